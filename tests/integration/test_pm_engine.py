"""The SRv6PM engine for real: h1 — r1 — c — r2 — h2 in namespaces, srv6pm-node on every
router, traffic both ways at 1,000 packets/s, and exact drop injectors on the core router with a
different pattern per direction. Every block's measured loss must equal the injector's drops in
that block — counted independently, by nftables on another node — exactly, both ways."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pb_grpc
from srv6pm_node.counters.pins import temporary_bpffs
from srv6pm_topos.agents import agent_executable, start_agent
from srv6pm_topos.injector import DropBook, Sampler
from srv6pm_topos.lab import wait_until
from srv6pm_topos.monitored import MonitoredNetwork, monitored_network
from srv6pm_topos.three_routers import POLICY_A, POLICY_B
from tests.support import KERNEL_TX_IDS, require_tool, scrape_metrics

pytestmark = pytest.mark.netns

S = 1_000_000_000
DRIVERS = {"ebpf": pb.COUNTER_DRIVER_EBPF, "netfilter": pb.COUNTER_DRIVER_NETFILTER}


@contextlib.contextmanager
def network(net, tmp_path, driver: str) -> Iterator[MonitoredNetwork]:
    require_tool("nft")
    with temporary_bpffs() as pins, monitored_network(net, DRIVERS[driver], pins, tmp_path) as mn:
        yield mn


@pytest.fixture(params=sorted(DRIVERS))
def mn(request, net, tmp_path) -> Iterator[MonitoredNetwork]:
    with network(net, tmp_path, request.param) as m:
        yield m


@pytest.fixture
def mn_ebpf(net, tmp_path) -> Iterator[MonitoredNetwork]:
    with network(net, tmp_path, "ebpf") as m:
        yield m


def covered(r: pb.BlockResult) -> list[int]:
    """The blocks a result's loss figures cover (merged ones are same-colour blocks before it)."""
    return [r.block_number - 2 * k for r_k in [r] for k in range(r_k.merged_blocks)]


def check_exact(results: list[pb.BlockResult], fwd: DropBook, rev: DropBook) -> list[int]:
    """Assert measured == injected for every result the books can check; return those blocks."""
    checked = []
    for r in results:
        if not r.forward.valid:
            continue
        want_f, want_r = (
            fwd.drops(r.block_number, r.merged_blocks),
            rev.drops(r.block_number, r.merged_blocks),
        )
        if want_f is None or want_r is None:
            continue  # the books missed a sample (not the engine's fault)
        assert r.reverse.valid
        assert (r.forward.lost_packets, r.reverse.lost_packets) == (want_f, want_r), (
            f"block {r.block_number} (x{r.merged_blocks}): measured {r.forward.lost_packets}/"
            f"{r.reverse.lost_packets}, injected {want_f}/{want_r}"
        )
        assert r.forward.rx_packets == r.forward.tx_packets - want_f
        checked.append(r.block_number)
    return checked


def longest_run(blocks: list[int]) -> int:
    best = run = 0
    prev = None
    for b in sorted(blocks):
        run = run + 1 if prev is not None and b == prev + 1 else 1
        best, prev = max(best, run), b
    return best


def assert_no_gap_no_repeat(results: list[pb.BlockResult]) -> list[int]:
    """Every block between the first and the last measured one is covered exactly once."""
    blocks = [b for r in results if r.forward.valid for b in covered(r)]
    assert len(blocks) == len(set(blocks)), f"a block counted twice: {sorted(blocks)}"
    assert sorted(blocks) == list(range(min(blocks), max(blocks) + 1)), f"a silent gap: {sorted(blocks)}"
    return blocks


class Stream:
    """StreamResults of r1 in a thread, with the time each result arrived."""

    def __init__(self, mn: MonitoredNetwork, mid: str, since: int = 0) -> None:
        self.call = mn.pm("r1").StreamResults(
            pb.StreamResultsRequest(measurement_ids=[mid], since_block=since)
        )
        self.got: list[tuple[int, pb.BlockResult]] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        with contextlib.suppress(grpc.RpcError):
            for msg in self.call:
                self.got.append((time.time_ns(), msg.result))

    def close(self) -> None:
        self.call.cancel()


