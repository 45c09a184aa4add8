"""The publisher's disk spool, and the publisher's routing with a stand-in producer (no Kafka)."""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest
from kafka.errors import KafkaTimeoutError
from kafka.future import Future

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_controller.publish import ResultPublisher, Spool, encode
from srv6pm_controller.publish.schema import EncodedResult


def result(mid: str, n: int) -> pb.BlockResult:
    r = pb.BlockResult(measurement_id=mid, block_number=n, color=n % 2, merged_blocks=1)
    r.start_time.FromNanoseconds(n * 1_000_000_000)
    r.forward.CopyFrom(pb.DirectionResult(tx_packets=100 + n, rx_packets=100 + n, valid=True))
    return r


def rec(mid: str, n: int) -> EncodedResult:
    return encode(result(mid, n))


# --- Spool -----------------------------------------------------------------------------------------

def test_spool_reads_in_seq_order_and_survives_reopen(tmp_path):
    spool = Spool(tmp_path / "s.db")
    for seq, n in [(3, 30), (1, 10), (2, 20)]:
        assert spool.add(seq, rec("m", n))
    assert [r.seq for r in spool.peek(10)] == [1, 2, 3]
    spool.close()
    spool = Spool(tmp_path / "s.db")
    assert spool.depth == 3 and spool.max_seq() == 3
    assert [r.record for r in spool.peek(2)] == [rec("m", 10), rec("m", 20)]
    spool.remove([1, 2])
    assert spool.depth == 1 and spool.size_bytes == len(b"m") + len(rec("m", 30).value)
    spool.close()


def test_spool_ignores_a_block_already_spooled(tmp_path):
    spool = Spool(tmp_path / "s.db")
    assert spool.add(1, rec("m", 1))
    assert not spool.add(2, rec("m", 1))
    assert spool.add(3, rec("other", 1))
    assert (spool.depth, spool.duplicates_total, spool.spooled_total) == (2, 1, 2)


def test_spool_row_bound_drops_oldest_and_logs_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    spool = Spool(tmp_path / "s.db", max_rows=3)
    for n in range(10):
        spool.add(n + 1, rec("m", n))
    assert [r.record.block_number for r in spool.peek(10)] == [7, 8, 9]
    assert spool.dropped_total == 7
    assert len([r for r in caplog.records if "full" in r.getMessage()]) == 1


def test_spool_byte_bound(tmp_path):
    size = 1 + len(rec("m", 1).value)  # blocks 1..4 encode to the same length
    spool = Spool(tmp_path / "s.db", max_bytes=2 * size)
    for n in range(5):
        spool.add(n + 1, rec("m", n))
    assert spool.depth == 2 and spool.size_bytes <= 2 * size and spool.dropped_total == 3
    tiny = Spool(tmp_path / "t.db", max_bytes=10)
    assert not tiny.add(1, rec("m", 0))  # larger than the whole spool: dropped, not stored
    assert tiny.depth == 0 and tiny.dropped_total == 1


def test_spool_rejects_nonsense_bounds(tmp_path):
    with pytest.raises(ValueError):
        Spool(tmp_path / "s.db", max_rows=0)


# --- ResultPublisher with a stand-in producer --------------------------------------------------------

class FakeKafka:
    """Shared state of the stand-in 'cluster': up or down, and the log of delivered messages."""

    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.log: list[tuple[bytes, bytes]] = []
        self.lock = threading.Lock()

    def producer(self, **config):
        if not self.up:
            raise KafkaTimeoutError("Unable to bootstrap")
        return FakeProducer(self, config)


class FakeProducer:
    """Resolves every send at once: acknowledged while the fake Kafka is up, failed while down."""

    def __init__(self, kafka: FakeKafka, config: dict) -> None:
        self.kafka = kafka
        self.config = config

    def send(self, topic, key, value, headers):
        future = Future()
        if self.kafka.up:
            with self.kafka.lock:
                self.kafka.log.append((key, value))
            future.success(None)
        else:
            future.failure(KafkaTimeoutError("down"))
        return future

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass


