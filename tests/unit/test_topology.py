"""Topology building from interface state, and its ArangoDB document mapping."""

from __future__ import annotations

import pytest

from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.controller.v1 import topology_service_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm_controller.topology import netlink_source
from srv6pm_controller.topology.store import (
    ArangoTopologyStore,
    EmbeddedTopologyStore,
    from_documents,
    to_documents,
)


def iface(name: str, *addrs: str, up: bool = True) -> mpb.Interface:
    return mpb.Interface(name=name, up=up, addresses=list(addrs))


def three_routers() -> dict:
    return {
        "r1": (
            npb.Node(name="r1"),
            [
                iface("lo", "::1/128", "fc00:1::1/128"),
                iface("eth0", "fd00:1::1/64"),
                iface("eth1", "fd00:12::1/64"),
            ],
            ["fc00:1::d6/128"],
        ),
        "r2": (
            npb.Node(name="r2", router_id="10.0.0.2"),
            [iface("lo", "::1/128"), iface("eth1", "fd00:12::2/64"), iface("eth2", "fd00:23::2/64")],
            [],
        ),
        "r3": (
            npb.Node(name="r3"),
            [
                iface("eth2", "fd00:23::3/64"),
                iface("eth9", "fd00:99::3/64", up=False),
                iface("eth3", "fd00:1::9/128"),
            ],
            [],
        ),
    }


def test_links_join_interfaces_sharing_a_subnet_in_both_directions():
    topo = netlink_source.build(three_routers())
    assert [(n.name, n.router_id, list(n.sids)) for n in topo.nodes] == [
        ("r1", "fc00:1::1", ["fc00:1::d6/128"]),
        ("r2", "10.0.0.2", []),
        ("r3", "", []),
    ]
    links = {(e.source, e.source_interface, e.target, e.target_interface) for e in topo.links}
    assert links == {
        ("r1", "eth1", "r2", "eth1"),
        ("r2", "eth1", "r1", "eth1"),
        ("r2", "eth2", "r3", "eth2"),
        ("r3", "eth2", "r2", "eth2"),
    }
    # fd00:1::/64 on r1 and a /128 on r3 do not make a link; a down interface does not either.
    assert all(e.metric == netlink_source.DEFAULT_METRIC for e in topo.links)


def test_arango_documents_round_trip():
    topo = netlink_source.build(three_routers())
    vertices, edges = to_documents(topo)
    assert {v["_key"] for v in vertices} == {"r1", "r2", "r3"}
    assert all(e["_from"].startswith("srv6pm_nodes/") and e["_to"].startswith("srv6pm_nodes/") for e in edges)
    assert len({e["_key"] for e in edges}) == len(edges)  # one document per directed link
    back = from_documents(vertices, edges)
    assert list(back.nodes) == list(topo.nodes)
    assert sorted((e.source, e.target, e.source_interface) for e in back.links) == sorted(
        (e.source, e.target, e.source_interface) for e in topo.links
    )


def test_arango_keys_are_sanitised():
    topo = pb.Topology(nodes=[pb.TopologyNode(name="edge router/1")])
    vertices, _ = to_documents(topo)
    assert vertices[0]["_key"] == "edge_router_1" and vertices[0]["name"] == "edge router/1"


def test_embedded_store_persists(tmp_path):
    path = tmp_path / "t.sqlite3"
    store = EmbeddedTopologyStore(path)
    assert store.load() is None
    topo = netlink_source.build(three_routers())
    store.save(topo)
    assert EmbeddedTopologyStore(path).load() == topo


def test_arango_store_reports_an_unreachable_server():
    with pytest.raises(Exception, match=r"(?i)connect|refused|resolve"):
        ArangoTopologyStore("http://127.0.0.1:9", "srv6pm", "root", "")
