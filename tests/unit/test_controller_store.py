"""The controller's result store: what a batch of node results leaves stored, and what survives."""

from __future__ import annotations

from pathlib import Path

from srv6pm.controller.v1 import measurement_service_pb2 as mpb
from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_controller import store as store_mod
from srv6pm_controller.store import Store


def block(mid: str, n: int) -> pb.BlockResult:
    return pb.BlockResult(measurement_id=mid, block_number=n)


def register(s: Store, mid: str, first_block: int = 0) -> None:
    s.put_measurement(mpb.Measurement(spec=pb.MeasurementSpec(measurement_id=mid), sender_node="r1"))
    if first_block:
        s.set_first_block(mid, first_block)


def test_a_batch_stores_only_new_blocks_of_registered_measurements(tmp_path: Path):
    s = Store(tmp_path)
    register(s, "a", first_block=10)
    register(s, "b")
    batch = [block("a", 9), block("a", 10), block("b", 3), block("gone", 1), block("a", 11), block("a", 10)]
    assert [(r.measurement_id, r.block_number) for r in s.add_results(batch)] == [
        ("a", 10),
        ("b", 3),
        ("a", 11),
    ]  # before the first block, unknown measurement and the duplicate are left out
    assert s.add_results([block("a", 11), block("b", 3)]) == []  # a replay after a reconnect
    assert s.last_block("a") == 11 and s.first_block("a") == 10
    s.delete_measurement("b")
    assert s.add_results([block("b", 4)]) == [] and s.last_block("b") == 0
    s.close()
    again = Store(tmp_path)  # what was stored survives a restart
    assert [r.block_number for r in again.recent_results("a", 10)] == [10, 11]
    again.close()


def test_only_the_newest_blocks_are_kept(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(store_mod, "KEEP_RESULTS", 3)
    monkeypatch.setattr(store_mod, "PRUNE_EVERY", 4)
    s = Store(tmp_path)
    register(s, "a")
    s.add_results([block("a", n) for n in range(1, 6)])  # holds block 4: pruned to the newest 3
    assert [r.block_number for r in s.recent_results("a", 100)] == [3, 4, 5]
    s.add_results([block("a", 6), block("a", 7)])  # no prune in between
    assert [r.block_number for r in s.recent_results("a", 100)] == [3, 4, 5, 6, 7]
    s.add_results([block("a", 8)])  # pruned again at block 8
    assert [r.block_number for r in s.recent_results("a", 100)] == [6, 7, 8]
    s.close()
