"""Packet loss from counters and from probe sequence numbers.

Two families of figures:

* **Data-traffic loss** (direct / alternate-marking measurement, RFC 9341): the probes carry
  counters of the *data* packets of a block. For a block, forward loss = S_TxC - R_RxC and backward
  loss = R_TxC - S_RxC. Counters may be cumulative (they only ever grow, and wrap at 2^bits: the
  Direct Measurement TLV carries 32 bits) or per block (reset each block, as the alternate-marking
  colour counters are read). :func:`counter_delta` undoes one wrap; :class:`CumulativeLoss`
  turns a stream of cumulative snapshots that may arrive duplicated, reordered or with a missing
  probe into per-interval loss without ever counting a packet twice.
* **Probe loss**: from the sequence numbers of sent and answered probes (:func:`probe_loss`),
  with the forward/backward split a stateful reflector makes possible (:func:`split_probe_loss`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


def counter_delta(newer: int, older: int, bits: int = 32) -> int:
    """``newer - older`` for a counter that wraps at ``2**bits`` (at most one wrap in between)."""
    mod = 1 << bits
    return (newer - older) % mod


@dataclass(frozen=True)
class LossFigures:
    """Loss in one direction over one interval."""

    sent: int
    received: int

    @property
    def lost(self) -> int:
        """Packets lost (negative means more received than sent: duplication or a misread)."""
        return self.sent - self.received

    @property
    def ratio(self) -> float:
        """Lost / sent, 0.0 when nothing was sent."""
        return self.lost / self.sent if self.sent else 0.0


@dataclass(frozen=True)
class BlockCounters:
    """The four counters of one block (per-block or cumulative, as the reader provides them).

    ``s_txc``: data packets the sender node transmitted, ``r_rxc``: received by the reflector node,
    ``r_txc``: transmitted by the reflector node in the reverse direction, ``s_rxc``: received back
    by the sender node. The last two are None when only the forward direction is measured.
    """

    s_txc: int
    r_rxc: int
    r_txc: int | None = None
    s_rxc: int | None = None


@dataclass(frozen=True)
class BlockLoss:
    """Loss of one block (or interval) in both directions."""

    block: int
    forward: LossFigures
    backward: LossFigures | None
    blocks_spanned: int = 1  # >1 when a probe was missed and the interval covers several blocks


def block_loss(block: int, c: BlockCounters) -> BlockLoss:
    """Loss from per-block counters: forward S_TxC - R_RxC, backward R_TxC - S_RxC."""
    back = None
    if c.r_txc is not None and c.s_rxc is not None:
        back = LossFigures(c.r_txc, c.s_rxc)
    return BlockLoss(block, LossFigures(c.s_txc, c.r_rxc), back)


class CumulativeLoss:
    """Per-interval loss from cumulative counters carried by probes.

    Feed it ``(index, counters)`` in the order replies arrive; ``index`` is what orders the
    snapshots (the probe sequence number or the block number, monotonic at the sender). It
    returns the loss since the previous snapshot it accepted, or None for a snapshot that brings
    nothing new: a duplicate reply, or a late (reordered) reply older than one already used —
    using it would count its interval twice. A missed probe simply makes the next interval span
    several indices (``blocks_spanned``), so no packet is lost from the books.
    """

    def __init__(self, bits: int = 32) -> None:
        self.bits = bits
        self._last: tuple[int, BlockCounters] | None = None
        self.duplicates = 0
        self.late = 0

    def feed(self, index: int, c: BlockCounters) -> BlockLoss | None:
        """Add one snapshot; return the loss of the interval it closes, if any."""
        if self._last is None:
            self._last = (index, c)
            return None
        last_index, last = self._last
        if index == last_index:
            self.duplicates += 1
            return None
        if index < last_index:
            self.late += 1
            return None
        self._last = (index, c)
        d = lambda new, old: counter_delta(new, old, self.bits)  # noqa: E731
        fwd = LossFigures(d(c.s_txc, last.s_txc), d(c.r_rxc, last.r_rxc))
        back = None
        if None not in (c.r_txc, c.s_rxc, last.r_txc, last.s_rxc):
            back = LossFigures(d(c.r_txc, last.r_txc), d(c.s_rxc, last.s_rxc))  # type: ignore[arg-type]
        return BlockLoss(index, fwd, back, blocks_spanned=index - last_index)


@dataclass(frozen=True)
class ProbeLoss:
    """Probe-level loss over a run of probes."""

    sent: int
    received: int  # distinct probes answered
    duplicates: int
    reordered: int  # replies that arrived after a reply to a later probe

    @property
    def lost(self) -> int:
        """Probes never answered."""
        return self.sent - self.received


def probe_loss(sent: Iterable[int], received_in_order: Iterable[int]) -> ProbeLoss:
    """Loss, duplication and reordering of probes from their sequence numbers.

    ``sent``: sequence numbers sent; ``received_in_order``: the sender sequence numbers of the
    replies in arrival order. Replies to probes never sent are ignored (not ours, or forged).
    """
    sent_set = set(sent)
    seen: set[int] = set()
    dup = reordered = 0
    highest = -1
    for seq in received_in_order:
        if seq not in sent_set:
            continue
        if seq in seen:
            dup += 1
            continue
        seen.add(seq)
        if seq < highest:
            reordered += 1
        highest = max(highest, seq)
    return ProbeLoss(len(sent_set), len(seen), dup, reordered)


@dataclass(frozen=True)
class SplitProbeLoss:
    """Forward and backward probe loss, as a stateful reflector's own sequence numbers allow."""

    forward: int
    backward: int


