"""Exact loss on real traffic: r1 TX(c) - r2 RX(c) == the injector's drops(c), for each colour.

r1's egress counter and r2's ingress counter sit on either side of a drop injector (nftables
numgen on the middle node, with its own drop counters per colour). Run for each driver and, for
eBPF, both ingress attachment modes (XDP and TC).
"""

from __future__ import annotations

import pytest
from counters_lab import (
    DROP_EVERY,
    H2,
    SIDS,
    add_injector,
    bpffs_root,
    build_topo,
    injector_counts,
    make_factory,
    send_udp,
    settle,
    setup_flow,
)

from srv6pm_node.counters.api import Direction

pytestmark = pytest.mark.netns


@pytest.fixture
def topo(net):
    return build_topo(net)


@pytest.fixture
def pin_root():
    with bpffs_root() as root:
        yield root

PER_COLOUR = (3000, 2000)  # packets sent while colour 0, then colour 1 is active


@pytest.mark.parametrize(("kind", "rx_mode"), [("ebpf", "xdp"), ("ebpf", "tc"), ("netfilter", "auto")])
@pytest.mark.parametrize("drop", [True, False], ids=["injector-drops", "no-drops"])
def test_tx_minus_rx_equals_drops_per_colour(topo, pin_root, kind, rx_mode, drop):
    factory = make_factory(kind, pin_root)
    if drop:
        add_injector(topo.inj, "eth1")
    with factory(topo.r1) as tx, factory(topo.r2) as rx:
        assert setup_flow(topo, tx, rx, rx_mode) == ("nft" if kind == "netfilter" else rx_mode)
        for colour, count in enumerate(PER_COLOUR):
            tx.set_colour(colour)
            assert tx.colour() == colour
            send_udp(topo.r1, H2, count)

        def read():
            return tx.read(SIDS, Direction.EGRESS).colours, rx.read(SIDS, Direction.INGRESS).colours

        tx_c, rx_c = settle(read)
        drops = injector_counts(topo.inj) if drop else {}
        for colour, count in enumerate(PER_COLOUR):
            dropped = drops.get(f"drop_c{colour}", 0)
            assert tx_c[colour].packets == count, f"colour {colour}: r1 counted {tx_c[colour]}"
            assert tx_c[colour].packets - rx_c[colour].packets == dropped, (
                f"colour {colour}: TX {tx_c[colour]} RX {rx_c[colour]} injector drops {dropped}")
            if drop:
                # the injector really dropped, in this colour (numgen spreads drops 1 in N)
                assert dropped >= count // DROP_EVERY - 1
                assert drops[f"seen_c{colour}"] == count
                # every packet has the same size: bytes lost == drops x packet size
                size = tx_c[colour].bytes // tx_c[colour].packets
                assert tx_c[colour].bytes - rx_c[colour].bytes == dropped * size
            else:
                assert rx_c[colour] == tx_c[colour]
