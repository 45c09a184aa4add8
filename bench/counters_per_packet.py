#!/usr/bin/env python3
"""Per-packet cost of the srv6pm BPF programs through BPF_PROG_TEST_RUN (prints figures).

    sudo taskset -c 1 .venv/bin/python bench/counters_per_packet.py [--repeat 1000000] [--rounds 5]

For each program (XDP ingress, TC egress, TC ingress) and each monitored-flow count (1, 1,000,
10,000), the average ns per run of: the empty program of the same type (baseline, measured in the
same session, interleaved), a non-SRv6 packet, an SRv6 packet whose SID list is not monitored
(miss, 4 SIDs), and hits with 1, 4 and 16 SIDs. Each figure is the median of ``--rounds`` runs of
``--repeat`` repetitions; overhead = figure - baseline. TC egress runs with colour 0 on unmarked
packets, so no byte is rewritten (a flip costs one bpf_skb_store_bytes on changed packets only).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import struct
import sys
from ipaddress import IPv6Address

from srv6pm_node.counters import libbpf
from srv6pm_node.counters.api import Direction
from srv6pm_node.counters.ebpf import OBJ_DIR, EbpfDriver

ETH = bytes.fromhex("020000000002" "020000000001" "86dd")
GOALS = {"hit <= 4 SIDs": 20.0, "non-SRv6": 5.0}


def ipv6(nh: int, plen: int, dst: str, tc: int = 0) -> bytes:
    return struct.pack("!IHBB", (6 << 28) | (tc << 20), plen, nh, 64) + \
        IPv6Address("2001:db8::1").packed + IPv6Address(dst).packed


def udp_payload(n: int = 64) -> bytes:
    return struct.pack("!HHHH", 4000, 5000, 8 + n, 0) + b"x" * n


def srv6_frame(sids: list[str]) -> bytes:
    inner = ipv6(17, 8 + 64, "2001:db8:b::1") + udp_payload()
    srh = struct.pack("!BBBBBBH", 41, 2 * len(sids), 4, len(sids) - 1, len(sids) - 1, 0, 0)
    srh += b"".join(IPv6Address(s).packed for s in reversed(sids))
    return ETH + ipv6(43, len(srh) + len(inner), sids[0]) + srh + inner


def plain_frame() -> bytes:
    return ETH + ipv6(17, 8 + 64, "2001:db8::2") + udp_payload()


def sidlist(n: int, tag: int) -> list[str]:
    return [f"fc00:{tag:x}:{i + 1:x}::" for i in range(n)]


def measure(fd: int, frame: bytes, repeat: int, rounds: int) -> float:
    return statistics.median(libbpf.test_run(fd, frame, repeat=repeat).duration_ns for _ in range(rounds))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--flows", default="1,1000,10000")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (BPF_PROG_TEST_RUN)", file=sys.stderr)
        return 1
    random.seed(1)
    hits = {n: sidlist(n, 0xA000 + n) for n in (1, 4, 16)}
    frames = {"non-SRv6": plain_frame(), "miss (4 SIDs)": srv6_frame(sidlist(4, 0xBEEF))}
    frames.update({f"hit {n} SID{'s' if n > 1 else ''}": srv6_frame(s) for n, s in hits.items()})

    progs = [("xdp ingress", "srv6pm_xdp_ing", "baseline_xdp", Direction.INGRESS),
             ("tc egress", "srv6pm_tc_egr", "baseline_tc", Direction.EGRESS),
             ("tc ingress", "srv6pm_tc_ing", "baseline_tc", Direction.INGRESS)]
    results: dict[tuple[str, int, str], float] = {}
    with EbpfDriver(pin_root=None) as drv, libbpf.BpfObject(str(OBJ_DIR / "baseline.bpf.o")) as base:
        for nflows in (int(x) for x in args.flows.split(",")):
            for d in Direction:  # monitored: the hit lists plus filler lists of mixed lengths
                for f in drv.flows(d):
                    drv.remove_flow(f.sids, d)
                for s in hits.values():
                    drv.add_flow(s, d)
                for i in range(max(0, nflows - len(hits))):
                    drv.add_flow(sidlist(random.randint(1, 16), i + 1), d)
            print(f"# {nflows} monitored flows per direction", file=sys.stderr)
            for label, prog, empty, _ in progs:
                fd, efd = drv.obj.prog_fd(prog), base.prog_fd(empty)
                for case, frame in frames.items():
                    # interleave: baseline and program measured back to back for every case
                    results[(label, nflows, "empty")] = min(
                        results.get((label, nflows, "empty"), float("inf")),
                        measure(efd, frame, args.repeat, args.rounds))
                    results[(label, nflows, case)] = measure(fd, frame, args.repeat, args.rounds)
    flows = sorted({k[1] for k in results})
    print(f"per-packet cost, ns (BPF_PROG_TEST_RUN, repeat {args.repeat}, median of {args.rounds}); "
          "overhead over the empty program in brackets")
    header = f"{'program':12} {'case':15}" + "".join(f"{f'{n} flows':>18}" for n in flows)
    print(header)
    print("-" * len(header))
    worst: dict[str, float] = {}
    for label, *_ in progs:
        for case in ["empty", *frames]:
            cells = []
            for n in flows:
                v = results[(label, n, case)]
                over = v - results[(label, n, "empty")]
                cells.append(f"{v:8.1f}" + (f" [{over:+6.1f}]" if case != "empty" else " " * 9))
                goal = "hit <= 4 SIDs" if case in ("hit 1 SID", "hit 4 SIDs") else case
                if goal in GOALS:
                    worst[goal] = max(worst.get(goal, -1e9), over)
            print(f"{label:12} {case:15}" + "".join(f"{c:>18}" for c in cells))
    print()
    for goal, limit in GOALS.items():
        ok = "met" if worst[goal] <= limit else "NOT met"
        print(f"goal: overhead {goal} <= {limit:.0f} ns: worst {worst[goal]:+.1f} ns -> {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
