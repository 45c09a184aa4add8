"""The reflector side: which counters answer a probe.

The reflector node runs one STAMP Session-Reflector for all its measurements; a probe names its
measurement by (SSID, sender address). Its block is derived from the sender's timestamp T1
(:meth:`~.blocks.BlockClock.read_block`), never from "now", and the counters come from the
node's snapshot of that block. Outside the block's window the probe gets its Direct Measurement
TLV back flagged unrecognised — the sender then settles the block with a later probe, or merges
it into the next one — rather than counters of the wrong block.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_twamp.counters import Counters, ProbeContext

from ..counters import Direction
from .blocks import BlockClock
from .dataplane import DataPlane

MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class ReflectorMeasurement:
    """What the reflector needs to know about one of its measurements."""

    spec: pb.MeasurementSpec
    clock: BlockClock
    guard_ns: int
    forward: tuple[str, ...]
    reverse: tuple[str, ...]


class ReflectorCounters:
    """The :class:`~srv6pm_twamp.counters.CounterReader` the node's reflector reads through."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane
        self.by_session: dict[tuple[int, str], ReflectorMeasurement] = {}

    def read(self, ctx: ProbeContext) -> Counters:
        """R_RxC of the forward flow and R_TxC of the reverse flow, for the probe's block."""
        m = self.by_session.get((ctx.ssid, ctx.peer[0]))
        if m is None or not m.spec.loss_enabled or ctx.sent_ns is None:
            raise LookupError("no loss measurement for this session")
        n = m.clock.read_block(ctx.sent_ns)
        now = ctx.received_ns or time.time_ns()
        snap = self.dataplane.snapshot(m.clock, n, m.guard_ns, now)  # LookupError outside the window
        c = m.clock.colour(n)
        rx = snap.get((Direction.INGRESS, m.forward))
        if rx is None:
            raise LookupError("the forward flow is not monitored yet")
        tx = snap.get((Direction.EGRESS, m.reverse)) if m.reverse else None
        epoch = self.dataplane.epoch(Direction.INGRESS, m.forward)
        if m.reverse:
            epoch = max(epoch, self.dataplane.epoch(Direction.EGRESS, m.reverse))
        return Counters(tx_packets=tx[c] & MASK32 if tx else 0, rx_packets=rx[c] & MASK32, epoch_ns=epoch)
