"""Steady UDP traffic between namespaces: one paced sender process per stream.

A process, not a thread: a test's or the demo's own threads (samplers, result streams) then never
slow the traffic down through the interpreter lock. ``python -m srv6pm_topos.traffic DST PPS
[--size B] [--port P] [--src ADDR]`` sends until SIGTERM and prints how many datagrams it sent.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from .lab import Node

TICK_S = 0.005  # send in small bursts every 5 ms: smooth enough, cheap enough


class UdpStream:
    """Send ``pps`` UDP datagrams per second from ``node`` to ``dst`` until stopped."""

    def __init__(
        self, node: Node, dst: str, pps: int = 1000, size: int = 200, port: int = 9, src: str | None = None
    ) -> None:
        self.node, self.dst, self.pps, self.size, self.port, self.src = node, dst, pps, size, port, src
        self.sent = 0
        self._proc: subprocess.Popen | None = None

    def start(self) -> UdpStream:
        """Start sending."""
        argv = [
            sys.executable,
            "-m",
            "srv6pm_topos.traffic",
            self.dst,
            str(self.pps),
            "--size",
            str(self.size),
            "--port",
            str(self.port),
        ]
        if self.src:
            argv += ["--src", self.src]
        self._proc = self.node.popen(argv, stdout=subprocess.PIPE, text=True)
        return self

    def stop(self) -> int:
        """Stop; return how many datagrams were sent."""
        if self._proc is not None:
            self.node.lab.stop(self._proc)
            assert self._proc.stdout is not None
            out = self._proc.stdout.read().strip()
            self._proc.stdout.close()
            self.sent = int(out) if out.isdigit() else 0
            self._proc = None
        return self.sent


def send(dst: str, pps: int, size: int, port: int, src: str | None) -> int:
    """Send paced datagrams until SIGTERM/SIGINT; return how many were sent."""
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    payload = b"\x5a" * size
    sent = 0
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        if src:
            s.bind((src, 0))
        start = time.monotonic()
        while not stop:
            due = int((time.monotonic() - start) * pps)
            while sent < due:
                # a full queue drops here, before any counter: not a measured loss
                with contextlib.suppress(OSError):
                    s.sendto(payload, (dst, port))
                sent += 1
            time.sleep(TICK_S)
    return sent


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m srv6pm_topos.traffic", description=__doc__)
    p.add_argument("dst")
    p.add_argument("pps", type=int)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--port", type=int, default=9)
    p.add_argument("--src")
    a = p.parse_args(argv)
    print(send(a.dst, a.pps, a.size, a.port, a.src), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
