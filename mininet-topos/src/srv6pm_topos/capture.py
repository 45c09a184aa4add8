"""Capture frames on a lab interface and decode the SRv6 ones (outer IPv6 + SRH + inner IPv6).

Used by the demo to show what crosses a link and by tests to prove it. No scapy: the fields we
need sit at fixed offsets.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from .lab import Node

ETH_P_ALL = 0x0003
_IPV6 = b"\x86\xdd"
_ROUTING = 43
_IPV6_IN_IPV6 = 41


@dataclass(frozen=True)
class SRv6Packet:
    """The fields of an SRv6 frame that say where it goes."""

    outer_src: str
    outer_dst: str
    segments: tuple[str, ...]  # visiting order
    segments_left: int
    inner_src: str | None  # None when the SRH does not carry an IPv6 packet
    inner_dst: str | None


def _addr(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6, raw)


def decode_srv6(frame: bytes) -> SRv6Packet | None:
    """Decode an Ethernet frame carrying IPv6 + SRH; None for anything else."""
    if len(frame) < 14 + 40 + 8 or frame[12:14] != _IPV6 or frame[20] != _ROUTING:
        return None
    srh = frame[54:]
    if srh[2] != 4:  # routing type 4 is the SRH
        return None
    last_entry = srh[4]
    if len(srh) < 8 + 16 * (last_entry + 1):
        return None
    stored = [_addr(srh[8 + 16 * i : 24 + 16 * i]) for i in range(last_entry + 1)]
    inner = srh[8 + 8 * srh[1] :]
    carries_v6 = srh[0] == _IPV6_IN_IPV6 and len(inner) >= 40
    return SRv6Packet(
        outer_src=_addr(frame[22:38]),
        outer_dst=_addr(frame[38:54]),
        segments=tuple(reversed(stored)),
        segments_left=srh[3],
        inner_src=_addr(inner[8:24]) if carries_v6 else None,
        inner_dst=_addr(inner[24:40]) if carries_v6 else None,
    )


class Capture:
    """Frames seen on ``node``'s ``ifname`` while the ``with`` block runs (AF_PACKET in the netns)."""

    def __init__(self, node: Node, ifname: str) -> None:
        self._sock = node.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        # A large buffer (SO_RCVBUFFORCE: we are root) so a busy machine does not drop frames.
        self._sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # 33 = SO_RCVBUFFORCE
        self._sock.bind((ifname, 0))
        self._sock.settimeout(0.05)
        self.frames: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.frames.append(self._sock.recv(65535))
            except TimeoutError:
                continue

    def __enter__(self) -> Capture:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.2)  # let the last frames in flight arrive
        self._stop.set()
        self._thread.join()
        self._sock.close()

    def srv6(self) -> list[SRv6Packet]:
        """The captured SRv6 packets, decoded."""
        return [p for p in map(decode_srv6, self.frames) if p is not None]
