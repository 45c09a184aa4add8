"""UDP sockets for probes: kernel receive timestamps, hop limit, traffic class, SRv6 routing header.

No raw sockets and no custom kernel behaviour: a probe goes down a SID list through a plain UDP
socket whose ``IPV6_RTHDR`` option holds a type-4 Segment Routing Header (RFC 8754); Linux takes
type 4 only as a socket option, not as per-packet ancillary data, so :func:`send` sets it around
the one ``sendmsg``. The Linux kernel (``ipv6_push_rthdr4``) puts the header in the packet, sends it to the
segment ``Segments Left`` points at, and writes the socket's destination into Segment List[0]::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    | Next Header   |  Hdr Ext Len  | Routing Type=4| Segments Left |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Last Entry   |     Flags     |              Tag              |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |            Segment List[0] (128-bit IPv6 address)             |
    |                             ...                               |
    |            Segment List[n] (128-bit IPv6 address)             |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Segment List[0] is the *last* segment (the final destination), Segment List[n] the first one.

Transmit side: with ``tx_id`` a datagram asks the kernel for its software transmit timestamp
(``SO_TIMESTAMPING``, taken as the driver hands the packet to the device, after any seg6
encapsulation); the ``SCM_TS_OPT_ID`` control message (Linux 6.13) tags it with that id, so
:func:`recv_tx_timestamps` can tell exactly which datagram each timestamp belongs to, even when a
send fails or several sessions share the socket. Kernels without it refuse the control message:
:func:`send` then falls back, once and for good on that socket, to no transmit timestamps.

Receive side: ``SO_TIMESTAMPNS`` gives each datagram the kernel's receive time,
``IPV6_RECVHOPLIMIT`` / ``IP_RECVTTL`` the hop limit it arrived with (copied into the reply's
Session-Sender TTL), ``IPV6_RECVTCLASS`` / ``IP_RECVTOS`` its DSCP/ECN (Class of Service TLV),
``IPV6_RECVRTHDR`` the SRH it carried (in-band replies go back along it) and ``IPV6_RECVPKTINFO``
the local address it was sent to (Destination Node Address TLV).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import struct
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

# Linux values the socket module does not export on every Python build.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)
IPV6_FREEBIND = 78  # linux/in6.h, since 4.15
SO_TIMESTAMPING = 37  # also SCM_TIMESTAMPING, the control message it answers with
SCM_TS_OPT_ID = 81  # asm-generic/socket.h, since Linux 6.13
IPV6_RECVERR, IP_RECVERR = 25, 11
SO_EE_ORIGIN_TIMESTAMPING = 4
# linux/net_tstamp.h. On the socket: report software timestamps, tagged with an id, without the
# packet; per datagram: take its transmit timestamp (only datagrams that ask get one).
_TX_REPORTING = (1 << 4) | (1 << 7) | (1 << 11)
_TX_SOFTWARE = 1 << 1
_EXTENDED_ERR = struct.Struct("@IBBBBII")  # struct sock_extended_err up to ee_data
_U32 = struct.Struct("@I")
IPV6_SRCRT_TYPE_4 = 4
_TIMESPEC = struct.Struct("@qq")
_INT = struct.Struct("@i")
MAX_DATAGRAM = 9216  # jumbo frame; anything longer is truncated, counted and dropped

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def srh(waypoints: Sequence[ipaddress.IPv6Address | str], destination: ipaddress.IPv6Address | str) -> bytes:
    """The type-4 routing header for a probe visiting ``waypoints`` in order, then ``destination``."""
    segs = [ipaddress.IPv6Address(destination), *(ipaddress.IPv6Address(w) for w in reversed(waypoints))]
    n = len(segs)
    if n > 128:
        raise ValueError("a SID list of at most 127 waypoints")
    head = struct.pack("!BBBBBBH", 0, 2 * n, IPV6_SRCRT_TYPE_4, n - 1, n - 1, 0, 0)
    return head + b"".join(s.packed for s in segs)


@dataclass(frozen=True)
class SrhInfo:
    """A received Segment Routing Header."""

    segments: tuple[ipaddress.IPv6Address, ...]  # in travel order: first waypoint ... final segment
    segments_left: int


def parse_srh(data: bytes) -> SrhInfo | None:
    """Decode an SRH from ``IPV6_RTHDR`` ancillary data; None if it is not a valid type-4 header."""
    if len(data) < 8 or data[2] != IPV6_SRCRT_TYPE_4:
        return None
    hdr_len, last_entry = data[1], data[4]
    n = last_entry + 1
    if 8 + 16 * n > min(len(data), 8 + 8 * hdr_len):
        return None
    segs = [ipaddress.IPv6Address(data[8 + 16 * i : 24 + 16 * i]) for i in range(n)]
    return SrhInfo(tuple(reversed(segs)), data[3])


class Datagram:
    """One received datagram with what the kernel told about it.

    A plain slotted class, not a dataclass: the reflector builds one per probe, so construction
    cost matters. The traffic class, SRH and local address are decoded only when asked for.
    """

    __slots__ = (
        "_local",
        "_rthdr",
        "_tclass",
        "data",
        "hop_limit",
        "kernel_timestamp",
        "peer",
        "rx_ns",
        "truncated",
    )

    def __init__(
        self,
        data: bytes,
        peer: tuple[str, int],
        rx_ns: int,
        kernel_timestamp: bool = True,
        hop_limit: int | None = None,
        truncated: bool = False,
        tclass: int | None = None,
        rthdr: bytes | None = None,
        local: bytes | None = None,
    ) -> None:
        self.data = data
        self.peer = peer
        self.rx_ns = rx_ns  # kernel receive timestamp (user-space clock if the kernel gave none)
        self.kernel_timestamp = kernel_timestamp
        self.hop_limit = hop_limit
        self.truncated = truncated
        self._tclass = tclass
        self._rthdr = rthdr
        self._local = local

    @property
    def tclass(self) -> int | None:
        """The traffic class / TOS octet the datagram arrived with: DSCP << 2 | ECN."""
        return self._tclass

    @property
    def srh(self) -> SrhInfo | None:
        """The Segment Routing Header it carried, if any."""
        return parse_srh(self._rthdr) if self._rthdr else None

    @property
    def local(self) -> IPAddress | None:
        """The local address it was sent to."""
        raw = self._local
        if raw is None:
            return None
        if len(raw) == 4:
            return ipaddress.IPv4Address(raw)
        addr = ipaddress.IPv6Address(raw)
        return addr.ipv4_mapped or addr

    def __repr__(self) -> str:
        return f"Datagram({len(self.data)} octets from {self.peer}, rx_ns={self.rx_ns}, hop={self.hop_limit})"


def parse_host_port(text: str, default_port: int = 862) -> tuple[str, int]:
    """``"[::1]:862"``, ``"::1"``, ``"10.0.0.1:9000"`` or ``"host"`` -> (host, port)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, int(port)
    return text, default_port


