"""``srv6pm-demo``: the main job, a monitored SRv6 flow end to end on one machine.

Builds h1 — r1 — c — r2 — h2 in network namespaces, starts srv6pm-node on r1, c and r2, provisions
the SR policies through the agents' SRv6Manager API, configures SRv6PM on the edge routers and
starts a loss and delay measurement on one policy (reflector on r2, sender on r1). Traffic flows
both ways while an independent nftables injector on the core router drops every N-th packet of
each direction and counts its drops per colour. The result stream of r1 (SRv6PM.StreamResults)
is printed as a live table, one line per block as it closes, next to what the injector dropped
in that block; the demo exits 0 only if every compared block's measured loss equals the injected
drops, exactly, in both directions. Everything it creates is removed when it ends (Ctrl-C
included).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

import grpc

from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as mpb_grpc
from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_node.counters.pins import temporary_bpffs

from .injector import DropBook, Sampler
from .lab import Lab
from .monitored import MonitoredNetwork, monitored_network
from .three_routers import POLICIES, Policy

NS = 1_000_000_000
MEASUREMENT_ID = "demo"
DRIVERS = {"ebpf": pb.COUNTER_DRIVER_EBPF, "netfilter": pb.COUNTER_DRIVER_NETFILTER}
DRIVER_NAMES = {v: k for k, v in DRIVERS.items()}

# The live table: one line per block.
HEADER = (
    "                     |      forward  r1 -> r2        |      reverse  r2 -> r1        |       "
    "| two-way   probes\n"
    "     block  start    |     tx     rx   lost injected |     tx     rx   lost injected | match "
    "| delay µs  rx/sent"
)


@dataclass
class Direction:
    """One direction of one block: what srv6-pm measured and what the injector dropped."""

    tx: int
    rx: int
    lost: int
    injected: int | None  # None: the injector's counters were not sampled for this block

    @property
    def exact(self) -> bool:
        return self.injected is not None and self.lost == self.injected


@dataclass
class Row:
    """One block result as the demo shows it."""

    block: int
    start: str  # ISO 8601, local time
    merged_blocks: int
    forward: Direction | None  # None: a baseline block, no loss figure
    reverse: Direction | None
    two_way_delay_us: float | None
    probes_sent: int
    probes_received: int

    @property
    def measured(self) -> bool:
        return self.forward is not None

    @property
    def compared(self) -> bool:
        """Measured, and the injector's drops are known for every measured direction."""
        return self.forward is not None and all(
            d.injected is not None for d in (self.forward, self.reverse) if d is not None
        )

    @property
    def match(self) -> bool | None:
        if not self.compared:
            return None
        return all(d.exact for d in (self.forward, self.reverse) if d is not None)

    def line(self) -> str:
        """The row of the live table."""

        def cells(d: Direction | None) -> str:
            if d is None:
                return f"{'-':>6} {'-':>6} {'-':>6} {'-':>8}"
            inj = "?" if d.injected is None else str(d.injected)
            return f"{d.tx:>6} {d.rx:>6} {d.lost:>6} {inj:>8}"

        match = {None: "-", True: "yes", False: "NO"}[self.match]
        delay = "-" if self.two_way_delay_us is None else f"{self.two_way_delay_us:.1f}"
        probes = f"{self.probes_received}/{self.probes_sent}"
        notes = []
        if self.forward is None:
            notes.append("baseline")
        if self.merged_blocks > 1:
            notes.append(f"merged_blocks={self.merged_blocks}")
        clock = self.start[11:19]
        return (
            f"{self.block:>10}  {clock:<8} | {cells(self.forward)} | {cells(self.reverse)} | {match:^5} "
            f"| {delay:>8}  {probes:>7}" + (f"  {', '.join(notes)}" if notes else "")
        ).rstrip()


@dataclass
class Summary:
    """Totals over the measured blocks."""

    blocks_requested: int
    blocks_measured: int = 0
    blocks_compared: int = 0
    blocks_exact: int = 0
    forward_lost: int = 0
    forward_injected: int = 0
    reverse_lost: int = 0
    reverse_injected: int = 0
    timed_out: bool = False
    rows: list[Row] = field(default_factory=list, repr=False)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        if not row.measured:
            return
        self.blocks_measured += 1
        if not row.compared:
            return
        self.blocks_compared += 1
        self.blocks_exact += bool(row.match)
        assert row.forward is not None and row.forward.injected is not None
        self.forward_lost += row.forward.lost
        self.forward_injected += row.forward.injected
        if row.reverse is not None and row.reverse.injected is not None:
            self.reverse_lost += row.reverse.lost
            self.reverse_injected += row.reverse.injected

    @property
    def ok(self) -> bool:
        """Every block requested was measured, and every compared one matched exactly."""
        return (
            not self.timed_out
            and self.blocks_measured >= self.blocks_requested
            and self.blocks_compared > 0
            and self.blocks_exact == self.blocks_compared
        )

    def line(self) -> str:
        unread = self.blocks_measured - self.blocks_compared
        return (
            f"blocks measured {self.blocks_measured}, exact {self.blocks_exact} of {self.blocks_compared}"
            f" compared{f' ({unread} not compared: injector not read in time)' if unread else ''};"
            f" loss measured {self.forward_lost} forward + {self.reverse_lost} reverse,"
            f" injected {self.forward_injected} forward + {self.reverse_injected} reverse"
        )

    def record(self) -> dict[str, object]:
        d = {k: v for k, v in asdict(self).items() if k != "rows"}
        d["ok"] = self.ok
        return d


