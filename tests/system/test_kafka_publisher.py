"""The publisher against a real Kafka broker: delivery, order, outages, the spool and its bound."""

from __future__ import annotations

import logging
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from srv6pm_controller.publish import ResultPublisher, encode
from tests.system.blocks import block
from tests.system.servers import KafkaServer, consume_all

# Short timeouts: an outage is noticed within seconds, so the tests stay short.
FAST = {"request_timeout_ms": 1500, "delivery_timeout_ms": 3000, "bootstrap_timeout_ms": 2000,
        "max_block_ms": 2000, "reconnect_backoff_max_ms": 500}


def publisher(kafka: KafkaServer, topic: str, spool: Path, **kwargs) -> ResultPublisher:
    return ResultPublisher(kafka.bootstrap, spool, topic=topic, producer_config=FAST,
                           retry_interval=0.2, max_retry_interval=1.0, **kwargs)


def block_index(record) -> tuple[str, int]:
    """(measurement id, n) of a consumed record, n as passed to ``block()``."""
    number = int(record.value.split(b"block_number=")[1].split(b"i")[0])
    mid = record.key.decode()
    return mid, number - block(mid, 0).block_number


def check_delivered(records, expected_order: list[tuple[str, int]]) -> None:
    """Every expected block exactly once, keyed by its measurement, each key in publish order,
    with the exact encoded bytes."""
    got = [block_index(r) for r in records]
    assert len(got) == len(set(got)), "duplicates in Kafka"
    assert sorted(got) == sorted(expected_order), "lost or unexpected blocks"
    by_offset = sorted(records, key=lambda r: (r.partition, r.offset))
    for mid in {m for m, _ in expected_order}:
        arrived = [r for r in by_offset if r.key.decode() == mid]
        assert len({r.partition for r in arrived}) == 1, "one key, one partition"
        assert [block_index(r)[1] for r in arrived] == [n for m, n in expected_order if m == mid]
    for r in records:
        assert r.value == encode(block(*block_index(r))).value
        assert dict(r.headers)["srv6pm-schema"] == b"srv6pm_block/1"


def test_every_block_arrives_once_keyed_in_order(kafka, topic, tmp_path):
    kafka.create_topic(topic, partitions=3)
    order = [(f"m{i}", n) for n in range(100) for i in range(4)]
    with publisher(kafka, topic, tmp_path / "spool.db") as pub:
        assert pub.wait_connected(15), "publisher never connected to a running broker"
        for mid, n in order:
            assert pub.publish(block(mid, n))
        assert pub.flush(30)
        m = pub.metrics()
    assert m["published"] == len(order)
    assert m["spooled"] == 0 and m["spool_depth"] == 0 and m["dropped"] == 0
    check_delivered(consume_all(kafka.bootstrap, topic, len(order)), order)


def test_republished_block_is_ignored(kafka, topic, tmp_path):
    kafka.create_topic(topic, partitions=1)
    with publisher(kafka, topic, tmp_path / "spool.db") as pub:
        assert pub.wait_connected(15)
        assert pub.publish(block("m", 1))
        assert not pub.publish(block("m", 1))
        assert pub.flush(30)
        assert pub.metrics()["duplicates"] == 1
    check_delivered(consume_all(kafka.bootstrap, topic, 1), [("m", 1)])


def test_kafka_never_started_spools_then_delivers_after_restart_of_publisher(own_kafka, topic, tmp_path,
                                                                             caplog):
    caplog.set_level(logging.WARNING, logger="srv6pm_controller.publish")
    spool = tmp_path / "state" / "spool.db"
    spool.parent.mkdir()
    order = [(f"m{i}", n) for n in range(20) for i in range(2)]
    pub = publisher(own_kafka, topic, spool)
    for mid, n in order[:30]:
        assert pub.publish(block(mid, n))
    m = pub.metrics()
    assert (m["spooled"], m["spool_depth"], m["published"], m["kafka_up"]) == (30, 30, 0, 0)
    assert not pub.flush(1)
    pub.close()
    assert any("spooling block results" in r.getMessage() for r in caplog.records)
    # The spool is a file in the state directory: it outlives the publisher (a controller restart).
    with sqlite3.connect(spool) as db:
        assert db.execute("SELECT COUNT(*) FROM spool").fetchone() == (30,)

    pub = publisher(own_kafka, topic, spool)
    try:
        assert pub.metrics()["spool_depth"] == 30
        assert not pub.publish(block(*order[0]))  # spooled in the previous run: not spooled again
        for mid, n in order[30:]:
            assert pub.publish(block(mid, n))
        assert pub.metrics()["spool_depth"] == 40
        own_kafka.start()
        own_kafka.create_topic(topic, partitions=3)
        assert pub.flush(60), pub.metrics()
        m = pub.metrics()
        assert (m["published"], m["spool_depth"], m["dropped"], m["kafka_up"]) == (40, 0, 0, 1)
    finally:
        pub.close()
    check_delivered(consume_all(own_kafka.bootstrap, topic, len(order)), order)


