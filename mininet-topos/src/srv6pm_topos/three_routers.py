"""h1 — r1 — c — r2 — h2: two SRv6 edge routers, a core router between them, a host behind each.

Each edge router encapsulates traffic for the far host's prefixes into a SID list and the far
edge decapsulates it (End.DT6). Two SR policies each way, so measurements on different SID lists
can run side by side:

* policy A: the far edge's End.DT6 SID only (the core just forwards);
* policy B: the core's End SID, then the far edge's End.DT6 SID.

Addressing (/64 each): h1-r1 fd00:1:: and fd00:11:: (policy A / B prefixes behind r1), r1-c
fd00:13::, c-r2 fd00:32::, r2-h2 fd00:2:: and fd00:22::. Locators: r1 fc00:1::/64, r2
fc00:2::/64, c fc00:3::/64. The core's interfaces towards r1 and r2 (``c_from_r1``,
``c_from_r2``) are where loss is injected.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from pyroute2 import IPRoute

from srv6pm.node.v1 import srv6_manager_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as pb_grpc

from .lab import Lab, Node

R1_DT6, R2_DT6, CORE_END = "fc00:1::d6", "fc00:2::d6", "fc00:3::e"


@dataclass(frozen=True)
class Policy:
    """One bidirectional SR policy between r1 and r2, with its hosts' and probe endpoints' addresses."""

    name: str
    forward: tuple[str, ...]  # r1 -> r2
    reverse: tuple[str, ...]  # r2 -> r1
    r1_prefix: str  # behind r1 (reverse traffic goes there)
    r2_prefix: str  # behind r2 (forward traffic goes there)
    h1_addr: str
    h2_addr: str
    r1_probe: str  # probe endpoint on r1 (sender side), inside r1_prefix
    r2_probe: str  # probe endpoint on r2 (reflector side), inside r2_prefix


POLICY_A = Policy(
    "A",
    (R2_DT6,),
    (R1_DT6,),
    "fd00:1::/64",
    "fd00:2::/64",
    "fd00:1::2",
    "fd00:2::2",
    "fd00:1::5354",
    "fd00:2::5354",
)
POLICY_B = Policy(
    "B",
    (CORE_END, R2_DT6),
    (CORE_END, R1_DT6),
    "fd00:11::/64",
    "fd00:22::/64",
    "fd00:11::2",
    "fd00:22::2",
    "fd00:11::5354",
    "fd00:22::5354",
)
POLICIES = (POLICY_A, POLICY_B)


@dataclass
class ThreeRouters:
    """The nodes, and the names of the interfaces that matter."""

    h1: Node
    r1: Node
    c: Node
    r2: Node
    h2: Node
    edge_core_if: str = "eth1"  # r1's and r2's interface towards the core
    c_from_r1: str = "eth1"
    c_from_r2: str = "eth2"


def build(lab: Lab) -> ThreeRouters:
    """Create the namespaces, links, addresses and plain routes (SRv6 comes with :func:`provision`)."""
    h1, r1, c, r2, h2 = (lab.add_node(n, router=n[0] != "h") for n in ("h1", "r1", "c", "r2", "h2"))
    lab.link(
        "h1",
        "eth0",
        "r1",
        "eth0",
        a_addrs=["fd00:1::2/64", "fd00:11::2/64"],
        b_addrs=["fd00:1::1/64", "fd00:11::1/64"],
    )
    lab.link("r1", "eth1", "c", "eth1", a_addrs=["fd00:13::1/64"], b_addrs=["fd00:13::2/64"])
    lab.link("c", "eth2", "r2", "eth1", a_addrs=["fd00:32::1/64"], b_addrs=["fd00:32::2/64"])
    lab.link(
        "r2",
        "eth0",
        "h2",
        "eth0",
        a_addrs=["fd00:2::1/64", "fd00:22::1/64"],
        b_addrs=["fd00:2::2/64", "fd00:22::2/64"],
    )
    h1.add_route("::/0", gateway="fd00:1::1")
    h2.add_route("::/0", gateway="fd00:2::1")
    for loc in ("fc00:2::/64", "fc00:3::/64"):
        r1.add_route(loc, gateway="fd00:13::2")
    for loc in ("fc00:1::/64", "fc00:3::/64"):
        r2.add_route(loc, gateway="fd00:32::1")
    c.add_route("fc00:1::/64", gateway="fd00:13::1")
    c.add_route("fc00:2::/64", gateway="fd00:32::2")
    # Static neighbours: no neighbour discovery racing the first packets of a measured flow.
    for node, ifname, peer, peer_if, addrs in (
        (r1, "eth1", c, "eth1", ["fd00:13::2"]),
        (c, "eth1", r1, "eth1", ["fd00:13::1"]),
        (c, "eth2", r2, "eth1", ["fd00:32::2"]),
        (r2, "eth1", c, "eth2", ["fd00:32::1"]),
        (r1, "eth0", h1, "eth0", ["fd00:1::2", "fd00:11::2"]),
        (h1, "eth0", r1, "eth0", ["fd00:1::1"]),
        (r2, "eth0", h2, "eth0", ["fd00:2::2", "fd00:22::2"]),
        (h2, "eth0", r2, "eth0", ["fd00:2::1"]),
    ):
        mac = _mac(peer, peer_if)
        with IPRoute(netns=node.netns) as ipr:
            idx = ipr.link_lookup(ifname=ifname)[0]
            for addr in addrs:
                ipr.neigh("add", dst=addr, lladdr=mac, ifindex=idx, state=0x80)  # NUD_PERMANENT
    return ThreeRouters(h1, r1, c, r2, h2)


def _mac(node: Node, ifname: str) -> str:
    with IPRoute(netns=node.netns) as ipr:
        return ipr.get_links(ipr.link_lookup(ifname=ifname)[0])[0].get_attr("IFLA_ADDRESS")


def provision(r1: grpc.Channel, c: grpc.Channel, r2: grpc.Channel) -> list[str]:
    """Install the SRv6 state through each router's SRv6Manager; one line per call."""
    done = []

    def behaviour(name: str, channel: grpc.Channel, b: pb.Behavior) -> None:
        got = pb_grpc.SRv6ManagerStub(channel).CreateBehavior(pb.CreateBehaviorRequest(behavior=b)).behavior
        done.append(f"{name}: behaviour {got.sid} {pb.BehaviorAction.Name(got.action)}")

    def path(name: str, channel: grpc.Channel, prefix: str, segs: tuple[str, ...]) -> None:
        p = pb.Path(destination=prefix, segments=list(segs), device="eth1")
        got = pb_grpc.SRv6ManagerStub(channel).CreatePath(pb.CreatePathRequest(path=p)).path
        done.append(f"{name}: path {got.destination} -> {list(got.segments)}")

    behaviour("c", c, pb.Behavior(sid=CORE_END, action=pb.BEHAVIOR_ACTION_END, device="eth1"))
    for name, channel, sid in (("r1", r1, R1_DT6), ("r2", r2, R2_DT6)):
        behaviour(
            name,
            channel,
            pb.Behavior(sid=sid, action=pb.BEHAVIOR_ACTION_END_DT6, lookup_table=254, device="eth0"),
        )
    for p in POLICIES:
        path("r1", r1, p.r2_prefix, p.forward)
        path("r2", r2, p.r1_prefix, p.reverse)
    return done
