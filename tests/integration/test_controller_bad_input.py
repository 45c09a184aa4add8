"""Every northbound RPC and every srv6pm command, given bad input: a precise status (the CLI: one
line, exit 1), and nothing changes — not the controller's state, not the routes on the nodes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from srv6pm.controller.v1 import measurement_service_pb2 as mpb
from srv6pm.controller.v1 import measurement_service_pb2_grpc as mpb_grpc
from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.controller.v1 import node_service_pb2_grpc as npb_grpc
from srv6pm.controller.v1 import topology_service_pb2 as topb
from srv6pm.controller.v1 import topology_service_pb2_grpc as topb_grpc
from srv6pm.controller.v1 import tunnel_service_pb2 as tpb
from srv6pm.controller.v1 import tunnel_service_pb2_grpc as tpb_grpc
from srv6pm.node.v1 import srv6_pm_pb2 as pmpb
from srv6pm_controller.client import TunnelEnd
from srv6pm_topos.agents import executable
from srv6pm_topos.lab import Lab
from tests.controller_lab import Env, tunnel_args

pytestmark = pytest.mark.netns

INV, NF, AE, FP = "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION"


@pytest.fixture
def env(net: Lab, tmp_path: Path) -> Iterator[Env]:
    """Nodes r1 and r2 registered, tunnel t1 between them, a topology extracted."""
    e = Env(net, tmp_path)
    e.client.register_node("r1", e.a1.target, insecure=True)
    e.client.register_node("r2", e.a2.target, insecure=True)
    e.cli("tunnel", "create", "t1", *tunnel_args(e.t))
    e.client.extract_topology()
    yield e
    e.client.close()


def snapshot(env: Env) -> tuple:
    """What bad input must not change: the controller's registry and the nodes' kernel routes."""
    c = env.client
    return (
        [(n.name, n.address) for n in c.nodes()],
        c.tunnels(),
        c.measurements(),
        c.topology().links,
        env.routes(env.t.r1),
        env.routes(env.t.r2),
    )


def status(call, request) -> tuple[str, str]:
    """(status name, details) of a unary call, or of a stream's first message."""
    try:
        out = call(request, timeout=20)
        if isinstance(out, grpc.Call) and hasattr(out, "__next__"):
            next(out)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details()
    return "OK", ""


def end(t, side: str, **over) -> TunnelEnd:
    e = TunnelEnd(
        node="r1" if side == "left" else "r2",
        prefix=t.h1_prefix if side == "left" else t.h2_prefix,
        decap_sid=t.r1_decap_sid if side == "left" else t.r2_decap_sid,
        device=t.core_if,
    )
    for k, v in over.items():
        setattr(e, k, v)
    return e


def tunnel(t, name: str = "t2", left: dict | None = None, right: dict | None = None, **over) -> tpb.Tunnel:
    tun = tpb.Tunnel(
        name=name,
        left=end(t, "left", **(left or {})),
        right=end(t, "right", **(right or {})),
        forward_segments=over.pop("forward", [t.r2_decap_sid]),
        reverse_segments=over.pop("reverse", [t.r1_decap_sid]),
    )
    for k, v in over.items():
        setattr(tun, k, v)
    return tun


def measurement(**over) -> mpb.Measurement:
    spec = pmpb.MeasurementSpec(measurement_id=over.pop("id", "m1"), loss_enabled=True, delay_enabled=True)
    spec.color_period.FromSeconds(over.pop("period", 1))
    m = mpb.Measurement(sender_node="r1", reflector_node="r2", tunnel="t1", spec=spec)
    for k, v in over.items():
        setattr(m, k, v)
    return m


