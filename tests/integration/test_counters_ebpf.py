"""The eBPF driver on real interfaces: pinning across an agent restart, idempotent attach/detach,
the TC chain continuing after our program, foreign XDP programs left alone, GSO counted as the
segments it becomes, and the srv6pm-counters CLI run inside a namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from counters_lab import (
    H2,
    SIDS,
    bpffs_root,
    build_topo,
    make_factory,
    send_udp,
    settle,
    setup_flow,
    socket_in,
)

from srv6pm_node.counters import libbpf, pins
from srv6pm_node.counters.api import Attachment, CounterError, Direction
from srv6pm_node.counters.ebpf import OBJ_DIR, EbpfDriver

pytestmark = pytest.mark.netns


@pytest.fixture
def topo(net):
    return build_topo(net)


@pytest.fixture
def pin_root():
    with bpffs_root() as root:
        yield root
CLI = str(Path(sys.executable).with_name("srv6pm-counters"))


def _counts(drv, direction):
    return [(c.packets, c.bytes) for c in drv.read(SIDS, direction).colours]


def test_counters_survive_restart_and_reattach(topo, pin_root):
    factory = make_factory("ebpf", pin_root)
    tx, rx = factory(topo.r1), factory(topo.r2)
    setup_flow(topo, tx, rx, "xdp")
    send_udp(topo.r1, H2, 500)
    before = settle(lambda: (_counts(tx, Direction.EGRESS), _counts(rx, Direction.INGRESS)))
    assert before[0][0][0] == 500 and before[0] == before[1]
    tx.close()
    rx.close()  # the agent "exits": programs stay attached, maps stay pinned

    with pins.in_netns(topo.r1.netns):
        cookie = pins.netns_cookie()
    assert sorted(p.name for p in (pin_root / f"netns-{cookie}").iterdir()) == [
        "srv6pm_cfg", "srv6pm_ctr_egr", "srv6pm_ctr_ing", "srv6pm_flow_egr", "srv6pm_flow_ing",
        "srv6pm_idx_egr", "srv6pm_idx_ing"]
    send_udp(topo.r1, H2, 100)  # counted while no agent runs

    tx, rx = factory(topo.r1), factory(topo.r2)  # the restarted agent
    try:
        assert [f.sids for f in tx.flows()] == [tuple(SIDS)]
        assert _counts(tx, Direction.EGRESS)[0][0] == 600
        # re-attach twice: replaces the program in place, one filter, no count lost
        for _ in range(2):
            setup_flow(topo, tx, rx, "xdp")
        filters = topo.r1.run(["tc", "filter", "show", "dev", "eth1", "egress"]).stdout
        assert filters.count("handle 0x5336") == 1
        tx.set_colour(1)
        send_udp(topo.r1, H2, 300)
        after = settle(lambda: (_counts(tx, Direction.EGRESS), _counts(rx, Direction.INGRESS)))
        assert after[0][0][0] == 600 and after[0][1][0] == 300
        assert after[0] == after[1]
        assert Attachment("eth1", Direction.EGRESS, "tc") in tx.attachments()
        assert Attachment("eth2", Direction.INGRESS, "xdp") in rx.attachments()

        # detach is idempotent, and detached interfaces count nothing
        for _ in range(2):
            tx.detach("eth1", Direction.EGRESS)
            rx.detach("eth2", Direction.INGRESS)
        assert tx.attachments() == [] and rx.attachments() == []
        send_udp(topo.r1, H2, 50)
        time.sleep(0.2)
        assert (_counts(tx, Direction.EGRESS), _counts(rx, Direction.INGRESS)) == after
    finally:
        tx.close()
        rx.close()


def test_tc_chain_continues_after_our_program(topo, pin_root):
    """A filter after ours still runs: here one that drops everything, so nothing reaches inj."""
    tx, rx = make_factory("ebpf", pin_root)(topo.r1), make_factory("ebpf", pin_root)(topo.r2)
    with tx, rx, libbpf.BpfObject(str(OBJ_DIR / "baseline.bpf.o")) as other:
        setup_flow(topo, tx, rx)
        with pins.in_netns(topo.r1.netns):
            libbpf.tc_attach(topo.r1.ifindex("eth1"), False, other.prog_fd("baseline_tc_drop"),
                             handle=7, priority=7)
        seen = topo.inj.link_stats("eth1")["rx_packets"]
        send_udp(topo.r1, H2, 200)
        time.sleep(0.2)
        assert _counts(tx, Direction.EGRESS)[0][0] == 200  # our program ran …
        assert topo.inj.link_stats("eth1")["rx_packets"] == seen  # … and so did the next filter


def test_foreign_xdp_program_is_not_replaced(topo, pin_root):
    with libbpf.BpfObject(str(OBJ_DIR / "baseline.bpf.o")) as other, \
            make_factory("ebpf", pin_root)(topo.r2) as rx:
        with pins.in_netns(topo.r2.netns):
            idx = topo.r2.ifindex("eth2")
            libbpf.xdp_attach(idx, other.prog_fd("baseline_xdp"), libbpf.XDP_FLAGS_DRV_MODE)
        with pytest.raises(CounterError, match="foreign XDP"):
            rx.attach("eth2", Direction.INGRESS, "xdp")
        assert rx.attach("eth2", Direction.INGRESS, "auto") == "tc"  # falls back to TC ingress
        rx.detach("eth2", Direction.INGRESS)
        with pins.in_netns(topo.r2.netns):
            assert libbpf.prog_name(libbpf.xdp_query(idx)) == "baseline_xdp"  # still there


@pytest.mark.parametrize("rx_mode", ["xdp", "tc"])
def test_tcp_gso_counted_as_segments(topo, pin_root, rx_mode):
    """TCP through the tunnel: r1's TC egress sees GSO super-packets, r2 sees the segments on the
    wire; both must count the same packets and bytes."""
    topo.r2.add_route("fd00:1::/64", gateway="fd00:2::1")  # the ACKs go back unencapsulated
    tx, rx = make_factory("ebpf", pin_root)(topo.r1), make_factory("ebpf", pin_root)(topo.r2)
    with tx, rx, socket_in(topo.h2, kind=__import__("socket").SOCK_STREAM) as srv:
        setup_flow(topo, tx, rx, rx_mode)
        srv.bind(("::", 5001))
        srv.listen(1)
        got = []

        def sink():
            conn, _ = srv.accept()
            with conn:
                while data := conn.recv(1 << 16):
                    got.append(len(data))

        t = threading.Thread(target=sink)
        t.start()
        skbs = topo.r1.link_stats("eth1")["tx_packets"]
        with socket_in(topo.r1, kind=__import__("socket").SOCK_STREAM) as cli:
            cli.connect((H2, 5001))
            cli.sendall(os.urandom(1 << 16) * 32)  # 2 MiB
        t.join(10)
        assert sum(got) == 1 << 21
        txc, rxc = settle(lambda: (_counts(tx, Direction.EGRESS), _counts(rx, Direction.INGRESS)))
        assert txc == rxc, f"TX {txc} RX {rxc}"
        assert txc[0][0] >= (1 << 21) // 1500  # at least one count per MTU-sized segment
        # veth counts an skb once: fewer skbs than counted packets proves GSO was exercised
        skbs = topo.r1.link_stats("eth1")["tx_packets"] - skbs
        print(f"GSO: {skbs} skbs left r1, counted as {txc[0][0]} packets")
        assert skbs < txc[0][0]


def test_cli_inside_netns_shares_pins_with_the_driver(topo, pin_root):
    """srv6pm-counters run with `ip netns exec` (fresh /sys) finds and keeps the same pins."""
    def cli(node, *argv):
        return subprocess.run(["ip", "netns", "exec", node.netns, CLI, "--pin-root", str(pin_root), *argv],
                              capture_output=True, text=True, timeout=30)

    for node, args in ((topo.r1, ["attach", "eth1", "-d", "egress"]),
                       (topo.r1, ["flow", "add", "-d", "egress", *SIDS]),
                       (topo.r1, ["color", "set", "1"]),
                       (topo.r2, ["attach", "eth2", "-d", "ingress", "--mode", "tc"]),
                       (topo.r2, ["flow", "add", "-d", "ingress", *SIDS])):
        res = cli(node, *args)
        assert res.returncode == 0, res.stderr
    send_udp(topo.r1, H2, 250)
    time.sleep(0.3)
    shown = json.loads(cli(topo.r1, "show", "--json").stdout)
    assert shown["colour"] == 1 and shown["driver"] == "ebpf"
    assert shown["attachments"] == [{"ifname": "eth1", "direction": "egress", "mode": "tc"}]
    assert shown["flows"][0]["sids"] == SIDS
    assert shown["flows"][0]["colours"][1]["packets"] == 250
    table = cli(topo.r2, "show").stdout
    assert ",".join(SIDS) in table and " 250 " in table
    listed = json.loads(cli(topo.r2, "flow", "list", "--json").stdout)
    assert listed[0]["direction"] == "ingress"
    # the in-process driver (netns= argument) reads the very same maps
    with EbpfDriver(pin_root=pin_root, netns=topo.r2.netns) as rx:
        assert rx.read(SIDS, Direction.INGRESS).colours[1].packets == 250
    bad = cli(topo.r1, "flow", "del", "-d", "egress", "fc00::99")
    assert bad.returncode == 1 and "not monitored" in bad.stderr
    assert cli(topo.r1, "flow", "del", "-d", "egress", *SIDS).returncode == 0
    assert cli(topo.r1, "flow", "list").stdout == ""
