"""Topology from the nodes' kernel state, read through their agents (SRv6Manager).

Nodes are the registered agents; a link joins two interfaces of different nodes that hold
addresses in the same IPv6 (or IPv4) subnet — on a point-to-point router link that is exactly
the adjacency. Host routes (/128, /32) and loopbacks never make links. SIDs are the node's local
SID behaviours.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.controller.v1 import topology_service_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as mpb_grpc

from . import asking

DEFAULT_METRIC = 10


def _router_id(node: npb.Node, interfaces: Iterable[mpb.Interface]) -> str:
    if node.router_id:
        return node.router_id
    for iface in interfaces:  # first global address on loopback, else on anything
        if iface.name == "lo":
            for a in iface.addresses:
                ip = ipaddress.ip_interface(a).ip
                if not ip.is_loopback:
                    return str(ip)
    return ""


def build(nodes: dict[str, tuple[npb.Node, list[mpb.Interface], list[str]]]) -> pb.Topology:
    """The topology of ``nodes`` (name -> (node, its interfaces, its SIDs)); pure, for testing."""
    topo = pb.Topology(source=pb.TOPOLOGY_SOURCE_NETLINK)
    subnets: dict[ipaddress._BaseNetwork, list[tuple[str, str]]] = {}
    for name in sorted(nodes):
        node, interfaces, sids = nodes[name]
        topo.nodes.append(
            pb.TopologyNode(name=name, router_id=_router_id(node, interfaces), sids=sorted(sids))
        )
        for iface in interfaces:
            if iface.name == "lo" or not iface.up:
                continue
            for addr in iface.addresses:
                net = ipaddress.ip_interface(addr).network
                if net.prefixlen < net.max_prefixlen:
                    subnets.setdefault(net, []).append((name, iface.name))
    links = set()
    for members in subnets.values():
        for a_node, a_if in members:
            for b_node, b_if in members:
                if a_node != b_node:
                    links.add((a_node, b_node, a_if, b_if))
    for a_node, b_node, a_if, b_if in sorted(links):
        topo.links.append(
            pb.TopologyLink(
                source=a_node,
                target=b_node,
                source_interface=a_if,
                target_interface=b_if,
                metric=DEFAULT_METRIC,
            )
        )
    return topo


def extract(nodes: list[npb.Node], channel: Callable[[npb.Node], grpc.Channel]) -> pb.Topology:
    """Read every node's interfaces and SIDs and build the topology; a node that does not answer
    raises :class:`NodeError` naming it."""
    state = {}
    for node in nodes:
        stub = mpb_grpc.SRv6ManagerStub(channel(node))
        with asking(node.name):
            interfaces = list(stub.ListInterfaces(mpb.ListInterfacesRequest(), timeout=10).interfaces)
            behaviors = stub.ListBehaviors(mpb.ListBehaviorsRequest(all_tables=True), timeout=10).behaviors
        state[node.name] = (node, interfaces, [b.sid for b in behaviors])
    topo = build(state)
    now = Timestamp()
    now.GetCurrentTime()
    topo.extracted_at.CopyFrom(now)
    return topo
