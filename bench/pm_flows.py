#!/usr/bin/env python3
"""SRv6PM engine scale: srv6pm-node CPU and memory per monitored flow at colour period T = 1 s.

    sudo .venv/bin/python bench/pm_flows.py [--flows 10,100,1000] [--seconds 20] [--driver ebpf]

For each flow count N, a fresh h1 — r1 — c — r2 — h2 lab (:mod:`srv6pm_topos.monitored`:
srv6pm-node on r1, c and r2, SRv6PM configured on r1 and r2 with the chosen counter driver) gets
N distinct bidirectional SR policies between r1 and r2, written straight over netlink: End.DT6
SIDs ``fc00:1::1:<i>`` on r1 and ``fc00:2::1:<i>`` on r2, and encap paths ``fd00:2:<i>::/64 ->
[fc00:2::1:<i>]`` on r1 and ``fd00:1:<i>::/64 -> [fc00:1::1:<i>]`` on r2. Then N measurements
(T = 1 s, loss and delay, default guard; default probe interval: 5 probes per block, or
``--probes-per-block``) start —
StartReflector on r2, then StartSender on r1, from a small thread pool — and the time that takes
is printed (each start checks the node's routes with one kernel route lookup, whatever the number
of routes). A light UDP stream from h1 runs over the first ``--traffic-flows`` policies so their
loss figures count packets (the engine's cost is per block and per probe, not per packet).

Once every measurement has streamed a result (StreamResults on r1, all measurements), the agents'
CPU time (utime + stime of the whole process, all threads, /proc/<pid>/stat) is read over
``--seconds`` of wall time and given as % of one core, with its kernel share (stime) apart: in
namespaces the veth "links" are processed in the sender's context, so a probe's sendto pays for
its trip through the emulated network, which a router's NIC would not charge it. The results
streamed in that window give results/s (N/s expected), the share carrying loss figures both
ways, probes sent per result and the share of probes answered. Memory is VmRSS
(/proc/<pid>/status) after Configure, before the first measurement, and at the end of the
window; the difference divided by N is the per-flow cost. Everything (namespaces, agents, bpffs)
is removed at the end, also after a failure, Ctrl-C or SIGTERM. Figures, not a test: nothing is
asserted. The lab's processes (bench, traffic, three agents) share the machine's CPUs: on a
small machine the agents compete with each other.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from pyroute2 import IPRoute

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_controller.measurements.collector import STREAM_BATCH
from srv6pm_node.counters.pins import temporary_bpffs
from srv6pm_topos.lab import Node, lab, wait_until
from srv6pm_topos.monitored import MonitoredNetwork, monitored_network
from srv6pm_topos.traffic import UdpStream

NS = 1_000_000_000
DRIVERS = {"ebpf": pb.COUNTER_DRIVER_EBPF, "netfilter": pb.COUNTER_DRIVER_NETFILTER}
GOAL_FLOWS, GOAL_CPU = 1000, 50.0  # 1,000 concurrent flows at T = 1 s within half a core per node
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the N policies ----------------------------------------------------------------------------


def r1_sid(i: int) -> str:
    return f"fc00:1::1:{i:x}"


def r2_sid(i: int) -> str:
    return f"fc00:2::1:{i:x}"


def r1_probe(i: int) -> str:
    return f"fd00:1:{i:x}::5354"  # inside fd00:1:<i>::/64, steered by r2 into [r1_sid(i)]


def r2_probe(i: int) -> str:
    return f"fd00:2:{i:x}::5354"  # inside fd00:2:<i>::/64, steered by r1 into [r2_sid(i)]


def add_policies(
    node: Node,
    n: int,
    local_sid: Callable[[int], str],
    far_prefix: Callable[[int], str],
    far_sid: Callable[[int], str],
) -> None:
    """N End.DT6 SIDs (table 254) and N single-SID encap paths on one edge router (eth1 faces c)."""
    with IPRoute(netns=node.netns) as ipr:
        eth0, eth1 = (ipr.link_lookup(ifname=name)[0] for name in ("eth0", "eth1"))
        for i in range(1, n + 1):
            ipr.route(
                "add",
                dst=f"{local_sid(i)}/128",
                oif=eth0,
                encap={"type": "seg6local", "action": "End.DT6", "table": 254},
            )
            ipr.route(
                "add",
                dst=far_prefix(i),
                oif=eth1,
                # pyroute2 takes segs in SRH order (last segment first): the reverse of ip(8)
                encap={"type": "seg6", "mode": "encap", "segs": [far_sid(i)]},
            )


def spec(i: int, probes_per_block: int = 0) -> pb.MeasurementSpec:
    s = pb.MeasurementSpec(
        measurement_id=f"f{i}",
        forward_segments=[r2_sid(i)],
        reverse_segments=[r1_sid(i)],
        sender_address=r1_probe(i),
        reflector_address=r2_probe(i),
        loss_enabled=True,
        delay_enabled=True,
    )
    s.color_period.FromNanoseconds(NS)
    if probes_per_block:  # within the T - guard (T/2 by default) window
        s.probe_interval.FromNanoseconds(NS // 2 // probes_per_block)
    return s


# --- the agents' processes ----------------------------------------------------------------------

def agent_pid(pid: int) -> int:
    """The srv6pm-node process: ``ip netns exec`` execs it in place; follow a forked child if not."""
    for _ in range(4):
        if Path(f"/proc/{pid}/comm").read_text().strip() != "ip":
            return pid
        children = [
            int(c)
            for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()
        ]
        if len(children) != 1:
            break
        pid = children[0]
    raise RuntimeError(f"cannot find the srv6pm-node process under pid {pid}")


def cpu_s(pid: int) -> tuple[float, float]:
    """(utime + stime, stime) of a whole process (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[12]) / CLK_TCK


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def log_problems(log: str) -> collections.Counter[str]:
    """Warning and error messages of an agent's JSON log, counted."""
    out: collections.Counter[str] = collections.Counter()
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict) and doc.get("level") in ("warning", "error", "critical"):
                out[f"{doc['level']}: {doc.get('msg')}"] += 1
    return out