def test_every_northbound_rpc_refuses_bad_input_and_changes_nothing(env: Env):
    ch, t = env.ctl.channel, env.t
    nodes, tunnels = npb_grpc.NodeServiceStub(ch), tpb_grpc.TunnelServiceStub(ch)
    meas, topo = mpb_grpc.MeasurementServiceStub(ch), topb_grpc.TopologyServiceStub(ch)
    before = snapshot(env)
    node = npb.Node
    cases = [
        # NodeService
        (
            nodes.RegisterNode,
            npb.RegisterNodeRequest(node=node(name="bad name", address="x:1")),
            INV,
            "invalid",
        ),
        (nodes.RegisterNode, npb.RegisterNodeRequest(node=node(name="r3")), INV, "node address is required"),
        (
            nodes.RegisterNode,
            npb.RegisterNodeRequest(node=node(name="r3", address="garbage")),
            INV,
            "HOST:PORT",
        ),
        (
            nodes.RegisterNode,
            npb.RegisterNodeRequest(node=node(name="r3", address="fd00::1:50051")),
            INV,
            "brackets",
        ),
        (
            nodes.RegisterNode,
            npb.RegisterNodeRequest(node=node(name="r3", address="h:70000")),
            INV,
            "port 1-65535",
        ),
        (
            nodes.RegisterNode,
            npb.RegisterNodeRequest(node=node(name="r1", address="unix:/else")),
            AE,
            "registered",
        ),
        (nodes.GetNode, npb.GetNodeRequest(name="r9"), NF, "unknown node 'r9'"),
        (nodes.RemoveNode, npb.RemoveNodeRequest(name="r9"), NF, "unknown node 'r9'"),
        (nodes.RemoveNode, npb.RemoveNodeRequest(name="r1"), FP, "tunnel t1"),
        # TunnelService
        (tunnels.CreateTunnel, tpb.CreateTunnelRequest(tunnel=tunnel(t, name="")), INV, "tunnel name"),
        (tunnels.CreateTunnel, tpb.CreateTunnelRequest(tunnel=tunnel(t, left={"node": "r9"})), NF, "'r9'"),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, left={"node": ""})),
            INV,
            "left.node",
        ),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, right={"prefix": "fd00:2::1/64"})),
            INV,
            "right.prefix",
        ),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, left={"decap_sid": "ff02::1"})),
            INV,
            "left.decap_sid",
        ),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, right={"device": ""})),
            INV,
            "device",
        ),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, right={"node": "r1"})),
            INV,
            "must differ",
        ),
        (tunnels.CreateTunnel, tpb.CreateTunnelRequest(tunnel=tunnel(t, forward=[])), INV, "empty"),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, forward=["fc00:9::1"] * 16 + [t.r2_decap_sid])),
            INV,
            "at most 16",
        ),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, reverse=[t.r2_decap_sid])),
            INV,
            "must end with left.decap_sid",
        ),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, left={"decap_action": 99})),
            INV,
            "decap_action",
        ),
        (
            tunnels.CreateTunnel,
            tpb.CreateTunnelRequest(tunnel=tunnel(t, name="t1", right={"prefix": "fd00:9::/64"})),
            AE,
            "'t1'",
        ),
        (tunnels.GetTunnel, tpb.GetTunnelRequest(name="t9"), NF, "unknown tunnel 't9'"),
        (tunnels.DeleteTunnel, tpb.DeleteTunnelRequest(name="t9"), NF, "unknown tunnel 't9'"),
        # MeasurementService
        (
            meas.CreateMeasurement,
            mpb.CreateMeasurementRequest(measurement=measurement(id="")),
            INV,
            "measurement",
        ),
        (
            meas.CreateMeasurement,
            mpb.CreateMeasurementRequest(measurement=measurement(sender_node="")),
            INV,
            "sender_node is required",
        ),
        (
            meas.CreateMeasurement,
            mpb.CreateMeasurementRequest(measurement=measurement(reflector_node="r9")),
            NF,
            "'r9'",
        ),
        (meas.CreateMeasurement, mpb.CreateMeasurementRequest(measurement=measurement(period=0)), INV, "1 s"),
        (
            meas.CreateMeasurement,
            mpb.CreateMeasurementRequest(measurement=measurement(tunnel="t9")),
            NF,
            "unknown tunnel",
        ),
        (meas.GetMeasurement, mpb.GetMeasurementRequest(measurement_id="m9"), NF, "unknown measurement 'm9'"),
        (meas.DeleteMeasurement, mpb.DeleteMeasurementRequest(measurement_id="m9"), NF, "'m9'"),
        (
            meas.StreamResults,
            mpb.StreamResultsRequest(measurement_ids=["m9"]),
            NF,
            "unknown measurement 'm9'",
        ),
        # TopologyService
        (topo.ExtractTopology, topb.ExtractTopologyRequest(source=7), INV, "TopologySource"),
        (
            topo.ExtractTopology,
            topb.ExtractTopologyRequest(source=topb.TOPOLOGY_SOURCE_ISIS),
            FP,
            "IS-IS topology: node r1",
        ),
    ]
    for call, request, code, fragment in cases:
        got, details = status(call, request)
        assert (got, fragment in details) == (code, True), (request, got, details)
        assert "\n" not in details
    assert snapshot(env) == before
    # A node that is down: named in the error, nothing changed either.
    env.a2.stop()
    got, details = status(
        topo.ExtractTopology, topb.ExtractTopologyRequest(source=topb.TOPOLOGY_SOURCE_NETLINK)
    )
    assert got == "UNAVAILABLE" and details.startswith("kernel topology: node r2:"), details
    got, details = status(meas.CreateMeasurement, mpb.CreateMeasurementRequest(measurement=measurement()))
    assert got == "UNAVAILABLE" and details.startswith("node r2: starting the reflector"), details
    got, details = status(tunnels.DeleteTunnel, tpb.DeleteTunnelRequest(name="t1"))
    assert got != "OK"
    assert [tn.name for tn in env.client.tunnels()] == ["t1"] and env.client.measurements() == []


