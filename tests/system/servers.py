"""Real servers for the system tests: Kafka (KRaft), InfluxDB 1.x and Telegraf, on 127.0.0.1.

Binaries come from .tools/ (scripts/install-system-deps.sh). Every server binds free loopback
ports, keeps its data in a temporary directory, logs to a file there, and is stopped by its pid
(SIGTERM, then SIGKILL) — never by name. Should the test process itself be killed before its
teardown runs, the kernel kills the servers too (PR_SET_PDEATHSIG), so no run leaves one behind.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools"
KAFKA_LIBS = TOOLS / "kafka" / "libs"
TELEGRAF_BIN = TOOLS / "bin" / "telegraf"
INFLUXD_BIN = TOOLS / "bin" / "influxd"
TELEGRAF_CONF = REPO / "telegraf" / "telegraf.conf"
JAVA = shutil.which("java")


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: be SIGKILLed if the test process dies without its teardown."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> float:
    """Poll ``check`` until it returns True; returns the seconds it took. Raises TimeoutError."""
    start = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - start
        except Exception:  # not ready yet: connection refused, HTTP error, ...
            pass
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what} not ready after {timeout} s")
        time.sleep(interval)


def port_open(port: int) -> bool:
    """True if something accepts TCP connections on 127.0.0.1:port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Process:
    """A server process we started; :meth:`stop` ends exactly this pid."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process, output appended to its log file."""
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         preexec_fn=_die_with_parent)

    def running(self) -> bool:
        """True while the process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 15.0, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to our pid, wait ``grace`` seconds, then SIGKILL it."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def log_tail(self, lines: int = 40) -> str:
        """The end of the log, for failure messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# --- Kafka ----------------------------------------------------------------------------------------

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


class KafkaServer:
    """A single-node KRaft Kafka broker (broker + controller in one JVM) on loopback.

    Ports and data directory are fixed at construction so the broker can be stopped and started
    again as "the same" Kafka (what a client sees after an outage).
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.controller_port = free_port()
        self.data = workdir / "data"
        self.config = workdir / "server.properties"
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self._formatted = False
        self.process: Process | None = None
        self.startup_seconds: float | None = None

    def _java(self, main: str, *args: str) -> list[str]:
        assert JAVA is not None
        return [JAVA, "-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                "-cp", f"{KAFKA_LIBS}/*", main, *args]

    def _prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.data}",
            "num.partitions=3",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=3",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # After a crash the restarted broker must wait for its old session to expire before it
            # may register again (9 s by default): keep the session short for the outage tests.
            "broker.session.timeout.ms=2000",
            "broker.heartbeat.interval.ms=500",
            "auto.create.topics.enable=true",
            "",
        ]))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2.format(log=self.workdir / "server.log"))
        # "--cluster-id=ID" in one word: a random id may start with "-" and look like an option.
        fmt = subprocess.run(self._java("kafka.tools.StorageTool", "format",
                                        f"--cluster-id={self.cluster_id}", "-c", str(self.config)),
                             capture_output=True, text=True, timeout=120)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka storage format failed: {fmt.stdout}{fmt.stderr}")
        self._formatted = True

    def start(self, timeout: float = 60.0) -> float:
        """Start the broker (formatting storage the first time); returns start-up seconds."""
        t0 = time.monotonic()
        if not self._formatted:
            self._prepare()
        self.process = Process("kafka", self._java("kafka.Kafka", str(self.config)),
                               self.workdir / "stdout.log")
        self.process.start()
        try:
            wait_until(self._ready, timeout, "kafka broker", interval=0.2)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.process.log_tail()}\n{self.server_log_tail()}") from None
        self.startup_seconds = time.monotonic() - t0
        return self.startup_seconds

    def _ready(self) -> bool:
        assert self.process is not None
        if not self.process.running():
            raise RuntimeError(f"kafka exited:\n{self.process.log_tail()}\n{self.server_log_tail()}")
        if not port_open(self.port):
            return False
        # The listener accepts before the broker is unfenced; a metadata round trip proves it serves.
        from kafka import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000,
                                 bootstrap_timeout_ms=3000)
        try:
            admin.describe_cluster()
        finally:
            admin.close()
        return True

    def create_topic(self, name: str, partitions: int = 3) -> None:
        """Create a topic (replication factor 1)."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10000)
        try:
            admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        finally:
            admin.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the broker process (SIGTERM: clean shutdown; SIGKILL: a crash)."""
        if self.process is not None:
            self.process.stop(grace=20.0, sig=sig)

    def server_log_tail(self) -> str:
        """The end of the broker's log4j log."""
        path = self.workdir / "server.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-40:])
        except OSError:
            return ""


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list:
    """Read ``topic`` from the beginning until ``expected`` records arrived (or ``timeout``),
    then keep reading 1 s more to catch extras (duplicates). Returns the ConsumerRecords."""
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=500)
    records: list = []
    try:
        deadline = time.monotonic() + timeout
        extra_until: float | None = None
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=300)
            for part in batch.values():
                records.extend(part)
            if len(records) >= expected and extra_until is None:
                extra_until = time.monotonic() + 1.0
            if extra_until is not None and time.monotonic() > extra_until:
                break
    finally:
        consumer.close()
    return records


