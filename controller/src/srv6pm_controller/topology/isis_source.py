"""Topology from FRR's IS-IS, read through the node agents (SRv6Manager.GetIsisTopology).

Each registered node's agent reads its router's IS-IS view from FRR (vtysh JSON): the router's
system id and its adjacencies. A registered node is identified by the system id its own agent
reports, so IS-IS neighbours map onto registered node names exactly (by hostname only when FRR
did not give the neighbour's system id). Nodes are the registered nodes under their registered
names, plus every IS-IS neighbour without an agent, named by the hostname it advertises (its
system id when it advertises none, or when that name is a registered node's).

A link is an Up adjacency of a registered node, directed from it: ``source_interface`` is its
interface, ``metric`` its IS-IS metric there (the lowest over the adjacency's levels), and
``target_interface`` the neighbour's interface of the adjacency back when the neighbour is
registered too (parallel adjacencies are told apart by the addresses on the link), else empty —
a router without an agent is only seen from its neighbours. ``router_id`` is the registered
one, else the router's IS-IS loopback address; SIDs are the node's local SID behaviours, as in
the netlink source (FRR 8.4's IS-IS advertises no SRv6 locators).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.controller.v1 import topology_service_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as mpb_grpc

from . import asking

ISIS_TIMEOUT = 30.0  # the agent runs a few vtysh commands, each with its own timeout


class InconsistentTopology(Exception):
    """The nodes' IS-IS views contradict each other (e.g. two nodes with one system id)."""


def _ip(address: str) -> str:
    return str(ipaddress.ip_interface(address).ip)


def _router_id(node: npb.Node, view: mpb.GetIsisTopologyResponse) -> str:
    if node.router_id:
        return node.router_id
    return _ip(view.loopback_addresses[0]) if view.loopback_addresses else ""


def _reverse_interface(
    adj: mpb.IsisAdjacency, source_system_id: str, neighbor: mpb.GetIsisTopologyResponse
) -> str:
    """The neighbour's interface of the adjacency back to the source, '' if it cannot be told."""
    back = [
        b
        for b in neighbor.adjacencies
        if b.state == mpb.ISIS_ADJACENCY_STATE_UP
        and b.neighbor_system_id == source_system_id
        and b.level == adj.level
    ]
    interfaces = {b.interface for b in back}
    if len(interfaces) == 1:
        return interfaces.pop()
    ours = {_ip(a) for a in adj.local_addresses}
    theirs = {_ip(a) for a in adj.neighbor_addresses}
    matching = {
        b.interface
        for b in back
        if ours & {_ip(a) for a in b.neighbor_addresses} or theirs & {_ip(a) for a in b.local_addresses}
    }
    return matching.pop() if len(matching) == 1 else ""


def build(
    nodes: dict[str, tuple[npb.Node, mpb.GetIsisTopologyResponse, list[str]]],
) -> pb.Topology:
    """The topology of ``nodes`` (name -> (node, its IS-IS view, its SIDs)); pure, for testing."""
    by_system_id: dict[str, str] = {}
    by_hostname: dict[str, str] = {}
    for name in sorted(nodes):
        view = nodes[name][1]
        if view.system_id in by_system_id:
            raise InconsistentTopology(
                f"nodes {by_system_id[view.system_id]} and {name} report the same IS-IS system id "
                f"{view.system_id}"
            )
        by_system_id[view.system_id] = name
        if view.hostname:
            by_hostname.setdefault(view.hostname, name)

    topo = pb.Topology(source=pb.TOPOLOGY_SOURCE_ISIS)
    for name in sorted(nodes):
        node, view, sids = nodes[name]
        topo.nodes.append(pb.TopologyNode(name=name, router_id=_router_id(node, view), sids=sorted(sids)))

    others: dict[str, str] = {}  # system id (or hostname) of a neighbour without an agent -> name

    def neighbor_name(adj: mpb.IsisAdjacency) -> str:
        sysid = adj.neighbor_system_id
        if sysid in by_system_id:
            return by_system_id[sysid]
        if not sysid and adj.neighbor_hostname in by_hostname:
            return by_hostname[adj.neighbor_hostname]
        key = sysid or adj.neighbor_hostname
        if key not in others:
            wanted = adj.neighbor_hostname or sysid
            taken = set(nodes) | set(others.values())
            others[key] = wanted if wanted not in taken else (sysid or wanted)
        return others[key]

    # (source, target, source interface) -> (metric, target interface)
    links: dict[tuple[str, str, str], tuple[int, str]] = {}
    for name in sorted(nodes):
        view = nodes[name][1]
        for adj in view.adjacencies:
            known = adj.neighbor_system_id or adj.neighbor_hostname
            if adj.state != mpb.ISIS_ADJACENCY_STATE_UP or not known:
                continue
            target = neighbor_name(adj)
            if target == name:
                continue
            target_if = _reverse_interface(adj, view.system_id, nodes[target][1]) if target in nodes else ""
            key = (name, target, adj.interface)
            if key in links:
                metric, known_if = links[key]
                links[key] = (min(metric, adj.metric), known_if or target_if)
            else:
                links[key] = (adj.metric, target_if)

    for sysid_or_host in sorted(others, key=lambda k: others[k]):
        topo.nodes.append(pb.TopologyNode(name=others[sysid_or_host]))
    for (source, target, source_if), (metric, target_if) in sorted(links.items()):
        topo.links.append(
            pb.TopologyLink(
                source=source,
                target=target,
                source_interface=source_if,
                target_interface=target_if,
                metric=metric,
            )
        )
    return topo


def extract(nodes: list[npb.Node], channel: Callable[[npb.Node], grpc.Channel]) -> pb.Topology:
    """Read every node's IS-IS view and SIDs through its agent and build the topology. A node that
    refuses or fails raises :class:`NodeError` naming it (FAILED_PRECONDITION when FRR/IS-IS is
    not there); views that contradict each other raise :class:`InconsistentTopology`."""
    state = {}
    for node in nodes:
        stub = mpb_grpc.SRv6ManagerStub(channel(node))
        with asking(node.name):
            view = stub.GetIsisTopology(mpb.GetIsisTopologyRequest(), timeout=ISIS_TIMEOUT)
            behaviors = stub.ListBehaviors(mpb.ListBehaviorsRequest(all_tables=True), timeout=10).behaviors
        state[node.name] = (node, view, [b.sid for b in behaviors])
    topo = build(state)
    now = Timestamp()
    now.GetCurrentTime()
    topo.extracted_at.CopyFrom(now)
    return topo
