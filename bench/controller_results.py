#!/usr/bin/env python3
"""Controller result pipeline: block results/s from node streams to Kafka acks on one core; memory.

    .venv/bin/python bench/controller_results.py [--nodes 20] [--per-node 500]
        [--seconds 12] [--scenarios max-disk-256,max-shm-256,max-shm-1,paced-disk-256]

Goal: >= 20,000 block results/s end to end to Kafka on one core (10,000 flows at T = 1 s with
headroom).

What runs. A single-node Kafka broker (the system tests' ``tests.system.servers.KafkaServer``,
jars from ``scripts/setup.sh``) and ``--nodes`` fake nodes: real gRPC servers on 127.0.0.1, one
thread pool each, all in one child process, answering ``SRv6PM.StreamResults`` only. Each streams
``--per-node`` measurements (ids ``n<node>-m<j>``), block after block (T = 1 s block numbers),
every BlockResult fully populated (both directions, three delay statistics, probe counts), oldest
first per measurement, up to the request's ``max_batch`` results per response (and at most the
scenario's node batch). The fake node sends pre-serialised bytes (a per-measurement part plus a
per-block part, concatenated: protobuf merges them) so that its own cost stays low; the wire
format is what a real agent sends.

The measured process is the controller as ``srv6pm-controller`` wires it (``cli/daemon.py``
``build``): ``Store`` (SQLite) + ``NodeChannels`` + ``NodeRegistry`` + ``ResultPublisher``
(real kafka-python producer, acks=all) + ``ResultBus`` + ``ResultCollector``. The fake nodes are
registered and the measurements put in the store as RUNNING with their first block, as
``MeasurementService.CreateMeasurement`` does (without the StartSender calls), then
``collector.refresh()`` opens one real stream per node. ``collector.handle`` is wrapped by a
counter (one Python call per batch, counted in the controller's CPU) to know what arrived.

Scenarios (``mode-medium-batch``): ``max`` = nodes send as fast as the controller takes them (gRPC
flow control is the back-pressure), ``paced`` = every node closes one block of each of its
measurements every ``--period`` s in one burst, i.e. nodes x per-node / period results/s (10,000/s
by default: the goal's load). ``disk`` = the controller's state directory on ``--disk-dir``
(default the temp dir; its filesystem is printed), ``shm`` = on /dev/shm (tmpfs: fsync costs
nothing), to show what the store's commits cost. ``batch`` = results per response at most.

Figures, measured over ``--seconds`` after a ``--warmup``: results received/s (into
``collector.handle``), results acknowledged by Kafka/s (publisher's ``published`` counter), the
controller process's CPU (``getrusage``, all threads, as % of one core), results/s per core
(acked/s divided by that fraction), the fake nodes' and the broker's CPU (/proc/<pid>/stat),
VmRSS growth during the scenario per measurement (the peak minus VmRSS before the controller's
objects were built; while the controller does not keep up it includes the results gRPC buffers for
it, and later scenarios reuse memory freed by earlier ones: read the first scenario, or a paced one
that keeps up), and the SQLite state size. Then the nodes pause,
the controller takes what is in flight (at most ``--drain`` s: a slow controller leaves results
in gRPC's buffers, printed apart), the streams close, the publisher flushes, and the topic is read
back: every identity (measurement id, block number) the controller received must be in Kafka
once (a node's stream is ordered, so what node i delivered is the first k_i results of its
sequence); lost, duplicated and unexpected ones are counted. By default the controller is pinned
to CPU 0 and the broker and the nodes to the other CPUs (``--no-pin``: no pinning). Everything
(broker, node process, temp dirs) is removed at the end, also after a failure, Ctrl-C or SIGTERM.
Figures, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The Kafka broker fixture of the system tests lives in tests/system/servers.py: import it from
# the repository root rather than copying it.
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BASE_BLOCK = 1_763_850_000  # a Unix time in seconds: block numbers of T = 1 s
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- fake nodes (child process) ------------------------------------------------------------------

def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _static_part(pb: Any, node: str, mid: str, seed: int) -> bytes:
    """Everything of a BlockResult but the block-dependent fields, serialised once."""
    tx = 10_000 + seed % 5000
    lost = seed % 7
    r = pb.BlockResult(measurement_id=mid, merged_blocks=1, node=node)
    r.forward.CopyFrom(pb.DirectionResult(tx_packets=tx, rx_packets=tx - lost, lost_packets=lost,
                                          loss_ratio=lost / tx, tx_bytes=tx * 1500,
                                          rx_bytes=(tx - lost) * 1500, valid=True))
    r.reverse.CopyFrom(pb.DirectionResult(tx_packets=tx, rx_packets=tx - 1, lost_packets=1,
                                          loss_ratio=1 / tx, tx_bytes=tx * 1400,
                                          rx_bytes=(tx - 1) * 1400, valid=True))
    for name, base in (("two_way_delay", 150_000), ("one_way_delay_forward", 75_000),
                       ("one_way_delay_backward", 74_000)):
        getattr(r, name).CopyFrom(pb.DelayStats(
            valid=True, samples=5, min_ns=base - 20_000 + seed, avg_ns=base + seed, max_ns=base * 2 + seed,
            p50_ns=base - 1_000 + seed, p99_ns=base * 2 - 500 + seed, jitter_ns=1_000 + seed % 997))
    r.probes.CopyFrom(pb.ProbeCounts(sent=5, received=5 - seed % 2, lost=seed % 2, rejected=0))
    return r.SerializeToString()


def _block_part(pb: Any, number: int) -> bytes:
    r = pb.BlockResult(block_number=number, color=number % 2)
    r.start_time.FromNanoseconds(number * 1_000_000_000)
    r.end_time.FromNanoseconds((number + 1) * 1_000_000_000)
    return r.SerializeToString()


def node_ids(node: int, per_node: int) -> list[str]:
    """Measurement ids of fake node ``node``, in the (sorted) order the collector asks for them."""
    return [f"n{node:03d}-m{j:05d}" for j in range(per_node)]


def serve_nodes(nodes: int, per_node: int, cap: int, period: float, cpus: list[int],
                ports: Any, sent: Any, pause: Any, stop: Any) -> None:
    """Child process: ``nodes`` gRPC servers streaming results until ``stop`` is set."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the bench
    if cpus:
        os.sched_setaffinity(0, cpus)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from srv6pm.node.v1 import srv6_pm_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["SRv6PM"].full_name
    servers = []
    for i in range(nodes):
        name = f"n{i:03d}"
        statics = {mid: _static_part(pb, name, mid, i * per_node + j)
                   for j, mid in enumerate(node_ids(i, per_node))}

        def stream(
            request: Any, context: Any, i: int = i, statics: dict[str, bytes] = statics
        ) -> Iterator[bytes]:
            parts = [statics[m] for m in request.measurement_ids]
            if not parts:
                return
            single = request.max_batch <= 1
            batch = 1 if single else min(request.max_batch, cap)
            tag = b"\x0a" if single else b"\x12"  # field 1 `result`, or field 2 `results`
            number = max(request.since_block + 1, BASE_BLOCK)
            first, t0, k, block = number, time.monotonic(), 0, b""
            while not stop.is_set() and context.is_active():
                if pause.is_set():
                    time.sleep(0.01)
                    continue
                if period and k == 0:
                    wait = t0 + (number - first) * period - time.monotonic()
                    if wait > 0:
                        time.sleep(min(wait, 0.05))
                        continue
                if k == 0:
                    block = _block_part(pb, number)  # shared by every measurement of this round
                take = min(batch, len(parts) - k)
                yield b"".join(tag + _varint(len(p) + len(block)) + p + block for p in parts[k:k + take])
                sent[i] += take  # reached once gRPC has sent the previous response and wants the next
                k += take
                if k == len(parts):
                    k, number = 0, number + 1

        handler = grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=pb.StreamResultsRequest.FromString, response_serializer=None
        )  # None: the handler yields bytes already serialised
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        generic = grpc.method_handlers_generic_handler(service, {"StreamResults": handler})
        server.add_generic_rpc_handlers((generic,))
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        servers.append(server)
    ports.put(-1)  # all started
    stop.wait()
    for server in servers:
        server.stop(0)


