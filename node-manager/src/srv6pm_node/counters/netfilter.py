"""The netfilter (nftables) counter driver: the fallback where eBPF is unavailable.

Everything lives in one table per network namespace, ``ip6 srv6pm``::

    set ifs_egr / ifs_ing      interfaces attached per direction (attach = add an element)
    set colour / set mark_bit  the active colour and the DSCP bit used (one element each)
    chain post   postrouting   oifname @ifs_egr rt type 4 jump egr_flows
    chain pre    prerouting    iifname @ifs_ing rt type 4 jump ing_flows
    chain egr_flows            per flow: srh last-entry N-1 srh sid[1] … srh sid[N] … goto e_<id>
    chain e_<id>               @nh,<bit>,1 set <colour> counter name "e_<id>_c<colour>"
    chain ing_flows / i_<id>   @nh,<bit>,1 <c> counter name "i_<id>_c<c>" (c = 0, 1)

A colour flip rewrites every egress flow chain in one ``nft -f`` transaction (atomic). Counters are
named objects, so replacing rules never resets them. The control path runs the ``nft`` CLI with
``-f -`` for changes and ``-j`` (JSON) for reads — pyroute2 has no usable nftables support; none
of it is on the packet path.

Limits, honestly:

* Egress needs ``net.netfilter.nf_hooks_lwtunnel=1`` so POSTROUTING sees the packet *after* the
  seg6 encapsulation. That sysctl is global to the host and one-way (the kernel refuses to turn it
  off again until reboot); :meth:`NftDriver.attach` enables it for egress.
* Flows are matched by a linear list of rules (one per flow; each compares the SRH's last entry
  and every SID, ``srh sid[i]``, so up to 16 SIDs and no false match). A set/verdict-map lookup
  would be O(1) but nftables concatenations are limited to 64 bytes — at most 3 SIDs with the
  length — so per-packet cost here grows with the number of flows.
* A GSO/GRO super-packet is counted as one packet (nftables sees the skb, not the segments): with
  TCP offloads on the sending router, egress packet counts fall below the ingress ones. Use the
  eBPF driver there, or turn GSO off on the egress interface.
* ``nft`` 1.0.6 mis-compiles ``ip6 dscp & MASK`` comparisons: the colour bit is matched and set as
  a raw header bit, ``@nh,OFFSET,1``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from . import layout
from .api import (
    Attachment,
    ColourCount,
    CounterDriver,
    CounterError,
    Direction,
    FlowCounters,
    FlowNotFound,
    check_colour,
)
from .pins import in_netns

TABLE = "srv6pm"
FAMILY = "ip6"
_PREFIX = {Direction.EGRESS: "e", Direction.INGRESS: "i"}
_FLOWS_CHAIN = {Direction.EGRESS: "egr_flows", Direction.INGRESS: "ing_flows"}
_IFSET = {Direction.EGRESS: "ifs_egr", Direction.INGRESS: "ifs_ing"}
_SKELETON = f"""
table {FAMILY} {TABLE} {{
  set ifs_egr {{ type ifname; }}
  set ifs_ing {{ type ifname; }}
  set colour {{ type mark; elements = {{ 0 }}; }}
  set mark_bit {{ type mark; elements = {{ 0 }}; }}
  chain egr_flows {{ }}
  chain ing_flows {{ }}
  chain post {{
    type filter hook postrouting priority 300; policy accept;
    oifname @ifs_egr rt type 4 jump egr_flows
  }}
  chain pre {{
    type filter hook prerouting priority -300; policy accept;
    iifname @ifs_ing rt type 4 jump ing_flows
  }}
}}
"""
LWTUNNEL_SYSCTL = Path("/proc/sys/net/netfilter/nf_hooks_lwtunnel")


def header_bit(mark_bit: int) -> int:
    """Bit offset in the IPv6 header of DSCP bit ``mark_bit`` (version is bits 0-3, TC 4-11)."""
    layout.tc_mask(mark_bit)  # validates
    return 9 - mark_bit


def flow_id(sids: Sequence[str]) -> str:
    """Stable short id of a SID list: names its chains and counters."""
    return hashlib.sha256(",".join(sids).encode()).hexdigest()[:12]


class NftDriver(CounterDriver):
    """Counter driver over nftables (see the module docstring for the rule layout and limits)."""

    name = "netfilter"

    def __init__(self, *, netns: str | None = None, mark_bit: int | None = None, nft: str = "nft") -> None:
        self.netns = netns
        self._nft_bin = nft
        if not self._table_exists():
            self._nft(_SKELETON)
        if mark_bit is not None and mark_bit != self.mark_bit:
            header_bit(mark_bit)
            flows = self._scan()
            script = [
                f"flush set {FAMILY} {TABLE} mark_bit",
                f"add element {FAMILY} {TABLE} mark_bit {{ {mark_bit} }}",
            ]
            for (d, sids), _ in flows.items():
                script += self._flow_chain_rules(d, flow_id(sids), self.colour(), mark_bit)
            self._nft("\n".join(script))

    # --- nft plumbing ----------------------------------------------------------------------

    def _argv(self, *args: str) -> list[str]:
        base = [self._nft_bin, *args]
        return ["ip", "netns", "exec", self.netns, *base] if self.netns else base

    def _nft(self, script: str) -> None:
        proc = subprocess.run(self._argv("-f", "-"), input=script, capture_output=True, text=True, timeout=30)
        if proc.returncode:
            raise CounterError(f"nft failed: {proc.stderr.strip()}")

    def _json(self, *args: str) -> list[dict]:
        proc = subprocess.run(self._argv("-j", *args), capture_output=True, text=True, timeout=30)
        if proc.returncode:
            raise CounterError(f"nft {' '.join(args)} failed: {proc.stderr.strip()}")
        return json.loads(proc.stdout)["nftables"]

    def _table_exists(self) -> bool:
        proc = subprocess.run(self._argv("list", "table", FAMILY, TABLE), capture_output=True, timeout=30)
        return proc.returncode == 0

    def _set_elems(self, name: str) -> list:
        for item in self._json("list", "set", FAMILY, TABLE, name):
            if "set" in item:
                return list(item["set"].get("elem", []))
        return []

    # --- attachment ------------------------------------------------------------------------

    def attach(self, ifname: str, direction: Direction, mode: str = "auto") -> str:
        """Count (and for egress, mark) on an interface: add it to the direction's set."""
        d = Direction(direction)
        if mode not in ("auto", "nft"):
            raise CounterError(f"the netfilter driver has no {mode} mode")
        if d is Direction.EGRESS:
            self._enable_lwtunnel_hooks()
        if ifname not in self._set_elems(_IFSET[d]):
            self._nft(f'add element {FAMILY} {TABLE} {_IFSET[d]} {{ "{ifname}" }}')
        return "nft"

    def _enable_lwtunnel_hooks(self) -> None:
        """POSTROUTING must see packets after the seg6 encapsulation (global, one-way sysctl)."""
        with in_netns(self.netns):
            if LWTUNNEL_SYSCTL.read_text().strip() != "1":
                LWTUNNEL_SYSCTL.write_text("1")

    def detach(self, ifname: str, direction: Direction) -> None:
        """Stop counting on an interface (counters are kept)."""
        d = Direction(direction)
        if ifname in self._set_elems(_IFSET[d]):
            self._nft(f'delete element {FAMILY} {TABLE} {_IFSET[d]} {{ "{ifname}" }}')

    def attachments(self) -> list[Attachment]:
        """Interfaces in the attachment sets."""
        return [Attachment(name, d, "nft") for d in Direction for name in self._set_elems(_IFSET[d])]

    # --- flows -----------------------------------------------------------------------------

    @staticmethod
    def _match(sids: Sequence[str]) -> str:
        # srh sid[i] is SRH Segment List[i-1]; the SRH carries the travel order reversed
        srh = list(reversed(sids))
        parts = [f"srh last-entry {len(sids) - 1}"] + [f"srh sid[{i + 1}] {s}" for i, s in enumerate(srh)]
        return " ".join(parts)

    @staticmethod
    def _flow_chain_rules(d: Direction, fid: str, colour: int, mark_bit: int) -> list[str]:
        p, bit = _PREFIX[d], header_bit(mark_bit)
        chain = f"{FAMILY} {TABLE} {p}_{fid}"
        if d is Direction.EGRESS:
            return [
                f"flush chain {chain}",
                f'add rule {chain} @nh,{bit},1 set {colour} counter name "{p}_{fid}_c{colour}"',
            ]
        return [f"flush chain {chain}"] + [
            f'add rule {chain} @nh,{bit},1 {c} counter name "{p}_{fid}_c{c}"' for c in (0, 1)
        ]

    def _scan(self) -> dict[tuple[Direction, tuple[str, ...]], int]:
        """(direction, sids) -> handle of its match rule, parsed back from the flow chains."""
        out = {}
        for d in Direction:
            for item in self._json("list", "chain", FAMILY, TABLE, _FLOWS_CHAIN[d]):
                rule = item.get("rule")
                if not rule:
                    continue
                srh: dict[int, str] = {}
                for e in rule["expr"]:
                    field = e.get("match", {}).get("left", {}).get("exthdr", {}).get("field", "")
                    if field.startswith("sid["):
                        srh[int(field[4:-1])] = e["match"]["right"]
                sids = tuple(layout.normalize_sids([srh[i] for i in sorted(srh, reverse=True)]))
                out[(d, sids)] = rule["handle"]
        return out

    def add_flow(self, sids: Sequence[str], direction: Direction) -> None:
        """Monitor a SID list (counters from zero); a no-op if it already is."""
        d = Direction(direction)
        sids = layout.normalize_sids(sids)
        if (d, sids) in self._scan():
            return
        fid, p = flow_id(sids), _PREFIX[d]
        script = [f"add counter {FAMILY} {TABLE} {p}_{fid}_c{c}" for c in (0, 1)]
        script.append(f"add chain {FAMILY} {TABLE} {p}_{fid}")
        script += self._flow_chain_rules(d, fid, self.colour(), self.mark_bit)
        script.append(f"add rule {FAMILY} {TABLE} {_FLOWS_CHAIN[d]} {self._match(sids)} goto {p}_{fid}")
        self._nft("\n".join(script))

    def remove_flow(self, sids: Sequence[str], direction: Direction) -> bool:
        """Stop monitoring a SID list; False if it was not monitored."""
        d = Direction(direction)
        sids = layout.normalize_sids(sids)
        handle = self._scan().get((d, sids))
        if handle is None:
            return False
        fid, p = flow_id(sids), _PREFIX[d]
        self._nft(
            "\n".join(
                [
                    f"delete rule {FAMILY} {TABLE} {_FLOWS_CHAIN[d]} handle {handle}",
                    f"flush chain {FAMILY} {TABLE} {p}_{fid}",
                    f"delete chain {FAMILY} {TABLE} {p}_{fid}",
                    *[f"delete counter {FAMILY} {TABLE} {p}_{fid}_c{c}" for c in (0, 1)],
                ]
            )
        )
        return True

    def _counters(self) -> dict[str, tuple[int, int]]:
        out = {}
        for item in self._json("list", "counters", "table", FAMILY, TABLE):
            if "counter" in item:
                c = item["counter"]
                out[c["name"]] = (c["packets"], c["bytes"])
        return out

    def _flow_counters(self, d: Direction, sids: tuple[str, ...], ctrs: dict) -> FlowCounters:
        p, fid = _PREFIX[d], flow_id(sids)
        cc = tuple(ColourCount(*ctrs.get(f"{p}_{fid}_c{c}", (0, 0))) for c in (0, 1))
        return FlowCounters(d, sids, cc)  # type: ignore[arg-type]

    def read(self, sids: Sequence[str], direction: Direction) -> FlowCounters:
        """A flow's counters per colour."""
        d = Direction(direction)
        sids = layout.normalize_sids(sids)
        ctrs = self._counters()
        if f"{_PREFIX[d]}_{flow_id(sids)}_c0" not in ctrs:
            raise FlowNotFound(f"{d} flow {list(sids)} is not monitored")
        return self._flow_counters(d, sids, ctrs)

    def flows(self, direction: Direction | None = None) -> list[FlowCounters]:
        """Every monitored flow with its counters."""
        ctrs = self._counters()
        keys = sorted(self._scan(), key=lambda k: (list(Direction).index(k[0]), k[1]))
        return [
            self._flow_counters(d, sids, ctrs)
            for d, sids in keys
            if direction is None or d == Direction(direction)
        ]

    # --- colour ----------------------------------------------------------------------------

    def set_colour(self, colour: int) -> None:
        """Flip the colour: the set and every egress flow chain, in one atomic transaction."""
        check_colour(colour)
        bit = self.mark_bit
        script = [f"flush set {FAMILY} {TABLE} colour", f"add element {FAMILY} {TABLE} colour {{ {colour} }}"]
        for d, sids in self._scan():
            if d is Direction.EGRESS:
                script += self._flow_chain_rules(d, flow_id(sids), colour, bit)
        self._nft("\n".join(script))

    def colour(self) -> int:
        """The active colour."""
        elems = self._set_elems("colour")
        return int(elems[0]) if elems else 0

    @property
    def mark_bit(self) -> int:
        """The DSCP bit carrying the colour."""
        elems = self._set_elems("mark_bit")
        return int(elems[0]) if elems else 0
