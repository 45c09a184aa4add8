"""Fixtures of the system tests: real Kafka, InfluxDB and Telegraf processes on 127.0.0.1.

The servers are installed by scripts/install-system-deps.sh (called from scripts/setup.sh) into
.tools/. A missing one skips the test with the reason, and fails it under CI=true (tests/support.py).
Every process is stopped by its pid in the fixture's teardown, also when the test failed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import require
from tests.system import servers

INSTALL_HINT = "run scripts/install-system-deps.sh (scripts/setup.sh does)"


def require_kafka() -> None:
    """Java and the Kafka jars must be installed."""
    require(servers.JAVA is not None, "java is not installed (Kafka broker needs Java 17)")
    require(any(servers.KAFKA_LIBS.glob("kafka_2.13-*.jar")),
            f"Kafka jars missing in .tools/kafka: {INSTALL_HINT}")


def require_influxdb() -> None:
    """influxd must be installed."""
    require(os.access(servers.INFLUXD_BIN, os.X_OK), f".tools/bin/influxd missing: {INSTALL_HINT}")


def require_telegraf() -> None:
    """telegraf must be installed."""
    require(os.access(servers.TELEGRAF_BIN, os.X_OK), f".tools/bin/telegraf missing: {INSTALL_HINT}")


@pytest.fixture(scope="session")
def system_tmp() -> Iterator[Path]:
    """A per-run directory for server data and logs (removed after the run)."""
    path = Path(tempfile.mkdtemp(prefix="srv6pm-system-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka(system_tmp: Path) -> Iterator[servers.KafkaServer]:
    """One Kafka broker shared by the tests that never stop it."""
    require_kafka()
    server = servers.KafkaServer(system_tmp / "kafka-shared")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_kafka(tmp_path: Path) -> Iterator[servers.KafkaServer]:
    """A broker of the test's own, NOT started: outage tests start and stop it at will."""
    require_kafka()
    server = servers.KafkaServer(tmp_path / "kafka")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def influxdb(system_tmp: Path) -> Iterator[servers.InfluxServer]:
    """InfluxDB 1.x with an empty database ``srv6pm``."""
    require_influxdb()
    server = servers.InfluxServer(system_tmp / "influxdb")
    try:
        server.start()
        server.query("CREATE DATABASE srv6pm")
        yield server
    finally:
        server.stop()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    return f"srv6pm.results.{request.node.name.replace('[', '.').replace(']', '')}.{uuid.uuid4().hex[:6]}"


@pytest.fixture
def telegraf(tmp_path: Path, kafka: servers.KafkaServer, influxdb: servers.InfluxServer,
             topic: str) -> Iterator[servers.TelegrafProcess]:
    """Telegraf with telegraf/telegraf.conf, consuming the test's topic into InfluxDB."""
    require_telegraf()
    kafka.create_topic(topic, partitions=3)
    proc = servers.TelegrafProcess(tmp_path / "telegraf", brokers=kafka.bootstrap, topic=topic,
                                   influx_url=influxdb.url, group=f"telegraf-{uuid.uuid4().hex[:8]}")
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()