# --- measurements of the controller process ------------------------------------------------------

def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def cpu_of(pid: int | None) -> float:
    """utime + stime of a process (all threads), seconds; 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except OSError:
        return 0.0


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fs_type(path: Path) -> str:
    """The filesystem type holding ``path`` (longest mount-point prefix in /proc/mounts)."""
    best, kind = "", "?"
    resolved = str(path.resolve())
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, typ, *_ = line.split()
            if (resolved == mnt or resolved.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, kind = mnt, typ
    return kind


class CountingHandle:
    """Wraps ``collector.handle`` to count results arriving per stream thread (no shared lock)."""

    def __init__(self, inner: Callable[[Any], None]) -> None:
        self.inner = inner
        self._local = threading.local()
        self._cells: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def __call__(self, results: Any) -> None:
        cell = getattr(self._local, "cell", None)
        if cell is None:
            cell = self._local.cell = [0]
            with self._lock:
                self._cells[threading.current_thread().name] = cell
        cell[0] += len(results)
        self.inner(results)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(c[0] for c in self._cells.values())

    def by_thread(self) -> dict[str, int]:
        """Results per thread name (the collector names them ``results-<node>``)."""
        with self._lock:
            return {name: c[0] for name, c in self._cells.items()}


@dataclass
class Scenario:
    """One configuration: ``max``/``paced`` nodes, state on ``disk``/``shm``, node batch cap."""

    name: str
    paced: bool
    medium: str
    batch: int
    figures: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Scenario:
        mode, medium, batch = text.split("-")
        if mode not in ("max", "paced") or medium not in ("disk", "shm"):
            raise ValueError(f"scenario {text!r}: want max|paced-disk|shm-<batch>")
        return cls(text, mode == "paced", medium, int(batch))


def identity_of(record: Any) -> tuple[str, int]:
    """(measurement id, block number) of a consumed Kafka record."""
    return record.key.decode(), int(record.value.split(b"block_number=", 1)[1].split(b"i", 1)[0])


def expected_identities(counts: list[int], per_node: int) -> set[tuple[str, int]]:
    """Identities of the first counts[i] results of node i's (deterministic) sequence, for every i."""
    out: set[tuple[str, int]] = set()
    for i, count in enumerate(counts):
        ids = node_ids(i, per_node)
        rounds, rest = divmod(count, per_node)
        for r in range(rounds):
            out.update((mid, BASE_BLOCK + r) for mid in ids)
        out.update((mid, BASE_BLOCK + rounds) for mid in ids[:rest])
    return out


