"""Validation of API input: every malformed SID, prefix or parameter is rejected here, with a
message naming the field, before anything touches the kernel."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from srv6pm.node.v1 import srv6_manager_pb2 as pb
from srv6pm_common import addresses

from .errors import InvalidArgument
from .model import MAIN_TABLE, Action, BehaviorSpec, EncapMode, PathSpec

_IFNAME_RE = re.compile(r"^[^\s/:]{1,15}$")  # IFNAMSIZ - 1, no whitespace, '/' or ':'

_ENCAP_MODES = {
    pb.ENCAP_MODE_UNSPECIFIED: EncapMode.ENCAP,
    pb.ENCAP_MODE_ENCAP: EncapMode.ENCAP,
    pb.ENCAP_MODE_INLINE: EncapMode.INLINE,
    pb.ENCAP_MODE_ENCAP_RED: EncapMode.ENCAP_RED,
    pb.ENCAP_MODE_L2ENCAP: EncapMode.L2ENCAP,
}
_ACTIONS = {getattr(pb, f"BEHAVIOR_ACTION_{a.name}"): a for a in Action}

# Which optional parameters each action takes; any other one set is an error, not ignored.
_PARAMS: dict[Action, set[str]] = {
    Action.END: set(),
    Action.END_X: {"nexthop"},
    Action.END_T: {"lookup_table"},
    Action.END_DX6: {"nexthop"},
    Action.END_DX4: {"nexthop"},
    Action.END_DT6: {"lookup_table", "vrf_table"},
    Action.END_DT4: {"vrf_table"},
    Action.END_DT46: {"vrf_table"},
    Action.END_B6: {"segments"},
    Action.END_B6_ENCAPS: {"segments"},
}


def sid(value: str, what: str = "SID") -> str:
    """A SID: a unicast, non-loopback IPv6 address, returned in compressed form."""
    try:
        return addresses.sid(value, what)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def segments(values: Iterable[str], what: str = "segments") -> tuple[str, ...]:
    """A SID list of 1 to 16 SIDs, first segment first."""
    try:
        return addresses.segments(values, what)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def prefix(value: str, what: str = "destination", *, v6_only: bool = False) -> str:
    """An IPv6 or IPv4 prefix without host bits; a bare address means a host prefix."""
    try:
        return addresses.prefix(value, what, v6_only=v6_only)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def device(value: str) -> str:
    """An interface name (existence is checked against the kernel later)."""
    if not value:
        raise InvalidArgument("device is required (the kernel needs an interface for SRv6 routes)")
    if not _IFNAME_RE.match(value):
        raise InvalidArgument(f"device {value!r} is not a valid interface name")
    return value


def table(value: int, what: str = "table") -> int:
    """A routing table id; 0 means main."""
    if value in (253, 255):
        raise InvalidArgument(f"{what} {value} is reserved (default/local)")
    return value or MAIN_TABLE


def path(msg: pb.Path) -> PathSpec:
    """Validate a Path message."""
    dst = prefix(msg.destination)
    if msg.encap_mode not in _ENCAP_MODES:
        raise InvalidArgument(f"encap_mode {msg.encap_mode} is unknown")
    mode = _ENCAP_MODES[msg.encap_mode]
    if mode is EncapMode.INLINE and ":" not in dst:
        raise InvalidArgument("encap_mode INLINE inserts an SRH into IPv6 packets: destination must be IPv6")
    return PathSpec(
        destination=dst,
        segments=segments(msg.segments),
        mode=mode,
        device=device(msg.device),
        table=table(msg.table),
        metric=msg.metric,
    )


def behavior(msg: pb.Behavior) -> BehaviorSpec:
    """Validate a Behavior message: the action's required parameters, and no others."""
    local_sid = prefix(msg.sid, "sid", v6_only=True)
    if msg.action not in _ACTIONS:
        raise InvalidArgument("action is required" if msg.action == 0 else f"action {msg.action} is unknown")
    action = _ACTIONS[msg.action]
    given = {name for name in ("nexthop", "lookup_table", "vrf_table") if getattr(msg, name)}
    if msg.segments:
        given.add("segments")
    extra = given - _PARAMS[action]
    if extra:
        raise InvalidArgument(f"{action.kernel_name} takes no {', '.join(sorted(extra))}")

    nexthop = ""
    if action in (Action.END_X, Action.END_DX6, Action.END_DX4):
        want = 4 if action is Action.END_DX4 else 6
        if not msg.nexthop:
            raise InvalidArgument(f"{action.kernel_name} needs an IPv{want} nexthop")
        try:
            addr = ipaddress.ip_address(msg.nexthop.strip())
        except ValueError:
            raise InvalidArgument(f"nexthop {msg.nexthop!r} is not an IP address") from None
        if addr.version != want:
            raise InvalidArgument(f"{action.kernel_name} needs an IPv{want} nexthop, got {msg.nexthop!r}")
        nexthop = str(addr)
    if action is Action.END_T and not msg.lookup_table:
        raise InvalidArgument("End.T needs lookup_table")
    if action is Action.END_DT6 and bool(msg.lookup_table) == bool(msg.vrf_table):
        raise InvalidArgument(
            "End.DT6 needs exactly one of lookup_table (table mode) or vrf_table (VRF mode)"
        )
    if action in (Action.END_DT4, Action.END_DT46) and not msg.vrf_table:
        raise InvalidArgument(f"{action.kernel_name} needs vrf_table (the table of a VRF device)")
    segs: tuple[str, ...] = ()
    if action in (Action.END_B6, Action.END_B6_ENCAPS):
        segs = segments(msg.segments)
    return BehaviorSpec(
        sid=local_sid,
        action=action,
        device=device(msg.device),
        table=table(msg.table),
        metric=msg.metric,
        nexthop=nexthop,
        lookup_table=table(msg.lookup_table, "lookup_table") if msg.lookup_table else 0,
        vrf_table=msg.vrf_table,
        segments=segs,
    )
