"""Delay, jitter and summary statistics from STAMP timestamps (all in nanoseconds).

T1: Session-Sender transmit, T2: Session-Reflector receive, T3: Session-Reflector transmit,
T4: Session-Sender receive (RFC 8762 §4). The two-way delay excludes the reflector's residence
time and needs no clock synchronisation; one-way delays do, and are only given when both ends say
(S bit of their Error Estimates) their clocks are synchronised.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass


def two_way_delay(t1: int, t2: int, t3: int, t4: int) -> int:
    """(T4 - T1) - (T3 - T2)."""
    return (t4 - t1) - (t3 - t2)


def one_way_delays(
    t1: int, t2: int, t3: int, t4: int, *, sender_synced: bool, reflector_synced: bool
) -> tuple[int, int] | None:
    """(forward T2 - T1, backward T4 - T3), or None unless both clocks are synchronised."""
    if not (sender_synced and reflector_synced):
        return None
    return t2 - t1, t4 - t3


def ipdv(delays: Sequence[float]) -> list[float]:
    """Inter-packet delay variation (RFC 3393/5481): delay[i] - delay[i-1] for consecutive probes."""
    return [b - a for a, b in itertools.pairwise(delays)]


def jitter(delays: Sequence[float]) -> float:
    """Mean absolute IPDV: the "jitter" figure printed by the tool (0 with fewer than 2 samples)."""
    v = ipdv(delays)
    return sum(abs(x) for x in v) / len(v) if v else 0.0


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (0 < p <= 100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError("p must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Summary:
    """min/avg/max/p50/p99 of a sample (None fields when the sample is empty)."""

    count: int
    min: float | None
    avg: float | None
    max: float | None
    p50: float | None
    p99: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        """Plain dict for JSON output."""
        return {k: getattr(self, k) for k in ("count", "min", "avg", "max", "p50", "p99")}


def summarize(values: Sequence[float]) -> Summary:
    """Summary statistics of ``values``."""
    if not values:
        return Summary(0, None, None, None, None, None)
    return Summary(
        count=len(values),
        min=min(values),
        avg=sum(values) / len(values),
        max=max(values),
        p50=percentile(values, 50),
        p99=percentile(values, 99),
    )


class RunningDelay:
    """min/avg/max and mean-absolute-IPDV jitter of a stream, in O(1) memory.

    For long-running sessions that keep no per-probe history; percentiles need the sample and are
    reported as None.
    """

    __slots__ = ("_abs_ipdv", "_last", "_sum", "count", "max", "min")

    def __init__(self) -> None:
        self.count = 0
        self.min: float | None = None
        self.max: float | None = None
        self._sum = 0.0
        self._last: float | None = None
        self._abs_ipdv = 0.0

    def add(self, value: float) -> None:
        """Add one delay (in arrival order)."""
        self.count += 1
        self._sum += value
        self.min = value if self.min is None or value < self.min else self.min
        self.max = value if self.max is None or value > self.max else self.max
        if self._last is not None:
            self._abs_ipdv += abs(value - self._last)
        self._last = value

    def summary(self) -> Summary:
        """The figures so far (p50/p99 None)."""
        if not self.count:
            return Summary(0, None, None, None, None, None)
        return Summary(self.count, self.min, self._sum / self.count, self.max, None, None)

    @property
    def jitter(self) -> float:
        """Mean absolute IPDV, as :func:`jitter`."""
        return self._abs_ipdv / (self.count - 1) if self.count > 1 else 0.0
