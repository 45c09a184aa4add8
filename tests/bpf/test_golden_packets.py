"""Golden packets through BPF_PROG_TEST_RUN (katran style).

Each case: an input frame, the monitored flows, the active colour; expected verdict, expected
output bytes, expected counter deltas per (flow, colour). Run against the TC egress marker and
both ingress counters (XDP and TC).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from srv6pm_node.counters import layout, libbpf
from srv6pm_node.counters.api import Direction, HashCollision
from tests.bpf import packets as pkt

TC_ACT_UNSPEC = -1
XDP_PASS = 2
PROGS = {  # name: (program, direction, verdict)
    "tc-egress": (layout.PROG_TC_EGRESS, Direction.EGRESS, TC_ACT_UNSPEC),
    "xdp-ingress": (layout.PROG_XDP_INGRESS, Direction.INGRESS, XDP_PASS),
    "tc-ingress": (layout.PROG_TC_INGRESS, Direction.INGRESS, TC_ACT_UNSPEC),
}

S1, S2, S4, S16, S17 = pkt.sids(1), pkt.sids(2), pkt.sids(4), pkt.sids(16), pkt.sids(17)
OTHER = pkt.sids(2, base="fc00:99:{}::")


@dataclass
class Case:
    name: str
    frame: bytes
    flows: list[list[str]] = field(default_factory=lambda: [S1, S2, S4, S16])
    counted: list[str] | None = None  # the flow expected to count it (None: nobody)
    colour: int = 0  # active colour (egress)
    tc_in: int = 0  # traffic class of the input
    l2: int = 14


def _cases() -> list[Case]:
    trunc = pkt.srv6(S4)
    srh_at = 14 + 40
    bad_len = bytearray(pkt.srv6(S2))
    bad_len[srh_at + 4] = 3  # last entry says 4 SIDs, the header holds 2
    return [
        Case("plain-ipv6", pkt.plain_ipv6()),
        Case("ipv4", pkt.ipv4()),
        Case("non-ip-arp", pkt.arp()),
        Case("srv6-1-sid", pkt.srv6(S1), counted="S1"),
        Case("srv6-1-sid-colour-1", pkt.srv6(S1), counted="S1", colour=1),
        Case("srv6-2-sids", pkt.srv6(S2), counted="S2", colour=1),
        Case("srv6-4-sids", pkt.srv6(S4), counted="S4"),
        Case("srv6-16-sids", pkt.srv6(S16), counted="S16", colour=1),
        # 17 SIDs: never monitored, and its first 16 must not match the 16-SID flow
        Case("srv6-17-sids", pkt.srv6([*S17[:16], "fc00:0:99::"]), colour=1),
        Case("srv6-17-sids-prefix", pkt.srv6([*S16, "fc00:0:99::"]), colour=1),
        Case("unmonitored", pkt.srv6(OTHER), colour=1),
        Case("longer-list-same-prefix", pkt.srv6([*S2, "fc00:0:77::"]), colour=1),
        Case("shorter-list", pkt.srv6(["fc00:0:2::"]), colour=1),
        Case("ext-headers-before-srh", pkt.srv6(S2, ext=pkt.hbh_dest()), counted="S2", colour=1),
        Case("vlan-tagged", pkt.srv6(S2, vlan=7), counted="S2", colour=1, l2=18),
        Case("truncated-srh", trunc[:srh_at + 8 + 40], colour=1),
        Case("truncated-fixed-srh", trunc[:srh_at + 5], colour=1),
        Case("srh-last-entry-beyond-length", bytes(bad_len), colour=1),
        Case("wrong-routing-type-0", pkt.srv6(S2, routing_type=0), colour=1),
        Case("wrong-routing-type-3", pkt.srv6(S2, routing_type=3), colour=1),
        # colour already set / other DSCP and ECN bits: EF (46) + ECT(1)
        Case("colour-set-active-0", pkt.srv6(S2, tc=0xB8 | 0x04 | 0x01), counted="S2", colour=0,
             tc_in=0xB8 | 0x04 | 0x01),
        Case("colour-set-active-1", pkt.srv6(S2, tc=0xB8 | 0x04 | 0x02), counted="S2", colour=1,
             tc_in=0xB8 | 0x04 | 0x02),
        Case("ecn-only-active-1", pkt.srv6(S2, tc=0x03), counted="S2", colour=1, tc_in=0x03),
    ]


CASES = _cases()
NAMED = {"S1": S1, "S2": S2, "S4": S4, "S16": S16}


def _snapshot(dp, direction, flows):
    # only monitored (USED) slots can count, and the case monitors exactly these
    return {tuple(s): dp.read(s, direction).colours for s in flows}


@pytest.mark.parametrize("prog", list(PROGS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden(dp, prog, case):
    name, direction, verdict = PROGS[prog]
    for sids in case.flows:
        dp.add_flow(sids, direction)
    dp.set_colour(case.colour)
    before = _snapshot(dp, direction, case.flows)

    res = libbpf.test_run(dp.obj.prog_fd(name), case.frame)

    assert res.retval == verdict
    mask = 0x04
    if direction is Direction.EGRESS and case.counted:
        tc_out = (case.tc_in | mask) if case.colour else (case.tc_in & ~mask)
        expected = pkt.set_tc(case.frame, tc_out, case.l2)
    else:
        expected = case.frame  # ingress never writes; unmatched packets are never touched
    assert res.data == expected

    after = _snapshot(dp, direction, case.flows)
    for sids, colours in after.items():
        delta = [(a.packets - b.packets, a.bytes - b.bytes)
                 for a, b in zip(colours, before[sids], strict=True)]
        if case.counted and list(sids) == NAMED[case.counted]:
            colour = case.colour if direction is Direction.EGRESS else int(bool(case.tc_in & mask))
            want = [(0, 0), (0, 0)]
            want[colour] = (1, pkt.l3_len(case.frame, case.l2))
            assert delta == want, f"{sids}: {delta}"
        else:
            assert delta == [(0, 0), (0, 0)], f"{sids} counted a packet it must not: {delta}"


@pytest.mark.parametrize("prog", list(PROGS))
def test_ingress_reads_colour_from_packet_egress_ignores_it(dp, prog):
    """Ingress counts by the packet's bit; egress by the active colour, whatever the packet says."""
    name, direction, _ = PROGS[prog]
    dp.add_flow(S2, direction)
    dp.set_colour(0)
    libbpf.test_run(dp.obj.prog_fd(name), pkt.srv6(S2, tc=0x04), repeat=5)
    libbpf.test_run(dp.obj.prog_fd(name), pkt.srv6(S2, tc=0x00), repeat=3)
    c = dp.read(S2, direction).colours
    if direction is Direction.EGRESS:
        assert (c[0].packets, c[1].packets) == (8, 0)
    else:
        assert (c[0].packets, c[1].packets) == (3, 5)