def split_probe_loss(sent: int, reflector_seqs: Iterable[int]) -> SplitProbeLoss:
    """Split probe loss by direction (RFC 8762 §4.2.1, stateful reflector).

    A stateful reflector numbers its replies 0, 1, 2, ... for the probes it *received*. So the
    highest reflector sequence number + 1 is how many probes arrived there (forward loss = sent -
    that), and the gaps among the reflector numbers we got are replies lost on the way back. (A
    loss of the very last replies is indistinguishable from forward loss and counted as such.)
    """
    got = set(reflector_seqs)
    if not got:
        return SplitProbeLoss(forward=sent, backward=0)
    reached = max(got) + 1
    return SplitProbeLoss(forward=sent - reached, backward=reached - len(got))


class ProbeAccounting:
    """:func:`probe_loss` and :func:`split_probe_loss` kept up to date probe by probe, in bounded
    memory, for sessions that run for days.

    Only the last ``window`` sequence numbers are remembered for duplicate detection; a reply to
    an older probe is counted as ``late`` (and not as received).
    """

    __slots__ = (
        "_answered",
        "_highest",
        "_refl_max",
        "duplicates",
        "late",
        "received",
        "reordered",
        "sent",
        "window",
    )

    def __init__(self, window: int = 4096) -> None:
        self.window = window
        self.sent = 0
        self.received = 0
        self.duplicates = 0
        self.reordered = 0
        self.late = 0
        self._answered: dict[int, None] = {}  # insertion-ordered set of recent answered seqs
        self._highest = -1
        self._refl_max = -1

    def on_sent(self) -> int:
        """Count a probe; return its sequence number (0, 1, 2, ...)."""
        self.sent += 1
        return self.sent - 1

    def on_reply(self, seq: int, reflector_seq: int) -> bool:
        """Count a reply to probe ``seq``; True when it is the first reply to a known probe."""
        if not 0 <= seq < self.sent:
            return False
        if seq in self._answered:
            self.duplicates += 1
            return False
        if seq <= self.sent - 1 - self.window:
            self.late += 1
            return False
        self._answered[seq] = None
        if len(self._answered) > self.window:
            del self._answered[next(iter(self._answered))]
        self.received += 1
        if seq < self._highest:
            self.reordered += 1
        self._highest = max(self._highest, seq)
        self._refl_max = max(self._refl_max, reflector_seq)
        return True

    @property
    def lost(self) -> int:
        """Probes not answered (yet)."""
        return self.sent - self.received

    def split(self) -> SplitProbeLoss:
        """Forward/backward split, valid when the reflector is stateful (see split_probe_loss)."""
        if self.received == 0:
            return SplitProbeLoss(forward=self.sent, backward=0)
        reached = self._refl_max + 1
        return SplitProbeLoss(forward=self.sent - reached, backward=reached - self.received)
