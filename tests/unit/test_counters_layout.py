"""Pure-Python parts of the counter drivers: SID-list encoding and hash, the colour bit's position,
the nftables match text, the CLI's argument handling. (The hash and layouts are also checked
against the real BPF programs by tests/bpf.)"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from srv6pm_node.counters import cli, layout, netfilter

sid = st.integers(min_value=0, max_value=(1 << 128) - 1).map(lambda i: str(ipaddress.IPv6Address(i)))
sid_lists = st.lists(sid, min_size=1, max_size=16)


@given(sid_lists)
def test_srh_bytes_reverse_the_travel_order_and_round_trip(sids):
    raw = layout.srh_bytes(sids)
    assert len(raw) == 16 * len(sids)
    assert raw[:16] == ipaddress.IPv6Address(sids[-1]).packed  # Segment List[0] = last segment
    assert layout.sids_from_srh(raw, len(sids)) == tuple(sids)


@given(sid_lists)
def test_hash_is_64_bit_and_order_sensitive(sids):
    h = layout.sidlist_hash(sids)
    assert 0 <= h < 1 << 64
    assert layout.sidlist_hash(list(sids)) == h
    if len(set(sids)) > 1:
        assert layout.sidlist_hash(list(reversed(sids))) != h or list(reversed(sids)) == sids


def test_hash_tells_prefixes_apart():
    base = [f"fc00:{i}::" for i in range(1, 17)]
    hashes = {layout.sidlist_hash(base[:n]) for n in range(1, 17)}
    assert len(hashes) == 16


def test_normalize_sids():
    assert layout.normalize_sids(["FC00:0:1::0"]) == ("fc00:0:1::",)
    for bad in ([], ["fc00::1"] * 17, ["10.0.0.1"], ["not-an-address"]):
        with pytest.raises(ValueError):
            layout.normalize_sids(bad)


@pytest.mark.parametrize("bit", range(6))
def test_mark_bit_is_a_dscp_bit_and_nft_offset_points_at_it(bit):
    mask = layout.tc_mask(bit)
    assert mask & 0x03 == 0 and bin(mask).count("1") == 1  # never ECN, exactly one bit
    # set traffic class = mask in a header; the nft raw bit offset must address that very bit
    word = (6 << 28) | (mask << 20)
    off = netfilter.header_bit(bit)
    assert (word >> (31 - off)) & 1 == 1
    assert bin(word).count("1") == 1 + 2  # the version's two bits plus ours


def test_nft_match_compares_every_sid_and_the_length():
    text = netfilter.NftDriver._match(("fc00:2::e", "fc00:3::d6"))
    assert text == "srh last-entry 1 srh sid[1] fc00:3::d6 srh sid[2] fc00:2::e"
    assert netfilter.flow_id(("fc00:2::e",)) != netfilter.flow_id(("fc00:2::e", "fc00:3::d6"))


@pytest.mark.parametrize("argv", [[], ["flow", "add", "fc00::1"], ["color", "set", "2"],
                                  ["attach", "eth0", "-d", "sideways"], ["--driver", "ipset", "show"]])
def test_cli_rejects_bad_usage(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err
