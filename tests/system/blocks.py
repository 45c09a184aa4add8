"""Block results for the system tests: every field set, values distinct per (measurement, block)."""

from __future__ import annotations

from srv6pm.node.v1 import srv6_pm_pb2 as pb

PERIOD_NS = 1_000_000_000
BASE_BLOCK = 1_763_850_000  # a Unix time in seconds: block numbers of T = 1 s


def block(measurement_id: str, n: int, *, reverse_valid: bool = True, node: str = "r1") -> pb.BlockResult:
    """The n-th block of a measurement (T = 1 s): distinct counters, delays and a non-trivial ratio."""
    number = BASE_BLOCK + n
    seed = sum(measurement_id.encode()) + n
    tx = 10_000 + seed
    lost = seed % 7
    r = pb.BlockResult(measurement_id=measurement_id, block_number=number, color=number % 2,
                       merged_blocks=1, node=node)
    r.start_time.FromNanoseconds(number * PERIOD_NS)
    r.end_time.FromNanoseconds((number + 1) * PERIOD_NS)
    r.forward.CopyFrom(pb.DirectionResult(tx_packets=tx, rx_packets=tx - lost, lost_packets=lost,
                                          loss_ratio=lost / tx, tx_bytes=tx * 1500,
                                          rx_bytes=(tx - lost) * 1500, valid=True))
    if reverse_valid:
        r.reverse.CopyFrom(pb.DirectionResult(tx_packets=tx // 2, rx_packets=tx // 2, lost_packets=0,
                                              loss_ratio=0.0, tx_bytes=tx * 64, rx_bytes=tx * 64, valid=True))
    else:
        r.reverse.CopyFrom(pb.DirectionResult(valid=False))
    r.two_way_delay.CopyFrom(pb.DelayStats(
        valid=True, samples=10, min_ns=100_000 + seed, avg_ns=150_000 + seed, max_ns=300_000 + seed,
        p50_ns=140_000 + seed, p99_ns=290_000 + seed, jitter_ns=1_000 + seed))
    r.one_way_delay_forward.CopyFrom(pb.DelayStats(
        valid=True, samples=10, min_ns=50_000, avg_ns=75_000 + seed, max_ns=150_000, p50_ns=70_000,
        p99_ns=149_000, jitter_ns=500))
    r.one_way_delay_backward.CopyFrom(pb.DelayStats(valid=False))
    r.probes.CopyFrom(pb.ProbeCounts(sent=10, received=10, lost=0, rejected=seed % 3))
    return r
