"""The IS-IS topology source for real: FRR (zebra + isisd) runs in each router's namespace,
srv6pm-node reads it through vtysh's JSON (SRv6Manager.GetIsisTopology), and srv6pm-controller
builds the topology from every registered node's view.

r1 —— r2 —— r3 —— r4 in a line, IS-IS level 2 over IPv6 point-to-point links; r4 runs FRR but no
agent (only its neighbour r3 sees it). FRR's hostnames are ``<name>-isis``, so the registered
node names are seen to come from the registry (nodes are matched by the system id their own agent
reports), and the agentless r4 from its IS-IS hostname. r2's metric towards r3 is 20.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from srv6pm.controller.v1 import topology_service_pb2 as topb
from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as mpb_grpc
from srv6pm_controller.client import Client, ClientError
from srv6pm_topos import frr
from srv6pm_topos.agents import Agent, Controller, executable, start_agent, start_controller
from srv6pm_topos.lab import Lab
from tests.support import require, require_tool

pytestmark = pytest.mark.netns

LINKS = [
    ("r1", "eth1", "r2", "eth1", "12"),
    ("r2", "eth2", "r3", "eth2", "23"),
    ("r3", "eth3", "r4", "eth3", "34"),
]


def system_id(i: int) -> str:
    return f"0000.0000.000{i}"


@dataclass
class Env:
    lab: Lab
    tmp: Path
    routers: dict[str, frr.FrrRouter]
    agents: dict[str, Agent]
    ctl: Controller
    client: Client

    def isis(self, name: str) -> mpb.GetIsisTopologyResponse:
        return mpb_grpc.SRv6ManagerStub(self.agents[name].channel).GetIsisTopology(
            mpb.GetIsisTopologyRequest(), timeout=30
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [executable("srv6pm"), "--controller", self.ctl.target, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )


def require_frr() -> None:
    require_tool("vtysh")
    reason = frr.missing()
    require(reason is None, reason or "")


def build(lab: Lab, names: list[str]) -> None:
    """The routers of ``names`` with their loopbacks, and the LINKS among them."""
    for name in names:
        node = lab.add_node(name)
        node.add_address("lo", f"fc00:{name[1:]}::1/128")
    for a, a_if, b, b_if, net in LINKS:
        if a in names and b in names:
            lab.link(
                a, a_if, b, b_if, a_addrs=[f"fd00:{net}::{a[1:]}/64"], b_addrs=[f"fd00:{net}::{b[1:]}/64"]
            )


def start_frr(stack: contextlib.ExitStack, lab: Lab, name: str, **config: object) -> frr.FrrRouter:
    node = lab.nodes[name]
    i = int(name[1:])
    router = frr.start_isis(
        node, f"49.0001.{system_id(i)}.00", node.interfaces, hostname=f"{name}-isis", **config
    )
    stack.callback(router.close)
    return router


@pytest.fixture
def line(net: Lab, tmp_path: Path) -> Iterator[Env]:
    require_frr()
    with contextlib.ExitStack() as stack:
        build(net, ["r1", "r2", "r3", "r4"])
        routers = {
            name: start_frr(stack, net, name, **({"metrics": {"eth2": 20}} if name == "r2" else {}))
            for name in ("r1", "r2", "r3", "r4")
        }
        took = frr.wait_for_adjacencies(
            {routers["r1"]: 1, routers["r2"]: 2, routers["r3"]: 2, routers["r4"]: 1}, timeout=60
        )
        print(f"IS-IS adjacencies up and hostnames known after {took:.1f}s")
        agents = {
            name: start_agent(
                net.nodes[name], tmp_path, extra_args=("--frr-vty-socket", str(routers[name].run_dir))
            )
            for name in ("r1", "r2", "r3")
        }
        ctl = start_controller(net, tmp_path)
        client = Client(ctl.target)
        stack.callback(client.close)
        for name in ("r1", "r2", "r3"):
            client.register_node(name, agents[name].target, insecure=True)
        yield Env(net, tmp_path, routers, agents, ctl, client)


def test_agent_reads_the_routers_isis_view_from_frr(line: Env):
    r2 = line.isis("r2")
    assert (r2.system_id, r2.hostname, list(r2.loopback_addresses)) == (
        system_id(2),
        "r2-isis",
        ["fc00:2::1/128"],
    )
    seen = [
        (a.interface, a.level, a.state, a.neighbor_system_id, a.neighbor_hostname, a.metric, a.area)
        for a in r2.adjacencies
    ]
    up = mpb.ISIS_ADJACENCY_STATE_UP
    assert seen == [
        ("eth1", 2, up, system_id(1), "r1-isis", 10, "core"),
        ("eth2", 2, up, system_id(3), "r3-isis", 20, "core"),
    ]
    by_if = {a.interface: a for a in r2.adjacencies}
    assert "fd00:12::1" in by_if["eth1"].neighbor_addresses  # r1's address on the link
    assert any(a.startswith("fe80::") for a in by_if["eth1"].neighbor_addresses)
    assert "fd00:23::2/64" in by_if["eth2"].local_addresses  # r2's own address on eth2


def test_controller_extracts_the_isis_topology(line: Env):
    # A local SID on r2 shows in the topology, read from its kernel through the agent.
    mpb_grpc.SRv6ManagerStub(line.agents["r2"].channel).CreateBehavior(
        mpb.CreateBehaviorRequest(
            behavior=mpb.Behavior(sid="fc00:2::e", action=mpb.BEHAVIOR_ACTION_END, device="lo")
        ),
        timeout=10,
    )
    topo = line.client.extract_topology(topb.TOPOLOGY_SOURCE_ISIS)
    assert topo.source == topb.TOPOLOGY_SOURCE_ISIS
    assert [(n.name, n.router_id, list(n.sids)) for n in topo.nodes] == [
        ("r1", "fc00:1::1", []),
        ("r2", "fc00:2::1", ["fc00:2::e/128"]),
        ("r3", "fc00:3::1", []),
        ("r4-isis", "", []),  # no agent: named by its IS-IS hostname, seen from r3 only
    ]
    assert [(e.source, e.source_interface, e.target, e.target_interface, e.metric) for e in topo.links] == [
        ("r1", "eth1", "r2", "eth1", 10),
        ("r2", "eth1", "r1", "eth1", 10),
        ("r2", "eth2", "r3", "eth2", 20),
        ("r3", "eth2", "r2", "eth2", 10),
        ("r3", "eth3", "r4-isis", "", 10),
    ]
    assert line.client.topology() == topo  # stored
    # Without a source the controller uses IS-IS too, since every node runs it.
    assert line.client.extract_topology().source == topb.TOPOLOGY_SOURCE_ISIS

    # The CLI: srv6pm topology show --extract --source isis.
    out = line.cli("--json", "topology", "show", "--extract", "--source", "isis")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["source"] == "TOPOLOGY_SOURCE_ISIS"
    assert [n["name"] for n in shown["nodes"]] == ["r1", "r2", "r3", "r4-isis"]
    assert len(shown["links"]) == 5

    # A link going down leaves the topology once IS-IS notices (hold time 3 s).
    line.routers["r3"].vtysh("configure terminal", "interface eth3", "shutdown", daemon="zebra")
    deadline = time.monotonic() + 20
    while True:
        topo = line.client.extract_topology(topb.TOPOLOGY_SOURCE_ISIS)
        if all(e.target != "r4-isis" for e in topo.links):
            break
        assert time.monotonic() < deadline, topo
        time.sleep(0.5)
    assert [n.name for n in topo.nodes] == ["r1", "r2", "r3"]
    assert len(topo.links) == 4


@pytest.fixture
def mixed(net: Lab, tmp_path: Path) -> Iterator[Env]:
    """r1 —— r2: r1 runs FRR, r2 does not (its agent points at an empty vty socket directory)."""
    require_frr()
    with contextlib.ExitStack() as stack:
        build(net, ["r1", "r2"])
        routers = {"r1": start_frr(stack, net, "r1")}
        empty = tmp_path / "no-frr"
        empty.mkdir()
        sockets = {"r1": str(routers["r1"].run_dir), "r2": str(empty)}
        agents = {
            name: start_agent(net.nodes[name], tmp_path, extra_args=("--frr-vty-socket", sockets[name]))
            for name in ("r1", "r2")
        }
        ctl = start_controller(net, tmp_path)
        client = Client(ctl.target)
        stack.callback(client.close)
        for name in ("r1", "r2"):
            client.register_node(name, agents[name].target, insecure=True)
        yield Env(net, tmp_path, routers, agents, ctl, client)


def test_without_frr_the_agent_and_the_controller_answer_failed_precondition(mixed: Env):
    assert mixed.isis("r1").system_id == system_id(1)
    with pytest.raises(grpc.RpcError) as err:
        mixed.isis("r2")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "FRR's isisd does not answer" in err.value.details()
    assert str(mixed.tmp / "no-frr") in err.value.details()

    with pytest.raises(ClientError) as cerr:
        mixed.client.extract_topology(topb.TOPOLOGY_SOURCE_ISIS)
    assert cerr.value.code == "FAILED_PRECONDITION"
    assert cerr.value.message.startswith("IS-IS topology: node r2: FRR's isisd does not answer")
    out = mixed.cli("topology", "show", "--extract", "--source", "isis")
    assert out.returncode == 1
    assert "FAILED_PRECONDITION" in out.stderr and "node r2" in out.stderr

    # Without a source the controller falls back to the nodes' kernel state.
    topo = mixed.client.extract_topology()
    assert topo.source == topb.TOPOLOGY_SOURCE_NETLINK
    assert [(e.source, e.source_interface, e.target, e.target_interface) for e in topo.links] == [
        ("r1", "eth1", "r2", "eth1"),
        ("r2", "eth1", "r1", "eth1"),
    ]

    # isisd stopping on r1 is a FAILED_PRECONDITION too, naming r1.
    mixed.lab.stop(mixed.routers["r1"].procs["isisd"])
    with pytest.raises(grpc.RpcError) as err:
        mixed.isis("r1")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(ClientError, match="node r1: FRR's isisd does not answer"):
        mixed.client.extract_topology(topb.TOPOLOGY_SOURCE_ISIS)
