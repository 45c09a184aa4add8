"""SRv6 routes in the kernel, over netlink (pyroute2): create, read back, list, replace, delete.

Every answer is read back from the kernel. Mutations are serialised by one lock, so the
check-then-act of an idempotent create cannot race with another call, and each is a single
netlink operation (or an add-then-delete pair rolled back on failure): an error leaves the
kernel as it was.

pyroute2 0.9.7 quirks handled here: its SRH encoder writes the segments in the order given while
the kernel's SRH holds them last-first, so we hand it the list reversed; it knows only the
"encap" and "inline" modes and silently falls back to "encap" for others, so the two missing
modes are registered below; and it cannot decode the SRH of End.B6 routes, so we decode those
bytes ourselves.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.rtmsg import rtmsg_base

from .errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, SRv6Error
from .model import Action, BehaviorSpec, EncapMode, InterfaceInfo, PathSpec

_SEG6_ENCAP = 5  # LWTUNNEL_ENCAP_SEG6
_SEG6LOCAL_ENCAP = 7  # LWTUNNEL_ENCAP_SEG6_LOCAL
_IPV6_DEFAULT_METRIC = 1024  # what the kernel assigns an IPv6 route given metric 0

_srh = rtmsg_base.seg6_encap_info.ipv6_sr_hdr
_srh.encapmodes.update({m.iproute2_name: m.value for m in EncapMode})
_srh.r_encapmodes.update({m.value: m.iproute2_name for m in EncapMode})


def _effective_metric(family: int, metric: int) -> int:
    return metric or (_IPV6_DEFAULT_METRIC if family == 6 else 0)


class SRv6Netlink:
    """SRv6 paths and behaviours of one network namespace (the agent's own by default)."""

    def __init__(self, netns: str | None = None) -> None:
        self._netns = netns
        self._lock = threading.Lock()
        self._vrf_support: bool | None = None

    @contextmanager
    def _ipr(self) -> Iterator[IPRoute]:
        ipr = IPRoute(netns=self._netns) if self._netns else IPRoute()
        try:
            yield ipr
        finally:
            ipr.close()

    # ----- paths ------------------------------------------------------------------------------

    def list_paths(self, table: int | None) -> list[PathSpec]:
        """SRv6 paths of ``table`` (None: every table)."""
        with self._ipr() as ipr:
            names = _link_names(ipr)
            return [self._to_path(ipr, r, names) for r in self._routes(ipr, _SEG6_ENCAP, table)]

    def lookup_path(self, address: str) -> PathSpec | None:
        """The SRv6 path the kernel sends a packet for ``address`` through (one route lookup, the
        kernel's own decision, whatever the number of routes); None if no SRv6 path carries it.
        The answer's destination is ``address``/128: a lookup does not tell the matched prefix."""
        with self._ipr() as ipr:
            route = self._lookup(ipr, address, _SEG6_ENCAP)
            return None if route is None else self._to_path(ipr, route)

    def get_path(self, destination: str, table: int) -> PathSpec:
        """The SRv6 path at (destination, table); NotFound if none."""
        with self._ipr() as ipr:
            route = self._find(ipr, _SEG6_ENCAP, destination, table)
            if route is None:
                raise NotFound(f"no SRv6 path to {destination} in table {table}")
            return self._to_path(ipr, route)

    def create_path(self, spec: PathSpec) -> tuple[PathSpec, bool]:
        """Install ``spec``; (path, False) if an identical one exists; AlreadyExists if a different one."""
        with self._lock, self._ipr() as ipr:
            oif = self._oif(ipr, spec.device)
            current = self._find(ipr, _SEG6_ENCAP, spec.destination, spec.table)
            if current is not None:
                existing = self._to_path(ipr, current)
                if self._same_path(existing, spec):
                    return existing, False
                raise AlreadyExists(
                    f"a different SRv6 path to {spec.destination} exists in table {spec.table}: "
                    f"segments {list(existing.segments)}, mode {existing.mode.iproute2_name}, "
                    f"device {existing.device}, metric {existing.metric}"
                )
            self._call(ipr, "add", self._path_args(spec, oif), spec.destination)
            return self._read_back_path(ipr, spec), True

    def update_path(self, spec: PathSpec) -> PathSpec:
        """Replace the SRv6 path at spec's key; NotFound if there is none."""
        with self._lock, self._ipr() as ipr:
            oif = self._oif(ipr, spec.device)
            current = self._find(ipr, _SEG6_ENCAP, spec.destination, spec.table)
            if current is None:
                raise NotFound(f"no SRv6 path to {spec.destination} in table {spec.table}")
            self._replace(
                ipr, current, self._path_args(spec, oif), spec.destination, spec.family, spec.metric
            )
            return self._read_back_path(ipr, spec)

    def delete_path(self, destination: str, table: int) -> PathSpec:
        """Remove the SRv6 path at (destination, table); return it as it was."""
        with self._lock, self._ipr() as ipr:
            current = self._find(ipr, _SEG6_ENCAP, destination, table)
            if current is None:
                raise NotFound(f"no SRv6 path to {destination} in table {table}")
            before = self._to_path(ipr, current)
            self._delete(ipr, current, destination)
            return before

    # ----- behaviours -------------------------------------------------------------------------

    def list_behaviors(self, table: int | None) -> list[BehaviorSpec]:
        """Local SID behaviours of ``table`` (None: every table)."""
        with self._ipr() as ipr:
            names = _link_names(ipr)
            return [self._to_behavior(ipr, r, names) for r in self._routes(ipr, _SEG6LOCAL_ENCAP, table)]

    def lookup_behavior(self, sid: str) -> BehaviorSpec | None:
        """The local SID behaviour the kernel applies to a packet for ``sid`` (one route lookup);
        None if that address is not an SRv6 local SID here."""
        with self._ipr() as ipr:
            route = self._lookup(ipr, sid, _SEG6LOCAL_ENCAP)
            return None if route is None else self._to_behavior(ipr, route)

    def get_behavior(self, sid: str, table: int) -> BehaviorSpec:
        """The behaviour at (sid, table); NotFound if none."""
        with self._ipr() as ipr:
            route = self._find(ipr, _SEG6LOCAL_ENCAP, sid, table)
            if route is None:
                raise NotFound(f"no behaviour for SID {sid} in table {table}")
            return self._to_behavior(ipr, route)

    def create_behavior(self, spec: BehaviorSpec) -> tuple[BehaviorSpec, bool]:
        """Install ``spec``; (behaviour, False) if identical exists; AlreadyExists if different."""
        with self._lock, self._ipr() as ipr:
            oif = self._oif(ipr, spec.device)
            current = self._find(ipr, _SEG6LOCAL_ENCAP, spec.sid, spec.table)
            if current is not None:
                existing = self._to_behavior(ipr, current)
                if self._same_behavior(existing, spec):
                    return existing, False
                raise AlreadyExists(
                    f"a different behaviour for SID {spec.sid} exists in table {spec.table}: "
                    f"{existing.action.kernel_name}"
                )
            self._check_vrf(ipr, spec)
            self._call(ipr, "add", self._behavior_args(spec, oif), spec.sid)
            return self._read_back_behavior(ipr, spec), True

    def update_behavior(self, spec: BehaviorSpec) -> BehaviorSpec:
        """Replace the behaviour at spec's key; NotFound if there is none."""
        with self._lock, self._ipr() as ipr:
            oif = self._oif(ipr, spec.device)
            current = self._find(ipr, _SEG6LOCAL_ENCAP, spec.sid, spec.table)
            if current is None:
                raise NotFound(f"no behaviour for SID {spec.sid} in table {spec.table}")
            self._check_vrf(ipr, spec)
            self._replace(ipr, current, self._behavior_args(spec, oif), spec.sid, 6, spec.metric)
            return self._read_back_behavior(ipr, spec)

    def delete_behavior(self, sid: str, table: int) -> BehaviorSpec:
        """Remove the behaviour at (sid, table); return it as it was."""
        with self._lock, self._ipr() as ipr:
            current = self._find(ipr, _SEG6LOCAL_ENCAP, sid, table)
            if current is None:
                raise NotFound(f"no behaviour for SID {sid} in table {table}")
            before = self._to_behavior(ipr, current)
            self._delete(ipr, current, sid)
            return before

    # ----- interfaces -------------------------------------------------------------------------

    def list_interfaces(self) -> list[InterfaceInfo]:
        """Every interface with its non-link-local addresses."""
        with self._ipr() as ipr:
            addrs: dict[int, list[str]] = {}
            for a in ipr.get_addr():
                address = a.get_attr("IFA_ADDRESS") or a.get_attr("IFA_LOCAL")
                if not address or ipaddress.ip_address(address).is_link_local:
                    continue
                addrs.setdefault(a["index"], []).append(f"{address}/{a['prefixlen']}")
            out = []
            for link in ipr.get_links():
                flags = link["flags"]
                mac = link.get_attr("IFLA_ADDRESS") or ""
                out.append(
                    InterfaceInfo(
                        name=link.get_attr("IFLA_IFNAME"),
                        index=link["index"],
                        up=bool(flags & 0x1) and link.get_attr("IFLA_OPERSTATE") in ("UP", "UNKNOWN"),
                        mac="" if mac == "00:00:00:00:00:00" else mac,
                        mtu=link.get_attr("IFLA_MTU") or 0,
                        addresses=tuple(sorted(addrs.get(link["index"], []))),
                    )
                )
            return sorted(out, key=lambda i: i.index)

    # ----- netlink plumbing -------------------------------------------------------------------

    @staticmethod
    def _routes(ipr: IPRoute, encap_type: int, table: int | None) -> list[Any]:
        families = (socket.AF_INET6,) if encap_type == _SEG6LOCAL_ENCAP else (socket.AF_INET6, socket.AF_INET)
        found = []
        for family in families:
            for route in ipr.get_routes(family=family):
                if route.get("encap_type") != encap_type:
                    continue
                if table is not None and _table_of(route) != table:
                    continue
                found.append(route)
        return found

    def _find(self, ipr: IPRoute, encap_type: int, network: str, table: int) -> Any | None:
        net = ipaddress.ip_network(network)
        for route in self._routes(ipr, encap_type, table):
            if route["dst_len"] == net.prefixlen and _dst_of(route, net.version) == str(net.network_address):
                return route
        return None

    @staticmethod
    def _lookup(ipr: IPRoute, address: str, encap_type: int) -> Any | None:
        try:
            routes = ipr.route("get", dst=str(ipaddress.ip_address(address)))
        except NetlinkError:
            return None  # unreachable, prohibited...
        if not routes or routes[0].get_attr("RTA_ENCAP_TYPE") != encap_type:
            return None
        return routes[0]

    @staticmethod
    def _oif(ipr: IPRoute, device: str) -> int:
        found = ipr.link_lookup(ifname=device)
        if not found:
            raise FailedPrecondition(f"device {device!r} does not exist on this node")
        return found[0]

    @staticmethod
    def _path_args(spec: PathSpec, oif: int) -> dict[str, Any]:
        args: dict[str, Any] = {
            "dst": spec.destination,
            "table": spec.table,
            "oif": oif,
            # Reversed: pyroute2 writes them as given, the kernel's SRH holds the last segment first.
            "encap": {"type": "seg6", "mode": spec.mode.iproute2_name, "segs": list(reversed(spec.segments))},
        }
        if spec.metric:
            args["priority"] = spec.metric
        return args

    @staticmethod
    def _behavior_args(spec: BehaviorSpec, oif: int) -> dict[str, Any]:
        encap: dict[str, Any] = {"type": "seg6local", "action": spec.action.kernel_name}
        if spec.action is Action.END_X or spec.action is Action.END_DX6:
            encap["nh6"] = spec.nexthop
        elif spec.action is Action.END_DX4:
            encap["nh4"] = spec.nexthop
        elif spec.action is Action.END_T or (spec.action is Action.END_DT6 and spec.lookup_table):
            encap["table"] = spec.lookup_table
        elif spec.action in (Action.END_DT4, Action.END_DT46):
            encap["vrf_table"] = spec.vrf_table
        elif spec.action in (Action.END_B6, Action.END_B6_ENCAPS):
            encap["srh"] = {"segs": list(reversed(spec.segments))}
        args: dict[str, Any] = {"dst": spec.sid, "table": spec.table, "oif": oif, "encap": encap}
        if spec.metric:
            args["priority"] = spec.metric
        return args

    def _check_vrf(self, ipr: IPRoute, spec: BehaviorSpec) -> None:
        """VRF-mode decapsulation needs kernel VRF support and a VRF device bound to the table."""
        if not spec.vrf_table:
            return
        for link in ipr.get_links():
            info = link.get("IFLA_LINKINFO")
            if info and info.get("IFLA_INFO_KIND") == "vrf":
                data = info.get("IFLA_INFO_DATA")
                if data and data.get("IFLA_VRF_TABLE") == spec.vrf_table:
                    if spec.action is Action.END_DT6:
                        # pyroute2 0.9.7 cannot encode SEG6_LOCAL_VRFTABLE for End.DT6.
                        raise FailedPrecondition(
                            "End.DT6 in VRF mode is not supported by this agent yet; "
                            "use End.DT46 or End.DT6 with lookup_table"
                        )
                    return
        if not self._kernel_has_vrf(ipr):
            raise FailedPrecondition(
                f"{spec.action.kernel_name} with vrf_table needs VRF support, which this kernel lacks "
                "(CONFIG_NET_VRF)"
            )
        raise FailedPrecondition(f"no VRF device is bound to table {spec.vrf_table} (vrf_table)")

    def _kernel_has_vrf(self, ipr: IPRoute) -> bool:
        if self._vrf_support is None:
            probe = f"s6pmvrf{threading.get_native_id() % 100000}"
            try:
                ipr.link("add", ifname=probe, kind="vrf", vrf_table=4242)
            except NetlinkError as exc:
                self._vrf_support = exc.code != errno.EOPNOTSUPP
            else:
                ipr.link("del", index=ipr.link_lookup(ifname=probe)[0])
                self._vrf_support = True
        return self._vrf_support

    @staticmethod
    def _call(ipr: IPRoute, command: str, args: dict[str, Any], what: str) -> None:
        try:
            ipr.route(command, **args)
        except NetlinkError as exc:
            raise _kernel_error(exc, what) from None

    def _replace(
        self, ipr: IPRoute, current: Any, args: dict[str, Any], what: str, family: int, metric: int
    ) -> None:
        old_metric = current.get_attr("RTA_PRIORITY") or 0
        if _effective_metric(family, metric) == old_metric:
            self._call(ipr, "replace", args, what)  # atomic in the kernel
            return
        # A different metric is a different kernel route: add the new one, then remove the old;
        # if the removal fails, take the new one back out.
        self._call(ipr, "add", args, what)
        try:
            self._delete(ipr, current, what)
        except SRv6Error:
            new_args = dict(args, priority=_effective_metric(family, metric))
            self._call(ipr, "del", new_args, what)
            raise

    def _delete(self, ipr: IPRoute, route: Any, what: str) -> None:
        family = 6 if route["family"] == socket.AF_INET6 else 4
        args = {
            "dst": f"{_dst_of(route, family)}/{route['dst_len']}",
            "table": _table_of(route),
            "priority": route.get_attr("RTA_PRIORITY") or 0,
        }
        self._call(ipr, "del", args, what)

    def _read_back_path(self, ipr: IPRoute, spec: PathSpec) -> PathSpec:
        route = self._find(ipr, _SEG6_ENCAP, spec.destination, spec.table)
        if route is None:
            raise SRv6Error(f"the kernel accepted the path to {spec.destination} but does not show it")
        return self._to_path(ipr, route)

    def _read_back_behavior(self, ipr: IPRoute, spec: BehaviorSpec) -> BehaviorSpec:
        route = self._find(ipr, _SEG6LOCAL_ENCAP, spec.sid, spec.table)
        if route is None:
            raise SRv6Error(f"the kernel accepted the behaviour for {spec.sid} but does not show it")
        return self._to_behavior(ipr, route)

    @staticmethod
    def _same_path(existing: PathSpec, wanted: PathSpec) -> bool:
        return existing == PathSpec(
            **{**wanted.__dict__, "metric": _effective_metric(wanted.family, wanted.metric)}
        )

    @staticmethod
    def _same_behavior(existing: BehaviorSpec, wanted: BehaviorSpec) -> bool:
        return existing == BehaviorSpec(**{**wanted.__dict__, "metric": _effective_metric(6, wanted.metric)})

    # ----- decoding ---------------------------------------------------------------------------

    @staticmethod
    def _ifname(ipr: IPRoute, index: int | None, names: dict[int, str] | None) -> str:
        if not index:
            return ""
        if names is not None:
            return names.get(index, str(index))
        links = ipr.get_links(index)
        return links[0].get("IFLA_IFNAME") if links else str(index)

    def _to_path(self, ipr: IPRoute, route: Any, names: dict[int, str] | None = None) -> PathSpec:
        family = 6 if route["family"] == socket.AF_INET6 else 4
        srh = route.get_attr("RTA_ENCAP").get_attr("SEG6_IPTUNNEL_SRH")
        mode = EncapMode(srh["encapmode"])
        segments = tuple(reversed(srh["segs"]))
        if mode is EncapMode.INLINE:
            segments = _without_inline_slot(segments)
        return PathSpec(
            destination=f"{_dst_of(route, family)}/{route['dst_len']}",
            segments=segments,
            mode=mode,
            device=self._ifname(ipr, route.get_attr("RTA_OIF"), names),
            table=_table_of(route),
            metric=route.get_attr("RTA_PRIORITY") or 0,
        )

    def _to_behavior(self, ipr: IPRoute, route: Any, names: dict[int, str] | None = None) -> BehaviorSpec:
        encap = route.get_attr("RTA_ENCAP")
        action = Action(encap.get_attr("SEG6_LOCAL_ACTION"))
        nexthop = encap.get_attr("SEG6_LOCAL_NH6") or encap.get_attr("SEG6_LOCAL_NH4") or ""
        lookup_table = encap.get_attr("SEG6_LOCAL_TABLE") or 0
        vrf_table = encap.get_attr("SEG6_LOCAL_VRFTABLE") or 0
        segs: tuple[str, ...] = ()
        for slot in encap["attrs"]:
            if slot.name != "SEG6_LOCAL_SRH":
                continue
            srh_nla = slot.nla  # the undecoded bytes: pyroute2 cannot decode this SRH itself
            raw = bytes(srh_nla.data[srh_nla.offset + 4 : srh_nla.offset + srh_nla.length])
            segs = _srh_segments(raw)
            if action is Action.END_B6:
                segs = _without_inline_slot(segs)
        return BehaviorSpec(
            sid=f"{_dst_of(route, 6)}/{route['dst_len']}",
            action=action,
            device=self._ifname(ipr, route.get_attr("RTA_OIF"), names),
            table=_table_of(route),
            metric=route.get_attr("RTA_PRIORITY") or 0,
            nexthop=nexthop,
            lookup_table=lookup_table,
            vrf_table=vrf_table,
            segments=segs,
        )


def _link_names(ipr: IPRoute) -> dict[int, str]:
    """Every interface's name by index: one dump for a whole listing, not one query per route."""
    return {link["index"]: link.get("IFLA_IFNAME") for link in ipr.get_links()}


def _srh_segments(raw: bytes) -> tuple[str, ...]:
    """Segments of a raw SRH in visiting order (the SRH stores them last-first)."""
    if len(raw) < 8:
        return ()
    last_entry = raw[4]
    count = min(last_entry + 1, (len(raw) - 8) // 16)
    stored = [socket.inet_ntop(socket.AF_INET6, raw[8 + 16 * i : 24 + 16 * i]) for i in range(count)]
    return tuple(reversed(stored))


def _without_inline_slot(segments: tuple[str, ...]) -> tuple[str, ...]:
    """Drop the slot an inserted (inline) SRH keeps for the packet's original destination."""
    return segments[:-1] if segments and segments[-1] == "::" else segments


def _table_of(route: Any) -> int:
    return route.get_attr("RTA_TABLE") or route["table"]


def _dst_of(route: Any, family: int) -> str:
    dst = route.get_attr("RTA_DST")
    return dst or ("::" if family == 6 else "0.0.0.0")


def _kernel_error(exc: NetlinkError, what: str) -> SRv6Error:
    """Map a kernel refusal to the API's error for it."""
    msg = f"kernel refused {what}: {exc.args[1] if len(exc.args) > 1 else exc} (errno {exc.code})"
    if exc.code == errno.EEXIST:
        return AlreadyExists(f"{msg}: another route holds this destination, table and metric")
    if exc.code == errno.ESRCH:
        return NotFound(msg)
    if exc.code in (errno.EOPNOTSUPP, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT):
        return FailedPrecondition(f"{msg}: this kernel lacks the feature")
    if exc.code in (errno.ENODEV, errno.ENETDOWN, errno.ENETUNREACH):
        return FailedPrecondition(msg)
    if exc.code == errno.EINVAL:
        return InvalidArgument(msg)
    return SRv6Error(msg)


__all__ = ["SRv6Netlink"]