def to_row(r: pb.BlockResult, fwd_book: DropBook, rev_book: DropBook, wait_s: float) -> Row:
    """A result and the injector's drops in the same block(s) (waiting up to ``wait_s`` for them:
    the injector's counters are read from 55 % of the next block on, results may come earlier)."""
    n, m = r.block_number, max(r.merged_blocks, 1)

    def injected(book: DropBook) -> int | None:
        deadline = time.monotonic() + wait_s
        while (got := book.drops(n, m)) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return got

    def direction(d: pb.DirectionResult, book: DropBook) -> Direction | None:
        if not d.valid:
            return None
        return Direction(d.tx_packets, d.rx_packets, d.lost_packets, injected(book))

    fwd = direction(r.forward, fwd_book)
    rev = direction(r.reverse, rev_book) if fwd is not None else None
    delay = r.two_way_delay.avg_ns / 1000 if r.two_way_delay.valid else None
    start = datetime.fromtimestamp(r.start_time.ToNanoseconds() / NS).isoformat(timespec="milliseconds")
    return Row(n, start, m, fwd, rev, delay, r.probes.sent, r.probes.received)


def describe_network(lab: MonitoredNetwork) -> list[str]:
    """The SRv6 state and SRv6PM configuration, read back from the agents."""
    lines = []
    for name in ("r1", "c", "r2"):
        stub = mpb_grpc.SRv6ManagerStub(lab.agents[name].channel)
        for b in stub.ListBehaviors(mpb.ListBehaviorsRequest(), timeout=10).behaviors:
            lines.append(f"{name}: behaviour {b.sid} {mpb.BehaviorAction.Name(b.action)}")
        for p in stub.ListPaths(mpb.ListPathsRequest(), timeout=10).paths:
            lines.append(f"{name}: path {p.destination} -> {list(p.segments)} dev {p.device}")
    for name in ("r1", "r2"):
        cfg = lab.pm(name).GetConfiguration(pb.GetConfigurationRequest(), timeout=10).config
        lines.append(
            f"{name}: SRv6PM driver {DRIVER_NAMES.get(cfg.driver, cfg.driver)}, marking and counting on"
            f" egress {list(cfg.egress_interfaces)}, ingress {list(cfg.ingress_interfaces)},"
            f" colour = DSCP bit {cfg.color_bit}"
        )
    return lines


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run the demo; return 0 when every compared block's loss equals the injected drops."""
    as_json = args.json
    narrate: TextIO = sys.stderr if as_json else out

    def say(line: str = "") -> None:
        print(line, file=narrate, flush=True)

    def emit(record: dict[str, object]) -> None:
        print(json.dumps(record), file=out, flush=True)

    policy: Policy = next(p for p in POLICIES if p.name == args.policy)
    period_ns = int(args.period * NS)
    summary = Summary(args.blocks)

    with contextlib.ExitStack() as stack:
        net = stack.enter_context(Lab())
        pin_root = stack.enter_context(temporary_bpffs(prefix=f"{net.prefix}bpf-"))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"{net.prefix}demo-")))
        say(f"== building h1 - r1 - c - r2 - h2 in network namespaces ({net.prefix}*)")
        try:
            lab = stack.enter_context(monitored_network(net, DRIVERS[args.driver], pin_root, workdir))
        except grpc.RpcError as e:
            say(f"srv6pm-demo: setting up the network failed: {e.code().name}: {e.details()}")
            if args.driver == "ebpf":
                say("   (the netfilter driver needs no eBPF: try --driver netfilter)")
            return 2
        pids = ", ".join(f"{n} (pid {a.proc.pid})" for n, a in lab.agents.items())
        say(f"   srv6pm-node running in {pids}, health SERVING")
        say("== SRv6 provisioned through gRPC (SRv6Manager), SRv6PM configured; read back from the agents")
        for line in describe_network(lab):
            say(f"   {line}")

        inj_fwd, inj_rev = lab.injectors(policy, args.drop_every_forward, args.drop_every_reverse)
        stack.callback(inj_rev.remove)
        stack.callback(inj_fwd.remove)
        t = lab.topo
        say(
            "== injecting loss on the core router c with nftables, drops counted per colour:"
            f" forward (in on c {t.c_from_r1}) {_every(args.drop_every_forward)},"
            f" reverse (in on c {t.c_from_r2}) {_every(args.drop_every_reverse)}"
        )
        books = [DropBook(inj_fwd, period_ns), DropBook(inj_rev, period_ns)]
        stack.enter_context(Sampler(books, period_ns))

        spec = lab.spec(policy, MEASUREMENT_ID, args.period)
        lab.start(spec)
        stack.callback(_stop_measurement, lab)
        say(
            f"== measurement {MEASUREMENT_ID!r} on policy {policy.name}: forward {list(policy.forward)},"
            f" reverse {list(policy.reverse)}, colour period {args.period:g} s, loss + delay (STAMP),"
            f" sender r1, reflector r2"
        )
        fwd_stream, rev_stream = lab.traffic(policy, args.pps)
        stack.callback(rev_stream.stop)
        stack.callback(fwd_stream.stop)
        say(f"== traffic {args.pps} packets/s each way: h1 {policy.h1_addr} -> h2 {policy.h2_addr} and back")
        if as_json:
            emit(
                {
                    "type": "start",
                    "prefix": net.prefix,
                    "measurement_id": MEASUREMENT_ID,
                    "policy": policy.name,
                    "driver": args.driver,
                    "period_s": args.period,
                    "pps": args.pps,
                    "drop_every_forward": args.drop_every_forward,
                    "drop_every_reverse": args.drop_every_reverse,
                    "blocks": args.blocks,
                }
            )
        say(
            f"== live results from r1 (SRv6PM.StreamResults), a line per block as it closes,"
            f" until {args.blocks} blocks are measured"
        )
        say()
        if not as_json:
            say(HEADER)

        def show(row: Row) -> None:
            summary.add(row)
            if as_json:
                emit({"type": "block", **asdict(row), "compared": row.compared, "match": row.match})
            else:
                say(row.line())

        stream_results(lab, args, books, show, summary)

        say()
        say("== " + summary.line())
        if as_json:
            emit({"type": "summary", **summary.record()})
        if summary.ok:
            say("== OK: in every block srv6-pm measured exactly the packets the injector dropped, both ways")
        elif summary.timed_out or summary.blocks_measured < summary.blocks_requested:
            say(
                f"== UNEXPECTED: only {summary.blocks_measured} of {args.blocks} blocks were measured in time"
            )
        else:
            say("== UNEXPECTED: measured loss differs from the injected drops (see the rows marked NO)")
    return 0 if summary.ok else 1


