"""Prerequisite checks shared by every test level.

Prerequisites (root, a kernel feature, a tool) go through :func:`require`: outside CI a missing
one skips the test with the reason; under CI (CI=true) it fails the test, so CI never goes green
by skipping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

IN_CI = os.environ.get("CI", "").lower() == "true"
# Transmit timestamps tagged per datagram (SCM_TS_OPT_ID) came with Linux 6.13.
KERNEL_TX_IDS = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2]) >= (6, 13)


def require(condition: bool, reason: str) -> None:
    """Skip (or, under CI, fail) the calling test unless ``condition`` holds."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI: {reason}")
    pytest.skip(reason)


def require_root() -> None:
    """Namespace tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)."""
    require(os.geteuid() == 0, "needs root to create network namespaces")


def require_tool(name: str) -> str:
    """Return the path of a command-line tool, or skip/fail if it is not installed."""
    path = shutil.which(name)
    require(path is not None, f"{name} is not installed")
    assert path is not None
    return path


def scrape_metrics(log_path: Path, node: Any = None) -> dict[str, float]:
    """What a daemon's ``/metrics`` shows now, at the 127.0.0.1 port its JSON log announced last
    (from inside ``node``'s network namespace when given: an agent's loopback is its own).

    Keys are sample names with their labels, as Prometheus writes them: ``name{label="value"}``.
    """
    port = None
    for line in log_path.read_text().splitlines():
        if '"metrics endpoint up"' in line:
            port = json.loads(line)["port"]
    assert port is not None, f"no metrics endpoint announced in {log_path}"
    url = f"http://127.0.0.1:{port}/metrics"
    if node is None:
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
    else:
        fetch = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=10).read().decode())"
        text = node.run([sys.executable, "-c", fetch, url]).stdout
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out
