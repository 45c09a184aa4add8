"""An exact, independent drop injector: nftables on a core router's ingress, counting its drops
per colour, so a test (or the demo) can tell how many packets of each block it dropped.

The rule drops every ``every``-th SRv6 packet (``numgen inc``) matching ``match`` (an nftables
expression, e.g. ``ip6 daddr fc00:2::d6``) as it arrives on one interface, before any routing,
and counts the drops — and the packets seen — by the colour bit read from the outer IPv6 header.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field

from .lab import Node

NS = 1_000_000_000


def header_bit(mark_bit: int) -> int:
    """Bit offset, in the IPv6 header, of DSCP bit ``mark_bit`` (nft ``@nh,OFFSET,1``)."""
    return 9 - mark_bit


@dataclass
class Injector:
    """A drop rule on one interface of one node."""

    node: Node
    table: str

    def counts(self) -> dict[str, int]:
        """Packets seen and dropped per colour: {"seen_c0", "seen_c1", "drop_c0", "drop_c1"}."""
        out = self.node.run(["nft", "-j", "list", "counters", "table", "netdev", self.table]).stdout
        return {
            i["counter"]["name"]: i["counter"]["packets"]
            for i in json.loads(out)["nftables"]
            if "counter" in i
        }

    def drops(self) -> tuple[int, int]:
        """Cumulative drops of colour 0 and colour 1."""
        c = self.counts()
        return c["drop_c0"], c["drop_c1"]

    def remove(self) -> None:
        """Delete the rule (and its counters)."""
        self.node.run(["nft", "delete", "table", "netdev", self.table], check=False)


def add(
    node: Node, ifname: str, every: int, *, match: str = "", mark_bit: int = 0, name: str | None = None
) -> Injector:
    """Drop every ``every``-th matching SRv6 packet arriving on ``ifname`` (``every`` 0: count only)."""
    table = name or f"s6inj_{ifname}"
    bit = header_bit(mark_bit)
    pkt = f"meta protocol ip6 ip6 nexthdr 43 {match}".strip()
    drop = f"{pkt} numgen inc mod {every} 0 jump dropper" if every else ""
    rules = f"""
table netdev {table} {{
  counter drop_c0 {{ }}
  counter drop_c1 {{ }}
  counter seen_c0 {{ }}
  counter seen_c1 {{ }}
  chain in {{
    type filter hook ingress device "{ifname}" priority 0;
    {pkt} @nh,{bit},1 0 counter name "seen_c0"
    {pkt} @nh,{bit},1 1 counter name "seen_c1"
    {drop}
  }}
  chain dropper {{
    @nh,{bit},1 0 counter name "drop_c0" drop
    @nh,{bit},1 1 counter name "drop_c1" drop
  }}
}}
"""
    proc = subprocess.run(
        ["ip", "netns", "exec", node.netns, "nft", "-f", "-"],
        input=rules,
        text=True,
        capture_output=True,
        timeout=30,
    )
    if proc.returncode:
        raise RuntimeError(f"nft refused the injector: {proc.stderr}")
    return Injector(node, table)


@dataclass
class DropBook:
    """Per-block drops of one injector, sampled the way the engine reads its counters: in block
    n+1, away from both boundaries, the colour-(n mod 2) drop counter is block n's running total."""

    inj: Injector
    period_ns: int
    cumulative: dict[int, int] = field(default_factory=dict)

    def sample(self, now_ns: int) -> None:
        """Record block n's running total, if the reading stayed inside block n+1 (a reading
        that ran into block n+2 may include that block's drops: it is discarded, not guessed)."""
        n = now_ns // self.period_ns - 1
        total = self.inj.drops()[n % 2]
        if time.time_ns() // self.period_ns - 1 == n:
            self.cumulative[n] = total

    def drops(self, block: int, merged: int = 1) -> int | None:
        """Drops in ``block`` (and the ``merged - 1`` same-colour blocks before it), if sampled."""
        a, b = self.cumulative.get(block), self.cumulative.get(block - 2 * merged)
        return None if a is None or b is None else a - b


class Sampler:
    """Samples drop books once per block, at 60 % of the block."""

    def __init__(self, books: list[DropBook], period_ns: int) -> None:
        self.books, self.period_ns = books, period_ns
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time_ns()
            target = (now // self.period_ns) * self.period_ns + self.period_ns * 6 // 10
            if target <= now:
                target += self.period_ns
            if self._stop.wait((target - now) / NS):
                return
            t = time.time_ns()
            for book in self.books:
                book.sample(t)
