"""The controller's measurement life cycle and result collection.

The nodes here are the SRv6PM test double of tests/fakes (srv6pm-node's SRv6PM is not implemented
yet): real gRPC servers in real processes, killed and restarted to prove that collection
reconnects and that nothing is lost or duplicated. Replace the double with srv6pm-node once the
SRv6PM issue lands.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from srv6pm.node.v1 import srv6_pm_pb2 as pmpb
from srv6pm_controller.client import Client, ClientError
from srv6pm_topos.agents import Controller, executable, start_controller
from srv6pm_topos.lab import Lab, wait_until
from tests.fakes.fake_pm_agent import block_result
from tests.fakes.pm_nodes import FakePMNode

FWD = ["fc00:2::1", "fc00:2::d6"]
REV = ["fc00:1::d6"]


class Env:
    def __init__(self, lab: Lab, tmp: Path) -> None:
        self.lab, self.tmp = lab, tmp
        self.n1, self.n2 = FakePMNode(lab, tmp, "n1"), FakePMNode(lab, tmp, "n2")
        self.ctl: Controller = start_controller(lab, tmp)
        self.client = Client(self.ctl.target)
        self.client.register_node("n1", self.n1.target, insecure=True)
        self.client.register_node("n2", self.n2.target, insecure=True)

    def restart_controller(self) -> None:
        self.client.close()
        assert self.ctl.stop(self.lab) == 0
        self.ctl = start_controller(self.lab, self.tmp)
        self.client = Client(self.ctl.target)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [executable("srv6pm"), "--controller", self.ctl.target, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def env(net: Lab, tmp_path: Path) -> Iterator[Env]:
    e = Env(net, tmp_path)
    yield e
    e.client.close()


def collect(client: Client, ids: list[str], count: int, timeout: float = 20) -> list[pmpb.BlockResult]:
    """``count`` results from the northbound stream (fails after ``timeout``)."""
    got: list[pmpb.BlockResult] = []
    stream = client.results(ids)

    def run() -> None:
        for r in stream:
            got.append(r)
            if len(got) >= count:
                break

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert len(got) >= count, f"only {len(got)} results in {timeout}s"
    return got


def test_measurement_life_cycle_and_results(env: Env):
    m = env.client.create_measurement("m1", "n1", "n2", forward=FWD, reverse=REV, period_s=1)
    assert m.spec.guard_time.ToNanoseconds() == 500_000_000  # default T/2
    assert env.n1.running() == [("m1", pmpb.MEASUREMENT_ROLE_SENDER)]
    assert env.n2.running() == [("m1", pmpb.MEASUREMENT_ROLE_REFLECTOR)]

    results = collect(env.client, ["m1"], 3)
    blocks = [r.block_number for r in results]
    assert blocks == sorted(set(blocks))  # in order, no duplicates
    for r in results:  # exactly what the node reported, unchanged
        assert r == block_result("m1", r.block_number, 1.0)

    got = env.client.measurement("m1", recent_blocks=2)
    assert got.measurement.state == pmpb.MEASUREMENT_STATE_RUNNING
    assert len(got.recent_results) == 2 and got.recent_results[-1].block_number >= blocks[-1]

    listed = json.loads(env.cli("--json", "measure", "list").stdout)
    assert [(x["spec"]["measurement_id"], x["state"]) for x in listed] == [
        ("m1", "MEASUREMENT_STATE_RUNNING")
    ]
    show = env.cli("measure", "show", "m1").stdout
    assert "FWD LOSS%" in show and "m1" in show
    watched = env.cli("--json", "watch", "m1", "--count", "2")
    assert watched.returncode == 0, watched.stderr
    lines = [json.loads(x) for x in watched.stdout.splitlines()]
    assert len(lines) == 2 and lines[0]["measurement_id"] == "m1"
    assert int(lines[1]["block_number"]) == int(lines[0]["block_number"]) + 1

    env.client.delete_measurement("m1")
    assert env.n1.running() == [] and env.n2.running() == []
    with pytest.raises(ClientError) as err:
        env.client.measurement("m1")
    assert err.value.code == "NOT_FOUND"


def test_bad_measurements_are_refused_and_start_nothing(env: Env):
    cases = [
        (dict(measurement_id="m1", sender="n1", reflector="n9", forward=FWD), "NOT_FOUND", "unknown node"),
        (
            dict(measurement_id="m1", sender="n1", reflector="n1", forward=FWD),
            "INVALID_ARGUMENT",
            "must differ",
        ),
        (dict(measurement_id="m 1", sender="n1", reflector="n2", forward=FWD), "INVALID_ARGUMENT", "invalid"),
        (
            dict(measurement_id="m1", sender="n1", reflector="n2", forward=["fc00::zz"]),
            "INVALID_ARGUMENT",
            "forward_segments[0]",
        ),
        (dict(measurement_id="m1", sender="n1", reflector="n2", forward=[]), "INVALID_ARGUMENT", "empty"),
        (
            dict(measurement_id="m1", sender="n1", reflector="n2", forward=FWD, period_s=0.5),
            "INVALID_ARGUMENT",
            "1 s to 3600 s",
        ),
        (
            dict(measurement_id="m1", sender="n1", reflector="n2", forward=FWD, period_s=4000),
            "INVALID_ARGUMENT",
            "1 s to 3600 s",
        ),
        (
            dict(measurement_id="m1", sender="n1", reflector="n2", forward=FWD, period_s=2, guard_s=2),
            "INVALID_ARGUMENT",
            "guard_time",
        ),
        (
            dict(measurement_id="m1", sender="n1", reflector="n2", tunnel="nope"),
            "NOT_FOUND",
            "unknown tunnel",
        ),
        # The sender node refuses: the reflector that was already started is stopped again.
        (
            dict(measurement_id="refuse-1", sender="n1", reflector="n2", forward=FWD),
            "FAILED_PRECONDITION",
            "node n1: starting the sender",
        ),
    ]
    for kw, code, fragment in cases:
        mid = kw.pop("measurement_id")
        with pytest.raises(ClientError) as err:
            env.client.create_measurement(mid, kw.pop("sender"), kw.pop("reflector"), **kw)
        assert err.value.code == code and fragment in err.value.message, (mid, err.value)
    assert env.n1.running() == [] and env.n2.running() == []
    assert env.client.measurements() == []
    env.client.create_measurement("m1", "n1", "n2", forward=FWD, period_s=1)
    with pytest.raises(ClientError) as err:
        env.client.create_measurement("m1", "n1", "n2", forward=FWD, period_s=1)
    assert err.value.code == "ALREADY_EXISTS"
    with pytest.raises(ClientError) as err:
        env.client.remove_node("n2")
    assert err.value.code == "FAILED_PRECONDITION" and "measurement m1" in err.value.message


def test_collection_survives_a_node_restart_without_duplicates(env: Env):
    env.client.create_measurement("m1", "n1", "n2", forward=FWD, period_s=1)
    seen: list[int] = []
    stream = env.client.results(["m1"])
    reader = threading.Thread(target=lambda: [seen.append(r.block_number) for r in stream], daemon=True)
    reader.start()
    wait_until(lambda: len(seen) >= 2, timeout=15)
    env.n1.kill()
    time.sleep(1.5)
    env.n1.start()  # same socket, same state file: the node resumes the measurement
    before = len(seen)
    wait_until(lambda: len(seen) >= before + 2, timeout=20)
    assert seen == sorted(set(seen)), seen  # no block twice, always forward
    assert "result stream broken, reconnecting" in env.ctl.log_path.read_text()


def test_measurements_survive_a_controller_restart(env: Env):
    env.client.create_measurement("m1", "n1", "n2", forward=FWD, reverse=REV, period_s=1)
    collect(env.client, ["m1"], 2)
    stored = [r.block_number for r in env.client.measurement("m1").recent_results]
    env.restart_controller()
    got = env.client.measurement("m1", recent_blocks=100)
    assert got.measurement.state == pmpb.MEASUREMENT_STATE_RUNNING
    assert [r.block_number for r in got.recent_results][: len(stored)] == stored  # kept across the restart
    after = collect(env.client, ["m1"], 2)  # re-attached: new blocks arrive
    assert after[0].block_number > stored[-1]
    wait_until(lambda: len(env.client.measurement("m1", 1000).recent_results) > len(stored) + 1, timeout=10)
    blocks = [r.block_number for r in env.client.measurement("m1", 1000).recent_results]
    assert blocks == sorted(set(blocks))