def run_scenario(sc: Scenario, args: argparse.Namespace, kafka: Any, node_cpus: list[int],
                 cleanup: list[Callable[[], None]]) -> None:
    """Start nodes and a controller, measure the window, drain, read the topic back."""
    from google.protobuf.duration_pb2 import Duration

    from srv6pm.controller.v1 import measurement_service_pb2 as mpb
    from srv6pm.controller.v1 import node_service_pb2 as npb
    from srv6pm.node.v1 import srv6_pm_pb2 as pb
    from srv6pm_controller.measurements.bus import ResultBus
    from srv6pm_controller.measurements.collector import ResultCollector
    from srv6pm_controller.publish import ResultPublisher
    from srv6pm_controller.services.nodes import NodeRegistry
    from srv6pm_controller.southbound.channels import NodeChannels
    from srv6pm_controller.store import Store
    from tests.system.servers import consume_all

    f = sc.figures
    measurements = args.nodes * args.per_node
    topic = f"srv6pm.bench.{sc.name}.{os.getpid()}"
    kafka.create_topic(topic, partitions=args.partitions)

    ctx = mp.get_context("spawn")  # no fork of a process that runs gRPC threads
    ports, pause, stop = ctx.Queue(), ctx.Event(), ctx.Event()
    sent = ctx.Array("q", args.nodes, lock=False)  # one writer per cell
    period = args.period if sc.paced else 0.0
    proc = ctx.Process(
        target=serve_nodes, name="fake-nodes", daemon=True,
        args=(args.nodes, args.per_node, sc.batch, period, node_cpus, ports, sent, pause, stop),
    )
    proc.start()

    def end_nodes() -> None:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    cleanup.append(end_nodes)
    node_ports = []
    while (port := ports.get(timeout=60)) != -1:
        node_ports.append(port)

    parent = Path("/dev/shm") if sc.medium == "shm" else Path(args.disk_dir)
    state = Path(tempfile.mkdtemp(prefix="srv6pm-bench-state-", dir=parent))
    cleanup.append(lambda: shutil.rmtree(state, ignore_errors=True))
    f["fs"] = fs_type(state)
    rss0 = rss_kib()

    # Wired as cli/daemon.py build() does.
    store = Store(state)
    channels = NodeChannels()
    registry = NodeRegistry(store, channels)
    publisher = ResultPublisher([kafka.bootstrap], state / "kafka-spool.sqlite3", topic=topic)
    bus = ResultBus([publisher.publish])
    collector = ResultCollector(registry, store, bus.publish)
    counter = CountingHandle(collector.handle)
    collector.handle = counter  # type: ignore[method-assign]  # _NodeStream calls self.collector.handle

    def close_controller() -> None:
        collector.close()
        publisher.close()
        channels.close()
        store.close()
    cleanup.append(close_controller)

    # Registration as NodeService.RegisterNode and MeasurementService.CreateMeasurement store it.
    t = time.monotonic()
    for i, port in enumerate(node_ports):
        name = f"n{i:03d}"
        store.put_node(npb.Node(name=name, address=f"127.0.0.1:{port}",
                                credentials=npb.NodeCredentials(insecure=True)))
        for mid in node_ids(i, args.per_node):
            spec = pb.MeasurementSpec(measurement_id=mid, color_period=Duration(seconds=1),
                                      loss_enabled=True, delay_enabled=True)
            m = mpb.Measurement(sender_node=name, reflector_node="far", spec=spec,
                                state=pb.MEASUREMENT_STATE_RUNNING)
            m.created_at.GetCurrentTime()
            store.put_measurement(m)
            store.set_first_block(mid, BASE_BLOCK)
    f["setup_s"] = time.monotonic() - t
    if not publisher.wait_connected(30):
        raise RuntimeError("publisher did not connect to Kafka")

    collector.refresh()  # one stream per fake node
    time.sleep(args.warmup)

    broker_pid = kafka.process.proc.pid if kafka.process and kafka.process.proc else None

    def sample() -> tuple[float, float, int, int, float, float]:
        return (time.monotonic(), cpu_self(), counter.total, publisher.metrics()["published"],
                cpu_of(proc.pid), cpu_of(broker_pid))

    f["t_setup"] = time.monotonic()
    s0 = sample()
    peak = rss_kib()
    end = s0[0] + args.seconds
    while time.monotonic() < end:
        time.sleep(0.25)
        peak = max(peak, rss_kib())
    s1 = sample()
    wall = s1[0] - s0[0]
    cpu = (s1[1] - s0[1]) / wall
    f["received_s"] = (s1[2] - s0[2]) / wall
    f["acked_s"] = (s1[3] - s0[3]) / wall
    f["cpu"] = cpu
    f["per_core_s"] = f["acked_s"] / cpu if cpu > 0 else 0.0
    f["nodes_cpu"] = (s1[4] - s0[4]) / wall
    f["kafka_cpu"] = (s1[5] - s0[5]) / wall
    f["rss_mib"] = peak / 1024
    f["rss_per_m_kib"] = (peak - rss0) / measurements

    # Drain: nodes stop sending, the controller takes what is in flight (or what it can of it
    # in a few seconds: a slow controller leaves results in gRPC's buffers, not lost), Kafka
    # acknowledges all of it.
    f["t_window"] = time.monotonic()
    pause.set()
    time.sleep(0.2)
    total_sent = sum(sent)
    deadline = time.monotonic() + args.drain
    while counter.total < total_sent and time.monotonic() < deadline:
        time.sleep(0.05)
    f["reconnects"] = sum(max(collector.connects(f"n{i:03d}") - 1, 0) for i in range(args.nodes))
    collector.close()  # after this no result arrives any more: the counts are final
    f["flushed"] = publisher.flush(60)
    metrics = publisher.metrics()
    received = counter.by_thread()
    per_node = [received.get(f"results-n{i:03d}", 0) for i in range(args.nodes)]
    f["sent"] = total_sent
    f["received"] = sum(per_node)
    f["acked"] = metrics["published"]
    f["spooled"] = metrics["spooled"]
    f["db_mib"] = sum(p.stat().st_size for p in state.iterdir() if p.name.startswith("controller")) / 2**20
    close_controller()
    cleanup.remove(close_controller)
    end_nodes()
    cleanup.remove(end_nodes)
    f["t_drain"] = time.monotonic()

    # A node's stream is ordered and the collector handles it in order: what the controller got
    # from node i is the first per_node[i] results of node i's sequence.
    records = consume_all(kafka.bootstrap, topic, f["acked"], timeout=max(30.0, f["acked"] / 10_000))
    got = [identity_of(r) for r in records]
    unique = set(got)
    expected = expected_identities(per_node, args.per_node)
    f["in_kafka"] = len(got)
    f["duplicates"] = len(got) - len(unique)
    f["lost"] = len(expected - unique)
    f["unexpected"] = len(unique - expected)
    f["t_check"] = time.monotonic()


