"""An exact, independent drop injector: nftables on a core router's ingress, counting its drops
per colour, so a test (or the demo) can tell how many packets of each block it dropped.

The rule drops every ``every``-th SRv6 packet (``numgen inc``) matching ``match`` (an nftables
expression, e.g. ``ip6 daddr fc00:2::d6``) as it arrives on one interface, before any routing,
and counts the drops — and the packets seen — by the colour bit read from the outer IPv6 header.
"""

from __future__ import annotations

import json
import os
import select
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

    def drops(self, block: int, merged: int = 1) -> int | None:
        """Drops in ``block`` (and the ``merged - 1`` same-colour blocks before it), if sampled."""
        a, b = self.cumulative.get(block), self.cumulative.get(block - 2 * merged)
        return None if a is None or b is None else a - b


class CounterReader:
    """A long-lived ``nft -j -i`` in the core router's namespace: a reading of every netdev counter
    costs a pipe round trip instead of a fork and two execs, so it fits its window even when the
    machine is busy. A reply that does not come in time ends the process (a late reply must never
    pass for the next one); the next reading starts a new one."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.proc: subprocess.Popen | None = None
        self._buf = b""

    def read(self, timeout: float) -> dict[tuple[str, str], int] | None:
        """{(table, counter): packets}, or None when nft did not answer within ``timeout`` s."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self.node.popen(
                ["nft", "-j", "-i"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            self._buf = b""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        try:
            os.write(self.proc.stdin.fileno(), b"list counters netdev\n")
            fd = self.proc.stdout.fileno()
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError
                self._buf += chunk
        except (OSError, TimeoutError, EOFError):
            self.close()
            return None
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            items = json.loads(line)["nftables"]
            return {(c["table"], c["name"]): c["packets"] for i in items if (c := i.get("counter"))}
        except (ValueError, KeyError, TypeError):
            return None

    def close(self) -> None:
        if self.proc is not None:
            self.node.lab.stop(self.proc, timeout=2)
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.proc = None


class Sampler:
    """Reads the injectors' per-colour drop counters (all on one node) once per block into their
    books, keeping a reading only if it provably happened inside one block: block n's colour
    counter is at rest during block n+1 (after the in-flight packets, hence not before 55 % of it,
    past the engine's guard time) and starts moving again in block n+2. A late reading (a starved
    thread, a slow ``nft``) is thrown away and tried again while the window lasts; a block
    without a good reading is simply not in the books (not compared, never wrongly compared)."""

    FIRST, LAST = 0.55, 0.95  # the part of a block where readings are taken

    def __init__(self, books: list[DropBook], period_ns: int) -> None:
        self.books, self.period_ns = books, period_ns
        self.reader = CounterReader(books[0].inj.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drop-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self.prime()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.reader.close()

    def prime(self) -> None:
        """Before any traffic the counters are at rest: one reading is the running total of the
        current block's two predecessors, the reference of the first blocks measured."""
        counters = self.reader.read(timeout=10)
        if counters is None:
            raise RuntimeError("nft on the core router does not answer")
        block = time.time_ns() // self.period_ns
        for book in self.books:
            for n in (block - 1, block - 2):
                book.cumulative[n] = counters[(book.inj.table, f"drop_c{n % 2}")]

    def sample_once(self) -> bool:
        """One reading now; True if it was kept (it stayed within the current block's window)."""
        p = self.period_ns
        t0 = time.time_ns()
        block = t0 // p
        end = block * p + int(self.LAST * p)
        if t0 < block * p + self.FIRST * p or t0 >= end:
            return False
        counters = self.reader.read(timeout=(end - t0) / NS)
        if counters is None or time.time_ns() >= end:
            return False
        try:
            drops = [counters[(book.inj.table, f"drop_c{(block - 1) % 2}")] for book in self.books]
        except KeyError:
            return False
        for book, n in zip(self.books, drops, strict=True):
            book.cumulative[block - 1] = n
        return True

    def _run(self) -> None:
        p = self.period_ns
        while not self._stop.is_set():
            now = time.time_ns()
            block, into = divmod(now, p)
            if into < self.FIRST * p:
                wait = self.FIRST * p - into
            elif (
                into < self.LAST * p
                and (block - 1) not in self.books[0].cumulative
                and not self.sample_once()
            ):
                continue  # too late this time: try again while the window lasts
            else:
                wait = p - into + self.FIRST * p
            if self._stop.wait(wait / NS):
                return
