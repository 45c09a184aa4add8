"""Steady UDP traffic between namespaces: a paced sender thread per stream."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from .lab import Node


class UdpStream:
    """Send ``pps`` UDP datagrams per second from ``node`` to ``dst`` until stopped."""

    def __init__(
        self, node: Node, dst: str, pps: int = 1000, size: int = 200, port: int = 9, src: str | None = None
    ) -> None:
        self.node, self.dst, self.pps, self.size, self.port, self.src = node, dst, pps, size, port, src
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"udp-{node.name}-{dst}", daemon=True)

    def start(self) -> UdpStream:
        """Start sending."""
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop; return how many datagrams were sent."""
        self._stop.set()
        self._thread.join(timeout=5)
        return self.sent

    def _run(self) -> None:
        payload = b"\x5a" * self.size
        tick = 0.005  # send in small bursts every 5 ms: smooth enough, cheap enough
        per_tick = self.pps * tick
        with self.node.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            if self.src:
                s.bind((self.src, 0))
            start = time.monotonic()
            while not self._stop.is_set():
                due = int((time.monotonic() - start) / tick * per_tick)
                while self.sent < due:
                    # a full queue drops here, before any counter: not a measured loss
                    with contextlib.suppress(OSError):
                        s.sendto(payload, (self.dst, self.port))
                    self.sent += 1
                time.sleep(tick)
