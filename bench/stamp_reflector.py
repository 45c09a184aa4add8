"""Reflector throughput: probes/s one reflector process (pinned to one core) answers with no more
than 0.01 % unanswered.

    .venv/bin/python bench/stamp_reflector.py [--rates 20000,30000] [--auth] [--stateful]

The reflector runs in its own process pinned to one CPU; the load generator (this process, on
another CPU) sends prebuilt STAMP probes at a fixed rate in small batches, reads the replies as
they come, then waits a second for stragglers. One line per rate, then the best passing rate.
Figures, not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

REFLECTOR = """
import asyncio, os, sys
from srv6pm_twamp.reflector import Reflector, ReflectorConfig
os.sched_setaffinity(0, {%(cpu)d})
async def main():
    r = Reflector(ReflectorConfig(stateful=%(stateful)s, key=%(key)r))
    host, port = await r.start("::1", 0)
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    r.close()
    print("reflector stats:", dict(r.stats), file=sys.stderr)
asyncio.run(main())
"""


def offer(port: int, rate: int, seconds: float, probes: list[bytes]) -> tuple[int, int, float]:
    """Send ``rate`` probes/s for ``seconds``; return (sent, answered, elapsed)."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(("::1", 0))
    sock.connect(("::1", port))
    sock.setblocking(False)
    send, recv = sock.send, sock.recv
    n = len(probes)
    sent = received = 0
    total = int(rate * seconds)
    start = time.perf_counter()
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            try:
                send(probes[sent % n])
            except BlockingIOError:
                break
            sent += 1
        while True:
            try:
                recv(2048)
            except BlockingIOError:
                break
            received += 1
    elapsed = time.perf_counter() - start
    deadline = time.perf_counter() + 1.0
    while time.perf_counter() < deadline and received < sent:
        try:
            recv(2048)
            received += 1
        except BlockingIOError:
            time.sleep(0.001)
    sock.close()
    return sent, received, elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="10000,20000,30000,40000,50000")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--auth", action="store_true", help="authenticated mode (HMAC-SHA-256)")
    ap.add_argument("--stateful", action="store_true")
    args = ap.parse_args()
    from srv6pm_twamp.wire.stamp import SenderPacket

    key = b"benchmark key 16" if args.auth else None
    probes = [SenderPacket(seq=i, ssid=1).encode(key) for i in range(4096)]
    cpus = sorted(os.sched_getaffinity(0))
    refl_cpu, gen_cpu = cpus[0], cpus[-1]
    proc = subprocess.Popen(
        [sys.executable, "-c", REFLECTOR % {"cpu": refl_cpu, "stateful": args.stateful, "key": key}],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(proc.stdout.readline())
    os.sched_setaffinity(0, {gen_cpu})
    best = 0
    mode = ("authenticated" if key else "unauthenticated") + (
        ", stateful" if args.stateful else ", stateless"
    )
    print(f"reflector on CPU {refl_cpu}, load generator on CPU {gen_cpu}, {mode}, 44/112-octet probes")
    try:
        for rate in (int(r) for r in args.rates.split(",")):
            sent, answered, elapsed = offer(port, rate, args.seconds, probes)
            lost = sent - answered
            ok = lost <= sent * 0.0001
            best = rate if ok else best
            print(
                f"rate {rate:>6}/s (offered {sent / elapsed:>7.0f}/s): sent {sent} answered {answered} "
                f"unanswered {lost} ({100 * lost / sent:.3f} %) {'PASS' if ok else 'FAIL'}",
                flush=True,
            )
    finally:
        proc.stdin.close()
        proc.wait(10)
    print(f"best rate with <= 0.01 % unanswered: {best} probes/s on one core")


if __name__ == "__main__":
    main()