def test_exact_loss_per_block_in_both_directions(mn):
    """≥ 5 consecutive blocks, each exact both ways; a loss shows up within T + guard + 1 s."""
    fwd, rev = mn.injectors(POLICY_A, 7, 13)
    books = [DropBook(fwd, S), DropBook(rev, S)]
    spec = mn.spec(POLICY_A, "exact")
    with Sampler(books, S):
        first_block = time.time_ns() // S
        mn.start(spec)
        stream = Stream(mn, "exact")
        streams = mn.traffic(POLICY_A, pps=1000)
        results = mn.wait_blocks("exact", 10, timeout=40)
        time.sleep(1.2)  # the books sample the last block after it is read
        for s in streams:
            s.stop()
    stream.close()
    checked = check_exact(results, *books)
    assert longest_run(checked) >= 5, f"consecutive exact blocks: {sorted(checked)}"
    # blocks wholly after the start, with traffic all along
    steady = [r for r in results if r.block_number in checked and r.block_number > first_block + 1]
    assert len(steady) >= 4
    for r in steady:
        n = r.block_number
        assert books[0].drops(n, r.merged_blocks) > 0 and books[1].drops(n, r.merged_blocks) > 0, n
        per_block = r.merged_blocks * 900  # 1,000 packets/s each way (a burst may fall either side)
        assert r.forward.tx_packets >= per_block and r.reverse.tx_packets >= per_block, r
        assert r.two_way_delay.valid and 0 < r.two_way_delay.avg_ns < 50_000_000, r
        assert r.two_way_delay.kernel_timestamps == KERNEL_TX_IDS, r  # T1 and T4 from the kernel
        assert r.one_way_delay_forward.valid, r  # one clock: synchronised
        assert r.probes.sent >= 1 and r.probes.received >= 1, r  # 5 a block, fewer on a busy machine
    # the stream delivered the same results, each within T + guard + 1 s of its block's start
    streamed = {r.block_number: (t, r) for t, r in stream.got}
    for r in steady:
        t, sr = streamed[r.block_number]
        assert sr == r
        assert t - r.start_time.ToNanoseconds() <= (1 + 0.5 + 1) * S


def test_zero_loss_and_bad_requests_change_nothing(mn_ebpf):
    mn = mn_ebpf
    fwd, rev = mn.injectors(POLICY_A, 0, 0)  # count only
    books = [DropBook(fwd, S), DropBook(rev, S)]
    spec = mn.spec(POLICY_A, "clean")
    with Sampler(books, S):
        mn.start(spec)
        streams = mn.traffic(POLICY_A, pps=1000)
        mn.wait_blocks("clean", 2, timeout=20)
        bad_requests(mn, spec)
        results = mn.wait_blocks("clean", 6, timeout=30)
        for s in streams:
            s.stop()
    checked = check_exact(results, *books)
    assert len(checked) >= 4
    assert all(
        r.forward.lost_packets == 0 and r.reverse.lost_packets == 0 for r in results if r.forward.valid
    )
    assert all(r.forward.tx_packets > 0 for r in results if r.block_number in checked[1:])
    statuses = mn.pm("r1").ListMeasurements(pb.ListMeasurementsRequest()).measurements
    assert [(s.spec.measurement_id, s.state) for s in statuses] == [("clean", pb.MEASUREMENT_STATE_RUNNING)]
    # A batched stream: the stored blocks, then live ones, at most max_batch a message, in order,
    # none missing or twice.
    stored = mn.pm("r1").GetResults(pb.GetResultsRequest(measurement_id="clean")).results
    call = mn.pm("r1").StreamResults(
        pb.StreamResultsRequest(measurement_ids=["clean"], max_batch=4), timeout=20
    )
    got: list[pb.BlockResult] = []
    for resp in call:
        assert 1 <= len(resp.results) <= 4 and not resp.HasField("result")
        got.extend(resp.results)
        if len(got) > len(stored) + 1:  # past the replay: live blocks too
            break
    call.cancel()
    numbers = [r.block_number for r in got]
    assert numbers == list(range(stored[0].block_number, stored[0].block_number + len(numbers)))
    assert len(stored) > 4  # so the replay took more than one message
    assert mn.pm("r2").GetConfiguration(pb.GetConfigurationRequest()).config.driver == pb.COUNTER_DRIVER_EBPF


