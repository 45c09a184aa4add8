"""Run the SRv6PM double (fake_pm_agent) as a real process the test can kill and restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc

from srv6pm.node.v1 import srv6_pm_pb2 as pmpb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pmpb_grpc
from srv6pm_topos.lab import Lab

ROOT = Path(__file__).resolve().parents[2]


class FakePMNode:
    """One fake node on ``unix:{tmp}/{name}.sock``, its process owned by ``lab``."""

    def __init__(self, lab: Lab, tmp: Path, name: str) -> None:
        self.lab, self.target = lab, f"unix:{tmp}/{name}.sock"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        """Start (or restart) the process and wait until it answers."""
        argv = [sys.executable, "-m", "tests.fakes.fake_pm_agent", self.target]
        self.proc = self.lab.popen_host(argv, cwd=ROOT)
        self.channel = grpc.insecure_channel(self.target)
        grpc.channel_ready_future(self.channel).result(timeout=20)

    def kill(self) -> None:
        """SIGKILL the process (a crash, not a graceful stop)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.channel.close()

    def running(self) -> list[tuple[str, int]]:
        """(measurement id, role) of what the node runs."""
        resp = pmpb_grpc.SRv6PMStub(self.channel).ListMeasurements(pmpb.ListMeasurementsRequest())
        return sorted((m.spec.measurement_id, m.role) for m in resp.measurements)
