"""The whole chain from real measurements to the database a dashboard reads:
srv6pm-node (SRv6PM engine, r1 -> r2 over a tunnel, loss injected on the core) -> srv6pm-controller
-> Kafka -> Telegraf -> InfluxDB. What arrives in Kafka and InfluxDB is exactly what the sender node
reports (its GetResults, block by block), its loss figures are exactly the injector's drops, and
neither a controller restart nor Kafka away for 30 s loses or duplicates a block."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from srv6pm.node.v1 import srv6_pm_pb2 as pmpb
from srv6pm_controller.client import Client, TunnelEnd
from srv6pm_controller.publish import encode
from srv6pm_controller.publish.schema import block_fields, block_tags
from srv6pm_node.counters.pins import temporary_bpffs
from srv6pm_topos.agents import Controller, start_controller
from srv6pm_topos.injector import DropBook
from srv6pm_topos.lab import Lab, wait_until
from srv6pm_topos.monitored import MonitoredNetwork
from srv6pm_topos.three_routers import POLICY_A, R1_DT6, R2_DT6
from tests.support import require_tool, scrape_metrics
from tests.system.servers import consume_all

S = 1_000_000_000


class Network:
    """h1 — r1 — c — r2 — h2 with srv6pm-node on r1 and r2 (SRv6PM configured, eBPF counters),
    traffic both ways over policy A's prefixes and drop injectors on the core (every 7th forward,
    every 13th reverse packet) whose drops are booked per block."""

    def __init__(self, lab: Lab, tmp: Path, pins: Path, stack: contextlib.ExitStack) -> None:
        require_tool("nft")
        self.lab, self.tmp, self.stack = lab, tmp, stack
        self.mn = MonitoredNetwork.edges(lab, tmp, pmpb.COUNTER_DRIVER_EBPF, pins, stack)
        self.books = self.mn.lossy_traffic(stack, POLICY_A, 7, 13)

    def start_controller(self, bootstrap: str, topic: str) -> Controller:
        """The controller, stopped before the agents at the end (no stream left open to them)."""
        ctl = start_controller(
            self.lab,
            self.tmp,
            extra_args=[
                *("--kafka-bootstrap", bootstrap, "--kafka-topic", topic),
                *("--metrics-listen", "127.0.0.1:0"),
            ],
        )
        self.stack.callback(ctl.stop, self.lab)
        return ctl

    def set_up(self, client: Client, mid: str) -> None:
        """Register the nodes, provision tunnel t1 through the controller, measure it (T = 1 s)."""
        for name in ("r1", "r2"):
            client.register_node(name, self.mn.agents[name].target, insecure=True)
        client.create_tunnel(
            "t1",
            TunnelEnd(node="r1", prefix=POLICY_A.r1_prefix, decap_sid=R1_DT6, device="eth1"),
            TunnelEnd(node="r2", prefix=POLICY_A.r2_prefix, decap_sid=R2_DT6, device="eth1"),
            forward=[R2_DT6],
            reverse=[R1_DT6],
        )
        client.create_measurement(mid, "r1", "r2", tunnel="t1", period_s=1)

    def node_results(self, mid: str) -> dict[int, pmpb.BlockResult]:
        """What the sender node itself has for ``mid``, by block number."""
        return {r.block_number: r for r in self.mn.results(mid)}


@pytest.fixture
def network(net: Lab, tmp_path: Path) -> Iterator[Network]:
    with temporary_bpffs() as pins, contextlib.ExitStack() as stack:
        yield Network(net, tmp_path, pins, stack)  # the stack stops traffic, sampler and agents


def stored(target: str, mid: str) -> list[pmpb.BlockResult]:
    with Client(target) as c:
        return list(c.measurement(mid, 1000).recent_results)


def check_exact(results: list[pmpb.BlockResult], books: list[DropBook]) -> list[int]:
    """Assert measured == injected, both ways, for every result the books can check; return those."""
    fwd, rev = books
    checked = []
    for r in results:
        if not r.forward.valid:
            continue
        want = (fwd.drops(r.block_number, r.merged_blocks), rev.drops(r.block_number, r.merged_blocks))
        if None in want:
            continue  # the books missed a sample
        assert (r.forward.lost_packets, r.reverse.lost_packets) == want, (r.block_number, want, r)
        checked.append(r.block_number)
    return checked


def block_of(record) -> int:
    """The block number of a consumed record (a field of its line-protocol value)."""
    return int(record.value.split(b"block_number=")[1].split(b"i")[0])


def check_kafka(bootstrap: str, topic: str, mid: str, want: list[int], network: Network) -> None:
    """Kafka holds every block of ``want`` once, in order, each record exactly the node's result encoded
    (and nothing else: later blocks, if any, are the node's too)."""
    records = [r for r in consume_all(bootstrap, topic, len(want), timeout=60) if r.key == mid.encode()]
    node = network.node_results(mid)
    assert len({r.partition for r in records}) == 1  # one key, one partition
    records.sort(key=lambda r: r.offset)
    blocks = [block_of(r) for r in records]
    assert blocks == sorted(set(blocks)), f"duplicated or out of order in Kafka: {blocks}"
    assert set(want) <= set(blocks), f"lost in Kafka: {sorted(set(want) - set(blocks))}"
    for r, b in zip(records, blocks, strict=True):
        assert r.value == encode(node[b]).value, f"block {b}: Kafka has {r.value!r}, the node {node[b]}"


def test_controller_results_reach_kafka_and_influxdb_exactly(kafka, influxdb, telegraf, topic, network, net):
    mid = f"pipe-{topic.rsplit('.', 1)[-1]}"
    ctl = network.start_controller(kafka.bootstrap, topic)
    with Client(ctl.target) as c:
        network.set_up(c, mid)
    wait_until(lambda: len(stored(ctl.target, mid)) >= 3, timeout=20)
    # A controller restart in the middle: it re-attaches and carries on, blocks closed meanwhile
    # are collected from the node.
    assert net.stop(ctl.proc) == 0
    time.sleep(2)
    ctl = network.start_controller(kafka.bootstrap, topic)
    wait_until(lambda: len(stored(ctl.target, mid)) >= 9, timeout=30)
    time.sleep(1.2)  # the books sample the last block after it is read
    results = stored(ctl.target, mid)
    node = network.node_results(mid)
    blocks = [r.block_number for r in results]
    assert blocks == list(range(blocks[0], blocks[-1] + 1))  # no gap across the controller restart
    assert blocks == [b for b in sorted(node) if b <= blocks[-1]]  # every block the node published
    assert results == [node[b] for b in blocks]
    checked = check_exact(results, network.books)
    assert len(checked) >= 4, f"exact blocks: {checked}"

    check_kafka(kafka.bootstrap, topic, mid, blocks, network)

    query = f"SELECT * FROM srv6pm_block WHERE measurement_id = '{mid}'"

    def rows() -> list[dict]:
        got = influxdb.rows(query)
        return got if {int(r["block_number"]) for r in got} >= set(blocks) else []

    got = wait_until(rows, timeout=60, interval=0.5)
    by_block = {int(r["block_number"]): r for r in got}
    assert len(by_block) == len(got)  # one point per block: nothing duplicated
    node = network.node_results(mid)
    for b, row in by_block.items():  # every point exactly the node's result of that block
        r = node[b]
        want = {**block_fields(r), **block_tags(r), "time": r.start_time.ToNanoseconds()}
        assert {k: v for k, v in row.items() if v is not None} == want, b
    loss = [(by_block[b]["forward_lost_packets"], by_block[b]["reverse_lost_packets"]) for b in checked]
    assert all(f > 0 and r > 0 for f, r in loss)  # the injected loss, as the dashboard shows it


def test_kafka_away_for_30_s_loses_and_duplicates_nothing(own_kafka, topic, network, tmp_path):
    own_kafka.start()
    own_kafka.create_topic(topic, partitions=3)
    mid = f"outage-{topic.rsplit('.', 1)[-1]}"
    ctl = network.start_controller(own_kafka.bootstrap, topic)
    with Client(ctl.target) as c:
        network.set_up(c, mid)
    wait_until(lambda: len(stored(ctl.target, mid)) >= 3, timeout=20)
    own_kafka.stop(sig=signal.SIGTERM)
    down_from = stored(ctl.target, mid)[-1].block_number
    time.sleep(30)  # results keep coming: the controller spools them
    during = [r.block_number for r in stored(ctl.target, mid) if r.block_number > down_from]
    assert len(during) >= 25, during
    assert "spooling block results" in ctl.log_path.read_text()
    # ... and says so on its metrics endpoint: Kafka down, the spool holding every block since
    m = scrape_metrics(ctl.log_path)
    assert m["srv6pm_controller_kafka_up"] == 0
    waiting = [r for r in stored(ctl.target, mid) if r.block_number > down_from]
    held = m["srv6pm_controller_kafka_spool_results"] + m["srv6pm_controller_kafka_in_flight"]
    assert len(during) <= held <= len(waiting) + 1  # +1: a send failing as Kafka went
    assert m["srv6pm_controller_kafka_spool_bytes"] > 0
    assert m['srv6pm_controller_node_stream_up{node="r1"}'] == 1
    own_kafka.start()
    up_from = stored(ctl.target, mid)[-1].block_number
    wait_until(lambda: stored(ctl.target, mid)[-1].block_number >= up_from + 3, timeout=20)
    time.sleep(1.2)  # the books sample the last block after it is read
    results = stored(ctl.target, mid)
    node = network.node_results(mid)
    blocks = [r.block_number for r in results]
    assert blocks == list(range(blocks[0], blocks[-1] + 1))
    assert blocks == [b for b in sorted(node) if b <= blocks[-1]]  # every block the node published
    assert results == [node[b] for b in blocks]
    assert len(check_exact(results, network.books)) >= 20

    check_kafka(own_kafka.bootstrap, topic, mid, blocks, network)  # before, during and after the outage
    m = scrape_metrics(ctl.log_path)
    assert m["srv6pm_controller_kafka_up"] == 1 and m["srv6pm_controller_kafka_spool_results"] == 0
    assert m["srv6pm_controller_kafka_spool_dropped_total"] == 0
    collected = m["srv6pm_controller_results_collected_total"]
    assert collected >= len(blocks)
    accounted = sum(
        m[f"srv6pm_controller_kafka_{k}"] for k in ("published_total", "in_flight", "spool_results")
    )
    assert abs(accounted - collected) <= 1  # a block may arrive while the figures are read
    assert m['srv6pm_controller_measurements{state="running"}'] == 1
