"""The sender side's block bookkeeping, on simulated counters: per-block loss from cumulative
per-colour chains, merged blocks when an exchange fails, no double counting, restarts, wraps."""

from __future__ import annotations

import pytest

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_common import measurement_spec
from srv6pm_common.errors import InvalidArgument
from srv6pm_node.counters import Direction
from srv6pm_node.pm.blocks import BlockClock, probe_phase
from srv6pm_node.pm.sender import SenderMeasurement, default_ssid
from srv6pm_twamp.sender import ProbeResult
from srv6pm_twamp.wire.tlv import FLAG_U, CounterEpoch, DirectMeasurement

S = 1_000_000_000
FWD, REV = ("fc00:2::d6",), ("fc00:1::d6",)
BASE = 1_800_000_000  # a block number in 2027


def spec(**kw) -> pb.MeasurementSpec:
    s = pb.MeasurementSpec(
        measurement_id="m",
        forward_segments=FWD,
        reverse_segments=REV,
        sender_address="fd00:1::5354",
        reflector_address="fd00:2::5354",
        loss_enabled=True,
        delay_enabled=True,
        **kw,
    )
    s.color_period.FromNanoseconds(S)
    return measurement_spec.normalise(s)


class Net:
    """Cumulative per-colour counters at both ends; block n sends tx[n] packets each way and loses
    lost[n] forward and back[n] backward."""

    def __init__(self, start: int = 0) -> None:
        self.s_tx = [start, start]
        self.r_rx = [start, start]
        self.r_tx = [start, start]
        self.s_rx = [start, start]
        self.s_epoch, self.r_epoch = 1, 2  # when each end's counters started
        self.tells_epoch = True  # a reflector without the CounterEpoch TLV returns it with U set

    def block(self, n: int, tx: int, lost: int, back: int) -> None:
        c = n % 2
        self.s_tx[c] += tx
        self.r_rx[c] += tx - lost
        self.r_tx[c] += tx
        self.s_rx[c] += tx - back

    def snapshot(self) -> dict:
        return {(Direction.EGRESS, FWD): tuple(self.s_tx), (Direction.INGRESS, REV): tuple(self.s_rx)}


class Driver:
    """Runs a SenderMeasurement through simulated blocks; replies carry the reflector's counters."""

    def __init__(self, m: SenderMeasurement, net: Net) -> None:
        self.m, self.net, self.seq, self.published = m, net, 0, []

    def probe(self, n: int, offset_s: float = 0.6, answer: bool = True, reply_to: int | None = None) -> int:
        """A probe sent in block n (carrying block n-1) and, if ``answer``, its reply."""
        t1 = n * S + int(offset_s * S)
        _, pending = self.m.probe_tlvs(t1, self.net.snapshot(), lambda d, sids: self.net.s_epoch)
        seq = self.seq
        self.seq += 1
        self.m.sent(seq, t1, pending)
        if answer:
            self.reply(seq, t1, n - 1)
        return seq

    def reply(self, seq: int, t1: int, n: int, duplicate: bool = False, unrecognised: bool = False) -> None:
        c = n % 2
        flags = FLAG_U if unrecognised else 0
        dm = DirectMeasurement(s_txc=0, r_rxc=self.net.r_rx[c], r_txc=self.net.r_tx[c]).to_tlv(flags)
        epoch = CounterEpoch(self.net.r_epoch).to_tlv(flags if self.net.tells_epoch else FLAG_U)
        r = ProbeResult(
            seq,
            1,
            t1,
            t1 + 50_000,
            t1 + 60_000,
            t1 + 100_000,
            seq,
            255,
            64,
            True,
            True,
            (dm, epoch),
            duplicate,
        )
        self.m.on_reply(r)

    def publish(self, now_ns: int) -> list[pb.BlockResult]:
        out = [s.result for s in self.m.due(now_ns) if s.result is not None]
        self.published += out
        return out


def run(
    blocks: range, net: Net, d: Driver, loss: dict[int, tuple[int, int]], drop_probes: set[int] = frozenset()
):
    for n in blocks:
        lost, back = loss.get(n, (0, 0))
        d.probe(n, answer=n not in drop_probes)
        net.block(n, 1000, lost, back)
        d.publish(n * S + int(0.99 * S))