def test_broker_stopped_mid_run_then_restarted_nothing_lost_nothing_duplicated(own_kafka, topic, tmp_path,
                                                                               caplog):
    caplog.set_level(logging.WARNING, logger="srv6pm_controller.publish")
    own_kafka.start()
    own_kafka.create_topic(topic, partitions=3)
    order = [(f"m{i}", n) for n in range(60) for i in range(3)]
    with publisher(own_kafka, topic, tmp_path / "spool.db") as pub:
        assert pub.wait_connected(15)
        for mid, n in order[:60]:
            pub.publish(block(mid, n))
        assert pub.flush(30)
        own_kafka.stop(sig=signal.SIGKILL)  # a crash: no goodbye to the clients
        down_at = time.monotonic()
        for mid, n in order[60:120]:
            pub.publish(block(mid, n))
            time.sleep(0.02)  # results keep coming while the broker is away
        deadline = time.monotonic() + 30
        while pub.metrics()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.1)
        m = pub.metrics()
        assert m["spool_depth"] >= 1 and m["kafka_up"] == 0, m
        assert any("spooling block results" in r.getMessage() for r in caplog.records)
        for mid, n in order[120:]:
            pub.publish(block(mid, n))
        time.sleep(max(0.0, 8 - (time.monotonic() - down_at)))  # stay down a while
        own_kafka.start()
        assert pub.flush(60), pub.metrics()
        m = pub.metrics()
        assert m["spool_depth"] == 0 and m["dropped"] == 0 and m["kafka_up"] == 1
    check_delivered(consume_all(own_kafka.bootstrap, topic, len(order)), order)


def test_controller_stopped_during_outage_spools_unacknowledged_and_next_run_delivers(own_kafka, topic,
                                                                                      tmp_path):
    own_kafka.start()
    own_kafka.create_topic(topic, partitions=3)
    spool = tmp_path / "spool.db"
    order = [(f"m{i}", n) for n in range(10) for i in range(2)]
    pub = publisher(own_kafka, topic, spool)
    assert pub.wait_connected(15)
    for mid, n in order[:10]:
        pub.publish(block(mid, n))
    assert pub.flush(30)
    own_kafka.stop(sig=signal.SIGKILL)
    for mid, n in order[10:]:
        pub.publish(block(mid, n))  # sent straight to the producer: nobody acknowledges them
    assert pub.metrics()["in_flight"] > 0
    pub.close(timeout=0.5)  # the controller stops before the producer notices the outage
    with sqlite3.connect(spool) as db:
        assert db.execute("SELECT COUNT(*) FROM spool").fetchone() == (len(order) - 10,)
    own_kafka.start()
    with publisher(own_kafka, topic, spool) as pub:
        assert pub.flush(60), pub.metrics()
    check_delivered(consume_all(own_kafka.bootstrap, topic, len(order)), order)


def test_spool_bound_drops_oldest_counts_and_logs(own_kafka, topic, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="srv6pm_controller.publish")
    order = [("m", n) for n in range(25)]
    pub = publisher(own_kafka, topic, tmp_path / "spool.db", max_spool_rows=10)
    try:
        for mid, n in order:
            pub.publish(block(mid, n))
        m = pub.metrics()
        assert (m["spooled"], m["spool_depth"], m["dropped"]) == (25, 10, 15)
        assert any("full" in r.getMessage() and "dropped" in r.getMessage() for r in caplog.records)
        own_kafka.start()
        own_kafka.create_topic(topic, partitions=1)
        assert pub.flush(60), pub.metrics()
    finally:
        pub.close()
    check_delivered(consume_all(own_kafka.bootstrap, topic, 10), order[15:])


def test_spool_bound_in_bytes(own_kafka, topic, tmp_path):
    size = len(encode(block("m", 0)).value) + 1  # key "m" is one byte
    with publisher(own_kafka, topic, tmp_path / "spool.db", max_spool_bytes=3 * size + 10) as pub:
        for n in range(8):
            pub.publish(block("m", n))
        m = pub.metrics()
        assert m["spool_depth"] == 3 and m["dropped"] == 5
        assert m["spool_bytes"] <= 3 * size + 10


@pytest.fixture(autouse=True)
def _quiet_kafka_client_logs(caplog):
    # kafka-python logs every refused connection at ERROR; the outage tests cause many on purpose.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("kafka").setLevel(logging.NOTSET)