def resolve(host: str) -> str:
    """An address literal for ``host`` (names resolved once, IPv6 preferred), unchanged if literal."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
        infos.sort(key=lambda i: i[0] != socket.AF_INET6)
        return str(infos[0][4][0])


def family_of(host: str) -> int:
    """AF_INET6 for IPv6 literals (and names), AF_INET for IPv4 literals."""
    try:
        return socket.AF_INET if ipaddress.ip_address(host).version == 4 else socket.AF_INET6
    except ValueError:
        return socket.getaddrinfo(host, None)[0][0]


def open_socket(
    family: int,
    bind: tuple[str, int] = ("", 0),
    rcvbuf: int = 4 << 20,
    freebind: bool = False,
    tx_timestamps: bool = False,
) -> socket.socket:
    """A non-blocking UDP socket with every receive option this package uses turned on.

    ``freebind``: allow binding to, and sending from, an address no interface holds (a probe
    endpoint that exists only as a ``local`` route, as the node manager sets up).
    ``tx_timestamps``: datagrams sent with a ``tx_id`` get kernel transmit timestamps.
    """
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if freebind:
            sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
        # A deep receive queue rides out scheduling hiccups at high probe rates. net.core.rmem_max
        # caps SO_RCVBUF (often at 208 KiB, ~200 probes); with CAP_NET_ADMIN lift the cap.
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if tx_timestamps:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, _TX_REPORTING)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if bind[0] in ("", "::") else 1)
            for opt in (
                socket.IPV6_RECVHOPLIMIT,
                socket.IPV6_RECVTCLASS,
                socket.IPV6_RECVRTHDR,
                socket.IPV6_RECVPKTINFO,
            ):
                sock.setsockopt(socket.IPPROTO_IPV6, opt, 1)
            # Probes leave with hop limit 255 so the far end can tell how many hops they crossed.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
        # IPv4 options also apply to IPv4-mapped traffic on a dual-stack IPv6 socket.
        for opt in (IP_RECVTTL, socket.IP_RECVTOS, IP_PKTINFO):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IP, opt, 1)
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
        sock.setblocking(False)
        sock.bind(bind)
    except BaseException:
        sock.close()
        raise
    return sock


_SOL_SOCKET, _IPPROTO_IPV6, _IPPROTO_IP = socket.SOL_SOCKET, socket.IPPROTO_IPV6, socket.IPPROTO_IP
_IPV6_HOPLIMIT, _IPV6_TCLASS, _IPV6_RTHDR, _IPV6_PKTINFO = (
    socket.IPV6_HOPLIMIT,
    socket.IPV6_TCLASS,
    socket.IPV6_RTHDR,
    socket.IPV6_PKTINFO,
)
_IP_TTL, _IP_TOS, _MSG_TRUNC = socket.IP_TTL, socket.IP_TOS, socket.MSG_TRUNC
_int_from = _INT.unpack_from
_ts_from = _TIMESPEC.unpack_from


def recv_batch(sock: socket.socket, limit: int = 64) -> list[Datagram]:
    """Read up to ``limit`` queued datagrams without blocking (the reflector's hot path)."""
    out = []
    recvmsg = sock.recvmsg
    for _ in range(limit):
        try:
            data, anc, flags, addr = recvmsg(MAX_DATAGRAM, 512)
        except (BlockingIOError, InterruptedError):
            break
        rx_ns = hop = tclass = rthdr = local = None
        for level, kind, cdata in anc:
            if level == _IPPROTO_IPV6:
                if kind == _IPV6_HOPLIMIT:
                    hop = _int_from(cdata)[0]
                elif kind == _IPV6_TCLASS:
                    tclass = _int_from(cdata)[0]
                elif kind == _IPV6_PKTINFO:
                    local = cdata[:16]
                elif kind == _IPV6_RTHDR:
                    rthdr = cdata
            elif level == _SOL_SOCKET:
                if kind == SO_TIMESTAMPNS:
                    sec, nsec = _ts_from(cdata)
                    rx_ns = sec * 1_000_000_000 + nsec
            elif level == _IPPROTO_IP:
                if kind == _IP_TTL:
                    hop = _int_from(cdata)[0]
                elif kind == _IP_TOS:
                    tclass = cdata[0]
                elif kind == IP_PKTINFO:
                    local = cdata[8:12]  # ipi_addr: the header destination
        host = addr[0]
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]  # IPv4 peer on a dual-stack socket: report it as IPv4
        elif len(addr) == 4 and addr[3] and "%" not in host:
            host = f"{host}%{addr[3]}"  # link-local peer: keep the zone so the reply can go back
        kernel = rx_ns is not None
        out.append(
            Datagram(
                data,
                (host, addr[1]),
                rx_ns if kernel else time.time_ns(),
                kernel,
                hop,
                bool(flags & _MSG_TRUNC),
                tclass,
                rthdr,
                local,
            )
        )
    return out