# --- the result stream --------------------------------------------------------------------------


class ResultCounter:
    """StreamResults on the sender node (every measurement), counted in a thread."""

    def __init__(self, mn: MonitoredNetwork) -> None:
        # batched, as the controller asks for them
        self.call = mn.pm("r1").StreamResults(pb.StreamResultsRequest(max_batch=STREAM_BATCH))
        self.lock = threading.Lock()
        self.seen: set[str] = set()
        self.total = self.valid = self.probes_sent = self.probes_received = 0
        self.last: dict[str, pb.BlockResult] = {}  # the newest result with loss figures
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="results", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for resp in self.call:
                for r in resp.results:
                    self._count(r)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.error = exc

    def _count(self, r: pb.BlockResult) -> None:
        with self.lock:
            self.seen.add(r.measurement_id)
            self.total += 1
            self.valid += r.forward.valid and r.reverse.valid
            self.probes_sent += r.probes.sent
            self.probes_received += r.probes.received
            if r.forward.valid:
                self.last[r.measurement_id] = r

    def snapshot(self) -> tuple[int, int, int, int]:
        with self.lock:
            return self.total, self.valid, self.probes_sent, self.probes_received

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(timeout=5)


# --- one run ------------------------------------------------------------------------------------


@dataclass
class Row:
    flows: int
    start_s: float
    cpu: dict[str, float]
    sys_cpu: dict[str, float]
    rss_mib: dict[str, float]
    kib_per_flow: dict[str, float]
    results_per_s: float
    valid_pct: float
    probes_per_block: float
    replies_pct: float


