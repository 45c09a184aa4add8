"""One conformance suite, run against both counter drivers (eBPF and netfilter) on the same
topology and the same traffic: API semantics, what goes on the wire, what is (not) counted."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
from counters_lab import (
    H2,
    SIDS,
    bpffs_root,
    build_topo,
    header_bit,
    make_factory,
    send_udp,
    settle,
    setup_flow,
    socket_in,
)

from srv6pm_node.counters.api import Attachment, Direction, FlowNotFound

pytestmark = [pytest.mark.netns, pytest.mark.parametrize("kind", ["ebpf", "netfilter"])]


@pytest.fixture
def topo(net):
    return build_topo(net)


@pytest.fixture
def pin_root():
    with bpffs_root() as root:
        yield root

EF_ECT1 = 0xB9  # DSCP 46 (EF) + ECN ECT(1): bits the marker must never touch


def _wire_counter(node, tcs):
    """nft counters on inj's ingress for each exact outer traffic class value in ``tcs``."""
    rules = "\n".join(f'    meta protocol ip6 ip6 nexthdr 43 @nh,4,8 {tc:#x} counter name "tc{tc:02x}"'
                      for tc in tcs)
    objs = "\n".join(f"  counter tc{tc:02x} {{ }}" for tc in tcs)
    script = f"""table netdev s6wire {{
{objs}
  chain in {{
    type filter hook ingress device "eth1" priority -10;
{rules}
  }}
}}"""
    subprocess.run(["ip", "netns", "exec", node.netns, "nft", "-f", "-"], input=script, text=True,
                   check=True, timeout=30)

    def read():
        out = node.run(["nft", "-j", "list", "counters", "table", "netdev", "s6wire"]).stdout
        return {int(i["counter"]["name"][2:], 16): i["counter"]["packets"]
                for i in json.loads(out)["nftables"] if "counter" in i}
    return read


def _send_tc(node, count, tclass):
    """UDP from r1 to h2 with the inner traffic class set (seg6 encap copies it to the outer)."""
    with socket_in(node) as s:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tclass)
        for _ in range(count):
            s.sendto(b"q" * 100, (H2, 9))


def test_api_semantics(topo, pin_root, kind):
    with make_factory(kind, pin_root)(topo.r1) as drv:
        assert drv.flows() == [] and drv.colour() == 0 and drv.mark_bit == 0
        drv.add_flow(SIDS, Direction.EGRESS)
        drv.add_flow(SIDS, Direction.EGRESS)  # idempotent
        drv.add_flow(SIDS[:1], Direction.INGRESS)
        assert [(f.direction, f.sids) for f in drv.flows()] == [
            (Direction.EGRESS, tuple(SIDS)), (Direction.INGRESS, tuple(SIDS[:1]))]
        assert [f.sids for f in drv.flows(Direction.INGRESS)] == [tuple(SIDS[:1])]
        assert drv.read(SIDS, Direction.EGRESS).colours[0].packets == 0
        with pytest.raises(FlowNotFound):
            drv.read(SIDS, Direction.INGRESS)
        with pytest.raises(ValueError):
            drv.add_flow([f"fc00::{i:x}" for i in range(1, 18)], Direction.EGRESS)
        with pytest.raises(ValueError):
            drv.add_flow(["10.0.0.1"], Direction.EGRESS)
        with pytest.raises(ValueError):
            drv.set_colour(2)
        drv.set_colour(1)
        assert drv.colour() == 1
        for _ in range(2):
            drv.attach("eth1", Direction.EGRESS)
        assert drv.attachments() == [Attachment("eth1", Direction.EGRESS, drv.attachments()[0].mode)]
        for _ in range(2):
            drv.detach("eth1", Direction.EGRESS)
        assert drv.attachments() == []
        assert drv.remove_flow(SIDS, Direction.EGRESS)
        assert not drv.remove_flow(SIDS, Direction.EGRESS)
        assert [f.sids for f in drv.flows()] == [tuple(SIDS[:1])]
    with make_factory(kind, pin_root)(topo.r1) as again:  # state outlives the handle
        assert again.colour() == 1 and [f.sids for f in again.flows()] == [tuple(SIDS[:1])]


