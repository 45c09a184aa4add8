"""Validation of SRv6Manager input: what is accepted, normalised, and what is refused (and why)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srv6pm.node.v1 import srv6_manager_pb2 as pb
from srv6pm_node.srv6 import validate
from srv6pm_node.srv6.errors import InvalidArgument
from srv6pm_node.srv6.model import Action, EncapMode


def path(**kw) -> pb.Path:
    base = {"destination": "fd00:2::/64", "segments": ["fc00:2::d6"], "device": "eth1"}
    return pb.Path(**{**base, **kw})


def test_path_defaults_and_normalisation():
    spec = validate.path(path(destination="FD00:0002:0000::/64", segments=["FC00:2:0:0::D6"]))
    assert spec.destination == "fd00:2::/64"
    assert spec.segments == ("fc00:2::d6",)
    assert spec.mode is EncapMode.ENCAP  # UNSPECIFIED means encap
    assert spec.table == 254 and spec.metric == 0


def test_bare_address_is_a_host_prefix():
    assert validate.path(path(destination="fd00:2::5")).destination == "fd00:2::5/128"
    assert validate.path(path(destination="10.0.0.1")).destination == "10.0.0.1/32"


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"segments": []}, "empty"),
        ({"segments": ["fc00::1"] * 17}, "at most 16"),
        ({"segments": ["fc00::1", "fc00::zz"]}, "segments[1]"),
        ({"segments": ["10.0.0.1"]}, "not an IPv6 address"),
        ({"segments": ["::"]}, "unicast"),
        ({"segments": ["ff02::2"]}, "unicast"),
        ({"segments": ["::1"]}, "unicast"),
        ({"segments": ["::ffff:10.0.0.1"]}, "unicast"),
        ({"segments": ["fe80::1"]}, "unicast"),
        ({"segments": ["fc00::1%eth0"]}, "not an IPv6 address"),
        ({"destination": ""}, "required"),
        ({"destination": "fd00:2::1/64"}, "host bits"),
        ({"destination": "fd00:2::/129"}, "not a valid prefix"),
        ({"destination": "10.0.0.0/8", "encap_mode": pb.ENCAP_MODE_INLINE}, "IPv6"),
        ({"device": ""}, "device is required"),
        ({"device": "a" * 16}, "not a valid interface name"),
        ({"device": "eth 0"}, "not a valid interface name"),
        ({"table": 255}, "reserved"),
        ({"encap_mode": 9}, "unknown"),
    ],
)
def test_bad_paths_are_refused_with_a_reason(kw, fragment):
    with pytest.raises(InvalidArgument) as err:
        validate.path(path(**kw))
    assert fragment in str(err.value)


def test_sixteen_segments_is_the_limit():
    segs = [f"fc00:{i:x}::1" for i in range(1, 17)]
    assert len(validate.path(path(segments=segs)).segments) == 16


def behavior(**kw) -> pb.Behavior:
    return pb.Behavior(**{"sid": "fc00:1::1", "device": "eth0", **kw})


@pytest.mark.parametrize(
    ("kw", "check"),
    [
        ({"action": pb.BEHAVIOR_ACTION_END}, lambda b: b.action is Action.END and b.sid == "fc00:1::1/128"),
        ({"action": pb.BEHAVIOR_ACTION_END_X, "nexthop": "FD00::1"}, lambda b: b.nexthop == "fd00::1"),
        ({"action": pb.BEHAVIOR_ACTION_END_T, "lookup_table": 100}, lambda b: b.lookup_table == 100),
        ({"action": pb.BEHAVIOR_ACTION_END_DX4, "nexthop": "10.0.0.1"}, lambda b: b.nexthop == "10.0.0.1"),
        ({"action": pb.BEHAVIOR_ACTION_END_DX6, "nexthop": "fd00::1"}, lambda b: b.nexthop == "fd00::1"),
        ({"action": pb.BEHAVIOR_ACTION_END_DT6, "lookup_table": 254}, lambda b: b.lookup_table == 254),
        ({"action": pb.BEHAVIOR_ACTION_END_DT6, "vrf_table": 10}, lambda b: b.vrf_table == 10),
        ({"action": pb.BEHAVIOR_ACTION_END_DT4, "vrf_table": 10}, lambda b: b.vrf_table == 10),
        ({"action": pb.BEHAVIOR_ACTION_END_DT46, "vrf_table": 10}, lambda b: b.vrf_table == 10),
        (
            {"action": pb.BEHAVIOR_ACTION_END_B6, "segments": ["fc00::5"]},
            lambda b: b.segments == ("fc00::5",),
        ),
        (
            {"action": pb.BEHAVIOR_ACTION_END_B6_ENCAPS, "segments": ["fc00::5", "fc00::6"]},
            lambda b: b.segments == ("fc00::5", "fc00::6"),
        ),
        ({"action": pb.BEHAVIOR_ACTION_END, "sid": "fc00:1::/64"}, lambda b: b.sid == "fc00:1::/64"),
    ],
)
def test_good_behaviours(kw, check):
    assert check(validate.behavior(behavior(**kw)))


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({}, "action is required"),
        ({"action": 99}, "unknown"),
        ({"action": pb.BEHAVIOR_ACTION_END, "sid": "10.0.0.1"}, "IPv6"),
        ({"action": pb.BEHAVIOR_ACTION_END, "sid": "fc00:1::1/64"}, "host bits"),
        ({"action": pb.BEHAVIOR_ACTION_END, "nexthop": "fd00::1"}, "takes no nexthop"),
        ({"action": pb.BEHAVIOR_ACTION_END, "segments": ["fc00::1"]}, "takes no segments"),
        ({"action": pb.BEHAVIOR_ACTION_END_X}, "needs an IPv6 nexthop"),
        ({"action": pb.BEHAVIOR_ACTION_END_X, "nexthop": "10.0.0.1"}, "needs an IPv6 nexthop"),
        ({"action": pb.BEHAVIOR_ACTION_END_X, "nexthop": "nope"}, "not an IP address"),
        ({"action": pb.BEHAVIOR_ACTION_END_DX4, "nexthop": "fd00::1"}, "needs an IPv4 nexthop"),
        ({"action": pb.BEHAVIOR_ACTION_END_T}, "needs lookup_table"),
        ({"action": pb.BEHAVIOR_ACTION_END_DT6}, "exactly one"),
        ({"action": pb.BEHAVIOR_ACTION_END_DT6, "lookup_table": 1, "vrf_table": 2}, "exactly one"),
        ({"action": pb.BEHAVIOR_ACTION_END_DT4}, "needs vrf_table"),
        ({"action": pb.BEHAVIOR_ACTION_END_DT4, "lookup_table": 5, "vrf_table": 5}, "takes no lookup_table"),
        ({"action": pb.BEHAVIOR_ACTION_END_DT46}, "needs vrf_table"),
        ({"action": pb.BEHAVIOR_ACTION_END_B6}, "empty"),
        ({"action": pb.BEHAVIOR_ACTION_END_B6_ENCAPS, "segments": ["x"]}, "segments[0]"),
        ({"action": pb.BEHAVIOR_ACTION_END_T, "lookup_table": 255}, "reserved"),
    ],
)
def test_bad_behaviours_are_refused_with_a_reason(kw, fragment):
    with pytest.raises(InvalidArgument) as err:
        validate.behavior(behavior(**kw))
    assert fragment in str(err.value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=45), max_size=20), st.text(max_size=50), st.text(max_size=20))
def test_arbitrary_input_is_either_valid_or_invalid_argument(segments, destination, device):
    """Fuzz: garbage never raises anything but InvalidArgument, and what passes is normalised."""
    try:
        spec = validate.path(pb.Path(destination=destination, segments=segments, device=device))
    except InvalidArgument:
        return
    assert 1 <= len(spec.segments) <= 16
    assert all(validate.sid(s) == s for s in spec.segments)
    assert validate.prefix(spec.destination) == spec.destination
