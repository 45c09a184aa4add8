"""Emulated networks in Linux network namespaces, built through netlink (pyroute2).

A :class:`Lab` owns every namespace and process it creates. Namespace names carry a prefix unique
to the run (``s6pm<pid>x<random>-``), so concurrent runs never collide, and :func:`remove_stale`
clears what a crashed run left behind (its pid is no longer alive). ``Lab.close()`` (or leaving the
``with`` block) ends the lab's processes by pid and removes its namespaces, even after a failure.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pyroute2 import IPRoute, netns

_STALE_RE = re.compile(r"^s6pm(\d+)x[0-9a-f]+-")
# setns() applies to the calling thread; one lock keeps two helpers from interleaving.
_NS_LOCK = threading.Lock()


def remove_stale() -> list[str]:
    """Remove namespaces left by earlier runs whose process is gone; return their names."""
    removed = []
    for name in netns.listnetns():
        m = _STALE_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                netns.remove(name)
                removed.append(name)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Node:
    """One emulated host or router: a network namespace."""

    lab: Lab
    name: str
    netns: str
    router: bool = True
    interfaces: list[str] = field(default_factory=list)

    def ipr(self) -> IPRoute:
        """A netlink socket inside this node's namespace (close it, or use ``with``)."""
        return IPRoute(netns=self.netns)

    def ifindex(self, ifname: str) -> int:
        """Index of an interface of this node."""
        with self.ipr() as ipr:
            found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise KeyError(f"{self.name}: no interface {ifname}")
        return found[0]

    def add_address(self, ifname: str, cidr: str) -> None:
        """Add an address ("fd00:1::1/64" or "10.0.1.1/24") without duplicate address detection."""
        iface = ipaddress.ip_interface(cidr)
        with self.ipr() as ipr:
            idx = ipr.link_lookup(ifname=ifname)[0]
            kwargs = {"flags": 0x02} if iface.version == 6 else {}  # IFA_F_NODAD: usable at once
            ipr.addr("add", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen, **kwargs)

    def add_route(
        self,
        dst: str,
        *,
        gateway: str | None = None,
        dev: str | None = None,
        table: int = 254,
        **extra: object,
    ) -> None:
        """Add a plain route (tests' own plumbing; SRv6 routes go through srv6pm-node)."""
        kwargs: dict[str, object] = {"dst": dst, "table": table, **extra}
        if gateway:
            kwargs["gateway"] = gateway
        with self.ipr() as ipr:
            if dev:
                kwargs["oif"] = ipr.link_lookup(ifname=dev)[0]
            ipr.route("add", **kwargs)

    def sysctl(self, key: str, value: str | int) -> None:
        """Write a sysctl inside the namespace (e.g. "net.ipv6.conf.all.forwarding", 1)."""
        path = "/proc/sys/" + key.replace(".", "/")
        with _NS_LOCK:
            netns.pushns(self.netns)
            try:
                with open(path, "w") as f:
                    f.write(str(value))
            finally:
                netns.popns()

    def socket(self, family: int, kind: int, proto: int = 0) -> socket.socket:
        """A socket created inside the namespace (it stays bound to it wherever it is used)."""
        with _NS_LOCK:
            netns.pushns(self.netns)
            try:
                return socket.socket(family, kind, proto)
            finally:
                netns.popns()

    def link_stats(self, ifname: str) -> dict[str, int]:
        """Kernel interface counters (rx_packets, tx_packets, …) of an interface."""
        with self.ipr() as ipr:
            link = ipr.get_links(ipr.link_lookup(ifname=ifname)[0])[0]
        stats = link.get("IFLA_STATS64") or link.get("IFLA_STATS")
        return dict(stats)

    def popen(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        """Start a process inside the namespace; the lab ends it (by pid) on close."""
        return self.lab.popen(self, argv, **kwargs)

    def run(
        self, argv: Sequence[str], timeout: float = 30, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run a command inside the namespace to completion and capture its output."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )


class Lab:
    """A set of namespaces joined by veth links, torn down as a whole."""

    def __init__(self, prefix: str | None = None) -> None:
        remove_stale()
        self.prefix = prefix or f"s6pm{os.getpid()}x{secrets.token_hex(2)}-"
        self.nodes: dict[str, Node] = {}
        self._procs: list[subprocess.Popen] = []

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_node(self, name: str, *, router: bool = True) -> Node:
        """Create a namespace with loopback up; routers forward and accept SRv6."""
        ns = self.prefix + name
        netns.create(ns)
        node = Node(self, name, ns, router)
        self.nodes[name] = node
        with node.ipr() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        for family in ("all", "default"):
            node.sysctl(f"net.ipv6.conf.{family}.accept_dad", 0)
            node.sysctl(f"net.ipv6.conf.{family}.forwarding", 1 if router else 0)
            node.sysctl(f"net.ipv6.conf.{family}.seg6_enabled", 1 if router else 0)
        node.sysctl("net.ipv4.ip_forward", 1 if router else 0)
        node.sysctl("net.ipv4.conf.all.rp_filter", 0)
        return node

    def link(
        self,
        a: str,
        a_if: str,
        b: str,
        b_if: str,
        *,
        a_addrs: Sequence[str] = (),
        b_addrs: Sequence[str] = (),
    ) -> None:
        """Join two nodes with a veth pair, bring both ends up and address them."""
        na, nb = self.nodes[a], self.nodes[b]
        with na.ipr() as ipr:
            ipr.link("add", ifname=a_if, kind="veth", peer={"ifname": b_if, "net_ns_fd": nb.netns})
        for node, ifname, addrs in ((na, a_if, a_addrs), (nb, b_if, b_addrs)):
            node.interfaces.append(ifname)
            if node.router:  # the kernel checks seg6_enabled on the interface a packet arrives on
                node.sysctl(f"net.ipv6.conf.{ifname}.seg6_enabled", 1)
            with node.ipr() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state="up")
            for cidr in addrs:
                node.add_address(ifname, cidr)

    def popen(self, node: Node, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        """Start ``argv`` in ``node``'s namespace (``ip netns exec`` also gives it its own /sys)."""
        proc = subprocess.Popen(["ip", "netns", "exec", node.netns, *argv], **kwargs)  # type: ignore[call-overload]
        self._procs.append(proc)
        return proc

    def popen_host(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        """Start ``argv`` in the root namespace (e.g. the controller); ended on close like the rest."""
        proc = subprocess.Popen(list(argv), **kwargs)  # type: ignore[call-overload]
        self._procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 5.0) -> int:
        """SIGTERM a process this lab started, SIGKILL it after ``timeout``; return its exit code."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def close(self) -> None:
        """End every process the lab started, then remove its namespaces."""
        for proc in self._procs:
            with contextlib.suppress(Exception):
                self.stop(proc, timeout=3)
        self._procs.clear()
        for node in self.nodes.values():
            with contextlib.suppress(OSError):
                netns.remove(node.netns)
        self.nodes.clear()


def wait_until(predicate: object, timeout: float = 10.0, interval: float = 0.05) -> object:
    """Poll ``predicate()`` until it returns a truthy value; raise TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()  # type: ignore[operator]
            if value:
                return value
        except Exception as exc:  # the thing polled may not exist yet
            last_exc = exc
        time.sleep(interval)
    raise TimeoutError(f"condition not met within {timeout}s (last error: {last_exc!r})")


@contextlib.contextmanager
def lab(prefix: str | None = None) -> Iterator[Lab]:
    """``with lab() as net:`` — a Lab that is always closed."""
    net = Lab(prefix)
    try:
        yield net
    finally:
        net.close()
