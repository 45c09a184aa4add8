"""h1 — r1 — r2 — h2: two SRv6 edge routers joined by one link, a host behind each.

Addressing (all /64): h1-r1 fd00:1::/64, r1-r2 fd00:12::/64, r2-h2 fd00:2::/64. Each router
owns a locator fc00:N::/64 (its SIDs), reachable from the other router over the r1-r2 link.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from srv6pm.node.v1 import srv6_manager_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as pb_grpc

from .lab import Lab, Node


@dataclass
class TwoRouters:
    """The nodes of the topology and the addresses tests and the demo need."""

    h1: Node
    r1: Node
    r2: Node
    h2: Node
    h1_addr: str = "fd00:1::2"
    h2_addr: str = "fd00:2::2"
    h1_prefix: str = "fd00:1::/64"
    h2_prefix: str = "fd00:2::/64"
    r1_decap_sid: str = "fc00:1::d6"
    r2_decap_sid: str = "fc00:2::d6"
    core_if: str = "eth1"  # each router's interface on the r1-r2 link


def build(lab: Lab) -> TwoRouters:
    """Create the four namespaces, links, addresses and plain routes (no SRv6 yet)."""
    h1, r1, r2, h2 = (lab.add_node(n, router=n.startswith("r")) for n in ("h1", "r1", "r2", "h2"))
    lab.link("h1", "eth0", "r1", "eth0", a_addrs=["fd00:1::2/64"], b_addrs=["fd00:1::1/64"])
    lab.link("r1", "eth1", "r2", "eth1", a_addrs=["fd00:12::1/64"], b_addrs=["fd00:12::2/64"])
    lab.link("r2", "eth0", "h2", "eth0", a_addrs=["fd00:2::1/64"], b_addrs=["fd00:2::2/64"])
    h1.add_route("::/0", gateway="fd00:1::1")
    h2.add_route("::/0", gateway="fd00:2::1")
    r1.add_route("fc00:2::/64", gateway="fd00:12::2")
    r2.add_route("fc00:1::/64", gateway="fd00:12::1")
    return TwoRouters(h1, r1, r2, h2)


def provision_tunnel(t: TwoRouters, r1: grpc.Channel, r2: grpc.Channel) -> list[str]:
    """Through SRv6Manager: h1→h2 traffic encapsulated by r1 towards r2's End.DT6 SID, and back.

    Returns one line per applied call, as read back from the kernels.
    """
    done = []
    # (router, its channel, prefix behind the far end, far end's decap SID, own decap SID)
    ends = (
        ("r1", r1, t.h2_prefix, t.r2_decap_sid, t.r1_decap_sid),
        ("r2", r2, t.h1_prefix, t.r1_decap_sid, t.r2_decap_sid),
    )
    for name, channel, far_prefix, far_sid, own_sid in ends:
        stub = pb_grpc.SRv6ManagerStub(channel)
        b = stub.CreateBehavior(
            pb.CreateBehaviorRequest(
                behavior=pb.Behavior(
                    sid=own_sid, action=pb.BEHAVIOR_ACTION_END_DT6, lookup_table=254, device="eth0"
                )
            )
        ).behavior
        done.append(f"{name}: behaviour {b.sid} End.DT6, lookup in table {b.lookup_table}")
        p = stub.CreatePath(
            pb.CreatePathRequest(path=pb.Path(destination=far_prefix, segments=[far_sid], device=t.core_if))
        ).path
        done.append(f"{name}: path {p.destination} -> SID list {list(p.segments)} via {p.device}")
    return done