def run(n: int, args: argparse.Namespace) -> Row:
    with (
        temporary_bpffs() as pin_root,
        lab() as net,
        tempfile.TemporaryDirectory(prefix="s6pm-bench-") as workdir,
        monitored_network(net, DRIVERS[args.driver], pin_root, Path(workdir)) as mn,
        contextlib.ExitStack() as cleanup,
    ):
        t0 = time.perf_counter()
        topo = mn.topo
        add_policies(topo.r1, n, r1_sid, lambda i: f"fd00:2:{i:x}::/64", r2_sid)
        add_policies(topo.r2, n, r2_sid, lambda i: f"fd00:1:{i:x}::/64", r1_sid)
        with IPRoute(netns=topo.r2.netns) as ipr:  # the test traffic ends at r2, after decapsulation
            for i in range(1, min(n, args.traffic_flows) + 1):
                ipr.route("add", dst=f"fd00:2:{i:x}::/64", type="blackhole")
        print(f"  {n} policies each way on r1 and r2 over netlink in {time.perf_counter() - t0:.1f} s")

        pids = {name: agent_pid(mn.agents[name].proc.pid) for name in ("r1", "r2")}
        rss0 = {name: rss_kib(pid) for name, pid in pids.items()}
        results = ResultCounter(mn)
        cleanup.callback(results.close)

        r1_pm, r2_pm = mn.pm("r1"), mn.pm("r2")

        def start(i: int) -> None:  # as the controller does: the reflector first, then the sender
            s = spec(i, args.probes_per_block)
            r2_pm.StartReflector(pb.StartReflectorRequest(spec=s), timeout=args.start_timeout)
            r1_pm.StartSender(pb.StartSenderRequest(spec=s), timeout=args.start_timeout)

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(start, range(1, n + 1)))
        start_s = time.perf_counter() - t0
        print(f"  {n} measurements started in {start_s:.1f} s ({1e3 * start_s / n:.1f} ms each)")

        for i in range(1, min(n, args.traffic_flows) + 1):
            stream = UdpStream(topo.h1, f"fd00:2:{i:x}::2", args.pps, src="fd00:1::2").start()
            cleanup.callback(stream.stop)

        t0 = time.perf_counter()
        wait_until(lambda: len(results.seen) >= n or results.error, timeout=30 + n / 20, interval=0.2)
        if results.error is not None:
            raise results.error
        print(f"  every measurement has a result {time.perf_counter() - t0:.1f} s later")
        time.sleep(args.warmup)

        c0 = {name: cpu_s(pid) for name, pid in pids.items()}
        got0, t0 = results.snapshot(), time.perf_counter()
        time.sleep(args.seconds)
        c1 = {name: cpu_s(pid) for name, pid in pids.items()}
        got1, t1 = results.snapshot(), time.perf_counter()
        rss1 = {name: rss_kib(pid) for name, pid in pids.items()}
        wall = t1 - t0
        total, valid, sent, received = (b - a for a, b in zip(got0, got1, strict=True))

        with results.lock:
            sample = results.last.get("f1")
        if sample is not None:
            print(
                f"  f1 block {sample.block_number}: forward tx {sample.forward.tx_packets} "
                f"rx {sample.forward.rx_packets} lost {sample.forward.lost_packets}, reverse tx "
                f"{sample.reverse.tx_packets} rx {sample.reverse.rx_packets}, two-way delay p50 "
                f"{sample.two_way_delay.p50_ns / 1e3:.0f} us over {sample.probes.received} probes"
            )
        for name in ("r1", "r2"):
            for msg, count in log_problems(mn.agents[name].log()).most_common(5):
                print(f"  {name} logged {count}x: {msg}")
        return Row(
            flows=n,
            start_s=start_s,
            cpu={k: 100 * (c1[k][0] - c0[k][0]) / wall for k in pids},
            sys_cpu={k: 100 * (c1[k][1] - c0[k][1]) / wall for k in pids},
            rss_mib={k: rss1[k] / 1024 for k in pids},
            kib_per_flow={k: (rss1[k] - rss0[k]) / n for k in pids},
            results_per_s=total / wall,
            valid_pct=100 * valid / total if total else 0.0,
            probes_per_block=sent / total if total else 0.0,
            replies_pct=100 * received / sent if sent else 0.0,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flows", default="10,100,1000", help="comma-separated flow counts, one run each")
    ap.add_argument("--seconds", type=float, default=20.0, help="steady-state window per run")
    ap.add_argument("--warmup", type=float, default=3.0, help="wait after every measurement has a result")
    ap.add_argument("--driver", choices=sorted(DRIVERS), default="ebpf")
    ap.add_argument("--workers", type=int, default=8, help="threads starting measurements")
    ap.add_argument("--start-timeout", type=float, default=600.0, help="deadline of each Start call, s")
    ap.add_argument("--traffic-flows", type=int, default=4, help="policies carrying test traffic")
    ap.add_argument("--pps", type=int, default=200, help="packets/s of each test stream")
    ap.add_argument(
        "--probes-per-block", type=int, default=0, help="probes per block (default: the engine's, 5)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, eBPF)", file=sys.stderr)
        return 1
    main_pid = os.getpid()
    # SIGTERM unwinds like Ctrl-C, so namespaces, agents and the bpffs go away. Only here: a child
    # forked by pyroute2 (netns helpers) inherits the handler and must not tear the lab down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143) if os.getpid() == main_pid else os._exit(143))
    sizes = [int(x) for x in args.flows.split(",")]
    print(
        f"srv6pm-node per-flow cost, T = 1 s, {args.driver} driver, {os.cpu_count()} CPUs, "
        f"window {args.seconds:g} s, probes per block: {args.probes_per_block or 'default (5)'}"
    )
    rows = []
    for n in sizes:
        print(f"{n} flows:")
        rows.append(run(n, args))

    print()
    head = (
        f"{'flows':>6} {'start s':>8} {'r1 CPU %':>9} {'r2 CPU %':>9} {'r1 sys %':>9} {'r2 sys %':>9} "
        f"{'r1 RSS MiB':>11} {'r2 RSS MiB':>11} "
        f"{'r1 KiB/flow':>12} {'r2 KiB/flow':>12} {'results/s':>10} {'w/ loss %':>10} {'probes/blk':>11} "
        f"{'replies %':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r.flows:>6} {r.start_s:>8.1f} {r.cpu['r1']:>9.1f} {r.cpu['r2']:>9.1f} "
            f"{r.sys_cpu['r1']:>9.1f} {r.sys_cpu['r2']:>9.1f} "
            f"{r.rss_mib['r1']:>11.1f} {r.rss_mib['r2']:>11.1f} {r.kib_per_flow['r1']:>12.1f} "
            f"{r.kib_per_flow['r2']:>12.1f} {r.results_per_s:>10.1f} {r.valid_pct:>10.1f} "
            f"{r.probes_per_block:>11.1f} {r.replies_pct:>10.1f}"
        )
    print("r1 = sender node, r2 = reflector node; CPU in % of one core (sys: its kernel part, which in")
    print("this lab includes the emulated links: a probe's sendto carries it through c to r2 in softirq);")
    print("KiB/flow = RSS growth / flows;")
    print("results/s, w/ loss % (results with loss figures both ways), probes/blk (probes sent per")
    print("result; 5 by default) and replies % (replies / probes sent) are from r1's result stream")
    goal = next((r for r in rows if r.flows == GOAL_FLOWS), None)
    if goal is not None:
        worst = max(goal.cpu.values())
        # within half a core, and still measuring: a result per flow and block, with loss figures
        met = worst <= GOAL_CPU and goal.results_per_s >= 0.99 * GOAL_FLOWS and goal.valid_pct >= 99
        print(
            f"goal ({GOAL_FLOWS} flows at T = 1 s within half a core on each node, every block measured): "
            f"{'met' if met else 'NOT met'} (busiest node {worst:.1f} %, {goal.results_per_s:.0f} "
            f"results/s, {goal.valid_pct:.0f} % with loss figures)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
