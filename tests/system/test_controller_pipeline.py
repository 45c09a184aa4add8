"""The whole chain from a node's result stream to the database a dashboard reads:
node (SRv6PM double) -> srv6pm-controller -> Kafka -> Telegraf -> InfluxDB, values checked
exactly, and a controller restart neither loses nor duplicates a block."""

from __future__ import annotations

import subprocess
from pathlib import Path

from srv6pm_controller.client import Client
from srv6pm_topos.agents import executable
from srv6pm_topos.lab import Lab, wait_until
from tests.fakes.fake_pm_agent import block_result
from tests.fakes.pm_nodes import FakePMNode
from tests.support import require_root


def start_controller(lab: Lab, tmp: Path, bootstrap: str, topic: str) -> tuple[subprocess.Popen, str]:
    target = f"unix:{tmp}/ctl.sock"
    log = open(tmp / "ctl.log", "ab")  # noqa: SIM115 - the process owns it for its lifetime
    proc = lab.popen_host(
        [
            executable("srv6pm-controller"),
            "--listen",
            target,
            "--insecure",
            "--state-dir",
            str(tmp / "state"),
            "--kafka-bootstrap",
            bootstrap,
            "--kafka-topic",
            topic,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    with Client(target) as c:
        wait_until(lambda: c.nodes() is not None, timeout=20)
    return proc, target


def test_controller_results_reach_influxdb_exactly(kafka, influxdb, telegraf, topic, tmp_path):
    require_root()
    lab = Lab()
    try:
        n1, n2 = FakePMNode(lab, tmp_path, "n1"), FakePMNode(lab, tmp_path, "n2")
        proc, target = start_controller(lab, tmp_path, kafka.bootstrap, topic)
        mid = f"pipe-{topic.rsplit('.', 1)[-1]}"
        with Client(target) as c:
            c.register_node("n1", n1.target, insecure=True)
            c.register_node("n2", n2.target, insecure=True)
            c.create_measurement(mid, "n1", "n2", forward=["fc00:2::d6"], reverse=["fc00:1::d6"], period_s=1)
            wait_until(lambda: len(c.measurement(mid).recent_results) >= 3, timeout=20)
        # A controller restart in the middle: it re-attaches and carries on.
        assert lab.stop(proc) == 0
        proc, target = start_controller(lab, tmp_path, kafka.bootstrap, topic)
        with Client(target) as c:
            wait_until(lambda: len(c.measurement(mid, 1000).recent_results) >= 6, timeout=30)
            stored = list(c.measurement(mid, 1000).recent_results)

        query = f"SELECT * FROM srv6pm_block WHERE measurement_id = '{mid}'"

        def rows() -> list[dict]:
            got = influxdb.rows(query)
            return got if len(got) >= len(stored) else []

        got = wait_until(rows, timeout=60)
        by_block = {int(r["block_number"]): r for r in got}
        assert len(by_block) == len(got)  # one point per block: nothing duplicated
        for r in stored:  # every block the controller stored reached the database, exactly
            row = by_block[r.block_number]
            want = block_result(mid, r.block_number, 1.0)
            assert row["forward_tx_packets"] == want.forward.tx_packets
            assert row["forward_rx_packets"] == want.forward.rx_packets
            assert row["forward_lost_packets"] == want.forward.lost_packets
            assert row["forward_loss_ratio"] == want.forward.loss_ratio
            assert row["reverse_lost_packets"] == 0
        blocks = sorted(by_block)
        assert blocks == list(range(blocks[0], blocks[-1] + 1))  # no gap across the controller restart
    finally:
        lab.close()