def code(call, request) -> grpc.StatusCode:
    try:
        call(request, timeout=30)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def bad_requests(mn: MonitoredNetwork, good: pb.MeasurementSpec) -> None:
    """Every kind of bad input gets its precise error, while a measurement runs."""
    r1, r2 = mn.pm("r1"), mn.pm("r2")
    nf = grpc.StatusCode.NOT_FOUND
    assert code(r1.GetResults, pb.GetResultsRequest(measurement_id="nope")) == nf
    assert code(r1.StopSender, pb.StopSenderRequest(measurement_id="nope")) == nf
    assert code(r2.StopReflector, pb.StopReflectorRequest(measurement_id="clean")) == grpc.StatusCode.OK
    assert code(r2.StartReflector, pb.StartReflectorRequest(spec=good)) == grpc.StatusCode.OK  # back at once
    with pytest.raises(grpc.RpcError) as err:
        next(iter(r1.StreamResults(pb.StreamResultsRequest(measurement_ids=["nope"]), timeout=5)))
    assert err.value.code() == nf

    def spec(**changes) -> pb.MeasurementSpec:
        s = pb.MeasurementSpec()
        s.CopyFrom(good)
        s.measurement_id = "bad"
        for k, v in changes.items():
            if k in ("forward_segments", "reverse_segments"):
                del getattr(s, k)[:]
                getattr(s, k).extend(v)
            elif k == "period_s":
                s.color_period.FromNanoseconds(int(v * S))
            else:
                setattr(s, k, v)
        return s

    inv, pre = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION
    cases = [
        (spec(forward_segments=["fc00:2::zz"]), inv),  # malformed SID list
        (spec(forward_segments=[]), inv),
        (spec(period_s=0.5), inv),  # T out of range
        (spec(period_s=3601), inv),
        (spec(measurement_id="no spaces"), inv),
        (spec(sender_address=""), inv),
        (spec(loss_enabled=False, delay_enabled=False), inv),
        (spec(forward_segments=["fc00:3::e", "fc00:2::d6"]), pre),  # no path steers the address into it
        (spec(reflector_address="fd00:99::1"), pre),  # no path at all
        (spec(period_s=2), pre),  # the node's colour period is 1 s
        (spec(protocol=pb.PROBE_PROTOCOL_TWAMP_LIGHT_LM), pre),
        (spec(measurement_id="clean", probe_dscp=10), grpc.StatusCode.ALREADY_EXISTS),  # same id, other spec
    ]
    for s, want in cases:
        assert code(r1.StartSender, pb.StartSenderRequest(spec=s)) == want, s
    assert code(r2.StartReflector, pb.StartReflectorRequest(spec=spec(forward_segments=["fc00:2::e"]))) == pre
    assert code(r1.StartSender, pb.StartSenderRequest(spec=good)) == grpc.StatusCode.OK  # idempotent
    # node configuration: unknown interface, bad colour bit, changing the driver under a measurement
    cfg = mn.pm("r1").GetConfiguration(pb.GetConfigurationRequest()).config
    for change, want in (
        ({"egress_interfaces": ["nosuch0"]}, pre),
        ({"color_bit": 6}, inv),
        ({"driver": pb.COUNTER_DRIVER_NETFILTER}, pre),
    ):
        c = pb.NodeConfig()
        c.CopyFrom(cfg)
        for k, v in change.items():
            if isinstance(v, list):
                del getattr(c, k)[:]
                getattr(c, k).extend(v)
            else:
                setattr(c, k, v)
        assert code(r1.Configure, pb.ConfigureRequest(config=c)) == want, change
    assert mn.pm("r1").GetConfiguration(pb.GetConfigurationRequest()).config == cfg
    # garbage at the reflector's port, from h2 (the probe endpoint is reachable from there)
    with mn.topo.h2.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        for junk in (b"", b"\x00", b"\xff" * 43, b"\x01" * 44 + b"\x05\x00\xff\xff", bytes(range(256)) * 4):
            s.sendto(junk, (good.reflector_address, 862))
    assert mn.agents["r2"].proc.poll() is None


