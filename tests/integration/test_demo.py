"""The README's main command keeps working: srv6pm-demo runs a monitored flow end to end, its
measured loss equals the injected drops in every block, both ways, and it leaves nothing behind."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from pyroute2 import netns

from tests.support import require_root

pytestmark = pytest.mark.netns


def test_demo_measures_exactly_the_injected_loss_and_cleans_up():
    require_root()
    demo = str(Path(sys.executable).with_name("srv6pm-demo"))
    out = subprocess.run([demo, "--blocks", "5", "--json"], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    start = records[0]
    assert start["type"] == "start" and start["blocks"] == 5
    blocks = [r for r in records if r["type"] == "block"]
    summary = records[-1]
    assert summary["type"] == "summary" and summary["ok"] is True

    compared = [b for b in blocks if b["compared"]]
    assert len(compared) >= 3, out.stdout
    for b in compared:
        for direction in ("forward", "reverse"):
            d = b[direction]
            assert d["lost"] == d["injected"], (direction, b)
            assert d["tx"] - d["rx"] == d["lost"], (direction, b)
        assert b["match"] is True
    # the injector really dropped (defaults: 1 packet in 7 forward, 1 in 13 reverse, 1000 pps)
    assert all(b["forward"]["injected"] > 0 and b["reverse"]["injected"] > 0 for b in compared)
    assert summary["blocks_exact"] == summary["blocks_compared"] == len(compared)
    assert summary["forward_lost"] == summary["forward_injected"] > 0
    assert summary["reverse_lost"] == summary["reverse_injected"] > 0
    # delay comes with the same probes
    assert any(b["two_way_delay_us"] for b in compared)

    prefix = start["prefix"]
    assert f"network namespaces ({prefix}*)" in out.stderr
    assert not [n for n in netns.listnetns() if n.startswith(prefix)]
    mounts = Path("/proc/self/mounts").read_text()
    assert prefix not in mounts  # the demo's bpffs is unmounted
    assert not list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))  # and its work directories removed


def test_demo_table_with_the_netfilter_driver():
    """The README's form: the live table, here on the netfilter driver."""
    require_root()
    demo = str(Path(sys.executable).with_name("srv6pm-demo"))
    out = subprocess.run(
        [demo, "--blocks", "2", "--driver", "netfilter"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.split()[:3] == ["block", "start", "|"] for line in lines if line.strip()), out.stdout
    rows = [line for line in lines if line[:10].strip().isdigit()]
    measured = [row for row in rows if "baseline" not in row]
    assert len(measured) >= 2 and any(" yes " in row for row in measured), out.stdout
    assert not [row for row in measured if " NO " in row], out.stdout
    assert re.search(r"^== blocks measured 2, exact (\d) of \1 compared", out.stdout, re.M), out.stdout
    assert "== OK: in every block srv6-pm measured exactly" in out.stdout