def send(
    sock: socket.socket,
    data: bytes,
    peer: tuple[str, int],
    *,
    tclass: int | None = None,
    waypoints: Sequence[ipaddress.IPv6Address | str] = (),
    source: IPAddress | None = None,
    tx_id: int | None = None,
) -> int:
    """Send one datagram, with a per-packet traffic class, SID list and source address if asked.

    ``tx_id`` (a u32): ask for the kernel's transmit timestamp of this datagram, tagged with the id
    (socket opened with ``tx_timestamps``; see :func:`recv_tx_timestamps`)."""
    if "%" in peer[0]:  # link-local with a zone: sendto wants the zone as a scope id
        addr, _, zone = peer[0].partition("%")
        scope = int(zone) if zone.isdigit() else socket.if_nametoindex(zone)
        dest: tuple = (addr, peer[1], 0, scope)  # type: ignore[type-arg]
    else:
        dest = peer
    if tx_id is not None and sock in _NO_TX_ID:
        tx_id = None  # this kernel has no SCM_TS_OPT_ID
    if tclass is None and not waypoints and source is None and tx_id is None and ":" in peer[0]:
        return sock.sendto(data, dest)  # the common case: no ancillary data at all
    v6 = sock.family == socket.AF_INET6
    anc: list[tuple[int, int, bytes]] = []
    if tx_id is not None:
        anc.append((socket.SOL_SOCKET, SCM_TS_OPT_ID, _U32.pack(tx_id & 0xFFFFFFFF)))
        anc.append((socket.SOL_SOCKET, SO_TIMESTAMPING, _U32.pack(_TX_SOFTWARE)))
    host = peer[0]
    if v6 and host.replace(".", "").isdigit():
        host = "::ffff:" + host  # IPv4 literal peer on a dual-stack socket
    mapped = v6 and host.startswith("::ffff:")
    if tclass is not None:
        if v6 and not mapped:
            anc.append((socket.IPPROTO_IPV6, socket.IPV6_TCLASS, _INT.pack(tclass)))
        else:
            anc.append((socket.IPPROTO_IP, socket.IP_TOS, bytes([tclass])))
    if source is not None:
        if v6 and source.version == 6:
            anc.append((socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, source.packed + _INT.pack(0)))
        elif source.version == 4 and (mapped or not v6):
            # struct in_pktinfo {ifindex; spec_dst (the source to use); addr}
            anc.append((socket.IPPROTO_IP, IP_PKTINFO, _INT.pack(0) + source.packed + bytes(4)))
    if host != peer[0]:
        dest = (host, peer[1])
    if waypoints and (not v6 or mapped):
        raise ValueError("a SID list needs an IPv6 destination")
    if waypoints:
        # Linux accepts a type-4 routing header only as a sticky socket option, not as ancillary
        # data (ip6_datagram_send_ctl knows types 0 and 2 only): set it, send, take it off again.
        # The event loop is single-threaded, so no other datagram can leave in between.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RTHDR, srh(waypoints, host))
    try:
        return _sendmsg(sock, data, anc, dest, tx_id is not None)
    finally:
        if waypoints:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RTHDR, b"")