def stream_results(
    lab: MonitoredNetwork,
    args: argparse.Namespace,
    books: list[DropBook],
    show: Callable[[Row], None],
    summary: Summary,
) -> None:
    """Follow r1's result stream until ``args.blocks`` blocks carry loss figures (or time runs out)."""
    # start-up (a baseline block or two) plus the blocks, plus slack for merged blocks
    deadline = (args.blocks + 4) * args.period * 1.5 + 20
    call = lab.pm("r1").StreamResults(
        pb.StreamResultsRequest(measurement_ids=[MEASUREMENT_ID]), timeout=deadline
    )
    try:
        for resp in call:
            show(to_row(resp.result, books[0], books[1], wait_s=args.period + 1))
            if summary.blocks_measured >= args.blocks:
                break
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        summary.timed_out = True
    finally:
        call.cancel()


def _every(n: int) -> str:
    return f"1 packet in {n} dropped" if n else "none dropped, counted only"


def _stop_measurement(lab: MonitoredNetwork) -> None:
    with contextlib.suppress(grpc.RpcError):
        lab.pm("r1").StopSender(pb.StopSenderRequest(measurement_id=MEASUREMENT_ID), timeout=10)
    with contextlib.suppress(grpc.RpcError):
        lab.pm("r2").StopReflector(pb.StopReflectorRequest(measurement_id=MEASUREMENT_ID), timeout=10)


def _positive(kind: type, minimum: float) -> Callable[[str], object]:
    def parse(text: str) -> object:
        value = kind(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srv6pm-demo", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--blocks", type=_positive(int, 1), default=8, help="blocks to measure (default %(default)s)"
    )
    p.add_argument(
        "--period",
        type=_positive(float, 1),
        default=1.0,
        help="colour period T in seconds, at least 1 (default %(default)s)",
    )
    p.add_argument(
        "--drop-every-forward",
        type=_positive(int, 0),
        default=7,
        metavar="N",
        help="the core drops every N-th forward packet, 0: none (default %(default)s)",
    )
    p.add_argument(
        "--drop-every-reverse",
        type=_positive(int, 0),
        default=13,
        metavar="N",
        help="the core drops every N-th reverse packet, 0: none (default %(default)s)",
    )
    p.add_argument(
        "--pps",
        type=_positive(int, 1),
        default=1000,
        help="packets per second each way (default %(default)s)",
    )
    p.add_argument(
        "--driver", choices=sorted(DRIVERS), default="ebpf", help="counter driver (default %(default)s)"
    )
    p.add_argument(
        "--policy",
        choices=[q.name for q in POLICIES],
        default="A",
        help="SR policy: A (the far edge's SID only) or B (via the core's End SID) (default %(default)s)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="JSON lines on stdout (start, one per block, summary) instead of the table; narration on stderr",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of srv6pm-demo."""
    args = parser().parse_args(argv)
    if os.geteuid() != 0:
        print("srv6pm-demo: needs root (it creates network namespaces)", file=sys.stderr)
        return 2
    try:
        return run(args)
    except KeyboardInterrupt:
        print("srv6pm-demo: interrupted; what it created has been removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