def print_table(scenarios: list[Scenario], args: argparse.Namespace) -> None:
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("state filesystem", lambda f: f["fs"]),
        ("results received /s", lambda f: f"{f['received_s']:,.0f}"),
        ("results acked by Kafka /s", lambda f: f"{f['acked_s']:,.0f}"),
        ("controller CPU (% of 1 core)", lambda f: f"{f['cpu'] * 100:.0f} %"),
        ("acked results /s per core", lambda f: f"{f['per_core_s']:,.0f}"),
        ("fake nodes CPU", lambda f: f"{f['nodes_cpu'] * 100:.0f} %"),
        ("Kafka broker CPU", lambda f: f"{f['kafka_cpu'] * 100:.0f} %"),
        ("controller RSS peak (MiB)", lambda f: f"{f['rss_mib']:.0f}"),
        ("RSS growth / measurement (KiB)", lambda f: f"{f['rss_per_m_kib']:.2f}"),
        ("SQLite state (MiB)", lambda f: f"{f['db_mib']:.1f}"),
        ("setup of measurements (s)", lambda f: f"{f['setup_s']:.2f}"),
        ("sent by nodes (whole run)", lambda f: f"{f['sent']:,}"),
        ("received by controller", lambda f: f"{f['received']:,}"),
        ("left in gRPC buffers at the end", lambda f: f"{f['sent'] - f['received']:,}"),
        ("acked by Kafka", lambda f: f"{f['acked']:,}"),
        ("spooled (Kafka slow/away)", lambda f: f"{f['spooled']:,}"),
        ("publisher flush complete", lambda f: "yes" if f["flushed"] else "NO"),
        ("stream reconnects", lambda f: f"{f['reconnects']}"),
        ("read back from Kafka", lambda f: f"{f['in_kafka']:,}"),
        ("lost / duplicated / unexpected",
         lambda f: f"{f['lost']:,} / {f['duplicates']:,} / {f['unexpected']:,}"),
    ]
    done = [s for s in scenarios if "in_kafka" in s.figures]
    width = max(len(r[0]) for r in rows) + 2
    col = max([16, *(len(s.name) + 2 for s in done)])
    print()
    print(f"{args.nodes} nodes x {args.per_node} measurements = {args.nodes * args.per_node:,} measurements; "
          f"window {args.seconds:g} s after {args.warmup:g} s warm-up; paced = one block per measurement "
          f"every {args.period:g} s ({args.nodes * args.per_node / args.period:,.0f} results/s)")
    print("".ljust(width) + "".join(s.name.rjust(col) for s in done))
    for label, fmt in rows:
        print(label.ljust(width) + "".join(fmt(s.figures).rjust(col) for s in done))


