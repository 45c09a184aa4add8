"""The engine's side of the data plane: the counter driver, monitored flows, per-block counter
snapshots, and the probe endpoints (``local`` routes) that make probes congruent with the data.

Probes without custom kernel behaviour: a probe is a plain UDP datagram sent from the sender
node to the reflector's probe address, an address inside the prefix the measured SR policy
steers. So the kernel's own seg6 encap route carries it along exactly the data's SID list, the
counter program colours and counts it with the data, and at the egress the decapsulating
End.DT6 looks it up in its table. There the engine adds ``local ADDR/128 dev lo`` to that table
(End.DT6 never consults table ``local``), and the datagram reaches the reflector's socket. The
replies come back the same way along the reverse SID list. The endpoint addresses need not be
assigned to any interface: the sockets bind with IP(V6)_FREEBIND.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Sequence

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_common.errors import FailedPrecondition, InvalidArgument

from ..counters import CounterDriver, CounterError, Direction, FlowNotFound, open_driver
from ..srv6.model import Action, EncapMode
from ..srv6.netlink import SRv6Netlink
from .blocks import BlockClock
from .state import State

log = logging.getLogger(__name__)

FlowKey = tuple[Direction, tuple[str, ...]]
Snapshot = dict[FlowKey, tuple[int, int]]  # cumulative packets of colour 0 and colour 1
MAX_MARK_BIT = 5
DRIVER_NAMES = {pb.COUNTER_DRIVER_EBPF: "ebpf", pb.COUNTER_DRIVER_NETFILTER: "netfilter"}


def normalise_config(config: pb.NodeConfig) -> pb.NodeConfig:
    """A checked copy with defaults filled in (INVALID_ARGUMENT on a bad field)."""
    out = pb.NodeConfig()
    out.CopyFrom(config)
    out.driver = out.driver or pb.COUNTER_DRIVER_EBPF
    if out.driver not in DRIVER_NAMES:
        raise InvalidArgument(f"unknown counter driver {out.driver}")
    if out.color_bit > MAX_MARK_BIT:
        raise InvalidArgument(f"color_bit is 0 to {MAX_MARK_BIT} (a DSCP bit; ECN is never touched)")
    out.reflector_port = out.reflector_port or 862
    for field, value in (("reflector_port", out.reflector_port), ("sender_port", out.sender_port)):
        if value > 0xFFFF:
            raise InvalidArgument(f"{field} is 0 to 65535")
    for ifname in (*out.egress_interfaces, *out.ingress_interfaces):
        if not ifname or len(ifname) >= 16 or "/" in ifname:
            raise InvalidArgument(f"interface name {ifname!r} is invalid")
    if not out.egress_interfaces and not out.ingress_interfaces:
        raise InvalidArgument("name at least one egress or ingress interface")
    return out


class DataPlane:
    """One open counter driver with its attachments, shared by every measurement of the node."""

    def __init__(self, config: pb.NodeConfig, pin_root: str | None, state: State) -> None:
        """Open the driver and attach it; FAILED_PRECONDITION (and nothing left attached) if the
        driver cannot run here or an interface does not exist."""
        self.config = config
        self.state = state
        self.netlink = SRv6Netlink()
        # The engine's loop and the colour flipper's thread both use the driver.
        self._lock = threading.RLock()
        missing = [i for i in (*config.egress_interfaces, *config.ingress_interfaces) if not _exists(i)]
        if missing:
            raise FailedPrecondition(f"no such interface: {', '.join(sorted(set(missing)))}")
        name = DRIVER_NAMES[config.driver]
        kwargs: dict[str, object] = {"mark_bit": config.color_bit}
        if name == "ebpf" and pin_root is not None:
            kwargs["pin_root"] = pin_root
        try:
            self.driver: CounterDriver = open_driver(name, **kwargs)
        except (CounterError, OSError) as exc:
            raise FailedPrecondition(f"the {name} counter driver cannot run on this node: {exc}") from None
        self.attached: list[tuple[str, Direction]] = []
        try:
            self.apply_interfaces(config)
        except BaseException:
            self.close(detach=True)
            raise
        self._flows: Counter[FlowKey] = Counter()
        self._epochs: dict[FlowKey, int] = {}
        self._entered: dict[int, int] = {}  # block -> when this node started marking its colour
        self._snapshots: dict[tuple[int, int], Snapshot] = {}
        self._routes: dict[tuple[str, int], bool] = {}  # (address, table) -> created by us
        self._route_users: Counter[tuple[str, int]] = Counter()

    def apply_interfaces(self, config: pb.NodeConfig) -> None:
        """Attach to the interfaces ``config`` names and detach from the others."""
        with self._lock:
            wanted = [(i, Direction.EGRESS) for i in config.egress_interfaces]
            wanted += [(i, Direction.INGRESS) for i in config.ingress_interfaces]
            for ifname, d in wanted:
                if (ifname, d) not in self.attached:
                    try:
                        self.driver.attach(ifname, d)
                    except (CounterError, OSError) as exc:
                        raise FailedPrecondition(
                            f"cannot attach the counters to {ifname} ({d}): {exc}"
                        ) from None
                    self.attached.append((ifname, d))
            for ifname, d in list(self.attached):
                if (ifname, d) not in wanted:
                    with contextlib.suppress(CounterError, OSError):
                        self.driver.detach(ifname, d)
                    self.attached.remove((ifname, d))
            self.config = config

    def close(self, detach: bool = False) -> None:
        """Release the driver handle (programs and pinned counters stay unless ``detach``)."""
        with self._lock:
            if detach:
                for ifname, d in self.attached:
                    with contextlib.suppress(CounterError, OSError):
                        self.driver.detach(ifname, d)
                self.attached.clear()
            self.driver.close()

    # --- colour ------------------------------------------------------------------------------

    def enter_block(self, clock: BlockClock, block: int, now_ns: int) -> None:
        """Mark egress packets with ``block``'s colour from now on, and remember when we did."""
        with self._lock:
            colour = clock.colour(block)
            if self.driver.colour() != colour:
                self.driver.set_colour(colour)
            if block not in self._entered:
                self._entered[block] = now_ns
                if len(self._entered) > 8:
                    del self._entered[min(self._entered)]

    # --- flows -------------------------------------------------------------------------------

    def use_flow(self, sids: Sequence[str], direction: Direction) -> None:
        """Monitor a SID list (counted per user; counters kept if it is monitored already)."""
        with self._lock:
            key = (direction, tuple(sids))
            if not self._flows[key]:
                try:
                    self.driver.read(sids, direction)
                    # Monitored already: the counters of an earlier run of this agent, kept by the
                    # kernel; their epoch is the one recorded then.
                    epoch = self.state.flow_epoch(str(direction), key[1]) or 0
                except FlowNotFound:
                    try:
                        self.driver.add_flow(sids, direction)
                    except CounterError as exc:
                        raise FailedPrecondition(
                            f"cannot monitor {list(sids)} ({direction}): {exc}"
                        ) from None
                    epoch = time.time_ns()
                    self.state.put_flow_epoch(str(direction), key[1], epoch)
                self._epochs[key] = epoch
            self._flows[key] += 1

    def epoch(self, direction: Direction, sids: tuple[str, ...]) -> int:
        """When a monitored flow's counters started (Unix ns; 0 if unknown)."""
        return self._epochs.get((direction, sids), 0)

    def release_flow(self, sids: Sequence[str], direction: Direction) -> None:
        """Drop one user of a flow; the last one stops monitoring it."""
        with self._lock:
            key = (direction, tuple(sids))
            self._flows[key] -= 1
            if self._flows[key] <= 0:
                del self._flows[key]
                self._epochs.pop(key, None)
                with contextlib.suppress(CounterError):
                    self.driver.remove_flow(sids, direction)
                self.state.put_flow_epoch(str(direction), key[1], None)

    def snapshot(self, clock: BlockClock, block: int, guard_ns: int, now_ns: int | None = None) -> Snapshot:
        """The cumulative counters of every flow, as read once in block ``block + 1`` after the
        guard time; every caller asking for the same block and guard gets the same reading.

        :class:`LookupError` outside that window: too early (the block is not over everywhere)
        or too late (its colour is being reused by block ``block + 2``); and when this node went
        on marking the block's colour well into the next block (it was down at the boundary): its
        counters of that colour were still moving when the far end read its own.
        """
        with self._lock:
            now_ns = time.time_ns() if now_ns is None else now_ns
            if clock.block_of(now_ns) != block + 1:
                raise LookupError(f"block {block} is not readable now")
            entered = self._entered.get(block + 1)
            if entered is None or entered > clock.start(block + 1) + guard_ns // 2:
                raise LookupError(f"block {block}'s colour was still being marked here after the guard time")
            key = (block, guard_ns)
            snap = self._snapshots.get(key)
            if snap is None:
                now_ns = time.time_ns()  # the reading's own time matters, not the caller's "now"
                if clock.block_of(now_ns) != block + 1:
                    raise LookupError(f"block {block} is not readable now")
                snap = {
                    (f.direction, f.sids): (f.colours[0].packets, f.colours[1].packets)
                    for f in self.driver.flows()
                }
                if clock.block_of(time.time_ns()) != block + 1:
                    # The reading ran into block+2 (a starved process): it may hold that block's
                    # packets of the same colour. Refuse rather than report a wrong block.
                    raise LookupError(f"reading block {block} took too long")
                self._snapshots = {k: v for k, v in self._snapshots.items() if k[0] >= block - 1}
                self._snapshots[key] = snap
            return snap

    # --- probe endpoints ---------------------------------------------------------------------

    def use_endpoint(self, address: str, table: int) -> None:
        """Make ``address`` deliverable locally after End.DT6 in ``table``."""
        key = (address, table)
        if not self._route_users[key]:
            try:
                _local_route("add", address, table)
                self._routes[key] = True
            except NetlinkError as exc:
                if exc.code != errno.EEXIST:
                    raise FailedPrecondition(f"cannot add a local route for {address}: {exc}") from None
                self._routes[key] = False  # someone else's: never remove it
        self._route_users[key] += 1

    def release_endpoint(self, address: str, table: int) -> None:
        """Drop one user of a probe endpoint; the last one removes the route we added."""
        key = (address, table)
        self._route_users[key] -= 1
        if self._route_users[key] > 0:
            return
        del self._route_users[key]
        if self._routes.pop(key, False):
            with contextlib.suppress(NetlinkError):
                _local_route("del", address, table)

    # --- what the kernel routes --------------------------------------------------------------

    def check_path(self, segments: Sequence[str], address: str, what: str) -> None:
        """FAILED_PRECONDITION unless the kernel sends packets for ``address`` through an SRv6
        encap path into ``segments`` (a route lookup: what the probes will actually follow)."""
        path = self.netlink.lookup_path(address)
        if path is None or tuple(path.segments) != tuple(segments):
            found = f" (it follows {list(path.segments)})" if path else ""
            raise FailedPrecondition(
                f"no SRv6 path on this node steers {what} {address} into SID list {list(segments)}{found}"
            )
        if path.mode not in (EncapMode.ENCAP, EncapMode.ENCAP_RED):
            raise FailedPrecondition(
                f"the path to {address} uses {path.mode.iproute2_name}; probes need encap"
            )

    def decap_table(self, sid: str, what: str) -> int:
        """The table the End.DT6 behaviour ``sid`` looks packets up in (FAILED_PRECONDITION if
        ``sid`` is not such a behaviour here)."""
        b = self.netlink.lookup_behavior(sid)
        if b is None:
            raise FailedPrecondition(f"{what} {sid} is not a local SID of this node")
        if b.action is Action.END_DT6 and b.lookup_table:
            return b.lookup_table
        raise FailedPrecondition(
            f"{what} {sid} is {b.action.kernel_name} here; probes are delivered through End.DT6 in table mode"
        )


def _exists(ifname: str) -> bool:
    try:
        socket.if_nametoindex(ifname)
    except OSError:
        return False
    return True


def _local_route(command: str, address: str, table: int) -> None:
    """``ip -6 route {add|del} local ADDRESS/128 dev lo table TABLE``."""
    with IPRoute() as ipr:
        ipr.route(
            command, dst=address, dst_len=128, type="local", table=table, oif=ipr.link_lookup(ifname="lo")[0]
        )
