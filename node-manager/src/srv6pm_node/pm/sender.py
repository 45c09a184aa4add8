"""The sender side of a measurement: what each probe carries, and each block's result.

Every probe of block ``b`` (sent from guard time on, every probe interval) carries, in its
Direct Measurement TLV, the sender's cumulative TX count of colour ``(b-1) mod 2`` as it stood
after block ``b-1`` (S_TxC). The reflector fills in its RX count of the same colour (R_RxC) and
its TX count for the reverse flow (R_TxC); the sender's reverse RX count (S_RxC) is read with
S_TxC. The first answered probe settles block ``b-1``.

Loss of block ``n`` is the change of those four cumulative counters since the last settled block
of the same colour (``n-2`` normally): forward ΔS_TxC - ΔR_RxC, reverse ΔR_TxC - ΔS_RxC. When a
block cannot be settled (every probe of the next block lost, a node down), nothing is lost from
the books: the next settled block of that colour covers it and says so (``merged_blocks``).
The chains survive restarts (:mod:`.state`).

Each block's delay figures come from the probes sent during that block.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_twamp.arithmetic.delay import jitter, summarize
from srv6pm_twamp.arithmetic.loss import counter_delta
from srv6pm_twamp.sender import ProbeResult
from srv6pm_twamp.wire.tlv import CounterEpoch, DirectMeasurement, Tlv

from ..counters import Direction
from .blocks import BlockClock, probe_phase
from .dataplane import Snapshot
from .state import ChainPoint

MASK32 = 0xFFFFFFFF  # the Direct Measurement TLV carries 32-bit counters
MAX_SETTLE_WAIT_NS = 2_000_000_000
# No block sees 2^31 packets (that is 600 Mpps for an hour): a larger delta is a counter reset.
RESET_DELTA = 1 << 31


def default_ssid(measurement_id: str) -> int:
    """The SSID both nodes derive when the spec leaves it 0 (1..65535)."""
    return zlib.crc32(measurement_id.encode()) % 0xFFFF + 1


@dataclass
class _Block:
    """What the sender gathered about one block."""

    sent: int = 0
    received: int = 0
    duplicates: int = 0
    rtt: list[int] = field(default_factory=list)
    forward: list[int] = field(default_factory=list)
    backward: list[int] = field(default_factory=list)
    user_times: int = 0  # samples with a T1 or T4 not taken by the kernel


@dataclass(frozen=True)
class _Pending:
    block: int  # the block whose counters the probe carries
    s_txc: int
    s_rxc: int | None
    s_epoch: int


@dataclass(frozen=True)
class Settled:
    """A block result to publish (None: nothing to publish) and the chain point to store with it
    (None: no loss figures)."""

    result: pb.BlockResult | None
    chain: ChainPoint | None


class SenderMeasurement:
    """One measurement's sender-side bookkeeping. Not thread-safe: the engine's loop owns it."""

    def __init__(
        self,
        spec: pb.MeasurementSpec,
        node: str,
        chains: dict[int, ChainPoint],
        last_block: int,
        synchronized: bool,
        first_block: int = 0,
    ) -> None:
        self.spec = spec
        self.node = node
        self.clock = BlockClock(spec.color_period.ToNanoseconds())
        self.guard_ns = spec.guard_time.ToNanoseconds()
        self.interval_ns = spec.probe_interval.ToNanoseconds()
        # within the interval and the probing window (T - guard), so every block keeps its probes
        window = self.clock.period_ns - self.guard_ns
        self.phase_ns = probe_phase(spec.ssid, max(0, min(self.interval_ns, window)))
        self.forward = tuple(spec.forward_segments)
        self.reverse = tuple(spec.reverse_segments)
        self.synchronized = synchronized
        self.chains = dict(chains)
        self.emitted_up_to = last_block  # blocks <= this are published (also before a restart)
        self.first_block = first_block  # blocks before the start are settled (baselines) but not published
        self._blocks: dict[int, _Block] = {}
        self._pending: dict[int, _Pending] = {}  # probe seq -> what it carried
        self._settled: dict[int, Settled] = {}  # blocks settled, waiting for their delay figures
        self.resets = 0  # baselines restarted because a far-end counter restarted from zero

    # --- schedule ----------------------------------------------------------------------------

    def next_probe_ns(self, now_ns: int) -> int:
        """The first probe time strictly after ``now_ns``."""
        b = self.clock.block_of(now_ns)
        for t in (
            *self.clock.probe_times(b, self.guard_ns, self.interval_ns, self.phase_ns),
            *self.clock.probe_times(b + 1, self.guard_ns, self.interval_ns, self.phase_ns),
        ):
            if t > now_ns:
                return t
        return self.clock.start(b + 2) + self.guard_ns + self.phase_ns

    # --- probes ------------------------------------------------------------------------------

    def probe_tlvs(
        self, now_ns: int, snapshot: Snapshot | None, epoch: Callable[[Direction, tuple[str, ...]], int]
    ) -> tuple[tuple[Tlv, ...], _Pending | None]:
        """The TLVs of a probe sent now, and what to remember about it. ``epoch`` tells when a
        local flow's counters started."""
        if not self.spec.loss_enabled or snapshot is None:
            return (), None
        n = self.clock.block_of(now_ns) - 1
        c = self.clock.colour(n)
        tx = snapshot.get((Direction.EGRESS, self.forward))
        if tx is None:
            return (), None
        rx = snapshot.get((Direction.INGRESS, self.reverse)) if self.reverse else None
        s_epoch = epoch(Direction.EGRESS, self.forward)
        if self.reverse:
            s_epoch = max(s_epoch, epoch(Direction.INGRESS, self.reverse))
        pending = _Pending(n, tx[c], rx[c] if rx is not None else None, s_epoch)
        return (DirectMeasurement(s_txc=tx[c] & MASK32).to_tlv(), CounterEpoch().to_tlv()), pending

    def sent(self, seq: int, t1_ns: int, pending: _Pending | None) -> None:
        """Record a probe sent with sequence number ``seq`` and stamped ``t1_ns``."""
        self._blocks.setdefault(self.clock.block_of(t1_ns), _Block()).sent += 1
        if pending is not None and self.clock.read_block(t1_ns) != pending.block:
            # Stamped in a later block than its counters were read in (a starved process): the
            # reflector would answer for another block. Its reply only counts for delay.
            pending = None
        if pending is not None:
            self._pending[seq] = pending
            if len(self._pending) > 4096:
                del self._pending[next(iter(self._pending))]

    def on_reply(self, r: ProbeResult) -> None:
        """Account one reply: its delay to its block, its counters to the block they settle."""
        blk = self._blocks.get(self.clock.block_of(r.t1))
        if blk is not None:
            if r.duplicate:
                blk.duplicates += 1
            else:
                blk.received += 1
                blk.rtt.append(r.rtt_ns)
                blk.user_times += not (r.tx_kernel_timestamp and r.kernel_timestamp)
                ow = r.one_way_ns(self.synchronized)
                if ow is not None:
                    blk.forward.append(ow[0])
                    blk.backward.append(ow[1])
        if r.duplicate:
            return
        pending = self._pending.pop(r.seq, None)
        dm = r.direct_measurement
        if pending is None or dm is None:
            return
        n = pending.block
        if n <= self.emitted_up_to or n in self._settled:
            return  # already settled by an earlier reply, or given up on: never count twice
        c = self.clock.colour(n)
        point = ChainPoint(
            n,
            pending.s_txc & MASK32,
            dm.r_rxc,
            dm.r_txc if self.reverse else None,
            pending.s_rxc & MASK32 if pending.s_rxc is not None else None,
            pending.s_epoch,
            r.counter_epoch,
        )
        prev = self.chains.get(c)
        if prev is not None and prev.block >= n:
            return
        result = self._result(n)
        if prev is not None:
            fwd = (counter_delta(point.s_txc, prev.s_txc), counter_delta(point.r_rxc, prev.r_rxc))
            rev = None
            if (
                point.r_txc is not None
                and point.s_rxc is not None
                and prev.r_txc is not None
                and prev.s_rxc is not None
            ):
                rev = (counter_delta(point.r_txc, prev.r_txc), counter_delta(point.s_rxc, prev.s_rxc))
            new_epoch = point.s_epoch != prev.s_epoch or (
                point.r_epoch is not None and prev.r_epoch is not None and point.r_epoch != prev.r_epoch
            )
            if new_epoch or max(*fwd, *(rev or ())) >= RESET_DELTA:
                # The counters at one end restarted from zero (a flow removed and added again: a
                # new epoch, or, with a reflector that does not tell its epoch, an implausible
                # jump). Start a new baseline; this block has no figures.
                self.resets += 1
            else:
                result.merged_blocks = (n - prev.block) // 2
                _fill(result.forward, *fwd)
                if rev is not None:
                    _fill(result.reverse, *rev)
        self.chains[c] = point
        self._settled[n] = Settled(result, point)

    # --- results -----------------------------------------------------------------------------

    def due(self, now_ns: int) -> list[Settled]:
        """Block results ready to publish, oldest first.

        A settled block is ready once its own probes are answered; an unsettled one is given up
        on (published without loss figures) when its colour's window has passed.
        """
        out: list[Settled] = []
        wait = min(self.guard_ns, MAX_SETTLE_WAIT_NS)
        candidates = sorted({*self._blocks, *self._settled})
        for n in candidates:
            if n <= self.emitted_up_to:
                self._blocks.pop(n, None)
                self._settled.pop(n, None)
                continue
            settled = self._settled.get(n)
            if settled is not None and now_ns >= self.clock.end(n):
                ready = settled
            elif settled is None and (
                now_ns >= self.clock.end(n + 1) + wait
                or (not self.spec.loss_enabled and now_ns >= self.clock.end(n) + wait)
            ):
                ready = Settled(self._result(n), None)
            else:
                break  # results go out in block order
            self._add_delay(ready.result, self._blocks.pop(n, None))
            self._settled.pop(n, None)
            self.emitted_up_to = n
            # a block from before the start only anchors the chain: store it, publish nothing
            out.append(ready if n >= self.first_block else Settled(None, ready.chain))
        return out

    def _result(self, n: int) -> pb.BlockResult:
        r = pb.BlockResult(
            measurement_id=self.spec.measurement_id,
            block_number=n,
            color=self.clock.colour(n),
            merged_blocks=1,
            node=self.node,
        )
        r.start_time.FromNanoseconds(self.clock.start(n))
        r.end_time.FromNanoseconds(self.clock.end(n))
        return r

    def _add_delay(self, r: pb.BlockResult, blk: _Block | None) -> None:
        blk = blk or _Block()
        r.probes.CopyFrom(
            pb.ProbeCounts(
                sent=blk.sent,
                received=blk.received,
                lost=max(0, blk.sent - blk.received),
                rejected=blk.duplicates,
            )
        )
        if self.spec.delay_enabled:
            kernel = blk.user_times == 0
            _stats(r.two_way_delay, blk.rtt, kernel)
            _stats(r.one_way_delay_forward, blk.forward, kernel)
            _stats(r.one_way_delay_backward, blk.backward, kernel)


def _fill(d: pb.DirectionResult, tx: int, rx: int) -> None:
    d.valid = True
    d.tx_packets, d.rx_packets = tx, rx
    d.lost_packets = tx - rx
    d.loss_ratio = (tx - rx) / tx if tx else 0.0


def _stats(d: pb.DelayStats, samples: list[int], kernel_timestamps: bool) -> None:
    if not samples:
        return
    s = summarize(samples)
    d.valid = True
    d.kernel_timestamps = kernel_timestamps
    d.samples = s.count
    d.min_ns, d.avg_ns, d.max_ns = int(s.min), int(s.avg), int(s.max)  # type: ignore[arg-type]
    d.p50_ns, d.p99_ns = int(s.p50), int(s.p99)  # type: ignore[arg-type]
    d.jitter_ns = int(jitter(samples))
