"""Sender scale: many concurrent sessions at 1 probe/s each on one core; CPU and memory per session.

    .venv/bin/python bench/stamp_sender.py [--sessions 10000] [--seconds 10]

The sender (this process) is pinned to one CPU, a reflector process to another. Sessions start
spread over one interval, run unlimited, and keep no per-probe history (``keep_results=False``);
after a warm-up of one interval the CPU time and answered probes are measured over ``--seconds``.
Figures, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time

REFLECTOR = """
import asyncio, os, sys
from srv6pm_twamp.reflector import Reflector, ReflectorConfig
os.sched_setaffinity(0, {%(cpu)d})
async def main():
    r = Reflector(ReflectorConfig())
    host, port = await r.start("::1", 0)
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    r.close()
    print("  reflector stats:", dict(r.stats), file=sys.stderr)
asyncio.run(main())
"""


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def run(port: int, sessions: int, seconds: float, interval: float) -> None:
    from srv6pm_twamp.sender import Sender, SessionConfig

    answered = 0

    def count(_result: object) -> None:
        nonlocal answered
        answered += 1

    sender = Sender()
    rss0 = rss_kib()
    started = []
    for i in range(sessions):
        started.append(
            sender.start(
                SessionConfig(
                    host="::1",
                    port=port,
                    count=None,
                    interval=interval,
                    keep_results=False,
                    start_delay=interval * i / sessions,
                ),
                on_result=count,
            )
        )
    await asyncio.sleep(interval * 1.5)  # warm-up: every session has sent at least once
    rss1 = rss_kib()
    sent0, answered0, cpu0, t0 = sender.stats["sent"], answered, cpu_s(), time.perf_counter()
    await asyncio.sleep(seconds)
    sent1, answered1, cpu1, t1 = sender.stats["sent"], answered, cpu_s(), time.perf_counter()
    for session in started:  # stop sending, keep listening for the replies in flight
        if session._handle is not None:
            session._handle.cancel()
    await asyncio.sleep(0.5)
    total_sent, total_answered = sender.stats["sent"], answered
    print("  sender stats:", dict(sender.stats))
    sender.close()
    wall = t1 - t0
    sent, got = sent1 - sent0, answered1 - answered0
    cpu = (cpu1 - cpu0) / wall
    print(f"{sessions} sessions at {1 / interval:g} probe/s each, measured over {wall:.1f} s:")
    print(f"  probes sent {sent} ({sent / wall:.0f}/s), answered {got} ({got / wall:.0f}/s)")
    print(
        f"  sender CPU {100 * cpu:.1f} % of one core ({1e6 * cpu / (sessions / interval):.1f} us per probe)"
    )
    print(
        f"  memory: RSS {rss0 / 1024:.1f} MiB before, {rss1 / 1024:.1f} MiB with the sessions "
        f"({1024 * (rss1 - rss0) / sessions:.0f} bytes per session)"
    )
    unanswered = total_sent - total_answered
    print(
        f"  whole run: {total_sent} probes, {unanswered} unanswered ({100 * unanswered / total_sent:.3f} %)"
    )
    met = cpu < 1 and unanswered <= 0.0001 * total_sent
    print(f"  goal (>= 10000 sessions at 1 probe/s on one core): {'met' if met else 'NOT met'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    proc = subprocess.Popen(
        [sys.executable, "-c", REFLECTOR % {"cpu": cpus[0]}],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(proc.stdout.readline())
    os.sched_setaffinity(0, {cpus[-1]})
    try:
        asyncio.run(run(port, args.sessions, args.seconds, args.interval))
    finally:
        proc.stdin.close()
        proc.wait(10)


if __name__ == "__main__":
    main()
