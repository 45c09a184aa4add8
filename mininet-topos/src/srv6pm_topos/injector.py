"""An exact, independent drop injector: nftables on a core router's ingress, counting its drops
per colour, so a test (or the demo) can tell how many packets of each block it dropped.

The rule drops every ``every``-th SRv6 packet (``numgen inc``) matching ``match`` (an nftables
expression, e.g. ``ip6 daddr fc00:2::d6``) as it arrives on one interface, before any routing,
and counts the drops — and the packets seen — by the colour bit read from the outer IPv6 header.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from .lab import Node


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
