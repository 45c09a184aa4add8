"""A controller with two real agents (r1, r2 in namespaces, two_routers topology), driven by the
Python client and the srv6pm CLI: shared by the controller's namespace tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as mpb_grpc
from srv6pm_controller.client import Client
from srv6pm_topos import two_routers
from srv6pm_topos.agents import Agent, Controller, executable, start_agent, start_controller
from srv6pm_topos.lab import Lab, Node
from tests.support import require_tool


class Env:
    """h1 - r1 - r2 - h2 with srv6pm-node on r1 and r2 and a controller (no node registered yet)."""

    def __init__(self, lab: Lab, tmp: Path) -> None:
        require_tool("ping")
        self.lab, self.tmp = lab, tmp
        self.t = two_routers.build(lab)
        self.a1: Agent = start_agent(self.t.r1, tmp)
        self.a2: Agent = start_agent(self.t.r2, tmp)
        self.ctl: Controller = start_controller(lab, tmp)
        self.client = Client(self.ctl.target)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(
            [executable("srv6pm"), "--controller", self.ctl.target, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check:
            assert out.returncode == 0, out.stderr
        return out

    def routes(self, node: Node) -> tuple[list, list]:
        stub = mpb_grpc.SRv6ManagerStub({"r1": self.a1, "r2": self.a2}[node.name].channel)
        return (
            list(stub.ListPaths(mpb.ListPathsRequest(all_tables=True)).paths),
            list(stub.ListBehaviors(mpb.ListBehaviorsRequest(all_tables=True)).behaviors),
        )


def ping(node: Node, dst: str) -> bool:
    return node.run(["ping", "-6", "-c", "2", "-i", "0.2", "-W", "1", dst], check=False).returncode == 0


def tunnel_args(t: two_routers.TwoRouters, **over: str) -> list[str]:
    args = {
        "left-node": "r1",
        "left-prefix": t.h1_prefix,
        "left-sid": t.r1_decap_sid,
        "left-dev": t.core_if,
        "right-node": "r2",
        "right-prefix": t.h2_prefix,
        "right-sid": t.r2_decap_sid,
        "right-dev": t.core_if,
        "forward": t.r2_decap_sid,
        "reverse": t.r1_decap_sid,
        **over,
    }
    return [x for k, v in args.items() for x in (f"--{k}", v)]