@pytest.mark.parametrize("mark_bit", [0, 3])
def test_marks_one_dscp_bit_on_the_wire(topo, pin_root, kind, mark_bit):
    """Colour 1 sets exactly the chosen DSCP bit of the outer header; colour 0 clears it; ECN and
    the other DSCP bits arrive as sent. Ingress counts by that bit."""
    bit = 1 << (2 + mark_bit)
    wire = _wire_counter(topo.inj, [EF_ECT1 | bit, EF_ECT1 & ~bit])
    factory = make_factory(kind, pin_root)
    with factory(topo.r1, mark_bit) as tx, factory(topo.r2, mark_bit) as rx:
        assert tx.mark_bit == mark_bit
        setup_flow(topo, tx, rx)
        tx.set_colour(1)
        _send_tc(topo.r1, 40, EF_ECT1)
        tx.set_colour(0)
        _send_tc(topo.r1, 30, EF_ECT1 | bit)  # arrives with the bit already set: must be cleared
        seen = settle(wire)
        assert seen == {EF_ECT1 | bit: 40, EF_ECT1 & ~bit: 30}
        rxc = settle(lambda: rx.read(SIDS, Direction.INGRESS).colours)
        assert (rxc[0].packets, rxc[1].packets) == (30, 40)
        txc = tx.read(SIDS, Direction.EGRESS).colours
        assert (txc[0].packets, txc[1].packets) == (30, 40)
    assert header_bit(mark_bit) == 9 - mark_bit


def test_unmonitored_sid_list_is_neither_counted_nor_marked(topo, pin_root, kind):
    from pyroute2 import IPRoute

    with IPRoute(netns=topo.r1.netns) as ipr:  # another SR policy: straight to r2's SID
        ipr.route("add", dst="fd00:4::/64", oif=ipr.link_lookup(ifname="eth1")[0],
                  encap={"type": "seg6", "mode": "encap", "segs": [SIDS[1]]})
    wire = _wire_counter(topo.inj, [0x04, 0x00])
    factory = make_factory(kind, pin_root)
    with factory(topo.r1) as tx, factory(topo.r2) as rx:
        setup_flow(topo, tx, rx)
        tx.set_colour(1)
        arrived = topo.r2.link_stats("eth2")["rx_packets"]
        send_udp(topo.r1, "fd00:4::1", 120)
        assert settle(wire) == {0x04: 0, 0x00: 120}  # left r1 unmarked
        assert topo.r2.link_stats("eth2")["rx_packets"] - arrived >= 120  # and reached r2's counter
        for drv, d in ((tx, Direction.EGRESS), (rx, Direction.INGRESS)):
            assert [(c.packets, c.bytes) for c in drv.read(SIDS, d).colours] == [(0, 0), (0, 0)]


def test_same_traffic_same_counts_and_detach_stops_counting(topo, pin_root, kind):
    factory = make_factory(kind, pin_root)
    with factory(topo.r1) as tx, factory(topo.r2) as rx:
        setup_flow(topo, tx, rx)
        send_udp(topo.r1, H2, 300, size=100)
        tx.set_colour(1)
        send_udp(topo.r1, H2, 200, size=100)
        pkt = 40 + 8 + 32 + 40 + 8 + 100  # outer IPv6 + SRH(2 SIDs) + inner IPv6 + UDP + payload
        want = [(300, 300 * pkt), (200, 200 * pkt)]
        def both():
            return [[(c.packets, c.bytes) for c in drv.read(SIDS, d).colours]
                    for drv, d in ((tx, Direction.EGRESS), (rx, Direction.INGRESS))]

        assert settle(both) == [want, want]
        tx.detach("eth1", Direction.EGRESS)
        rx.detach("eth2", Direction.INGRESS)
        send_udp(topo.r1, H2, 100, size=100)
        assert settle(both) == [want, want]
