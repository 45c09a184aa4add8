"""Data-plane counters: colour marking and per (SID list, colour) counting, eBPF or nftables.

``open_driver("ebpf" | "netfilter", ...)`` returns a :class:`~.api.CounterDriver`.
"""

from __future__ import annotations

from typing import Any

from .api import (
    Attachment,
    ColourCount,
    CounterDriver,
    CounterError,
    Direction,
    FlowCounters,
    FlowNotFound,
    HashCollision,
)

DRIVERS = ("ebpf", "netfilter")


def open_driver(name: str, **kwargs: Any) -> CounterDriver:
    """Open a driver by name; keyword arguments go to its constructor."""
    if name == "ebpf":
        from .ebpf import EbpfDriver

        return EbpfDriver(**kwargs)
    if name == "netfilter":
        from .netfilter import NftDriver

        return NftDriver(**kwargs)
    raise ValueError(f"unknown counter driver {name!r} (choose from {', '.join(DRIVERS)})")


__all__ = [
    "DRIVERS",
    "Attachment",
    "ColourCount",
    "CounterDriver",
    "CounterError",
    "Direction",
    "FlowCounters",
    "FlowNotFound",
    "HashCollision",
    "open_driver",
]