def verdict(scenarios: list[Scenario]) -> str:
    """The goal line, from the unpaced scenarios (a paced one is capped at its offered load).

    Met means really acknowledged at that rate with the controller on one core (pinned), state on
    a disk, nothing lost or doubled: acked/s per core alone would flatter a controller that waits
    on fsync rather than on its CPU.
    """
    unpaced = [s for s in scenarios if not s.paced and "in_kafka" in s.figures]
    if not unpaced:
        return "goal (>= 20,000 results/s on one core): not measured (no max-* scenario completed)"
    parts, met = [], {"disk": False, "shm": False}
    for s in unpaced:
        f = s.figures
        clean = f["lost"] == 0 and f["duplicates"] == 0 and f["unexpected"] == 0
        met[s.medium] = met[s.medium] or (f["acked_s"] >= 20_000 and clean)
        parts.append(f"{s.name}: {f['acked_s']:,.0f} acked/s at {f['cpu'] * 100:.0f} % of a core, "
                     f"{f['per_core_s']:,.0f}/s per core{'' if clean else ', LOSS/DUPLICATES'}")
    state = "met" if met["disk"] else "NOT met" + (" (met with the state on tmpfs)" if met["shm"] else "")
    return f"goal (>= 20,000 results/s on one core): {state} ({'; '.join(parts)})"