def test_block_clock_numbers_blocks_from_unix_time():
    clock = BlockClock(S)
    assert clock.block_of(BASE * S + 5) == BASE
    assert clock.colour(BASE + 1) == 1
    assert clock.read_block((BASE + 1) * S + S // 2) == BASE
    assert clock.probe_times(BASE, S // 2, S // 5) == [
        BASE * S + S // 2,
        BASE * S + 7 * S // 10,
        BASE * S + 9 * S // 10,
    ]


def test_measurements_spread_their_probes_over_the_interval():
    interval = S // 10
    phases = [probe_phase(ssid, interval) for ssid in range(1, 101)]
    assert all(0 <= p < interval for p in phases)
    tenths = [sum(1 for p in phases if p * 10 // interval == k) for k in range(10)]
    assert min(tenths) >= 5 and max(tenths) <= 15, tenths  # 100 measurements, ~10 per tenth


@pytest.mark.parametrize("ssid", [1, 2, 3, 1000, 65535])
def test_every_block_keeps_its_probes_in_the_window_whatever_the_phase(ssid):
    s = spec(ssid=ssid)
    s.probe_interval.FromNanoseconds(S)  # one probe per block: the phase must not push it out
    m = SenderMeasurement(s, "r1", {}, 0, synchronized=True)
    t = BASE * S
    for _ in range(4):
        t = m.next_probe_ns(t)
        b = t // S
        assert b * S + S // 2 <= t < (b + 1) * S
    assert t // S == BASE + 3


def test_each_block_gets_exactly_its_own_loss_both_ways():
    net = Net()
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, net)
    loss = {BASE + i: (i * 3, i) for i in range(10)}
    run(range(BASE, BASE + 10), net, d, loss)
    measured = [r for r in d.published if r.forward.valid]
    assert [r.block_number for r in measured] == list(range(BASE + 1, BASE + 9))
    for r in measured:
        assert (r.forward.lost_packets, r.reverse.lost_packets) == loss[r.block_number]
        assert r.forward.tx_packets == r.reverse.tx_packets == 1000
        assert r.merged_blocks == 1 and r.color == r.block_number % 2
        assert r.two_way_delay.valid and r.two_way_delay.avg_ns == 90_000
        assert r.one_way_delay_forward.avg_ns == 50_000 and r.one_way_delay_backward.avg_ns == 40_000
    # baselines are published without loss figures; nothing before the start is published
    assert all(r.block_number >= BASE for r in d.published)
    assert [r.block_number for r in d.published] == sorted({r.block_number for r in d.published})


def test_a_failed_exchange_merges_the_block_into_the_next_of_its_colour():
    net = Net()
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=False, first_block=BASE)
    d = Driver(m, net)
    loss = {BASE + i: (i + 1, 2 * i) for i in range(12)}
    run(range(BASE, BASE + 12), net, d, loss, drop_probes={BASE + 6})  # block BASE+5 never settles
    by_block = {r.block_number: r for r in d.published}
    assert not by_block[BASE + 5].forward.valid  # published at its deadline, without loss figures
    merged = by_block[BASE + 7]
    assert merged.merged_blocks == 2
    assert merged.forward.lost_packets == loss[BASE + 5][0] + loss[BASE + 7][0]
    assert merged.reverse.lost_packets == loss[BASE + 5][1] + loss[BASE + 7][1]
    assert merged.forward.tx_packets == 2000
    # every block's loss is counted once: the sum over published figures is the sum injected
    covered = sum(
        loss[r.block_number - 2 * k][0]
        for r in d.published
        if r.forward.valid
        for k in range(r.merged_blocks)
    )
    assert sum(r.forward.lost_packets for r in d.published if r.forward.valid) == covered
    assert not by_block[BASE + 6].one_way_delay_forward.valid  # clocks not synchronised


def test_duplicate_late_and_unrecognised_replies_never_count_twice():
    net = Net()
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, net)
    run(range(BASE, BASE + 4), net, d, {})
    net.block(BASE + 4, 0, 0, 0)
    seq = d.probe(BASE + 5, answer=False)
    t1 = (BASE + 5) * S + int(0.6 * S)
    d.reply(seq, t1, BASE + 4, unrecognised=True)  # the reflector could not read: no settlement
    assert not m._settled
    second = d.probe(BASE + 5, offset_s=0.8, answer=False)  # the next probe of the block settles it
    d.reply(second, t1, BASE + 4, duplicate=True)
    d.reply(second, t1, BASE + 4)
    out = d.publish((BASE + 5) * S + int(0.9 * S))
    assert [r.block_number for r in out] == [BASE + 3, BASE + 4]
    assert out[1].probes.sent == 0 and out[1].forward.valid and out[1].forward.lost_packets == 0
    assert out[1].forward.tx_packets == 0
    assert d.publish((BASE + 7) * S) == []  # nothing published twice


def test_restart_resumes_from_the_stored_chains_without_a_gap():
    net = Net()
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, net)
    loss = {BASE + i: (i, i % 3) for i in range(20)}
    run(range(BASE, BASE + 6), net, d, loss)
    last = max(r.block_number for r in d.published)
    # down for blocks BASE+6..BASE+9: traffic goes on, nobody probes
    for n in range(BASE + 6, BASE + 10):
        net.block(n, 1000, *loss[n])
    m2 = SenderMeasurement(spec(), "r1", dict(m.chains), last, synchronized=True)
    d2 = Driver(m2, net)
    run(range(BASE + 10, BASE + 16), net, d2, loss)
    first = d2.published
    assert min(r.block_number for r in first) > last  # nothing re-published
    valid = [r for r in d.published + d2.published if r.forward.valid]
    covered = [r.block_number - 2 * k for r in valid for k in range(r.merged_blocks)]
    assert len(covered) == len(set(covered))  # no block counted twice
    assert set(range(BASE + 2, BASE + 15)) <= set(covered)  # and none missing (incl. the downtime)
    assert sum(r.forward.lost_packets for r in valid) == sum(loss[n][0] for n in covered)
    assert any(r.merged_blocks > 1 for r in d2.published)


