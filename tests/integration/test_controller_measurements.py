"""The controller's measurement life cycle and result collection, against real srv6pm-node processes.

h1 — r1 — c — r2 — h2 in namespaces (:mod:`srv6pm_topos.three_routers`), srv6pm-node on r1 and
r2 with SRv6PM configured (eBPF counters), one tunnel r1 <-> r2 provisioned through the controller
(fd00:1::/64 behind r1, fd00:2::/64 behind r2, SID lists [fc00:2::d6] / [fc00:1::d6]), traffic
both ways at 1,000 packets/s and exact nftables drop injectors on the core (every 7th forward,
every 13th reverse packet). What the controller stores and streams must be exactly what the sender
node reports (its GetResults), and its loss figures exactly what the injectors dropped. Nodes and
the controller are killed and restarted mid-run: collection reconnects, nothing is lost or
duplicated.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.json_format import ParseDict

from srv6pm.node.v1 import srv6_pm_pb2 as pmpb
from srv6pm_common.measurement_spec import probe_endpoint
from srv6pm_controller.client import Client, ClientError, TunnelEnd
from srv6pm_node.counters.pins import temporary_bpffs
from srv6pm_topos.agents import Controller, executable, start_controller
from srv6pm_topos.injector import DropBook
from srv6pm_topos.lab import Lab, wait_until
from srv6pm_topos.monitored import MonitoredNetwork
from srv6pm_topos.three_routers import POLICY_A, R1_DT6, R2_DT6
from tests.support import require_tool

pytestmark = pytest.mark.netns

S = 1_000_000_000
FWD, REV = [R2_DT6], [R1_DT6]
SENDER, REFLECTOR = pmpb.MEASUREMENT_ROLE_SENDER, pmpb.MEASUREMENT_ROLE_REFLECTOR
RUNNING, STOPPED = pmpb.MEASUREMENT_STATE_RUNNING, pmpb.MEASUREMENT_STATE_STOPPED
# The probe endpoints the controller picks inside the tunnel's prefixes.
SENDER_PROBE, REFLECTOR_PROBE = probe_endpoint(POLICY_A.r1_prefix), probe_endpoint(POLICY_A.r2_prefix)


class Env:
    """The network, its agents, the controller with r1 and r2 registered and tunnel t1, traffic
    both ways over the tunnel and drop injectors on the core whose drops are booked per block."""

    def __init__(self, lab: Lab, tmp: Path, pins: Path, stack: contextlib.ExitStack) -> None:
        require_tool("nft")
        self.lab, self.tmp = lab, tmp
        self.mn = MonitoredNetwork.edges(lab, tmp, pmpb.COUNTER_DRIVER_EBPF, pins, stack)
        self.ctl: Controller = start_controller(lab, tmp)
        stack.callback(lambda: self.ctl.stop(lab))  # before the agents: no stream left open to them
        self.client = Client(self.ctl.target)
        stack.callback(lambda: self.client.close())
        for name in ("r1", "r2"):
            self.client.register_node(name, self.mn.agents[name].target, insecure=True)
        self.client.create_tunnel(
            "t1",
            TunnelEnd(node="r1", prefix=POLICY_A.r1_prefix, decap_sid=R1_DT6, device="eth1"),
            TunnelEnd(node="r2", prefix=POLICY_A.r2_prefix, decap_sid=R2_DT6, device="eth1"),
            forward=FWD,
            reverse=REV,
        )
        self.books = self.mn.lossy_traffic(stack, POLICY_A, 7, 13)

    def restart_controller(self, down_s: float = 0.0) -> None:
        self.client.close()
        assert self.ctl.stop(self.lab) == 0
        time.sleep(down_s)
        self.ctl = start_controller(self.lab, self.tmp)
        self.client = Client(self.ctl.target)

    def kill_agent(self, name: str) -> None:
        """SIGKILL a node's agent (a crash, not a graceful stop)."""
        agent = self.mn.agents[name]
        agent.proc.kill()
        agent.proc.wait()
        agent.channel.close()

    def states(self, name: str) -> dict[tuple[str, int], int]:
        """(measurement id, role) -> state, as the node itself reports it."""
        got = self.mn.pm(name).ListMeasurements(pmpb.ListMeasurementsRequest(), timeout=10).measurements
        return {(m.spec.measurement_id, m.role): m.state for m in got}

    def running(self, name: str) -> list[tuple[str, int]]:
        return sorted(k for k, state in self.states(name).items() if state == RUNNING)

    def node_results(self, mid: str) -> dict[int, pmpb.BlockResult]:
        """What the sender node itself has for ``mid``, by block number."""
        return {r.block_number: r for r in self.mn.results(mid)}

    def stored(self, mid: str) -> list[pmpb.BlockResult]:
        """What the controller stored for ``mid`` (up to its last 1,000 blocks)."""
        return list(self.client.measurement(mid, recent_blocks=1000).recent_results)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [executable("srv6pm"), "--controller", self.ctl.target, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def env(net: Lab, tmp_path: Path) -> Iterator[Env]:
    with temporary_bpffs() as pins, contextlib.ExitStack() as stack:
        yield Env(net, tmp_path, pins, stack)  # the stack stops traffic, sampler, client, agents


def collect(
    client: Client, ids: list[str], count: int, timeout: float = 20, since: int = 0
) -> list[pmpb.BlockResult]:
    """``count`` results from the northbound stream (fails after ``timeout``)."""
    got: list[pmpb.BlockResult] = []
    stream = client.results(ids, since_block=since)

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


def covered(r: pmpb.BlockResult) -> list[int]:
    """The blocks a result's loss figures cover (merged ones are same-colour blocks before it)."""
    return [r.block_number - 2 * k for k in range(r.merged_blocks)]


def check_exact(results: list[pmpb.BlockResult], books: list[DropBook]) -> list[int]:
    """Assert measured == injected, both ways, for every result the books can check; return those."""
    fwd, rev = books
    checked = []
    for r in results:
        if not r.forward.valid:
            continue
        want = (fwd.drops(r.block_number, r.merged_blocks), rev.drops(r.block_number, r.merged_blocks))
        if None in want:
            continue  # the books missed a sample (not the engine's fault)
        assert r.reverse.valid
        assert (r.forward.lost_packets, r.reverse.lost_packets) == want, (
            f"block {r.block_number} (x{r.merged_blocks}): measured {r.forward.lost_packets}/"
            f"{r.reverse.lost_packets}, injected {want[0]}/{want[1]}"
        )
        assert r.forward.rx_packets == r.forward.tx_packets - want[0]
        checked.append(r.block_number)
    return checked


def assert_as_reported(env: Env, mid: str, results: list[pmpb.BlockResult]) -> None:
    """Every result is exactly the sender node's own result of that block."""
    node = env.node_results(mid)
    for r in results:
        assert r == node[r.block_number], f"block {r.block_number} differs from the node's"


def assert_all_as_reported(env: Env, mid: str, stored: list[pmpb.BlockResult]) -> None:
    """The controller stored every result the sender node published, up to its last stored block,
    each exactly once and exactly as the node has it."""
    node = [r for r in env.mn.results(mid) if r.block_number <= stored[-1].block_number]
    assert [r.block_number for r in stored] == [r.block_number for r in node]
    assert stored == node


def assert_no_gap_no_repeat(results: list[pmpb.BlockResult]) -> None:
    """Result blocks strictly increase, and the measured ones cover every block between the first
    and the last exactly once (merged results included)."""
    numbers = [r.block_number for r in results]
    assert numbers == sorted(set(numbers)), numbers
    blocks = [b for r in results if r.forward.valid for b in covered(r)]
    summary = [(r.block_number, r.forward.valid, r.merged_blocks) for r in results]
    assert len(blocks) == len(set(blocks)), f"a block counted twice: {summary}"
    assert sorted(blocks) == list(range(min(blocks), max(blocks) + 1)), f"a silent gap: {summary}"


def test_measurement_life_cycle_and_results(env: Env):
    create = "measure create m1 --sender r1 --reflector r2 --period 1"
    created = env.cli("--json", *create.split(), "--tunnel", "t1")
    assert created.returncode == 0, created.stderr
    spec = json.loads(created.stdout)["spec"]
    assert spec["guard_time"] == "0.500s"  # default T/2
    assert (spec["forward_segments"], spec["reverse_segments"]) == (FWD, REV)  # from the tunnel
    assert (spec["sender_address"], spec["reflector_address"]) == (SENDER_PROBE, REFLECTOR_PROBE)
    assert env.running("r1") == [("m1", SENDER)]
    assert env.running("r2") == [("m1", REFLECTOR)]

    results = collect(env.client, ["m1"], 3)
    blocks = [r.block_number for r in results]
    assert blocks == list(range(blocks[0], blocks[0] + len(blocks)))  # every block, in order, once
    assert_as_reported(env, "m1", results)  # exactly what the node reported, unchanged

    got = env.client.measurement("m1", recent_blocks=2)
    assert got.measurement.state == RUNNING
    assert len(got.recent_results) == 2 and got.recent_results[-1].block_number >= blocks[-1]

    listed = json.loads(env.cli("--json", "measure", "list").stdout)
    assert [(x["spec"]["measurement_id"], x["state"]) for x in listed] == [
        ("m1", "MEASUREMENT_STATE_RUNNING")
    ]
    show = env.cli("measure", "show", "m1")
    assert show.returncode == 0 and "FWD LOSS%" in show.stdout and "m1" in show.stdout
    watched = env.cli("--json", "watch", "m1", "--count", "2")
    assert watched.returncode == 0, watched.stderr
    lines = [ParseDict(json.loads(x), pmpb.BlockResult()) for x in watched.stdout.splitlines()]
    assert len(lines) == 2 and lines[0].measurement_id == "m1"
    assert lines[1].block_number == lines[0].block_number + 1
    assert_as_reported(env, "m1", lines)  # the CLI's JSON carries the node's figures, unchanged
    # A reader resuming after the last block it has: the stored blocks after it first, then live
    # ones, none missing or twice.
    kept = env.stored("m1")
    resumed = collect(env.client, ["m1"], len(kept) + 1, since=kept[0].block_number)
    first = kept[0].block_number + 1
    assert [r.block_number for r in resumed] == list(range(first, first + len(resumed)))
    assert resumed[: len(kept) - 1] == kept[1:]
    assert_as_reported(env, "m1", resumed)
    replayed = env.cli("--json", "watch", "m1", "--since", str(kept[0].block_number), "--count", "2")
    assert [json.loads(x)["block_number"] for x in replayed.stdout.splitlines()] == [
        str(kept[0].block_number + 1),
        str(kept[0].block_number + 2),
    ]

    time.sleep(1.2)  # the books sample the last block after it is read
    stored = env.stored("m1")
    assert_all_as_reported(env, "m1", stored)
    assert_no_gap_no_repeat(stored)
    checked = check_exact(stored, env.books)
    assert len(checked) >= 3, f"exact blocks: {checked} of {[r.block_number for r in stored]}"
    for r in stored:
        if r.block_number in checked:  # really dropping, both ways
            assert all(book.drops(r.block_number, r.merged_blocks) > 0 for book in env.books), r

    deleted = env.cli("measure", "delete", "m1")
    assert deleted.returncode == 0 and "measurement m1 deleted" in deleted.stdout
    assert env.states("r1") == {("m1", SENDER): STOPPED}
    assert env.states("r2") == {("m1", REFLECTOR): STOPPED}
    with pytest.raises(ClientError) as err:
        env.client.measurement("m1")
    assert err.value.code == "NOT_FOUND"
    gone = env.cli("measure", "show", "m1")
    assert gone.returncode == 1 and gone.stderr.startswith("srv6pm: NOT_FOUND")

    # The same id again, without a tunnel: explicit SID lists and probe endpoints. A new
    # measurement: none of the previous run's blocks (which the node still keeps) comes back.
    last_of_first_run = max(env.node_results("m1"))
    explicit = f"{create} --forward {FWD[0]} --reverse {REV[0]} --sender-address {POLICY_A.r1_probe}"
    refused = env.cli(*explicit.split())
    assert refused.returncode == 1 and refused.stderr.startswith(
        "srv6pm: INVALID_ARGUMENT: spec.reflector_address is required without a tunnel"
    )
    recreated = env.cli(*explicit.split(), "--reflector-address", POLICY_A.r2_probe)
    assert recreated.returncode == 0 and "measurement m1 started" in recreated.stdout, recreated.stderr
    assert env.running("r1") == [("m1", SENDER)] and env.running("r2") == [("m1", REFLECTOR)]
    wait_until(lambda: len(env.stored("m1")) >= 3, timeout=15)
    again = env.stored("m1")
    assert all(r.block_number > last_of_first_run for r in again), [r.block_number for r in again]
    assert_as_reported(env, "m1", again)
    blocks = [r.block_number for r in again]
    assert blocks == list(range(blocks[0], blocks[-1] + 1))


def test_bad_measurements_are_refused_and_start_nothing(env: Env):
    explicit = dict(forward=FWD, reverse=REV, sender_address=POLICY_A.r1_probe)
    cases = [
        (dict(measurement_id="m1", sender="r1", reflector="r9", tunnel="t1"), "NOT_FOUND", "unknown node"),
        (
            dict(measurement_id="m1", sender="r1", reflector="r1", tunnel="t1"),
            "INVALID_ARGUMENT",
            "must differ",
        ),
        (dict(measurement_id="m 1", sender="r1", reflector="r2", tunnel="t1"), "INVALID_ARGUMENT", "invalid"),
        (
            dict(measurement_id="m1", sender="r1", reflector="r2", forward=["fc00::zz"]),
            "INVALID_ARGUMENT",
            "forward_segments[0]",
        ),
        (dict(measurement_id="m1", sender="r1", reflector="r2", forward=[]), "INVALID_ARGUMENT", "empty"),
        (
            dict(measurement_id="m1", sender="r1", reflector="r2", tunnel="t1", period_s=0.5),
            "INVALID_ARGUMENT",
            "1 s to 3600 s",
        ),
        (
            dict(measurement_id="m1", sender="r1", reflector="r2", tunnel="t1", period_s=4000),
            "INVALID_ARGUMENT",
            "1 s to 3600 s",
        ),
        (
            dict(measurement_id="m1", sender="r1", reflector="r2", tunnel="t1", period_s=2, guard_s=2),
            "INVALID_ARGUMENT",
            "guard_time",
        ),
        (
            dict(measurement_id="m1", sender="r1", reflector="r2", tunnel="nope"),
            "NOT_FOUND",
            "unknown tunnel",
        ),
        # No tunnel: the controller cannot pick the probe endpoints, the spec must name them.
        (
            dict(measurement_id="m1", sender="r1", reflector="r2", forward=FWD, reverse=REV),
            "INVALID_ARGUMENT",
            "spec.sender_address is required without a tunnel",
        ),
        (
            dict(measurement_id="m1", sender="r1", reflector="r2", **explicit),
            "INVALID_ARGUMENT",
            "spec.reflector_address is required without a tunnel",
        ),
        # The reflector node refuses: no path on r2 steers the sender's address into that list.
        (
            dict(
                measurement_id="refuse-r2",
                sender="r1",
                reflector="r2",
                **{**explicit, "reverse": ["fc00:3::e", R1_DT6]},
                reflector_address=POLICY_A.r2_probe,
            ),
            "FAILED_PRECONDITION",
            "node r2: starting the reflector",
        ),
        # The sender node refuses (no path on r1 leads to that reflector address) after the
        # reflector started: the controller stops the reflector again.
        (
            dict(
                measurement_id="refuse-r1",
                sender="r1",
                reflector="r2",
                **explicit,
                reflector_address="fd00:99::1",
            ),
            "FAILED_PRECONDITION",
            "node r1: starting the sender",
        ),
    ]
    for kw, code, fragment in cases:
        mid = kw.pop("measurement_id")
        with pytest.raises(ClientError) as err:
            env.client.create_measurement(mid, kw.pop("sender"), kw.pop("reflector"), **kw)
        assert err.value.code == code and fragment in err.value.message, (mid, err.value)
    assert env.running("r1") == [] and env.running("r2") == []
    assert env.states("r2") == {("refuse-r1", REFLECTOR): STOPPED}  # started, then stopped again
    assert env.client.measurements() == []

    env.client.create_measurement("m1", "r1", "r2", tunnel="t1", period_s=1)
    with pytest.raises(ClientError) as err:
        env.client.create_measurement("m1", "r1", "r2", tunnel="t1", period_s=1)
    assert err.value.code == "ALREADY_EXISTS"
    # Another colour period than the one the nodes already run: refused by the node, nothing left.
    with pytest.raises(ClientError) as err:
        env.client.create_measurement("m2", "r1", "r2", tunnel="t1", period_s=2)
    assert err.value.code == "FAILED_PRECONDITION" and "node r2: starting the reflector" in err.value.message
    assert "colour period" in err.value.message
    with pytest.raises(ClientError) as err:
        env.client.remove_node("r2")
    assert err.value.code == "FAILED_PRECONDITION" and "measurement m1" in err.value.message
    with pytest.raises(ClientError) as err:
        env.client.delete_tunnel("t1")
    assert err.value.code == "FAILED_PRECONDITION" and "measurement m1" in err.value.message
    assert env.running("r1") == [("m1", SENDER)] and env.running("r2") == [("m1", REFLECTOR)]
    assert [m.spec.measurement_id for m in env.client.measurements()] == ["m1"]


def test_collection_survives_a_node_crash_without_loss_or_duplicates(env: Env):
    env.client.create_measurement("m1", "r1", "r2", tunnel="t1", period_s=1)
    seen: list[pmpb.BlockResult] = []
    stream = env.client.results(["m1"])
    reader = threading.Thread(target=lambda: [seen.append(r) for r in stream], daemon=True)
    reader.start()
    wait_until(lambda: sum(r.forward.valid for r in seen) >= 2, timeout=15)
    env.kill_agent("r1")  # the sender, whose result stream the controller follows
    time.sleep(2.5)
    env.mn.start_agent("r1")  # same socket, same state directory: the node resumes the measurement
    before = sum(r.forward.valid for r in seen)
    wait_until(lambda: sum(r.forward.valid for r in seen) >= before + 4, timeout=30)
    time.sleep(1.2)  # the books sample the last block after it is read
    numbers = [r.block_number for r in seen]
    assert numbers == sorted(set(numbers)), numbers  # no block twice, always forward
    assert "result stream broken, reconnecting" in env.ctl.log_path.read_text()
    stored = env.stored("m1")
    assert [r.block_number for r in stored if numbers[0] <= r.block_number <= numbers[-1]] == numbers
    assert_all_as_reported(env, "m1", stored)  # every block the node published, once
    assert_no_gap_no_repeat(stored)  # the downtime is covered by merged blocks, not a silent gap
    assert any(r.merged_blocks > 1 for r in stored), [(r.block_number, r.merged_blocks) for r in stored]
    checked = check_exact(stored, env.books)
    assert len(checked) >= 4, f"exact blocks: {checked}"


def test_measurements_survive_a_controller_restart(env: Env):
    env.client.create_measurement("m1", "r1", "r2", tunnel="t1", period_s=1)
    collect(env.client, ["m1"], 2)
    stored = [r.block_number for r in env.stored("m1")]
    env.restart_controller(down_s=2.5)  # blocks close while the controller is away
    got = env.client.measurement("m1", recent_blocks=100)
    assert got.measurement.state == RUNNING
    assert [r.block_number for r in got.recent_results][: len(stored)] == stored  # kept across the restart
    after = collect(env.client, ["m1"], 2)  # re-attached: new blocks arrive
    assert after[0].block_number > stored[-1]
    wait_until(lambda: len(env.stored("m1")) >= len(stored) + 6, timeout=15)
    time.sleep(1.2)  # the books sample the last block after it is read
    results = env.stored("m1")
    blocks = [r.block_number for r in results]
    assert blocks == list(range(blocks[0], blocks[-1] + 1))  # every block once, none missed while away
    assert_all_as_reported(env, "m1", results)
    assert_no_gap_no_repeat(results)
    checked = check_exact(results, env.books)
    assert len(checked) >= 4, f"exact blocks: {checked}"
    assert any(
        stored[-1] < b < after[0].block_number for b in checked
    )  # closed while the controller was away
