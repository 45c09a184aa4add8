"""Syntax of SIDs, SID lists and prefixes, shared by the node agent and the controller.

Each check raises ValueError with a message naming the field; callers turn it into their own
INVALID_ARGUMENT answer.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

MAX_SEGMENTS = 16


def sid(value: str, what: str = "SID") -> str:
    """A SID: a global unicast IPv6 address (no scope id), returned in compressed form."""
    try:
        addr = ipaddress.IPv6Address(value.strip())
    except ValueError:
        raise ValueError(f"{what} {value!r} is not an IPv6 address") from None
    if addr.scope_id is not None:
        raise ValueError(f"{what} {value!r} is not an IPv6 address (scope ids are not allowed)")
    if addr.is_unspecified or addr.is_multicast or addr.is_loopback or addr.ipv4_mapped or addr.is_link_local:
        raise ValueError(f"{what} {value!r} is not a usable unicast IPv6 address")
    return str(addr)


def segments(values: Iterable[str], what: str = "segments") -> tuple[str, ...]:
    """A SID list of 1 to 16 SIDs, first segment first."""
    values = list(values)
    if not values:
        raise ValueError(f"{what}: the SID list is empty")
    if len(values) > MAX_SEGMENTS:
        raise ValueError(f"{what}: {len(values)} SIDs, at most {MAX_SEGMENTS} are supported")
    return tuple(sid(v, f"{what}[{i}]") for i, v in enumerate(values))


def prefix(value: str, what: str = "destination", *, v6_only: bool = False) -> str:
    """An IPv6 or IPv4 prefix without host bits; a bare address means a host prefix."""
    if not value:
        raise ValueError(f"{what} is required")
    try:
        net = ipaddress.ip_network(value.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(f"{what} {value!r} is not a valid prefix: {exc}") from None
    if v6_only and net.version != 6:
        raise ValueError(f"{what} {value!r} must be an IPv6 prefix")
    return str(net)


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?$")


def grpc_target(value: str, what: str = "address") -> str:
    """A gRPC endpoint: ``HOST:PORT`` (a name, an IPv4 address or ``[IPv6]``), ``unix:PATH`` or
    ``unix-abstract:NAME``; returned unchanged."""
    if not value:
        raise ValueError(f"{what} is required (HOST:PORT, [IPV6]:PORT or unix:PATH)")
    for scheme in ("unix:", "unix-abstract:"):
        if value.startswith(scheme):
            if len(value) == len(scheme):
                raise ValueError(f"{what} {value!r} names no socket")
            return value
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{what} {value!r} is not HOST:PORT (port 1-65535), [IPV6]:PORT or unix:PATH")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError(f"{what} {value!r}: {host} is not an IPv6 address") from None
    elif not _HOSTNAME.match(host):  # IPv4 literals match too
        raise ValueError(f"{what} {value!r}: {host!r} is not a host name or address (IPv6 goes in brackets)")
    return value
