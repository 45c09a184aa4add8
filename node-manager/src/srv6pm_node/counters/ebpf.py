"""The eBPF counter driver: the srv6pm programs (``node-manager/bpf/``) loaded through libbpf.

State lives in maps pinned per network namespace (see :mod:`.pins`), so a new driver instance —
an agent restart — picks up the flows and counters of the previous one, and re-attaching replaces
the running program in place (TC: same handle and priority; XDP: same interface) without losing a
count. Hot-path operations (colour flips, counter reads) are single map syscalls: no bpftool, no
``ip``.

Flow table (see ``bpf/srv6pm.h``): ``srv6pm_idx_{egr,ing}`` is an open-addressing hash index in
an ARRAY map (a SID list's slot is its home slot, hash & (size - 1), or one of the next
``MAX_PROBE - 1``) holding the hash and a flow id; ``srv6pm_flow_{egr,ing}`` holds each flow's
full SID list and ``srv6pm_ctr_{egr,ing}`` its per-CPU counters, by flow id. One writer per
namespace is the design (the agent); an operator's CLI next to it is tolerated, as flow ids are
re-checked against the SID-list store before use.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path

from . import layout, libbpf, pins
from .api import (
    Attachment,
    ColourCount,
    CounterDriver,
    CounterError,
    Direction,
    FlowCounters,
    FlowNotFound,
    HashCollision,
    check_colour,
)

OBJ_DIR = Path(__file__).parent / "bpf"
COUNTERS_OBJ = OBJ_DIR / "srv6pm_counters.bpf.o"
TC_HANDLE = 0x5336  # "S6": our filter's handle on clsact ingress/egress
TC_PRIORITY = 1
_OURS = {layout.PROG_TC_EGRESS, layout.PROG_XDP_INGRESS, layout.PROG_TC_INGRESS}


class EbpfDriver(CounterDriver):
    """Counter driver over the srv6pm eBPF programs.

    ``pin_root``: bpffs directory for the pins (mounted if needed); ``None`` disables pinning
    (maps live as long as this object or an attached program). ``netns``: name of the network
    namespace to act in (default: the caller's). ``mark_bit``: set the DSCP bit used for the colour
    (``None`` keeps the pinned setting; default bit 0).
    """

    name = "ebpf"

    def __init__(
        self,
        *,
        pin_root: str | os.PathLike[str] | None = pins.DEFAULT_PIN_ROOT,
        netns: str | None = None,
        mark_bit: int | None = None,
        obj_path: str | os.PathLike[str] = COUNTERS_OBJ,
    ) -> None:
        if not Path(obj_path).exists():
            raise CounterError(f"{obj_path} missing: build it with `make -C node-manager/bpf`")
        self.netns = netns
        with pins.in_netns(netns):
            self.pin_dir = pins.pin_dir(pin_root) if pin_root is not None else None
        self.obj = libbpf.BpfObject(str(obj_path), str(self.pin_dir) if self.pin_dir else None)
        self._index = {d: self.obj.map(layout.INDEX_MAP[d]) for d in Direction}
        self._flows = {d: self.obj.map(layout.FLOW_MAP[d]) for d in Direction}
        self._ctrs = {d: self.obj.map(layout.CTR_MAP[d], percpu=True) for d in Direction}
        self._cfg = self.obj.map(layout.CFG_MAP)
        self._ids = {
            d: {flow for _, flow, state, _ in self._slots(d) if state == layout.USED} for d in Direction
        }  # flow ids in use
        self._known: dict[tuple[Direction, int], tuple[int, tuple[str, ...]]] = {}  # see flows()
        if mark_bit is not None:
            colour, _ = self._read_cfg()
            self._cfg.update(layout.INDEX_FMT.pack(0), layout.CFG_FMT.pack(colour, layout.tc_mask(mark_bit)))

    def close(self) -> None:
        """Drop this handle; attached programs keep running, pinned maps keep counting."""
        self.obj.close()

    # --- attachment ------------------------------------------------------------------------

    def attach(self, ifname: str, direction: Direction, mode: str = "auto") -> str:
        """Attach: egress → TC clsact egress; ingress → XDP (driver mode) or TC clsact ingress.

        ``mode`` for ingress: "xdp", "tc", or "auto" (XDP, falling back to TC). Re-attaching
        replaces our previous program in place; a foreign XDP program is never replaced.
        """
        direction = Direction(direction)
        if mode not in ("auto", "xdp", "tc"):
            raise ValueError("mode is auto, xdp or tc")
        with pins.in_netns(self.netns):
            idx = self._ifindex(ifname)
            if direction is Direction.EGRESS:
                if mode == "xdp":
                    raise CounterError("XDP sees only incoming packets: egress uses TC")
                libbpf.tc_attach(idx, False, self.obj.prog_fd(layout.PROG_TC_EGRESS), TC_HANDLE, TC_PRIORITY)
                return "tc"
            if mode in ("auto", "xdp"):
                try:
                    self._xdp_attach(idx, ifname)
                    # never count twice: drop a TC ingress variant left from an earlier attach
                    libbpf.tc_detach(idx, True, TC_HANDLE, TC_PRIORITY)
                    return "xdp"
                except (OSError, CounterError) as exc:  # no native XDP here, or a foreign one
                    if mode == "xdp":
                        raise CounterError(f"XDP attach on {ifname} failed: {exc}") from exc
            self._xdp_detach_ours(idx)
            libbpf.tc_attach(idx, True, self.obj.prog_fd(layout.PROG_TC_INGRESS), TC_HANDLE, TC_PRIORITY)
            return "tc"

    def _xdp_attach(self, idx: int, ifname: str) -> None:
        current = libbpf.xdp_query(idx)
        if current and libbpf.prog_name(current) not in _OURS:
            raise CounterError(f"{ifname} runs a foreign XDP program (id {current}); not replacing it")
        libbpf.xdp_attach(idx, self.obj.prog_fd(layout.PROG_XDP_INGRESS), libbpf.XDP_FLAGS_DRV_MODE)

    def _xdp_detach_ours(self, idx: int) -> None:
        current = libbpf.xdp_query(idx)
        if current and libbpf.prog_name(current) in _OURS:
            libbpf.xdp_detach(idx)

    def detach(self, ifname: str, direction: Direction) -> None:
        """Detach our program(s) from an interface; a no-op where none is attached."""
        direction = Direction(direction)
        with pins.in_netns(self.netns):
            idx = self._ifindex(ifname)
            if direction is Direction.EGRESS:
                libbpf.tc_detach(idx, False, TC_HANDLE, TC_PRIORITY)
            else:
                self._xdp_detach_ours(idx)
                libbpf.tc_detach(idx, True, TC_HANDLE, TC_PRIORITY)

    def attachments(self) -> list[Attachment]:
        """Our programs attached in this namespace, by interface."""
        out = []
        with pins.in_netns(self.netns):
            for idx, ifname in socket.if_nameindex():
                if libbpf.tc_query(idx, False, TC_HANDLE, TC_PRIORITY):
                    out.append(Attachment(ifname, Direction.EGRESS, "tc"))
                xdp = libbpf.xdp_query(idx)
                if xdp and libbpf.prog_name(xdp) in _OURS:
                    out.append(Attachment(ifname, Direction.INGRESS, "xdp"))
                if libbpf.tc_query(idx, True, TC_HANDLE, TC_PRIORITY):
                    out.append(Attachment(ifname, Direction.INGRESS, "tc"))
        return out

    @staticmethod
    def _ifindex(ifname: str) -> int:
        try:
            return socket.if_nametoindex(ifname)
        except OSError as exc:
            raise CounterError(f"no interface {ifname}") from exc

    # --- flows -----------------------------------------------------------------------------

    def _slot(self, d: Direction, k: int) -> tuple[int, int, int]:
        """(hash, state, flow id) of index slot ``k``."""
        raw = self._index[d].lookup(layout.INDEX_FMT.pack(k % layout.TABLE_SIZE))
        return layout.SLOT_FMT.unpack(raw) if raw else (0, layout.EMPTY, 0)

    def _set_slot(self, d: Direction, k: int, h: int, state: int, flow: int) -> None:
        key = layout.INDEX_FMT.pack(k % layout.TABLE_SIZE)
        self._index[d].update(key, layout.SLOT_FMT.pack(h, state, flow))

    def _sids(self, d: Direction, flow: int) -> tuple[str, ...]:
        raw = self._flows[d].lookup(layout.INDEX_FMT.pack(flow))
        n, _, sids = layout.FLOW_FMT.unpack(raw) if raw else (0, 0, b"")
        return layout.sids_from_srh(sids, n)

    def _find(self, d: Direction, sids: tuple[str, ...]) -> tuple[int | None, int | None]:
        """Probe like the BPF program: (slot holding ``sids`` or None, first reusable slot or None).

        Raises :class:`HashCollision` if another monitored list has the same 64-bit hash.
        """
        h = layout.sidlist_hash(sids)
        home, free = layout.home_slot(h), None
        for i in range(layout.MAX_PROBE):
            k = (home + i) % layout.TABLE_SIZE
            sh, state, flow = self._slot(d, k)
            if state == layout.EMPTY:
                return None, free if free is not None else k
            if state == layout.DELETED:
                free = k if free is None else free
            elif sh == h:
                stored = self._sids(d, flow)
                if stored == sids:
                    return k, None
                raise HashCollision(f"{list(sids)} hashes like the monitored {list(stored)}")
        return None, free

    def add_flow(self, sids: Sequence[str], direction: Direction) -> None:
        """Monitor a SID list; counters start from zero. No-op if already monitored."""
        d = Direction(direction)
        sids = layout.normalize_sids(sids)
        found, free = self._find(d, sids)
        if found is not None:
            return
        if free is None:
            raise CounterError(f"no free index slot within {layout.MAX_PROBE} of this SID list's home slot")
        ids = self._ids[d]
        if len(ids) >= layout.MAX_FLOWS:
            raise CounterError(f"flow table full ({layout.MAX_FLOWS} {d} flows)")
        flow = len(ids)  # the first free id when nothing was removed: O(1) for bulk adds
        while True:
            if flow not in ids:
                if not self._sids(d, flow):
                    break
                # the SID-list store doubles as the allocation map: this id was taken by another
                # writer (the CLI next to a running agent) since our snapshot
                ids.add(flow)
                if len(ids) >= layout.MAX_FLOWS:
                    raise CounterError(f"flow table full ({layout.MAX_FLOWS} {d} flows)")
            flow = (flow + 1) % layout.MAX_FLOWS
        h = layout.sidlist_hash(sids)
        # the program may run at any moment: SID list and zeroed counters first (nothing points
        # at this flow id yet), then the index slot as a tombstone, then only its state flipped
        key = layout.INDEX_FMT.pack(flow)
        self._flows[d].update(key, layout.FLOW_FMT.pack(len(sids), 0, layout.srh_bytes(sids)))
        self._ctrs[d].update(key, bytes(self._ctr_stride() * libbpf.possible_cpus()))
        self._set_slot(d, free, h, layout.DELETED, flow)
        self._set_slot(d, free, h, layout.USED, flow)
        ids.add(flow)

    def remove_flow(self, sids: Sequence[str], direction: Direction) -> bool:
        """Stop monitoring a SID list (its counters are gone); False if it was not monitored."""
        d = Direction(direction)
        sids = layout.normalize_sids(sids)
        k, _ = self._find(d, sids)
        if k is None:
            return False
        h, _, flow = self._slot(d, k)
        self._set_slot(d, k, h, layout.DELETED, flow)  # only the state word changes
        # a tombstone followed by an empty slot ends no chain that would not end there anyway:
        # clear such tombstones so probe chains do not fill up over time
        while self._slot(d, k + 1)[1] == layout.EMPTY and self._slot(d, k)[1] == layout.DELETED:
            self._set_slot(d, k, 0, layout.EMPTY, 0)
            k -= 1
        # free the id for reuse (a packet that found the slot a moment ago now fails the compare)
        self._flows[d].update(layout.INDEX_FMT.pack(flow), bytes(layout.FLOW_FMT.size))
        self._ids[d].discard(flow)
        return True

    @staticmethod
    def _ctr_stride() -> int:
        return (layout.CTR_FMT.size + 7) & ~7

    def _counters(self, d: Direction, k: int) -> tuple[ColourCount, ColourCount]:
        return self._sum(self._ctrs[d].lookup(layout.INDEX_FMT.pack(k)) or b"")

    def _sum(self, raw: bytes) -> tuple[ColourCount, ColourCount]:
        """One flow's per-CPU counters summed."""
        tot = [0, 0, 0, 0]
        stride = self._ctr_stride()
        for cpu in range(len(raw) // stride):
            for i, v in enumerate(layout.CTR_FMT.unpack_from(raw, cpu * stride)):
                tot[i] += v
        return (ColourCount(tot[0], tot[2]), ColourCount(tot[1], tot[3]))

    def read(self, sids: Sequence[str], direction: Direction) -> FlowCounters:
        """Counters of one flow per colour, summed over CPUs."""
        d = Direction(direction)
        sids = layout.normalize_sids(sids)
        k, _ = self._find(d, sids)
        if k is None:
            raise FlowNotFound(f"{d} flow {list(sids)} is not monitored")
        return FlowCounters(d, sids, self._counters(d, self._slot(d, k)[2]))

    def _slots(self, d: Direction) -> list[tuple[int, int, int, int]]:
        """(slot, flow id, state, hash) of every non-empty index slot (one batched read of the
        index)."""
        raw = self._index[d].dump_array(layout.TABLE_SIZE)
        size = layout.SLOT_FMT.size
        states = raw[8::size]  # low byte of each slot's state word (offset 8): skip empty ones fast
        out = []
        for k in (i for i, b in enumerate(states) if b):
            h, state, flow = layout.SLOT_FMT.unpack_from(raw, k * size)
            out.append((k, flow, state, h))
        return out

    def flows(self, direction: Direction | None = None) -> list[FlowCounters]:
        """Every monitored flow with its counters: a batched read of the index and of the
        counters, whatever the number of flows (the engine reads them all every block)."""
        out = []
        per_flow = self._ctr_stride() * libbpf.possible_cpus()
        for d in [Direction(direction)] if direction else list(Direction):
            used = [(flow, h) for _, flow, state, h in self._slots(d) if state == layout.USED]
            if not used:
                continue
            raw = self._ctrs[d].dump_array(max(flow for flow, _ in used) + 1)
            for sids, flow in sorted((self._sids_of(d, flow, h), flow) for flow, h in used):
                out.append(FlowCounters(d, sids, self._sum(raw[flow * per_flow : (flow + 1) * per_flow])))
        return out

    def _sids_of(self, d: Direction, flow: int, h: int) -> tuple[str, ...]:
        """A used flow's SID list, read once: while its index slot keeps the same hash it is the
        same list (another process adding or removing flows changes the hash or the id)."""
        known = self._known.get((d, flow))
        if known is None or known[0] != h:
            known = (h, self._sids(d, flow))
            self._known[(d, flow)] = known
        return known[1]

    # --- colour ----------------------------------------------------------------------------

    def _read_cfg(self) -> tuple[int, int]:
        raw = self._cfg.lookup(b"\0" * 4)
        return layout.CFG_FMT.unpack(raw) if raw else (0, 0)

    def set_colour(self, colour: int) -> None:
        """Set the active colour (one map write; the next packet is marked with it)."""
        _, mask = self._read_cfg()
        self._cfg.update(b"\0" * 4, layout.CFG_FMT.pack(check_colour(colour), mask))

    def colour(self) -> int:
        """The active colour."""
        return self._read_cfg()[0] & 1

    @property
    def mark_bit(self) -> int:
        """The DSCP bit carrying the colour (0 until set: the program's default)."""
        mask = self._read_cfg()[1]
        return mask.bit_length() - 3 if mask else 0
