"""Shared pieces of the counter-driver namespace tests.

Topology (one /64 per link)::

    r1 ──eth1── inj ──eth2── r2 ──eth0── h2
    encap       End SID      End.DT6     sink
    egress      drop         ingress
    counter     injector     counter

r1 sends UDP to h2; its seg6 route encapsulates it with the SID list [inj's End SID, r2's End.DT6
SID]. The drop injector is an nftables rule on inj's ingress (netdev hook): it drops every Nth
SRv6 packet and counts its drops per colour (the colour bit read from the raw header), so
``r1 TX(c) - r2 RX(c)`` can be checked against an independent counter.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute, netns

from srv6pm_node.counters import pins
from srv6pm_node.counters.api import CounterDriver, Direction
from srv6pm_topos import injector
from srv6pm_topos.lab import Lab, Node
from tests.support import require, require_root, require_tool

SIDS = ["fc00:2::e", "fc00:3::d6"]  # travel order: inj's End, then r2's End.DT6
H2 = "fd00:3::2"
DROP_EVERY = 7


@dataclass
class Topo:
    r1: Node
    inj: Node
    r2: Node
    h2: Node
    r1_if: str = "eth1"  # r1's egress counter
    r2_if: str = "eth2"  # r2's ingress counter


def build(lab: Lab) -> Topo:
    """The four namespaces, links, addresses, plain and SRv6 routes."""
    r1, inj, r2 = (lab.add_node(n) for n in ("r1", "inj", "r2"))
    h2 = lab.add_node("h2", router=False)
    lab.link("r1", "eth1", "inj", "eth1", a_addrs=["fd00:1::1/64"], b_addrs=["fd00:1::2/64"])
    lab.link("inj", "eth2", "r2", "eth2", a_addrs=["fd00:2::1/64"], b_addrs=["fd00:2::2/64"])
    lab.link("r2", "eth0", "h2", "eth0", a_addrs=["fd00:3::1/64"], b_addrs=[H2 + "/64"])
    r1.add_route("fc00::/16", gateway="fd00:1::2")
    inj.add_route("fc00:3::/48", gateway="fd00:2::2")
    h2.add_route("::/0", gateway="fd00:3::1")
    with IPRoute(netns=r1.netns) as ipr:
        ipr.route(
            "add",
            dst="fd00:3::/64",
            oif=ipr.link_lookup(ifname="eth1")[0],
            # pyroute2 takes segs in SRH order (last segment first): the reverse of ip(8)
            encap={"type": "seg6", "mode": "encap", "segs": list(reversed(SIDS))},
        )
    with IPRoute(netns=inj.netns) as ipr:
        ipr.route(
            "add",
            dst=SIDS[0] + "/128",
            oif=ipr.link_lookup(ifname="eth1")[0],
            encap={"type": "seg6local", "action": "End"},
        )
    with IPRoute(netns=r2.netns) as ipr:
        ipr.route(
            "add",
            dst=SIDS[1] + "/128",
            oif=ipr.link_lookup(ifname="eth2")[0],
            encap={"type": "seg6local", "action": "End.DT6", "table": 254},
        )
    # static neighbours: no ND traffic to race with, no first-packet loss while resolving
    for node, ifname, peer in ((r1, "eth1", inj), (inj, "eth2", r2), (r2, "eth0", h2)):
        peer_if = {"inj": "eth1", "r2": "eth2", "h2": "eth0"}[peer.name]
        mac = _mac(peer, peer_if)
        addr = {"inj": "fd00:1::2", "r2": "fd00:2::2", "h2": H2}[peer.name]
        with IPRoute(netns=node.netns) as ipr:
            ipr.neigh("add", dst=addr, lladdr=mac, ifindex=ipr.link_lookup(ifname=ifname)[0], state=0x80)
    return Topo(r1, inj, r2, h2)


def _mac(node: Node, ifname: str) -> str:
    with IPRoute(netns=node.netns) as ipr:
        return ipr.get_links(ipr.link_lookup(ifname=ifname)[0])[0].get_attr("IFLA_ADDRESS")


header_bit = injector.header_bit
INJECTOR_TABLE = "s6inj"


def add_injector(node: Node, ifname: str, every: int = DROP_EVERY, mark_bit: int = 0) -> None:
    """Drop every ``every``-th SRv6 packet arriving on ``ifname``; count drops per colour."""
    injector.add(node, ifname, every, mark_bit=mark_bit, name=INJECTOR_TABLE)


def injector_counts(node: Node) -> dict[str, int]:
    """Packets seen and dropped per colour by the injector: {"seen_c0":…, "drop_c1":…}."""
    return injector.Injector(node, INJECTOR_TABLE).counts()


@contextlib.contextmanager
def socket_in(
    node: Node, family: int = socket.AF_INET6, kind: int = socket.SOCK_DGRAM
) -> Iterator[socket.socket]:
    """A socket created inside ``node``'s namespace (it stays there after we switch back)."""
    netns.pushns(node.netns)
    try:
        s = socket.socket(family, kind)
    finally:
        netns.popns()
    with s:
        yield s


def send_udp(node: Node, dst: str, count: int, size: int = 200, burst: int = 64) -> None:
    """Send ``count`` UDP datagrams from ``node`` to ``dst``, paced so no queue overflows."""
    payload = b"\xa5" * size
    with socket_in(node) as s:
        sent = 0
        while sent < count:
            n = min(burst, count - sent)
            for _ in range(n):
                s.sendto(payload, (dst, 9))
            sent += n
            time.sleep(0.0005)


def settle(read: Callable[[], object], timeout: float = 5.0) -> object:
    """Poll ``read()`` until two reads 100 ms apart agree; return the value."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        cur = read()
        if cur == last:
            return cur
        last = cur
    return last


@contextlib.contextmanager
def bpffs_root() -> Iterator[Path]:
    """A bpffs of the test's own (use it in a fixture), unmounted, pins and all, at the end."""
    require_root()
    with pins.temporary_bpffs() as d:
        yield d


def build_topo(net: Lab) -> Topo:
    """:func:`build`, after checking its prerequisites (nft for the injector)."""
    require_tool("nft")
    return build(net)


DriverFactory = Callable[..., CounterDriver]


def make_factory(kind: str, pin_root: Path) -> DriverFactory:
    """``factory(node, mark_bit=None)`` opens driver ``kind`` ("ebpf" or "netfilter") for a node."""
    if kind == "ebpf":
        from srv6pm_node.counters.ebpf import COUNTERS_OBJ, EbpfDriver

        require(COUNTERS_OBJ.exists(), "BPF objects not built (scripts/setup.sh)")
        return lambda node, mark_bit=None: EbpfDriver(pin_root=pin_root, netns=node.netns, mark_bit=mark_bit)
    from srv6pm_node.counters.netfilter import NftDriver

    require_tool("nft")
    return lambda node, mark_bit=None: NftDriver(netns=node.netns, mark_bit=mark_bit)


def setup_flow(topo: Topo, tx: CounterDriver, rx: CounterDriver, rx_mode: str = "auto") -> str:
    """Attach r1's egress and r2's ingress counters and monitor the test SID list on both."""
    tx.attach(topo.r1_if, Direction.EGRESS)
    mode = rx.attach(topo.r2_if, Direction.INGRESS, rx_mode)
    tx.add_flow(SIDS, Direction.EGRESS)
    rx.add_flow(SIDS, Direction.INGRESS)
    return mode