def test_dropped_probes_never_lose_or_double_count_a_block(mn_ebpf):
    mn = mn_ebpf
    fwd, rev = mn.injectors(POLICY_A, 11, 17)
    books = [DropBook(fwd, S), DropBook(rev, S)]
    with Sampler(books, S):
        mn.start(mn.spec(POLICY_A, "probes"))
        streams = mn.traffic(POLICY_A, pps=1000)
        mn.wait_blocks("probes", 3, timeout=20)
        # every probe reaching r2 is dropped after r2 counted it: no reply for over two blocks
        mn.topo.r2.run(["nft", "add table inet s6probe"])
        mn.topo.r2.run(["nft", "add chain inet s6probe in { type filter hook input priority 0; }"])
        mn.topo.r2.run(["nft", "add rule inet s6probe in udp dport 862 counter drop"])
        time.sleep(2.6)
        mn.topo.r2.run(["nft", "delete table inet s6probe"])
        first = mn.results("probes")[-1].block_number
        wait_until(
            lambda: len([r for r in mn.results("probes") if r.block_number > first + 3]) > 0, timeout=20
        )
        time.sleep(1.2)
        for s in streams:
            s.stop()
    results = mn.results("probes")
    assert any(r.merged_blocks > 1 for r in results), [(r.block_number, r.merged_blocks) for r in results]
    unsettled = [r.block_number for r in results if not r.forward.valid]
    assert unsettled  # published, flagged as not measured, and covered by a merged block
    blocks = assert_no_gap_no_repeat(results)
    assert set(unsettled[2:]) <= set(blocks)  # past the two baselines, each is covered by a merge
    checked = check_exact(results, *books)
    assert any(r.merged_blocks > 1 and r.block_number in checked for r in results)
    # The agents' metrics tell the same story: probes unanswered, blocks without loss figures.
    m1 = scrape_metrics(mn.agents["r1"].log_path, mn.topo.r1)
    m2 = scrape_metrics(mn.agents["r2"].log_path, mn.topo.r2)
    assert m1['srv6pm_node_measurements{role="sender"}'] == 1
    assert m1['srv6pm_node_counter_driver{driver="ebpf"}'] == 1
    assert m1["srv6pm_node_probes_sent_total"] >= sum(r.probes.sent for r in results)
    assert m1["srv6pm_node_probe_replies_total"] < m1["srv6pm_node_probes_sent_total"]
    assert m1["srv6pm_node_results_total"] >= len(results)
    assert m1["srv6pm_node_results_unmeasured_total"] == len(unsettled)
    assert m2['srv6pm_node_measurements{role="reflector"}'] == 1
    replied = m2['srv6pm_node_reflector_probes_total{outcome="replied"}']
    assert 0 < replied <= m2['srv6pm_node_reflector_probes_total{outcome="received"}']


def test_node_manager_restart_leaves_no_silent_gap(mn):
    fwd, rev = mn.injectors(POLICY_A, 7, 13)
    books = [DropBook(fwd, S), DropBook(rev, S)]
    with Sampler(books, S):
        mn.start(mn.spec(POLICY_A, "restart"))
        streams = mn.traffic(POLICY_A, pps=1000)
        before = mn.wait_blocks("restart", 3, timeout=20)
        mn.restart("r1", down_s=2.5)  # the sender: results and loss chains come back from its state directory
        assert [r.block_number for r in mn.results("restart")][: len(before)] == [
            r.block_number for r in before
        ]  # nothing already measured is lost
        mn.wait_blocks("restart", sum(r.forward.valid for r in before) + 3, timeout=30)
        mn.restart("r2", down_s=2.5)  # the reflector
        mid = mn.results("restart")[-1].block_number
        wait_until(lambda: mn.results("restart")[-1].block_number > mid + 4, timeout=30)
        time.sleep(1.2)
        for s in streams:
            s.stop()
    results = mn.results("restart")
    statuses = mn.pm("r1").ListMeasurements(pb.ListMeasurementsRequest()).measurements
    assert statuses[0].state == pb.MEASUREMENT_STATE_RUNNING and statuses[0].last_block_number > mid
    assert_no_gap_no_repeat(results)
    checked = check_exact(results, *books)
    assert len(checked) >= 6
    assert any(r.merged_blocks > 1 for r in results if r.block_number in checked)
    # a stream resumed from a block replays what came after it, then goes on
    stream = Stream(mn, "restart", since=mid)
    wait_until(lambda: len(stream.got) >= 3, timeout=10)
    stream.close()
    replayed = [r.block_number for _, r in stream.got]
    assert replayed[0] == mid + 1 and replayed == sorted(set(replayed))


