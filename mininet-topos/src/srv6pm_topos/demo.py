"""``srv6pm-demo``: the main job, end to end on one machine.

Builds h1 — r1 — r2 — h2 in network namespaces, starts srv6pm-node in each router, provisions a
bidirectional SRv6 tunnel through the agents' gRPC API, sends traffic from h1 to h2 and shows
that it crossed the r1—r2 link inside SRv6, then deletes the tunnel and shows the traffic stop.
Everything it creates is removed when it ends (Ctrl-C included).

(The measurement issues grow this into a monitored network with a live per-block loss table.)
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence

from srv6pm.node.v1 import srv6_manager_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as pb_grpc

from . import two_routers
from .agents import start_agent
from .capture import Capture
from .lab import Lab, Node

PORT = 9000


def send_udp(src: Node, dst_node: Node, dst: str, count: int) -> int:
    """Send ``count`` datagrams from ``src`` to ``dst``:PORT; return how many ``dst_node`` received."""
    rx = dst_node.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    rx.bind(("::", PORT))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    rx.settimeout(0.2)
    got = 0
    sent = threading.Event()

    def receive() -> None:
        nonlocal got
        idle_after_send = 0
        while idle_after_send < 3:  # stop 0.6 s after the last datagram has been sent
            try:
                rx.recv(2048)
                got += 1
            except TimeoutError:
                idle_after_send += sent.is_set()

    receiver = threading.Thread(target=receive)
    receiver.start()
    tx = src.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    for seq in range(count):
        tx.sendto(seq.to_bytes(4, "big") + b"srv6-pm demo", (dst, PORT))
        if seq % 100 == 99:
            time.sleep(0.002)  # a paced sender: the demo shows forwarding, not queue overflow
    sent.set()
    receiver.join()
    tx.close()
    rx.close()
    return got


def run(packets: int, out: object = sys.stdout) -> int:
    """Run the demo; return 0 when everything behaved as expected."""

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)  # type: ignore[call-overload]

    with Lab() as lab:
        say(f"== building h1 - r1 - r2 - h2 in network namespaces ({lab.prefix}*)")
        t = two_routers.build(lab)
        a1, a2 = start_agent(t.r1), start_agent(t.r2)
        say(f"   srv6pm-node running in r1 (pid {a1.proc.pid}) and r2 (pid {a2.proc.pid}), health SERVING")

        say("== provisioning the SRv6 tunnel through gRPC (SRv6Manager), read back from the kernel")
        for line in two_routers.provision_tunnel(t, a1.channel, a2.channel):
            say(f"   {line}")

        say(f"== sending {packets} UDP datagrams h1 -> h2")
        before_tx, before_rx = t.r1.link_stats(t.core_if), t.r2.link_stats(t.core_if)
        with Capture(t.r2, t.core_if) as cap:
            received = send_udp(t.h1, t.h2, t.h2_addr, packets)
        after_tx, after_rx = t.r1.link_stats(t.core_if), t.r2.link_stats(t.core_if)
        srv6 = [p for p in cap.srv6() if p.inner_dst == t.h2_addr]
        say(f"   {'sent by h1':<34}{packets:>8}")
        say(
            f"   {'r1 ' + t.core_if + ' tx packets':<34}{after_tx['tx_packets'] - before_tx['tx_packets']:>8}"
        )
        say(
            f"   {'r2 ' + t.core_if + ' rx packets':<34}{after_rx['rx_packets'] - before_rx['rx_packets']:>8}"
        )
        say(f"   {'seen on r1-r2 inside SRv6':<34}{len(srv6):>8}")
        say(f"   {'received by h2':<34}{received:>8}")
        if srv6:
            p = srv6[0]
            say(
                f"   on the wire: outer {p.outer_src} -> {p.outer_dst}, SRH segments {list(p.segments)},"
                f" inner {p.inner_src} -> {p.inner_dst}"
            )
        ok = received == packets and len(srv6) == packets

        say("== deleting the h1 -> h2 path (DeletePath) and sending again")
        pb_grpc.SRv6ManagerStub(a1.channel).DeletePath(pb.DeletePathRequest(destination=t.h2_prefix))
        after_delete = send_udp(t.h1, t.h2, t.h2_addr, 10)
        say(f"   received by h2 after delete: {after_delete} of 10")
        ok = ok and after_delete == 0
        say(
            "== "
            + (
                "OK: traffic crossed the tunnel inside SRv6 and stopped when it was deleted"
                if ok
                else "UNEXPECTED: see the figures above"
            )
        )
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of srv6pm-demo."""
    parser = argparse.ArgumentParser(prog="srv6pm-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--packets", type=int, default=1000, help="datagrams to send (default %(default)s)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("srv6pm-demo: needs root (it creates network namespaces)", file=sys.stderr)
        return 2
    try:
        return run(args.packets)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
