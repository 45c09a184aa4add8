"""End to end: publisher -> Kafka -> Telegraf (telegraf/telegraf.conf) -> InfluxDB, read with InfluxQL."""

from __future__ import annotations

import time

from kafka import KafkaProducer

from srv6pm_controller.publish import ResultPublisher, encode
from srv6pm_controller.publish.schema import block_fields, block_tags
from tests.system.blocks import block
from tests.system.servers import InfluxServer


def wait_rows(influxdb: InfluxServer, query: str, count: int, timeout: float = 60.0) -> list[dict]:
    """Poll an InfluxQL query until it returns ``count`` rows."""
    deadline = time.monotonic() + timeout
    rows: list[dict] = []
    while time.monotonic() < deadline:
        rows = influxdb.rows(query)
        if len(rows) >= count:
            return rows
        time.sleep(0.25)
    raise AssertionError(f"{len(rows)} of {count} rows after {timeout} s for {query!r}")


def test_published_blocks_reach_influxdb_exactly_and_redelivery_overwrites(kafka, influxdb, telegraf, topic,
                                                                            tmp_path):
    tag = topic.rsplit(".", 1)[-1]  # measurement ids unique to this run: the database is shared
    results = [block(f"e2e-{tag}-{i}", n, reverse_valid=(n % 2 == 0), node=f"r{i + 1}")
               for i in range(3) for n in range(5)]
    with ResultPublisher(kafka.bootstrap, tmp_path / "spool.db", topic=topic) as pub:
        assert pub.wait_connected(15)
        for r in results:
            assert pub.publish(r)
        assert pub.flush(30)

    query = f"SELECT * FROM srv6pm_block WHERE measurement_id =~ /^e2e-{tag}-/"
    rows = wait_rows(influxdb, query, len(results))
    assert len(rows) == len(results)
    by_identity = {(row["measurement_id"], row["block_number"]): row for row in rows}
    for r in results:
        row = by_identity[(r.measurement_id, r.block_number)]
        expected = {**block_fields(r), **block_tags(r), "time": r.start_time.ToNanoseconds()}
        present = {k: v for k, v in row.items() if v is not None}
        assert present == expected  # every value exactly as published, nothing added

    # Field types as InfluxDB stored them (JSON alone cannot tell 0.0 from 0).
    types = {row["fieldKey"]: row["fieldType"] for row in influxdb.rows("SHOW FIELD KEYS FROM srv6pm_block")}
    influx_type = {bool: "boolean", int: "integer", float: "float"}
    for key, value in block_fields(results[0]).items():
        assert types[key] == influx_type[type(value)], key

    # What a Grafana panel asks: loss ratio and delay of one flow over time, via InfluxQL.
    mid = results[0].measurement_id
    panel = influxdb.rows(f"SELECT forward_loss_ratio, two_way_delay_avg_ns FROM srv6pm_block "
                          f"WHERE measurement_id = '{mid}' ORDER BY time ASC")
    assert [(p["forward_loss_ratio"], p["two_way_delay_avg_ns"]) for p in panel] == [
        (r.forward.loss_ratio, r.two_way_delay.avg_ns) for r in results if r.measurement_id == mid]

    # Redelivery: the same block through Kafka again (e.g. after a controller restart), then a new
    # block behind it on the same key as a marker that Telegraf has processed the redelivery.
    again = encode(results[0])
    marker = block(results[0].measurement_id, 99, node=results[0].node)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    try:
        producer.send(topic, key=again.key, value=again.value)
        producer.send(topic, key=again.key, value=encode(marker).value)
        producer.flush(30)
    finally:
        producer.close()
    rows = wait_rows(influxdb, query, len(results) + 1)
    assert len(rows) == len(results) + 1  # the marker only: the redelivered block overwrote itself
    count = influxdb.rows(f"SELECT COUNT(block_number) FROM srv6pm_block WHERE measurement_id = '{mid}' "
                          f"AND block_number = {results[0].block_number}")
    assert count[0]["count"] == 1
