"""h1 — r1 — r2 — h2: two SRv6 edge routers joined by one link, a host behind each.

Addressing (all /64): h1-r1 fd00:1::/64, r1-r2 fd00:12::/64, r2-h2 fd00:2::/64. Each router
owns a locator fc00:N::/64 (its SIDs), reachable from the other router over the r1-r2 link.
"""

from __future__ import annotations

from dataclasses import dataclass

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
