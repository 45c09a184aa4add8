"""Syntax of SIDs, SID lists and prefixes, shared by the node agent and the controller.

Each check raises ValueError with a message naming the field; callers turn it into their own
INVALID_ARGUMENT answer.
"""

from __future__ import annotations

import ipaddress
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