def run_steps(steps: list[Callable[[], None]]) -> None:
    """Run cleanup steps, newest first; one failing must not keep the others from running."""
    for step in reversed(steps):
        try:
            step()
        except Exception as exc:
            print(f"cleanup: {exc}", file=sys.stderr)
    steps.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20, help="fake sender nodes (one stream each)")
    parser.add_argument("--per-node", type=int, default=500, help="measurements per node")
    parser.add_argument("--seconds", type=float, default=12.0, help="measuring window per scenario")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--period", type=float, default=1.0, help="T of the paced scenarios (s)")
    parser.add_argument("--drain", type=float, default=3.0,
                        help="at most this long for the controller to take what nodes sent (s)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of each topic")
    parser.add_argument("--scenarios", default="max-disk-256,max-shm-256,max-shm-1,paced-disk-256",
                        help="comma-separated max|paced-disk|shm-<node batch> (default %(default)s)")
    parser.add_argument("--disk-dir", default=tempfile.gettempdir(),
                        help="parent of the 'disk' state directories (default %(default)s)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the controller to CPU 0")
    args = parser.parse_args()
    scenarios = [Scenario.parse(s) for s in args.scenarios.split(",") if s]

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)

    def on_term(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    from tests.system.servers import JAVA, KAFKA_LIBS, KafkaServer

    if JAVA is None or not any(KAFKA_LIBS.glob("kafka_2.13-*.jar")):
        print("needs java and the Kafka jars in .tools/kafka (scripts/setup.sh)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cpus) >= 2
    controller_cpu, other_cpus = ({cpus[0]}, cpus[1:]) if pin else (set(cpus), [])

    cleanup: list[Callable[[], None]] = []
    workdir = Path(tempfile.mkdtemp(prefix="srv6pm-bench-kafka-"))
    cleanup.append(lambda: shutil.rmtree(workdir, ignore_errors=True))
    try:
        kafka = KafkaServer(workdir)
        if pin:
            os.sched_setaffinity(0, other_cpus)  # the JVM inherits the other CPUs
        cleanup.append(kafka.stop)
        startup = kafka.start()
        if pin:
            # Every thread of this process from now on (gRPC, collector, producer) runs on CPU 0.
            for tid in os.listdir("/proc/self/task"):
                with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                    os.sched_setaffinity(int(tid), controller_cpu)
        print(f"Kafka broker up in {startup:.1f} s; controller on CPU {sorted(controller_cpu)}, "
              f"broker and fake nodes on {other_cpus or 'any'}; Python {sys.version.split()[0]}")
        for sc in scenarios:
            t = time.monotonic()
            steps: list[Callable[[], None]] = []
            try:
                run_scenario(sc, args, kafka, other_cpus, steps)
            except Exception as exc:  # report it and go on with the next scenario
                logging.exception("scenario %s failed: %s", sc.name, exc)
                continue
            finally:
                run_steps(steps)
            f = sc.figures
            print(f"  {sc.name}: {f['acked_s']:,.0f} acked/s at {f['cpu'] * 100:.0f} % CPU, "
                  f"lost/dup {f['lost']}/{f['duplicates']} ({time.monotonic() - t:.0f} s: start "
                  f"{f['t_setup'] - t:.0f}, window {f['t_window'] - f['t_setup']:.0f}, drain+close "
                  f"{f['t_drain'] - f['t_window']:.0f}, read back {f['t_check'] - f['t_drain']:.0f})",
                  flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    finally:
        run_steps(cleanup)
    print_table(scenarios, args)
    print(verdict(scenarios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
