#!/usr/bin/env python3
"""Cost of the srv6pm programs on the live forwarding path, from the kernel's own BPF run-time
statistics (prints figures).

    sudo .venv/bin/python bench/counters_insitu.py [--rounds 3] [--seconds 2] [--rate 150000]

Same topology as bench/counters_pdr.py (gen ── r1 ── sink, r1 encapsulating into SRv6). With
BPF_ENABLE_STATS on, trafgen offers ``--rate`` pps while either the srv6pm programs (TC egress on
r1's uplink, marking and counting; XDP ingress on sink, counting) or the empty programs of the
same types sit at the same hooks; rounds alternate the two. ns/packet = run_time_ns / run_cnt as
the kernel measured them on real packets (the stats' own timestamps included, equally in both);
overhead = srv6pm - empty. Complements bench/counters_per_packet.py (BPF_PROG_TEST_RUN) with the
real path: real skbs, real caches, real encapsulated packets.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from counters_pdr import SID, _mac, build, frame

from srv6pm_node.counters import libbpf, pins
from srv6pm_node.counters.api import Direction
from srv6pm_node.counters.ebpf import OBJ_DIR as BPF_DIR
from srv6pm_node.counters.ebpf import TC_HANDLE, TC_PRIORITY, EbpfDriver
from srv6pm_topos.lab import Lab


def run_stats(fds: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {k: libbpf.prog_run_stats(fd) for k, fd in fds.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rate", type=int, default=150_000)
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("trafgen"):
        print("needs root and trafgen (netsniff-ng)", file=sys.stderr)
        return 1
    root = Path(tempfile.mkdtemp(prefix="s6pm-bench-bpf-"))
    pins.ensure_bpffs(root)
    per: dict[str, list[float]] = {"tc egress": [], "tc egress empty": [], "xdp ingress": [],
                                   "xdp ingress empty": []}
    try:
        with Lab() as lab, libbpf.BpfObject(str(BPF_DIR / "baseline.bpf.o")) as base:
            gen, r1, sink = build(lab)
            cfg = root.parent / f"{root.name}.trafgen"
            cfg.write_text("{ " + ", ".join(f"0x{b:02x}" for b in frame(_mac(r1, "eth0"), _mac(gen, "eth0")))
                           + " }\n")
            tx = EbpfDriver(pin_root=root, netns=r1.netns)
            rx = EbpfDriver(pin_root=root, netns=sink.netns)
            tx.add_flow([SID], Direction.EGRESS)
            rx.add_flow([SID], Direction.INGRESS)
            with pins.in_netns(r1.netns):
                r1_up = r1.ifindex("eth1")
            with pins.in_netns(sink.netns):
                sink_if = sink.ifindex("eth0")
            stats_fd = libbpf.enable_run_time_stats()
            try:
                for _ in range(args.rounds):
                    for ours in (True, False):
                        egr = tx.obj.prog_fd("srv6pm_tc_egr") if ours else base.prog_fd("baseline_tc")
                        ing = rx.obj.prog_fd("srv6pm_xdp_ing") if ours else base.prog_fd("baseline_xdp")
                        with pins.in_netns(r1.netns):
                            libbpf.tc_attach(r1_up, False, egr, TC_HANDLE, TC_PRIORITY)
                        with pins.in_netns(sink.netns):
                            libbpf.xdp_attach(sink_if, ing, libbpf.XDP_FLAGS_DRV_MODE)
                        fds = {"tc egress": egr, "xdp ingress": ing}
                        before = run_stats(fds)
                        gen.run(["taskset", "-c", "0", "trafgen", "-o", "eth0", "-i", str(cfg), "-n",
                                 str(int(args.rate * args.seconds)), "-b", f"{args.rate}pps", "-P", "1",
                                 "--no-sock-mem", "-Q", "-C"], timeout=args.seconds * 20 + 30)
                        time.sleep(0.2)
                        after = run_stats(fds)
                        for k in fds:
                            ns, cnt = (a - b for a, b in zip(after[k], before[k], strict=True))
                            per[k if ours else f"{k} empty"].append(ns / cnt if cnt else float("nan"))
            finally:
                os.close(stats_fd)
            counted = tx.read([SID], Direction.EGRESS).colours[0].packets
            tx.close()
            rx.close()
    finally:
        root.parent.joinpath(f"{root.name}.trafgen").unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            pins.unmount(root)
            root.rmdir()
    print(f"srv6pm programs on the live path (kernel BPF stats, {args.rate} pps offered, "
          f"{args.rounds} alternated rounds, median ns/packet)")
    for k in ("tc egress", "xdp ingress"):
        ours, empty = statistics.median(per[k]), statistics.median(per[f"{k} empty"])
        print(f"  {k:12} srv6pm {ours:6.1f}   empty {empty:6.1f}   overhead {ours - empty:+6.1f} ns")
    print(f"  (1-SID SR policy; the TC egress program counted {counted} packets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
