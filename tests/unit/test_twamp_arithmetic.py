"""Loss and delay arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srv6pm_twamp.arithmetic.delay import (
    ipdv,
    jitter,
    one_way_delays,
    percentile,
    summarize,
    two_way_delay,
)
from srv6pm_twamp.arithmetic.loss import (
    BlockCounters,
    CumulativeLoss,
    block_loss,
    counter_delta,
    probe_loss,
    split_probe_loss,
)


def test_counter_delta_wraps_once():
    assert counter_delta(10, 3) == 7
    assert counter_delta(5, 2**32 - 3) == 8  # wrapped through zero
    assert counter_delta(0, 0) == 0
    assert counter_delta(2, 2**64 - 1, bits=64) == 3


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_counter_delta_inverts_modular_add(start, step):
    assert counter_delta((start + step) % 2**32, start) == step


def test_block_loss_both_directions():
    loss = block_loss(4, BlockCounters(s_txc=1000, r_rxc=990, r_txc=500, s_rxc=499))
    assert (loss.forward.lost, loss.backward.lost) == (10, 1)
    assert loss.forward.ratio == pytest.approx(0.01)
    assert block_loss(1, BlockCounters(0, 0)).forward.ratio == 0.0
    assert block_loss(1, BlockCounters(5, 5)).backward is None


def test_cumulative_loss_with_wrap_missing_duplicate_and_late():
    acc = CumulativeLoss(bits=32)
    base = 2**32 - 100
    assert acc.feed(1, BlockCounters(base, base - 5, 10, 10)) is None  # first snapshot
    # 200 sent through the wrap, 197 arrived; backward 50 sent, 49 back
    r = acc.feed(2, BlockCounters((base + 200) % 2**32, (base - 5 + 197) % 2**32, 60, 59))
    assert (r.forward.sent, r.forward.lost, r.backward.lost, r.blocks_spanned) == (200, 3, 1, 1)
    assert acc.feed(2, BlockCounters(0, 0, 0, 0)) is None and acc.duplicates == 1
    # probe 3 missing: probe 4 closes an interval of two blocks
    r = acc.feed(4, BlockCounters((base + 600) % 2**32, (base - 5 + 590) % 2**32, 160, 159))
    assert (r.forward.sent, r.forward.lost, r.blocks_spanned) == (400, 7, 2)
    # the reply to probe 3 arrives late: ignored, or its packets would count twice
    assert acc.feed(3, BlockCounters(1, 1, 1, 1)) is None and acc.late == 1


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), min_size=2, max_size=30),
    st.integers(0, 2**32 - 1),
    st.randoms(use_true_random=False),
)
def test_cumulative_loss_totals_match_whatever_the_order(steps, start, rnd):
    """Total loss reported equals the true total between the first and last accepted snapshots."""
    tx, rx = start, start
    snaps = []
    for i, (sent, lost) in enumerate(steps):
        lost = min(lost, sent)
        tx, rx = tx + sent, rx + sent - lost
        snaps.append((i, BlockCounters(tx % 2**32, rx % 2**32)))
    order = snaps[:]
    rnd.shuffle(order)
    acc = CumulativeLoss()
    results = [r for i, c in order if (r := acc.feed(i, c))]
    used = [i for i, _ in order]
    first = used[0]
    last_accepted = max(results, key=lambda r: r.block).block if results else first
    true_sent = sum(min(s, 10_000) for s, _ in steps[first + 1 : last_accepted + 1])
    true_lost = sum(min(lo, s) for s, lo in steps[first + 1 : last_accepted + 1])
    assert sum(r.forward.sent for r in results) == true_sent
    assert sum(r.forward.lost for r in results) == true_lost


def test_probe_loss_counts_dups_reorder_and_ignores_strangers():
    p = probe_loss(range(10), [0, 1, 3, 2, 2, 5, 99, 9])
    assert (p.sent, p.received, p.lost, p.duplicates, p.reordered) == (10, 6, 4, 1, 1)


def test_split_probe_loss():
    # 10 sent; reflector got 8 (numbered 0..7); replies 3 and 5 lost on the way back
    s = split_probe_loss(10, [0, 1, 2, 4, 6, 7])
    assert (s.forward, s.backward) == (2, 2)
    assert split_probe_loss(3, []).forward == 3


def test_two_way_and_one_way_delay():
    t1, t2, t3, t4 = 1_000, 1_600, 1_700, 2_500
    assert two_way_delay(t1, t2, t3, t4) == 1_400
    assert one_way_delays(t1, t2, t3, t4, sender_synced=True, reflector_synced=True) == (600, 800)
    assert one_way_delays(t1, t2, t3, t4, sender_synced=True, reflector_synced=False) is None


def test_two_way_delay_is_independent_of_clock_offset():
    offset = 123_456_789
    assert two_way_delay(10, 20 + offset, 25 + offset, 40) == two_way_delay(10, 20, 25, 40) == 25


def test_ipdv_jitter_and_summary():
    d = [10, 12, 11, 15]
    assert ipdv(d) == [2, -1, 4]
    assert jitter(d) == pytest.approx(7 / 3)
    assert jitter([5]) == 0.0
    s = summarize(list(range(1, 101)))
    assert (s.count, s.min, s.max, s.avg, s.p50, s.p99) == (100, 1, 100, 50.5, 50, 99)
    assert summarize([]).avg is None
    assert percentile([7], 99) == 7
    with pytest.raises(ValueError):
        percentile([], 50)


def test_running_delay_matches_the_batch_functions():
    from srv6pm_twamp.arithmetic.delay import RunningDelay

    values = [120, 80, 95, 300, 101]
    rd = RunningDelay()
    assert rd.summary().count == 0 and rd.jitter == 0.0
    for v in values:
        rd.add(v)
    s, ref = rd.summary(), summarize(values)
    assert (s.count, s.min, s.max, s.avg) == (ref.count, ref.min, ref.max, ref.avg)
    assert s.p50 is None and rd.jitter == pytest.approx(jitter(values))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60), st.lists(st.integers(0, 70), max_size=120))
def test_probe_accounting_agrees_with_probe_loss(sent, replies):
    from srv6pm_twamp.arithmetic.loss import ProbeAccounting

    acc = ProbeAccounting(window=10_000)
    for _ in range(sent):
        acc.on_sent()
    for seq in replies:
        acc.on_reply(seq, seq)
    ref = probe_loss(range(sent), replies)
    assert (acc.sent, acc.received, acc.duplicates, acc.reordered) == (
        ref.sent,
        ref.received,
        ref.duplicates,
        ref.reordered,
    )
    assert acc.lost == ref.lost


def test_probe_accounting_bounded_window_and_split():
    from srv6pm_twamp.arithmetic.loss import ProbeAccounting

    acc = ProbeAccounting(window=4)
    for _ in range(10):
        acc.on_sent()
    assert acc.on_reply(2, 0) is False and acc.late == 1  # older than the window: late
    assert acc.on_reply(9, 0) and acc.on_reply(7, 1) and not acc.on_reply(7, 1)
    assert (acc.received, acc.duplicates, acc.reordered) == (2, 1, 1)
    assert len(acc._answered) <= 4
    # stateful reflector numbered its replies 0 and 1 but we know it saw probes up to #1 only
    assert acc.split().forward == 10 - 2 and acc.split().backward == 0
