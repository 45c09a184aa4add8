"""The README's main command keeps working: srv6pm-demo runs end to end and says OK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyroute2 import netns

from srv6pm_topos.lab import remove_stale
from tests.support import require_root

pytestmark = pytest.mark.netns


def test_demo_runs_end_to_end_and_cleans_up():
    require_root()
    demo = str(Path(sys.executable).with_name("srv6pm-demo"))
    out = subprocess.run([demo, "--packets", "300"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK: traffic crossed the tunnel inside SRv6" in out.stdout
    assert "received by h2                         300" in out.stdout
    prefix = next(line for line in out.stdout.splitlines() if "network namespaces (" in line)
    prefix = prefix.split("(")[1].rstrip("*)")
    remove_stale()
    assert not [n for n in netns.listnetns() if n.startswith(prefix)]
