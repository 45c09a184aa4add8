"""The counter-reader interface: how loss probes learn data-traffic counters.

This package never reads a kernel counter itself. Whoever runs a sender or reflector passes an
object with a ``read(ctx) -> Counters`` method (the node manager plugs its eBPF / nftables
drivers in here). ``ctx`` says which flow and which block the probe is about, as far as the probe
knows: TWAMP-Light loss queries carry a block number, STAMP probes do not (the reader then picks
the block, e.g. the colour that was active before the current one).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Counters:
    """Data-traffic counters of one flow and block, as the node counted them."""

    tx_packets: int = 0
    rx_packets: int = 0
    epoch_ns: int = 0  # when these counters started counting (0: unknown); see CounterEpoch


@dataclass(frozen=True)
class ProbeContext:
    """What a probe says about the flow it measures."""

    ssid: int
    peer: tuple[str, int]
    block: int | None = None
    segments: tuple[ipaddress.IPv6Address, ...] = ()  # SID list the probe travelled (reflector side)
    role: str = "reflector"  # or "sender"
    sent_ns: int | None = None  # the probe's T1 (Unix ns), as the sender stamped it
    received_ns: int | None = None  # when it arrived here (kernel timestamp, Unix ns)


@runtime_checkable
class CounterReader(Protocol):
    """Anything that can tell the counters of a flow and block."""

    def read(self, ctx: ProbeContext) -> Counters:
        """Counters for the flow/block ``ctx`` describes.

        Raise :class:`LookupError` when there are none to give (unknown flow, block not
        readable now): the reflector then answers with the TLV flagged unrecognised (U) rather
        than with made-up counters.
        """
        ...


@dataclass
class FixedCounterReader:
    """A reader over a plain mapping: ``{block: Counters}`` plus a default (tests, tools)."""

    by_block: dict[int | None, Counters] = field(default_factory=dict)
    default: Counters = field(default_factory=Counters)
    calls: list[ProbeContext] = field(default_factory=list)

    def read(self, ctx: ProbeContext) -> Counters:
        """Counters for ``ctx.block`` (or the default)."""
        self.calls.append(ctx)
        return self.by_block.get(ctx.block, self.default)