_NO_TX_ID: weakref.WeakSet[socket.socket] = weakref.WeakSet()  # their kernel refused SCM_TS_OPT_ID


def _sendmsg(
    sock: socket.socket, data: bytes, anc: list[tuple[int, int, bytes]], dest: tuple, tagged: bool
) -> int:
    try:
        return sock.sendmsg([data], anc, 0, dest)
    except OSError as exc:
        if not tagged or exc.errno != errno.EINVAL:
            raise
    # A kernel before 6.13 (or a socket opened without tx_timestamps): no transmit timestamps.
    _NO_TX_ID.add(sock)
    return sock.sendmsg([data], anc[2:], 0, dest)


_RECVERR = ((socket.IPPROTO_IPV6, IPV6_RECVERR), (socket.IPPROTO_IP, IP_RECVERR))


def recv_tx_timestamps(sock: socket.socket, limit: int = 256) -> list[tuple[int, int]]:
    """(id, Unix ns) of the transmit timestamps waiting on the socket's error queue, oldest first,
    without blocking. Call it before reading replies: a probe's timestamp is queued as it leaves,
    so it is always there before the reply to that probe can be."""
    out = []
    for _ in range(limit):
        try:
            _, anc, _, _ = sock.recvmsg(0, 512, socket.MSG_ERRQUEUE)
        except (BlockingIOError, InterruptedError):
            break
        ns = tx_id = None
        for level, kind, cdata in anc:
            if level == _SOL_SOCKET and kind == SO_TIMESTAMPING and len(cdata) >= _TIMESPEC.size:
                sec, nsec = _ts_from(cdata)  # scm_timestamping.ts[0]: the software timestamp
                ns = sec * 1_000_000_000 + nsec
            elif (level, kind) in _RECVERR and len(cdata) >= _EXTENDED_ERR.size:
                _errno, origin, _type, _code, _pad, _info, data = _EXTENDED_ERR.unpack_from(cdata)
                if origin == SO_EE_ORIGIN_TIMESTAMPING:
                    tx_id = data
        if ns and tx_id is not None:
            out.append((tx_id, ns))
    return out