def test_two_measurements_on_different_sid_lists_do_not_disturb_each_other(mn_ebpf):
    mn = mn_ebpf
    inj_a, inj_b = mn.injectors(POLICY_A, 7, 13), mn.injectors(POLICY_B, 5, 0)
    books_a, books_b = [DropBook(i, S) for i in inj_a], [DropBook(i, S) for i in inj_b]
    with Sampler(books_a + books_b, S):
        mn.start(mn.spec(POLICY_A, "a"))
        mn.start(mn.spec(POLICY_B, "b"))
        streams = [*mn.traffic(POLICY_A, pps=1000), *mn.traffic(POLICY_B, pps=500)]
        mn.wait_blocks("a", 5, timeout=30)
        mn.wait_blocks("b", 5, timeout=30)
        mn.pm("r1").StopSender(pb.StopSenderRequest(measurement_id="b"), timeout=10)
        mn.pm("r2").StopReflector(pb.StopReflectorRequest(measurement_id="b"), timeout=10)
        n_a = sum(r.forward.valid for r in mn.results("a"))
        mn.wait_blocks("a", n_a + 3, timeout=20)  # A goes on after B stopped
        time.sleep(1.2)
        for s in streams:
            s.stop()
    res_a, res_b = mn.results("a"), mn.results("b")
    assert len(check_exact(res_a, *books_a)) >= 6
    assert len(check_exact(res_b, *books_b)) >= 3
    assert all(r.reverse.lost_packets == 0 for r in res_b if r.reverse.valid)  # B reverse: no drops
    steady_b = [r for r in res_b if r.forward.valid][1:]
    assert all(450 <= r.forward.tx_packets <= 600 for r in steady_b)  # only B's packets in B's counters
    statuses = {
        (s.spec.measurement_id, s.state)
        for s in mn.pm("r1").ListMeasurements(pb.ListMeasurementsRequest()).measurements
    }
    assert statuses == {("a", pb.MEASUREMENT_STATE_RUNNING), ("b", pb.MEASUREMENT_STATE_STOPPED)}


def test_driver_unavailable_is_refused_and_configuration_at_start(net, tmp_path):
    require_tool("nft")
    r1, r2 = net.add_node("r1"), net.add_node("r2")
    net.link("r1", "eth1", "r2", "eth1")
    bogus = tmp_path / "not-a-directory"
    bogus.write_text("")
    agent = start_agent(r1, tmp_path, extra_args=("--bpf-pin-root", str(bogus / "bpf")))
    stub = pb_grpc.SRv6PMStub(agent.channel)
    ebpf = pb.NodeConfig(
        driver=pb.COUNTER_DRIVER_EBPF, egress_interfaces=["eth1"], ingress_interfaces=["eth1"]
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.Configure(pb.ConfigureRequest(config=ebpf), timeout=30)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ebpf counter driver cannot run" in err.value.details()
    assert code(stub.GetConfiguration, pb.GetConfigurationRequest()) == grpc.StatusCode.FAILED_PRECONDITION
    nft = pb.NodeConfig(driver=pb.COUNTER_DRIVER_NETFILTER, egress_interfaces=["eth1"])
    assert stub.Configure(pb.ConfigureRequest(config=nft), timeout=30).config.reflector_port == 862
    # --pm-interfaces configures at start; a bad one stops the agent with a clear message
    a2 = start_agent(r2, tmp_path, extra_args=("--pm-interfaces", "eth1", "--pm-driver", "netfilter"))
    cfg = pb_grpc.SRv6PMStub(a2.channel).GetConfiguration(pb.GetConfigurationRequest(), timeout=10).config
    assert (cfg.driver, list(cfg.egress_interfaces), list(cfg.ingress_interfaces)) == (
        pb.COUNTER_DRIVER_NETFILTER,
        ["eth1"],
        ["eth1"],
    )
    a2.stop()
    argv = [
        agent_executable(),
        "--listen",
        f"unix:{tmp_path}/x.sock",
        "--insecure",
        "--state-dir",
        str(tmp_path / "x"),
        "--pm-interfaces",
        "nosuch0",
    ]
    out = r2.run(argv, check=False)
    assert out.returncode == 2 and "--pm-interfaces: no such interface: nosuch0" in out.stderr
    out = r2.run([*argv[:-2], "--metrics-listen", "no-port"], check=False)
    assert out.returncode == 2 and "--metrics-listen: 'no-port' is not HOST:PORT" in out.stderr
