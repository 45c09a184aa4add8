"""The queue behind every result stream: filtering, batches, overflow, close."""

from __future__ import annotations

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_common.result_queue import ResultQueue


def block(mid: str, n: int) -> pb.BlockResult:
    return pb.BlockResult(measurement_id=mid, block_number=n)


def test_filters_by_measurement_and_batches_what_is_ready():
    q = ResultQueue(["a"])
    for n in range(5):
        q.offer(block("a", n))
        q.offer(block("b", n))
    assert [r.block_number for r in q.get(0.1, limit=3)] == [0, 1, 2]
    assert [r.block_number for r in q.get(0.1, limit=3)] == [3, 4]
    assert q.get(0.05, limit=3) == []  # nothing ready: waits, then empty
    every = ResultQueue()
    every.offer(block("b", 1))
    assert [r.measurement_id for r in every.get(0.1)] == ["b"]


def test_a_reader_too_far_behind_is_told_not_silently_skipped():
    q = ResultQueue(maxsize=2)
    for n in range(3):
        q.offer(block("a", n))
    assert q.overflowed and q.dropped == 1
    assert [r.block_number for r in q.get(0.1, limit=10)] == [0, 1]


def test_close_stops_receiving_and_tells_the_owner_once():
    closed = []
    q = ResultQueue(on_close=closed.append)
    q.close()
    q.close()
    q.offer(block("a", 1))
    assert closed == [q] and q.get(0.01) == []
