"""NTP / PTPv2 timestamp conversions and the Error Estimate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srv6pm_twamp.timestamps import (
    ErrorEstimate,
    TimestampFormat,
    from_wire,
    ns_from_ntp,
    ns_from_ptp,
    ntp_from_ns,
    ptp_from_ns,
    to_wire,
)


def test_ntp_known_values():
    assert ntp_from_ns(0) == 0x83AA7E80_00000000  # 1970-01-01 is 2208988800 s after 1900
    assert ntp_from_ns(500_000_000) == 0x83AA7E80_80000000
    assert ns_from_ntp(0x83AA7E80_40000000) == 250_000_000
    # 2036-02-07T06:28:16Z: NTP seconds wrap to 0 (era 1); read back correctly.
    wrap_ns = (2**32 - 2_208_988_800) * 10**9
    assert ntp_from_ns(wrap_ns) >> 32 == 0
    assert ns_from_ntp(ntp_from_ns(wrap_ns)) == wrap_ns


def test_ptp_known_values():
    assert ptp_from_ns(1_000_000_005, tai_offset=37) == (38 << 32) | 5
    assert ns_from_ptp((38 << 32) | 5, tai_offset=37) == 1_000_000_005


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=(2**32 + 2**31 - 2_208_988_800) * 10**9 - 1))
def test_ntp_round_trip_within_a_nanosecond(ns):
    assert abs(ns_from_ntp(ntp_from_ns(ns)) - ns) <= 1


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=0, max_value=(2**32 + 2**31 - 2_208_988_800) * 10**9 - 1),
    st.sampled_from(list(TimestampFormat)),
)
def test_wire_round_trip(ns, fmt):
    assert abs(from_wire(to_wire(ns, fmt), fmt) - ns) <= 1


def test_error_estimate_value_and_for_error():
    ee = ErrorEstimate(True, TimestampFormat.NTP, scale=32, multiplier=1)
    assert ee.seconds == 1.0
    e = ErrorEstimate.for_error(1e-6, synchronized=True, fmt=TimestampFormat.PTP)
    assert e.seconds >= 1e-6 and e.seconds < 2.1e-6
    assert 1 <= e.multiplier <= 255
    with pytest.raises(ValueError):
        ErrorEstimate(scale=64)