@pytest.mark.parametrize("bit", [0, 3, 5])
def test_configurable_mark_bit(dp, bit):
    """Marking sets exactly DSCP bit ``bit``; ingress reads that same bit."""
    from srv6pm_node.counters.ebpf import EbpfDriver

    mask = layout.tc_mask(bit)
    dp._cfg.update(layout.INDEX_FMT.pack(0), layout.CFG_FMT.pack(1, mask))
    assert dp.mark_bit == bit and isinstance(dp, EbpfDriver)
    dp.add_flow(S2, Direction.EGRESS)
    dp.add_flow(S2, Direction.INGRESS)
    frame = pkt.srv6(S2, tc=0x01)
    out = libbpf.test_run(dp.obj.prog_fd(layout.PROG_TC_EGRESS), frame).data
    assert out == pkt.set_tc(frame, 0x01 | mask)
    libbpf.test_run(dp.obj.prog_fd(layout.PROG_XDP_INGRESS), out)
    libbpf.test_run(dp.obj.prog_fd(layout.PROG_XDP_INGRESS), pkt.set_tc(frame, 0x01 | (mask >> 1 or 0x80)))
    c = dp.read(S2, Direction.INGRESS).colours
    assert (c[0].packets, c[1].packets) == (1, 1)


def test_mark_bit_rejects_ecn():
    for bad in (-1, 6, 7):
        with pytest.raises(ValueError):
            layout.tc_mask(bad)


def test_hash_collision_never_matches(dp):
    """An index slot with the packet's hash but another SID list is never a match."""
    h = layout.sidlist_hash(S2)
    k = layout.home_slot(h)
    xdp = dp.obj.prog_fd(layout.PROG_XDP_INGRESS)
    dp.add_flow(OTHER, Direction.INGRESS)  # flow id 0
    dp._set_slot(Direction.INGRESS, k, h, layout.USED, 0)  # forged: S2's hash -> OTHER's flow
    res = libbpf.test_run(xdp, pkt.srv6(S2, tc=0x04), repeat=4)
    assert res.retval == XDP_PASS
    assert dp._counters(Direction.INGRESS, 0)[1].packets == 0
    # the control: the same packet is counted once the flow's stored list is the packet's
    store = dp._flows[Direction.INGRESS]
    store.update(layout.INDEX_FMT.pack(0), layout.FLOW_FMT.pack(2, 0, layout.srh_bytes(S2)))
    libbpf.test_run(xdp, pkt.srv6(S2, tc=0x04), repeat=4)
    assert dp._counters(Direction.INGRESS, 0)[1].packets == 4
    # and the driver refuses to add a list whose hash is taken, instead of sharing counters
    store.update(layout.INDEX_FMT.pack(0), layout.FLOW_FMT.pack(2, 0, layout.srh_bytes(OTHER)))
    with pytest.raises(HashCollision):
        dp.add_flow(S2, Direction.INGRESS)


def _same_home_slot(count: int) -> list[list[str]]:
    """``count`` SID lists whose hashes share a home slot (found by search: birthday odds)."""
    by_slot: dict[int, list[list[str]]] = {}
    i = 0
    while True:
        i += 1
        s = [f"fc00:{i:x}::1", f"fc00:{i:x}::2"]
        group = by_slot.setdefault(layout.home_slot(layout.sidlist_hash(s)), [])
        group.append(s)
        if len(group) == count:
            return group