def test_every_cli_command_refuses_bad_input_in_one_line(env: Env):
    before = snapshot(env)
    missing = str(env.tmp / "missing.pem")
    cases = [
        (
            ["nodes", "add", "r3", "garbage"],
            "srv6pm: INVALID_ARGUMENT: node address 'garbage' is not HOST:PORT",
        ),
        (["nodes", "add", "r3", "[fd00::1]:1", "--node-ca", missing], "srv6pm: [Errno 2] No such file"),
        (["nodes", "remove", "r9"], "srv6pm: NOT_FOUND: unknown node 'r9'"),
        (
            ["tunnel", "create", "t2", *tunnel_args(env.t, **{"left-prefix": "nonsense"})],
            "srv6pm: INVALID_ARGUMENT",
        ),
        (["tunnel", "delete", "t9"], "srv6pm: NOT_FOUND: unknown tunnel 't9'"),
        (
            ["measure", "create", "m1", "--sender", "r1", "--reflector", "r9", "--tunnel", "t1"],
            "srv6pm: NOT_FOUND",
        ),
        (
            [
                "measure",
                "create",
                "m1",
                "--sender",
                "r1",
                "--reflector",
                "r2",
                "--tunnel",
                "t1",
                "--period",
                "nan",
            ],
            "srv6pm: INVALID_ARGUMENT: period_s nan",
        ),
        (
            ["measure", "create", "m1", "--sender", "r1", "--reflector", "r2", "--forward", "fc00::zz"],
            "srv6pm: INVALID_ARGUMENT",
        ),
        (["measure", "show", "m9"], "srv6pm: NOT_FOUND: unknown measurement 'm9'"),
        (["measure", "delete", "m9"], "srv6pm: NOT_FOUND"),
        (["watch", "m9"], "srv6pm: NOT_FOUND: unknown measurement 'm9'"),
        (["topology", "show", "--source", "isis"], "srv6pm: FAILED_PRECONDITION: IS-IS topology: node r1"),
    ]
    for args, start in cases:
        t0 = time.monotonic()
        out = env.cli(*args, check=False)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert out.stderr.startswith(start) and out.stderr.count("\n") == 1, (args, out.stderr)
        assert out.stdout == "" and time.monotonic() - t0 < 30, args
    # Malformed numbers are refused by the argument parser (exit 2, usage on stderr), before any call.
    for args in (
        ["measure", "show", "m1", "--blocks", "-1"],
        ["watch", "--count", "x"],
        ["watch", "--since", "-5"],
    ):
        out = env.cli(*args, check=False)
        assert out.returncode == 2 and "error: argument" in out.stderr, (args, out.stderr)
    assert snapshot(env) == before


def test_controller_flags_are_checked_at_start(tmp_path: Path):
    for flags, message in (
        (["--metrics-listen", "nowhere"], "--metrics-listen: 'nowhere' is not HOST:PORT"),
        (["--metrics-listen", "fd00::1:9464"], "brackets"),
    ):
        out = subprocess.run(
            [
                executable("srv6pm-controller"),
                *("--listen", f"unix:{tmp_path}/c.sock", "--insecure", "--state-dir", str(tmp_path / "s")),
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2 and message in out.stderr, out.stderr
