"""srv6pm-controller with real agents: register nodes, provision a bidirectional tunnel that
carries real traffic, all-or-nothing on failure, state kept across a restart, the srv6pm CLI and
the Python client."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as mpb_grpc
from srv6pm_controller.client import Client, ClientError, TunnelEnd
from srv6pm_topos.agents import executable, start_controller
from srv6pm_topos.lab import Lab, wait_until
from tests.controller_lab import Env, ping, tunnel_args

pytestmark = pytest.mark.netns


@pytest.fixture
def env(net: Lab, tmp_path: Path) -> Iterator[Env]:
    e = Env(net, tmp_path)
    yield e
    e.client.close()


def test_cli_registers_nodes_and_provisions_a_working_tunnel(env: Env):
    t = env.t
    assert env.cli("nodes", "add", "r1", env.a1.target).stdout.strip() == "node r1 registered (serving)"
    env.cli("nodes", "add", "r2", env.a2.target)
    nodes = json.loads(env.cli("--json", "nodes", "list").stdout)
    assert [(n["name"], n["health"]) for n in nodes] == [
        ("r1", "NODE_HEALTH_SERVING"),
        ("r2", "NODE_HEALTH_SERVING"),
    ]
    human = env.cli("nodes", "list").stdout.splitlines()
    assert human[0].split() == ["NAME", "ADDRESS", "HEALTH", "TRANSPORT"] and "serving" in human[1]

    assert not ping(t.h1, t.h2_addr)
    out = env.cli("tunnel", "create", "t1", *tunnel_args(t))
    assert out.stdout.startswith("tunnel t1 created")
    assert ping(t.h1, t.h2_addr)  # real traffic both ways through the provisioned tunnel
    paths, behaviors = env.routes(t.r1)
    assert [(p.destination, list(p.segments)) for p in paths] == [(t.h2_prefix, [t.r2_decap_sid])]
    assert [b.sid for b in behaviors] == [t.r1_decap_sid + "/128"]

    listed = json.loads(env.cli("--json", "tunnel", "list").stdout)
    assert listed[0]["name"] == "t1" and listed[0]["forward_segments"] == [t.r2_decap_sid]

    # A node with a tunnel on it cannot be removed.
    err = env.cli("nodes", "remove", "r1", check=False)
    assert err.returncode == 1 and "FAILED_PRECONDITION" in err.stderr and "tunnel t1" in err.stderr

    env.cli("tunnel", "delete", "t1")
    assert env.routes(t.r1) == ([], []) and env.routes(t.r2) == ([], [])
    assert not ping(t.h1, t.h2_addr)
    env.cli("nodes", "remove", "r1")
    assert [n.name for n in env.client.nodes()] == ["r2"]


def test_cli_errors_are_one_clear_line(env: Env):
    env.cli("nodes", "add", "r1", env.a1.target)
    env.cli("nodes", "add", "r2", env.a2.target)
    unknown = env.cli("tunnel", "create", "t1", *tunnel_args(env.t, **{"right-node": "r9"}), check=False)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "srv6pm: NOT_FOUND: unknown node 'r9' (register it first)"
    bad = env.cli("tunnel", "create", "t1", *tunnel_args(env.t, forward="fc00:2::zz"), check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "INVALID_ARGUMENT" in bad.stderr and "forward_segments[0]" in bad.stderr
    wrong_end = env.cli("tunnel", "create", "t1", *tunnel_args(env.t, forward="fc00:2::1"), check=False)
    assert "must end with right.decap_sid" in wrong_end.stderr
    unreachable = subprocess.run(
        [executable("srv6pm"), "--controller", f"unix:{env.tmp}/nobody.sock", "nodes", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1
    assert (
        unreachable.stderr.strip()
        == f"srv6pm: UNAVAILABLE: controller at unix:{env.tmp}/nobody.sock is unreachable"
    )
    assert env.routes(env.t.r1) == ([], []) and env.routes(env.t.r2) == ([], [])


def test_failed_tunnel_is_rolled_back_on_both_nodes(env: Env):
    """r2's device does not exist: r2's path fails last, after three objects were created; all go."""
    env.client.register_node("r1", env.a1.target, insecure=True)
    env.client.register_node("r2", env.a2.target, insecure=True)
    t = env.t
    # Something pre-existing and identical on r1 must survive the rollback (it was not ours to undo).
    mpb_grpc.SRv6ManagerStub(env.a1.channel).CreateBehavior(
        mpb.CreateBehaviorRequest(
            behavior=mpb.Behavior(
                sid=t.r1_decap_sid, action=mpb.BEHAVIOR_ACTION_END_DT6, lookup_table=254, device=t.core_if
            )
        )
    )
    before_r1 = env.routes(t.r1)
    with pytest.raises(ClientError) as err:
        env.client.create_tunnel(
            "t1",
            TunnelEnd(node="r1", prefix=t.h1_prefix, decap_sid=t.r1_decap_sid, device=t.core_if),
            TunnelEnd(node="r2", prefix=t.h2_prefix, decap_sid=t.r2_decap_sid, device="eth9"),
            [t.r2_decap_sid],
            [t.r1_decap_sid],
        )
    assert err.value.code == "FAILED_PRECONDITION" and "node r2" in err.value.message
    assert env.routes(t.r1) == before_r1
    assert env.routes(t.r2) == ([], [])
    assert env.client.tunnels() == []


def test_state_survives_a_controller_restart(env: Env):
    t = env.t
    env.client.register_node("r1", env.a1.target, insecure=True)
    env.client.register_node("r2", env.a2.target, insecure=True)
    end_l = TunnelEnd(node="r1", prefix=t.h1_prefix, decap_sid=t.r1_decap_sid, device=t.core_if)
    end_r = TunnelEnd(node="r2", prefix=t.h2_prefix, decap_sid=t.r2_decap_sid, device=t.core_if)
    created = env.client.create_tunnel("t1", end_l, end_r, [t.r2_decap_sid], [t.r1_decap_sid])
    # Idempotent: the same request again answers the same tunnel.
    assert env.client.create_tunnel("t1", end_l, end_r, [t.r2_decap_sid], [t.r1_decap_sid]) == created
    with pytest.raises(ClientError) as err:
        env.client.create_tunnel("t1", end_l, end_r, ["fc00:9::1", t.r2_decap_sid], [t.r1_decap_sid])
    assert err.value.code == "ALREADY_EXISTS"

    env.client.close()
    assert env.ctl.stop(env.lab) == 0
    env.ctl = start_controller(env.lab, env.tmp)
    env.client = Client(env.ctl.target)
    assert [n.name for n in env.client.nodes()] == ["r1", "r2"]
    assert env.client.tunnel("t1") == created
    assert ping(t.h1, t.h2_addr)
    env.client.delete_tunnel("t1")  # the restarted controller can still drive the nodes
    assert env.routes(t.r1) == ([], [])


def test_node_health_follows_the_agent(env: Env):
    env.client.register_node("r1", env.a1.target, insecure=True)
    assert env.client.node("r1").health == 1
    env.a1.stop()
    assert env.client.node("r1").health == 3  # UNREACHABLE
    with pytest.raises(ClientError) as err:
        env.client.register_node("r1", "unix:/elsewhere.sock", insecure=True)
    assert err.value.code == "ALREADY_EXISTS"
    with pytest.raises(ClientError) as err:
        env.client.register_node("bad name", "x:1", insecure=True)
    assert err.value.code == "INVALID_ARGUMENT"
    # Secrets never come back out of the API.
    env.client.register_node("r2", env.a2.target, insecure=True, token="s3cret")
    assert env.client.node("r2").credentials.token == ""


def test_topology_from_the_nodes(env: Env):
    t = env.t
    err = env.cli("topology", "show", check=False)
    assert err.returncode == 1 and "NOT_FOUND" in err.stderr
    env.client.register_node("r1", env.a1.target, insecure=True)
    env.client.register_node("r2", env.a2.target, insecure=True)
    env.cli("tunnel", "create", "t1", *tunnel_args(t))
    topo = json.loads(env.cli("--json", "topology", "show", "--extract").stdout)
    assert [(n["name"], n["sids"]) for n in topo["nodes"]] == [
        ("r1", [t.r1_decap_sid + "/128"]),
        ("r2", [t.r2_decap_sid + "/128"]),
    ]
    assert {
        (e["source"], e["source_interface"], e["target"], e["target_interface"]) for e in topo["links"]
    } == {("r1", "eth1", "r2", "eth1"), ("r2", "eth1", "r1", "eth1")}
    human = env.cli("topology", "show").stdout  # the stored one
    assert "r1:eth1" in human and "r2:eth1" in human
    # After a controller restart the stored topology is still there.
    env.client.close()
    env.ctl.stop(env.lab)
    env.ctl = start_controller(env.lab, env.tmp)
    env.client = Client(env.ctl.target)
    assert len(env.client.topology().links) == 2


def test_controller_requires_and_enforces_credentials(net: Lab, tmp_path: Path):
    ctl = executable("srv6pm-controller")
    out = subprocess.run(
        [ctl, "--listen", f"unix:{tmp_path}/c.sock", "--state-dir", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "no credentials" in out.stderr
    token = tmp_path / "token"
    token.write_text("ctl-token")
    net.popen_host(
        [
            ctl,
            "--listen",
            f"unix:{tmp_path}/c.sock",
            "--state-dir",
            str(tmp_path / "s"),
            "--token-file",
            str(token),
        ],
        stderr=subprocess.DEVNULL,
    )
    target = f"unix:{tmp_path}/c.sock"
    with Client(target) as anonymous:
        wait_until(lambda: _code(anonymous) == "UNAUTHENTICATED", timeout=20)
    with Client(target, token="ctl-token") as c:
        assert c.nodes() == []
    cli = subprocess.run(
        [executable("srv6pm"), "--controller", target, "--token-file", str(token), "nodes", "list"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert cli.returncode == 0 and cli.stdout.startswith("NAME")


def _code(client: Client) -> str:
    try:
        client.nodes()
    except ClientError as exc:
        return exc.code
    return "OK"
