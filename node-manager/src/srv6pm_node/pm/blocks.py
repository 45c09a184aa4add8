"""The block clock: how both ends of a measurement number blocks without talking to each other.

Block ``n`` of a measurement with colour period ``T`` is the wall-clock interval
``[n*T, (n+1)*T)`` of Unix time; its colour is ``n mod 2``. A node flips its marking colour at
every block boundary by its own clock. The counters of block ``n`` are read, at both ends, in block
``n+1`` after the guard time ``g``: by then every packet of block ``n`` has arrived (path delay and
reordering below ``g``) and none of block ``n+2`` (same colour) has been sent.

The sender reads its own counters at ``(n+1)*T + g`` and stamps its probe with that instant (T1);
the reflector derives the block from T1 — ``floor(T1 / T) - 1`` — not from its own clock, so both
name the same block. What the reflector's clock must satisfy: its own flip (for the reverse
direction it marks) must have happened, i.e. ``|clock offset| + path delay < g``; and it answers
only while its clock is still in block ``n+1`` (else the colour is being reused and it says so).
All namespaces of one machine share one clock; across machines, NTP (ms) or PTP (µs) is enough
for T of a second and more.
"""

from __future__ import annotations

from dataclasses import dataclass

NS = 1_000_000_000


@dataclass(frozen=True)
class BlockClock:
    """Block arithmetic for one colour period (nanoseconds throughout)."""

    period_ns: int

    def block_of(self, unix_ns: int) -> int:
        """The block an instant falls in."""
        return unix_ns // self.period_ns

    def start(self, block: int) -> int:
        """When a block starts."""
        return block * self.period_ns

    def end(self, block: int) -> int:
        """When a block ends (the next one starts)."""
        return (block + 1) * self.period_ns

    @staticmethod
    def colour(block: int) -> int:
        """The colour of a block."""
        return block % 2

    def read_block(self, t1_ns: int) -> int:
        """The block whose counters a probe stamped ``t1_ns`` carries (the one before)."""
        return self.block_of(t1_ns) - 1

    def probe_times(self, block: int, guard_ns: int, interval_ns: int, phase_ns: int = 0) -> list[int]:
        """When the sender probes in ``block``: from guard time (plus ``phase_ns``) on, every
        interval, within the block."""
        start, end = self.start(block) + guard_ns + phase_ns, self.end(block)
        return list(range(start, end, max(interval_ns, 1)))


def probe_phase(ssid: int, interval_ns: int) -> int:
    """A measurement's offset of its probes within the probe interval, from its SSID: a node's
    many measurements then spread their probes over the interval (golden-ratio hashing keeps
    consecutive SSIDs far apart) instead of all firing at the guard time, which would delay the
    colour flips and replies behind one burst."""
    return (ssid * 40503 % 65536) * interval_ns // 65536