def make(kafka: FakeKafka, path, **kwargs) -> ResultPublisher:
    return ResultPublisher("fake:9092", path, producer_factory=kafka.producer, retry_interval=0.01,
                           max_retry_interval=0.05, **kwargs)


def delivered_blocks(kafka: FakeKafka) -> list[tuple[str, int]]:
    return [(k.decode(), int(v.split(b"block_number=")[1].split(b"i")[0])) for k, v in kafka.log]


def test_publisher_sends_directly_when_kafka_is_up(tmp_path):
    kafka = FakeKafka()
    with make(kafka, tmp_path / "s.db") as pub:
        assert pub.wait_connected(5)
        for n in range(5):
            assert pub.publish(result("m", n))
        assert pub.flush(5)
        assert pub.metrics()["published"] == 5 and pub.metrics()["spooled"] == 0
    assert kafka.log == [(b"m", rec("m", n).value) for n in range(5)]


def test_publisher_spools_while_down_and_delivers_in_order_once_back(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    kafka = FakeKafka()
    with make(kafka, tmp_path / "s.db") as pub:
        assert pub.wait_connected(5)
        pub.publish(result("m", 0))
        kafka.up = False
        for n in range(1, 6):
            pub.publish(result("m", n))
        m = pub.metrics()
        assert m["spool_depth"] == 5 and m["kafka_up"] == 0 and m["send_failures"] >= 1
        assert any("spooling" in r.getMessage() for r in caplog.records)
        kafka.up = True
        assert pub.flush(5)
        assert pub.metrics()["spool_depth"] == 0
    assert delivered_blocks(kafka) == [("m", n) for n in range(6)]


def test_publisher_counts_duplicates_and_invalid_results(tmp_path):
    kafka = FakeKafka()
    with make(kafka, tmp_path / "s.db") as pub:
        assert pub.publish(result("m", 1))
        assert not pub.publish(result("m", 1))
        assert not pub.publish(pb.BlockResult(measurement_id="m", block_number=2))  # no start_time
        assert pub.flush(5)
        m = pub.metrics()
    assert (m["duplicates"], m["invalid"], m["published"]) == (1, 1, 1)
    assert delivered_blocks(kafka) == [("m", 1)]


def test_spooled_results_of_a_previous_run_go_first(tmp_path):
    kafka = FakeKafka(up=False)
    path = tmp_path / "s.db"
    pub = make(kafka, path)
    for n in range(3):
        pub.publish(result("m", n))
    pub.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM spool").fetchone() == (3,)
    pub = make(kafka, path)
    try:
        pub.publish(result("m", 3))
        kafka.up = True
        assert pub.flush(5)
        pub.publish(result("m", 4))
        assert pub.flush(5)
    finally:
        pub.close()
    assert delivered_blocks(kafka) == [("m", n) for n in range(5)]


def test_many_threads_publishing_through_an_outage_lose_and_double_nothing(tmp_path):
    kafka = FakeKafka()
    threads_n, blocks_n = 8, 200
    with make(kafka, tmp_path / "s.db") as pub:
        assert pub.wait_connected(5)

        def stream(i: int) -> None:  # one node stream per thread, one measurement each
            for n in range(blocks_n):
                if i == 0 and n == blocks_n // 4:
                    kafka.up = False
                if i == 0 and n == blocks_n // 2:
                    kafka.up = True
                pub.publish(result(f"m{i}", n))

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert pub.flush(10)
        assert pub.metrics()["published"] == threads_n * blocks_n
    got = delivered_blocks(kafka)
    assert len(got) == len(set(got)) == threads_n * blocks_n
    for i in range(threads_n):
        assert [n for m, n in got if m == f"m{i}"] == list(range(blocks_n))
