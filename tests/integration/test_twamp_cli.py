"""The real ``srv6pm-stamp`` console script: a reflector process and sender processes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import require

SCRIPT = Path(sys.executable).parent / "srv6pm-stamp"


@pytest.fixture
def reflector(request, tmp_path):
    """Start ``srv6pm-stamp reflect`` with the given extra args; yield (port, proc)."""
    procs = []

    def start(*extra):
        require(SCRIPT.exists(), f"console script {SCRIPT} not installed (run scripts/setup.sh)")
        proc = subprocess.Popen(
            [str(SCRIPT), "reflect", "--listen", "[::1]:0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        line = proc.stdout.readline()
        m = re.match(r"listening on \[(.*)\]:(\d+)", line)
        assert m, f"unexpected first line {line!r}"
        return int(m.group(2)), proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def send(*args, timeout=30):
    return subprocess.run([str(SCRIPT), "send", *args], capture_output=True, text=True, timeout=timeout)


def test_send_lines_and_summary(reflector):
    port, _ = reflector()
    out = send(
        f"[::1]:{port}",
        "--count",
        "4",
        "--interval",
        "0.05",
        "--padding",
        "40",
        "--dscp",
        "10",
        "--timeout",
        "3",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    probe_lines = [ln for ln in lines if ln.startswith("seq=")]
    assert [int(re.match(r"seq=(\d+)", ln).group(1)) for ln in probe_lines] == [0, 1, 2, 3]
    assert all("ttl=255" in ln for ln in probe_lines)
    assert "4 sent, 4 received, 0 lost (0.0%)" in out.stdout
    m = re.search(
        r"rtt min/avg/max/p99 = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms, jitter ([\d.]+) ms", out.stdout
    )
    assert m
    mn, avg, mx, p99, _ = map(float, m.groups())
    assert 0 < mn <= avg <= mx and p99 <= mx


def test_send_json_against_stateful_authenticated_reflector(reflector, tmp_path):
    key = tmp_path / "key"
    key.write_bytes(b"sixteen byte key\n")
    port, proc = reflector("--stateful", "--auth-key-file", str(key))
    out = send(
        f"[::1]:{port}",
        "--count",
        "3",
        "--interval",
        "0.05",
        "--auth-key-file",
        str(key),
        "--json",
        "--timeout",
        "3",
        "--ssid",
        "77",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["authenticated"] is True and doc["ssid"] == 77
    assert [p["seq"] for p in doc["probes"]] == [0, 1, 2]
    for p in doc["probes"]:
        assert p["t1_ns"] <= p["t4_ns"] and p["t2_ns"] <= p["t3_ns"]
        sent = p["t1_kernel_ns"] or p["t1_ns"]  # the kernel's transmit time, where it gives one
        assert p["t1_ns"] <= sent <= p["t2_ns"]
        assert p["rtt_ns"] == (p["t4_ns"] - sent) - (p["t3_ns"] - p["t2_ns"])
    s = doc["summary"]
    assert (s["sent"], s["received"], s["lost"]) == (3, 3, 0)
    assert s["rtt_ns"]["min"] <= s["rtt_ns"]["p99"] <= s["rtt_ns"]["max"]

    wrong = tmp_path / "wrong"
    wrong.write_bytes(b"not the key")
    bad = send(
        f"[::1]:{port}",
        "--count",
        "2",
        "--interval",
        "0.05",
        "--auth-key-file",
        str(wrong),
        "--json",
        "--timeout",
        "0.5",
    )
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["summary"]["lost"] == 2

    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    stats = json.loads(err.strip().splitlines()[-1])["reflector_stats"]
    assert stats["replied"] == 3 and stats["bad_hmac"] == 2


def test_usage_errors():
    out = send("[::1]:9", "--dscp", "99")
    assert out.returncode == 2
    out = subprocess.run([str(SCRIPT), "bogus"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
