"""Where the topology is kept: one interface, two implementations.

* :class:`EmbeddedTopologyStore` (default): the controller's SQLite state file.
* :class:`ArangoTopologyStore`: ArangoDB through python-arango — a vertex collection of nodes, an
  edge collection of links, and a named graph over them, so AQL graph traversals (shortest path,
  k-paths) work on it directly.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, Protocol

from srv6pm.controller.v1 import topology_service_pb2 as pb

GRAPH = "srv6pm_topology"
NODES = "srv6pm_nodes"
LINKS = "srv6pm_links"


class TopologyStore(Protocol):
    """Saves and loads the whole topology."""

    def save(self, topology: pb.Topology) -> None:
        """Replace the stored topology."""

    def load(self) -> pb.Topology | None:
        """The stored topology, or None before the first extraction."""


class EmbeddedTopologyStore:
    """The topology as one record in a SQLite file."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS topology (id INTEGER PRIMARY KEY CHECK (id = 1), record BLOB)"
        )
        self._lock = threading.Lock()

    def save(self, topology: pb.Topology) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO topology (id, record) VALUES (1, ?)", (topology.SerializeToString(),)
            )

    def load(self) -> pb.Topology | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM topology WHERE id = 1").fetchone()
        return pb.Topology.FromString(row[0]) if row else None


def _key(name: str) -> str:
    """An ArangoDB document key for a node name (keys allow letters, digits and _-:.@()+,=;$!*'%)."""
    return "".join(c if c.isalnum() or c in "_-:.@()+,=;$!*'" else "_" for c in name)


def to_documents(topology: pb.Topology) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The topology as ArangoDB vertex and edge documents."""
    vertices = [
        {"_key": _key(n.name), "name": n.name, "router_id": n.router_id, "sids": list(n.sids)}
        for n in topology.nodes
    ]
    edges = [
        {
            "_key": _key(f"{e.source}:{e.source_interface}-{e.target}:{e.target_interface}"),
            "_from": f"{NODES}/{_key(e.source)}",
            "_to": f"{NODES}/{_key(e.target)}",
            "source_interface": e.source_interface,
            "target_interface": e.target_interface,
            "metric": e.metric,
        }
        for e in topology.links
    ]
    return vertices, edges


def from_documents(vertices: list[dict[str, Any]], edges: list[dict[str, Any]]) -> pb.Topology:
    """The inverse of :func:`to_documents`."""
    names = {v["_key"]: v["name"] for v in vertices}
    topo = pb.Topology(source=pb.TOPOLOGY_SOURCE_NETLINK)
    for v in sorted(vertices, key=lambda v: v["name"]):
        topo.nodes.append(
            pb.TopologyNode(name=v["name"], router_id=v.get("router_id", ""), sids=v.get("sids", []))
        )
    for e in sorted(edges, key=lambda e: e["_key"]):
        topo.links.append(
            pb.TopologyLink(
                source=names[e["_from"].split("/", 1)[1]],
                target=names[e["_to"].split("/", 1)[1]],
                source_interface=e.get("source_interface", ""),
                target_interface=e.get("target_interface", ""),
                metric=e.get("metric", 0),
            )
        )
    return topo


class ArangoTopologyStore:
    """The topology in ArangoDB (python-arango). Not exercised against a server here: ArangoDB
    does not run on the development machine; the document mapping is tested."""

    def __init__(self, url: str, database: str, username: str, password: str) -> None:
        from arango import ArangoClient  # imported lazily: only deployments with ArangoDB need it
        from arango.http import DefaultHTTPClient

        # One quick attempt: an unreachable database should fail the start, not hang it.
        http = DefaultHTTPClient(request_timeout=10, retry_attempts=1, backoff_factor=0)
        self._db = ArangoClient(hosts=url, http_client=http).db(
            database, username=username, password=password
        )
        if not self._db.has_graph(GRAPH):
            self._db.create_graph(
                GRAPH,
                edge_definitions=[
                    {
                        "edge_collection": LINKS,
                        "from_vertex_collections": [NODES],
                        "to_vertex_collections": [NODES],
                    }
                ],
            )

    def save(self, topology: pb.Topology) -> None:
        vertices, edges = to_documents(topology)
        graph = self._db.graph(GRAPH)
        graph.edge_collection(LINKS).truncate()
        graph.vertex_collection(NODES).truncate()
        if vertices:
            self._db.collection(NODES).insert_many(vertices)
        if edges:
            self._db.collection(LINKS).insert_many(edges)

    def load(self) -> pb.Topology | None:
        vertices = list(self._db.collection(NODES).all())
        if not vertices:
            return None
        return from_documents(vertices, list(self._db.collection(LINKS).all()))
