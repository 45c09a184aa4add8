"""Timestamps and the Error Estimate of STAMP (RFC 8762 §4.1.1, RFC 4656 §4.1.2, RFC 8186).

Internally every instant is an ``int`` of nanoseconds since the Unix epoch (1970-01-01 UTC),
the unit the kernel's receive timestamps (``SO_TIMESTAMPNS``) use. On the wire a timestamp is
64 bits in one of two formats, chosen by the Z bit of the Error Estimate that travels with it::

    NTP 64-bit (Z=0)                       PTPv2 truncated (Z=1)
    +-------------------------------+      +-------------------------------+
    |  Seconds since 1900-01-01 (32)|      |  Seconds since 1970-01-01 (32)|
    +-------------------------------+      +-------------------------------+
    |  Fraction, 2^-32 s units (32) |      |  Nanoseconds (32)             |
    +-------------------------------+      +-------------------------------+

Error Estimate (RFC 4656 §4.1.2, Z from RFC 8186 §2.3)::

     0                   1
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |S|Z|   Scale   |   Multiplier  |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

S=1: the clock is synchronised to UTC by an external source. Error = Multiplier * 2^(Scale-32) s.
Multiplier MUST NOT be zero (RFC 4656).

PTP time is TAI; the offset TAI-UTC (37 s since 2017) is taken from ``CLOCK_TAI`` when the host
has it configured, so a PTP timestamp read back gives the same UTC instant.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

NTP_UNIX_OFFSET = 2_208_988_800  # seconds from 1900-01-01 to 1970-01-01
NS = 1_000_000_000


class TimestampFormat(enum.IntEnum):
    """Value of the Z bit."""

    NTP = 0
    PTP = 1


@dataclass(frozen=True)
class ErrorEstimate:
    """The 16-bit Error Estimate field."""

    synchronized: bool = False
    fmt: TimestampFormat = TimestampFormat.NTP
    scale: int = 0
    multiplier: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.scale < 64 or not 0 <= self.multiplier < 256:
            raise ValueError(f"scale {self.scale} / multiplier {self.multiplier} out of range")

    def to_int(self) -> int:
        """The 16-bit wire value."""
        return (int(self.synchronized) << 15) | (int(self.fmt) << 14) | (self.scale << 8) | self.multiplier

    @classmethod
    def from_int(cls, value: int) -> ErrorEstimate:
        """Decode the 16-bit wire value."""
        return cls(
            synchronized=bool(value >> 15 & 1),
            fmt=TimestampFormat(value >> 14 & 1),
            scale=value >> 8 & 0x3F,
            multiplier=value & 0xFF,
        )

    @property
    def seconds(self) -> float:
        """The error bound in seconds."""
        return self.multiplier * 2.0 ** (self.scale - 32)

    @classmethod
    def for_error(cls, seconds: float, *, synchronized: bool, fmt: TimestampFormat) -> ErrorEstimate:
        """The smallest Scale whose 8-bit Multiplier can express ``seconds`` (rounded up)."""
        for scale in range(64):
            mult = -(-seconds // 2.0 ** (scale - 32))  # ceil
            if mult <= 255:
                return cls(synchronized, fmt, scale, max(1, int(mult)))
        return cls(synchronized, fmt, 63, 255)


def tai_offset_s() -> int:
    """TAI - UTC in whole seconds as the kernel knows it (0 when not configured)."""
    try:
        return round((time.clock_gettime_ns(time.CLOCK_TAI) - time.time_ns()) / NS)
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return 0


def ntp_from_ns(unix_ns: int) -> int:
    """Unix nanoseconds -> 64-bit NTP timestamp (seconds wrap in 2036 as NTP era 1 does)."""
    secs, ns = divmod(unix_ns, NS)
    frac = (ns << 32) // NS
    return ((secs + NTP_UNIX_OFFSET) & 0xFFFFFFFF) << 32 | frac


def ns_from_ntp(value: int) -> int:
    """64-bit NTP timestamp -> Unix nanoseconds (era 0, i.e. 1900-2036; era 1 past 2036)."""
    secs, frac = value >> 32, value & 0xFFFFFFFF
    # Second values below 1968 are read as NTP era 1 (after 2036-02-07), RFC 4330 §3.
    if secs < 0x80000000:
        secs += 1 << 32
    ns = (frac * NS + (1 << 31)) >> 32  # round to nearest
    return (secs - NTP_UNIX_OFFSET) * NS + ns


def ptp_from_ns(unix_ns: int, tai_offset: int = 0) -> int:
    """Unix (UTC) nanoseconds -> 64-bit truncated PTPv2 timestamp (TAI seconds, nanoseconds)."""
    secs, ns = divmod(unix_ns + tai_offset * NS, NS)
    return (secs & 0xFFFFFFFF) << 32 | ns


def ns_from_ptp(value: int, tai_offset: int = 0) -> int:
    """64-bit truncated PTPv2 timestamp -> Unix (UTC) nanoseconds."""
    secs, ns = value >> 32, value & 0xFFFFFFFF
    return secs * NS + min(ns, NS - 1) - tai_offset * NS


def to_wire(unix_ns: int, fmt: TimestampFormat, tai_offset: int = 0) -> int:
    """Encode an instant in the format ``fmt``."""
    return ntp_from_ns(unix_ns) if fmt is TimestampFormat.NTP else ptp_from_ns(unix_ns, tai_offset)


def from_wire(value: int, fmt: TimestampFormat, tai_offset: int = 0) -> int:
    """Decode a 64-bit wire timestamp of format ``fmt``."""
    return ns_from_ntp(value) if fmt is TimestampFormat.NTP else ns_from_ptp(value, tai_offset)


def now_ns() -> int:
    """The current time, Unix nanoseconds (the same clock ``SO_TIMESTAMPNS`` stamps with)."""
    return time.time_ns()
