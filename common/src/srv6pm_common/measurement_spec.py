"""The rules of a MeasurementSpec, one place for the node agent and the controller.

:func:`normalise` checks what any node would refuse and fills the defaults, so a spec the
controller accepted is one both nodes accept (short of what only a node can know: its paths,
its clock period, its driver). Errors are :class:`~srv6pm_common.errors.InvalidArgument`.
"""

from __future__ import annotations

import ipaddress
import re

from srv6pm.node.v1 import srv6_pm_pb2 as pb

from . import addresses
from .errors import InvalidArgument

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MIN_PERIOD_S, MAX_PERIOD_S = 1, 3600
NS = 1_000_000_000


def check_id(measurement_id: str) -> str:
    """A measurement id: letters, digits, '-', '_', '.'; up to 64 characters."""
    if not ID_RE.match(measurement_id):
        raise InvalidArgument(
            f"measurement_id {measurement_id!r} is invalid (letters, digits, '-', '_', '.'; 1-64 characters)"
        )
    return measurement_id


def normalise(spec: pb.MeasurementSpec, *, need_segments: bool = True) -> pb.MeasurementSpec:
    """A checked copy of ``spec`` with SIDs in canonical form and defaults filled in.

    ``need_segments`` False lets the forward SID list be empty (the controller fills it from a
    tunnel afterwards and calls this again).
    """
    out = pb.MeasurementSpec()
    out.CopyFrom(spec)
    check_id(out.measurement_id)
    try:
        if out.forward_segments or need_segments:
            normal = addresses.segments(out.forward_segments, "spec.forward_segments")
            del out.forward_segments[:]
            out.forward_segments.extend(normal)
        if out.reverse_segments:
            normal = addresses.segments(out.reverse_segments, "spec.reverse_segments")
            del out.reverse_segments[:]
            out.reverse_segments.extend(normal)
        for field in ("sender_address", "reflector_address"):
            if getattr(out, field):
                setattr(out, field, addresses.sid(getattr(out, field), f"spec.{field}"))
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    period_ns = out.color_period.ToNanoseconds()
    if not MIN_PERIOD_S * NS <= period_ns <= MAX_PERIOD_S * NS:
        raise InvalidArgument(f"spec.color_period must be {MIN_PERIOD_S} s to {MAX_PERIOD_S} s")
    if out.HasField("guard_time") and not 0 < out.guard_time.ToNanoseconds() < period_ns:
        raise InvalidArgument("spec.guard_time must be above 0 and below color_period")
    if not out.HasField("guard_time"):
        out.guard_time.FromNanoseconds(period_ns // 2)
    if out.HasField("probe_interval"):
        if out.probe_interval.ToNanoseconds() <= 0:
            raise InvalidArgument("spec.probe_interval must be positive")
    else:
        # five probes (five chances to settle the previous block) per block, at most 1 s apart
        out.probe_interval.FromNanoseconds(min(NS, (period_ns - out.guard_time.ToNanoseconds()) // 5))
    if out.probe_interval.ToNanoseconds() > period_ns:
        out.probe_interval.FromNanoseconds(period_ns)
    if not out.loss_enabled and not out.delay_enabled:
        raise InvalidArgument("spec: enable loss, delay or both")
    if out.ssid > 0xFFFF:
        raise InvalidArgument("spec.ssid is 0 to 65535")
    if out.probe_dscp > 63:
        raise InvalidArgument("spec.probe_dscp is 0 to 63")
    if out.authentication.mode == pb.AUTH_MODE_HMAC_SHA256 and not out.authentication.key:
        raise InvalidArgument("spec.authentication.key is required in HMAC mode")
    out.protocol = out.protocol or pb.PROBE_PROTOCOL_STAMP
    out.timestamp_format = out.timestamp_format or pb.TIMESTAMP_FORMAT_NTP
    return out


def probe_endpoint(prefix: str, what: str = "prefix") -> str:
    """The probe endpoint the controller picks inside a tunnel end's prefix: its highest address
    but one (hosts are usually numbered from the bottom). The node makes it deliverable itself."""
    try:
        net = ipaddress.IPv6Network(prefix, strict=False)
    except ValueError:
        raise InvalidArgument(f"{what} {prefix!r} is not an IPv6 prefix: probes need one") from None
    if net.prefixlen > 126:
        raise InvalidArgument(f"{what} {prefix} is too small to hold a probe endpoint")
    return str(net[-2])