# --- InfluxDB ---------------------------------------------------------------------------------------

class InfluxServer:
    """InfluxDB OSS 1.x (influxd) on loopback with its data in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.rpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None
        self.startup_seconds: float | None = None

    def start(self, timeout: float = 30.0) -> float:
        """Start influxd; returns start-up seconds (until /ping answers 204)."""
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "influxdb.conf"
        conf.write_text(f"""\
reporting-disabled = true
bind-address = "127.0.0.1:{self.rpc_port}"
[meta]
  dir = "{self.workdir}/meta"
[data]
  dir = "{self.workdir}/data"
  wal-dir = "{self.workdir}/wal"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:{self.port}"
  log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
""")
        self.process = Process("influxd", [str(INFLUXD_BIN), "run", "-config", str(conf)],
                               self.workdir / "influxd.log")
        self.process.start()

        def ping() -> bool:
            assert self.process is not None
            if not self.process.running():
                raise RuntimeError(f"influxd exited:\n{self.process.log_tail()}")
            with urllib.request.urlopen(f"{self.url}/ping", timeout=1) as resp:
                return resp.status == 204
        try:
            wait_until(ping, timeout, "influxd")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.process.log_tail()}") from None
        self.startup_seconds = time.monotonic() - t0
        return self.startup_seconds

    def query(self, q: str, db: str = "srv6pm") -> dict:
        """Run an InfluxQL query over HTTP (/query, epoch=ns); returns the decoded JSON."""
        params = urllib.parse.urlencode({"db": db, "q": q, "epoch": "ns"})
        data = None
        if not q.lstrip().upper().startswith(("SELECT", "SHOW")):
            data, params = params.encode(), ""  # writes (CREATE/DROP) must be POSTed
        url = f"{self.url}/query" + (f"?{params}" if params else "")
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as resp:
            return json.loads(resp.read())

    def rows(self, q: str, db: str = "srv6pm") -> list[dict]:
        """The rows of the first series of a SELECT, as dicts column -> value (empty if none)."""
        result = self.query(q, db)["results"][0]
        if "error" in result:
            raise RuntimeError(result["error"])
        out: list[dict] = []
        for series in result.get("series", []):
            for values in series["values"]:
                row = dict(zip(series["columns"], values, strict=True))
                row.update(series.get("tags", {}))
                out.append(row)
        return out

    def stop(self) -> None:
        """Stop influxd by pid."""
        if self.process is not None:
            self.process.stop(grace=10.0)


# --- Telegraf ---------------------------------------------------------------------------------------

class TelegrafProcess:
    """Telegraf running the repository's telegraf/telegraf.conf, parameterised by environment."""

    def __init__(self, workdir: Path, *, brokers: str, topic: str, influx_url: str, group: str) -> None:
        self.workdir = workdir
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(workdir),
            "KAFKA_BROKERS": brokers,
            "KAFKA_TOPIC": topic,
            "KAFKA_CONSUMER_GROUP": group,
            "INFLUXDB_URL": influx_url,
            "INFLUXDB_DATABASE": "srv6pm",
            "TELEGRAF_FLUSH_INTERVAL": "200ms",
            "TELEGRAF_LOG_LEVEL_DEBUG": "true",
        }
        self.process: Process | None = None

    def start(self) -> None:
        """Start telegraf (readiness is proven by data arriving in InfluxDB, not by a port)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = Process("telegraf", [str(TELEGRAF_BIN), "--config", str(TELEGRAF_CONF)],
                               self.workdir / "telegraf.log", env=self.env)
        self.process.start()

    def stop(self) -> None:
        """Stop telegraf by pid."""
        if self.process is not None:
            self.process.stop(grace=10.0)