@pytest.mark.parametrize("prog", ["xdp-ingress", "tc-egress"])
def test_probing_same_home_slot(dp, prog):
    """Lists sharing a home slot are told apart; removing one leaves the others counted."""
    name, direction, _ = PROGS[prog]
    fd = dp.obj.prog_fd(name)
    a, b, c = _same_home_slot(3)
    for s in (a, b, c):
        dp.add_flow(s, direction)
    for n, s in ((1, a), (2, b), (3, c)):
        libbpf.test_run(fd, pkt.srv6(s), repeat=n)
    assert [dp.read(s, direction).colours[0].packets for s in (a, b, c)] == [1, 2, 3]
    assert dp.remove_flow(a, direction)  # a tombstone in front of b and c
    for s in (a, b, c):
        libbpf.test_run(fd, pkt.srv6(s), repeat=10)
    assert [dp.read(s, direction).colours[0].packets for s in (b, c)] == [12, 13]
    dp.add_flow(a, direction)  # reuses the tombstone, from zero
    libbpf.test_run(fd, pkt.srv6(a), repeat=5)
    assert [dp.read(s, direction).colours[0].packets for s in (a, b, c)] == [5, 12, 13]
    for s in (c, b, a):
        assert dp.remove_flow(s, direction)
    home = layout.home_slot(layout.sidlist_hash(a))
    assert [dp._slot(direction, home + i)[1] for i in range(3)] == [layout.EMPTY] * 3  # no tombstone left


def test_17_sids_cannot_be_monitored(dp):
    with pytest.raises(ValueError):
        dp.add_flow(S17, Direction.EGRESS)


@pytest.mark.parametrize("prog", ["tc-egress", "tc-ingress"])
def test_gso_counts_segments(dp, prog):
    """A GSO skb of 3 segments counts 3 packets and the bytes of the 3 packets on the wire."""
    name, direction, verdict = PROGS[prog]
    dp.add_flow(S2, direction)
    inner, payload = pkt.tcp_inner(2500)
    frame = pkt.srv6(S2, inner=inner, payload=payload)
    hdr = 40 + 8 + 2 * 16 + 40 + 32  # outer IPv6, SRH, inner IPv6, TCP with options
    res = libbpf.test_run(dp.obj.prog_fd(name), frame, ctx=pkt.skb_ctx(gso_segs=3, gso_size=1000))
    assert res.retval == verdict
    c = dp.read(S2, direction).colours[0]
    assert c.packets == 3
    assert c.bytes == pkt.l3_len(frame) + 2 * hdr


def test_counts_accumulate_over_repeat(dp):
    dp.add_flow(S4, Direction.EGRESS)
    dp.set_colour(1)
    frame = pkt.srv6(S4)
    libbpf.test_run(dp.obj.prog_fd(layout.PROG_TC_EGRESS), frame, repeat=1000)
    c = dp.read(S4, Direction.EGRESS).colours
    assert c[1] == type(c[1])(1000, 1000 * pkt.l3_len(frame))
    assert c[0].packets == 0


def test_removed_flow_stops_counting_and_readded_starts_from_zero(dp):
    fd = dp.obj.prog_fd(layout.PROG_XDP_INGRESS)
    dp.add_flow(S1, Direction.INGRESS)
    libbpf.test_run(fd, pkt.srv6(S1), repeat=3)
    assert dp.read(S1, Direction.INGRESS).colours[0].packets == 3
    assert dp.remove_flow(S1, Direction.INGRESS)
    assert not dp.remove_flow(S1, Direction.INGRESS)
    libbpf.test_run(fd, pkt.srv6(S1), repeat=3)
    dp.add_flow(S1, Direction.INGRESS)
    assert dp.read(S1, Direction.INGRESS).colours[0].packets == 0


def test_two_writers_on_the_same_pins_never_share_counters(tmp_path):
    """An agent and an operator's CLI on the same pinned maps: flow ids are re-checked, so a list
    added by one is not overwritten by the other's next add (each keeps its own counters)."""
    from srv6pm_node.counters import pins
    from srv6pm_node.counters.ebpf import EbpfDriver

    root = tmp_path / "bpf"
    pins.ensure_bpffs(root)
    try:
        with EbpfDriver(pin_root=root) as agent, EbpfDriver(pin_root=root) as cli:
            cli.add_flow(S1, Direction.INGRESS)  # the agent's snapshot predates this
            agent.add_flow(S2, Direction.INGRESS)
            fd = agent.obj.prog_fd(layout.PROG_XDP_INGRESS)
            libbpf.test_run(fd, pkt.srv6(S1), repeat=2)
            libbpf.test_run(fd, pkt.srv6(S2), repeat=3)
            assert [agent.read(s, Direction.INGRESS).colours[0].packets for s in (S1, S2)] == [2, 3]
            assert [f.sids for f in cli.flows()] == [tuple(S1), tuple(S2)]
    finally:
        pins.unmount(root)