def test_counters_wrapping_at_32_bits():
    net = Net(start=2**32 - 1500)
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, net)
    run(range(BASE, BASE + 8), net, d, {BASE + 4: (7, 3), BASE + 5: (1, 0)})
    by_block = {r.block_number: r for r in d.published if r.forward.valid}
    assert by_block[BASE + 4].forward.lost_packets == 7 and by_block[BASE + 5].reverse.lost_packets == 0
    assert by_block[BASE + 4].forward.tx_packets == 1000


def test_delay_only_measurement_publishes_every_block():
    s = spec()
    s.loss_enabled = False
    m = SenderMeasurement(s, "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, Net())
    assert m.probe_tlvs(BASE * S + S // 2, Net().snapshot(), lambda d, sids: 0) == ((), None)
    run(range(BASE, BASE + 4), Net(), d, {})
    assert [r.block_number for r in d.published] == [BASE, BASE + 1, BASE + 2]
    assert all(not r.forward.valid and r.two_way_delay.valid for r in d.published)


def test_spec_rules():
    s = spec()
    assert s.guard_time.ToNanoseconds() == S // 2 and s.probe_interval.ToNanoseconds() == S // 10
    for bad in (0.5, 3601):
        x = pb.MeasurementSpec(measurement_id="m", forward_segments=FWD, loss_enabled=True)
        x.color_period.FromNanoseconds(int(bad * S))
        with pytest.raises(InvalidArgument, match="color_period"):
            measurement_spec.normalise(x)
    x = pb.MeasurementSpec(measurement_id="m", forward_segments=["fc00::zz"], loss_enabled=True)
    x.color_period.FromNanoseconds(S)
    with pytest.raises(InvalidArgument, match="forward_segments"):
        measurement_spec.normalise(x)
    x = pb.MeasurementSpec(measurement_id="bad id", forward_segments=FWD, loss_enabled=True)
    with pytest.raises(InvalidArgument, match="measurement_id"):
        measurement_spec.normalise(x)
    assert 1 <= default_ssid("m") <= 0xFFFF and default_ssid("m") == default_ssid("m")


@pytest.mark.parametrize("epoch_told", [True, False], ids=["epoch", "plausibility"])
def test_a_far_end_counter_restarting_from_zero_starts_a_new_baseline(epoch_told):
    net = Net(start=5000)
    net.tells_epoch = epoch_told
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, net)
    loss = {BASE + i: (i, 1) for i in range(12)}
    run(range(BASE, BASE + 5), net, d, loss)
    net.r_rx, net.r_tx = [0, 0], [0, 0]  # the reflector's flows were removed and added again
    net.r_epoch = 3
    run(range(BASE + 5, BASE + 12), net, d, loss)
    by_block = {r.block_number: r for r in d.published}
    assert m.resets == 2  # one per colour
    assert not by_block[BASE + 4].forward.valid and not by_block[BASE + 5].forward.valid
    for n in range(BASE + 6, BASE + 11):
        assert by_block[n].forward.lost_packets == loss[n][0] and by_block[n].reverse.lost_packets == 1
    assert all(abs(r.forward.lost_packets) < 1000 for r in d.published)


def test_a_new_epoch_is_a_new_baseline_even_when_the_counts_look_plausible():
    """Counters re-created early in a run restart at values close to the old ones: only the
    epoch tells (a plain difference would report a few packets of negative loss)."""
    net = Net()
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, net)
    run(range(BASE, BASE + 3), net, d, {})
    net.r_rx = [net.r_rx[0] - 1000 + 28, net.r_rx[1] - 1000 + 28]  # re-created, ~one block ago
    net.r_epoch = 99
    run(range(BASE + 3, BASE + 9), net, d, {BASE + 6: (4, 0)})
    valid = [r for r in d.published if r.forward.valid]
    assert all(r.forward.lost_packets >= 0 for r in valid)
    assert {r.block_number: r.forward.lost_packets for r in valid}[BASE + 6] == 4
    assert m.resets == 2


def test_a_probe_stamped_a_block_late_never_settles_the_block_it_read():
    """Counters read in block n+1 but the probe stamped in n+2 (a starved process): the reflector
    would answer for n+1, so the reply counts for delay only."""
    net = Net()
    m = SenderMeasurement(spec(), "r1", {}, 0, synchronized=True, first_block=BASE)
    d = Driver(m, net)
    run(range(BASE, BASE + 4), net, d, {})
    read_at = (BASE + 4) * S + int(0.6 * S)
    _, pending = m.probe_tlvs(read_at, net.snapshot(), lambda d_, s_: net.s_epoch)
    late_t1 = (BASE + 5) * S + 1000
    m.sent(99, late_t1, pending)
    d.reply(99, late_t1, BASE + 3)
    assert BASE + 3 not in m._settled and not any(p.block == BASE + 3 for p in m._pending.values())
