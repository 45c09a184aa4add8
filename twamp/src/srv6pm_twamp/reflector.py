"""The Session-Reflector: answers STAMP test packets (and TWAMP-Light loss queries).

One :class:`Reflector` serves any number of sessions on one UDP socket, keyed by the sender's
SSID and address. It is an asyncio reader callback on the socket, so receive timestamps come from
the kernel and one event-loop turn drains a batch of datagrams.

What it does with each datagram, in order:

1. truncated (longer than the receive buffer) or shorter than a base packet: counted, dropped;
2. authenticated mode: the base HMAC and the HMAC TLV must verify, else counted and dropped -
   a packet that fails authentication is never answered;
3. TLVs (RFC 8972 / RFC 9503): known ones are processed and reflected with U cleared, unknown ones
   reflected unchanged with U set, malformed ones reflected with M set; a Destination Node
   Address that is not ours drops the packet; a Return Path TLV chooses where the reply goes
   (Return Address, SRv6 Segment List) or asks for no reply;
4. the reply: sequence number copied (stateless) or the session's own (stateful); T2 = kernel
   receive time, T3 = transmit time; the hop limit the probe arrived with goes into
   Session-Sender TTL; sent out-of-band (plain UDP to the sender) or in-band back along the
   reversed SID list the probe travelled, when configured so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Literal

from srv6pm_twamp import sockets
from srv6pm_twamp.counters import CounterReader, Counters, ProbeContext
from srv6pm_twamp.timestamps import (
    ErrorEstimate,
    TimestampFormat,
    from_wire,
    now_ns,
    tai_offset_s,
    to_wire,
)
from srv6pm_twamp.wire.errors import AuthError, DecodeError
from srv6pm_twamp.wire.sr_tlv import DestinationNodeAddress, ReturnPath
from srv6pm_twamp.wire.stamp import STAMP_PORT, encode_reflector, parse_sender
from srv6pm_twamp.wire.tlv import (
    FLAG_I,
    FLAG_M,
    FLAG_U,
    ClassOfService,
    CounterEpoch,
    DirectMeasurement,
    SyncSource,
    TimestampInformation,
    TimestampMethod,
    Tlv,
    TlvType,
    decode_tlvs,
    verify_tlvs,
)
from srv6pm_twamp.wire.twamp_light import LossQuery, LossResponse

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class ReflectorConfig:
    """How a reflector answers.

    ``reply_path``: "out-of-band" sends replies as plain UDP to the sender; "in-band" sends them
    back along the reverse of the SID list the probe arrived with (when it carried one).
    ``local_addresses``: the addresses a Destination Node Address TLV may name; empty means "the
    address the probe was sent to". ``protocol``: "stamp" or "twamp-light" (loss queries of
    draft-gandhi-spring-twamp-srpm).
    """

    stateful: bool = False
    key: bytes | None = None
    reply_path: Literal["out-of-band", "in-band"] = "out-of-band"
    synchronized: bool = False
    timestamp_format: TimestampFormat = TimestampFormat.NTP
    local_addresses: frozenset[IPAddress] = frozenset()
    protocol: Literal["stamp", "twamp-light"] = "stamp"
    max_sessions: int = 100_000
    clock_error: float = 1e-3  # seconds, advertised in the Error Estimate (RFC 4656 §4.1.2)


@dataclass
class _Reply:
    tclass: int | None = None
    source: IPAddress | None = None
    dest: IPAddress | None = None
    waypoints: tuple[ipaddress.IPv6Address, ...] | None = None
    no_reply: bool = False
    drop: str | None = None
    sent_ns: int | None = None  # the probe's T1, for counter readers that pick a block by time
    counters: Counters | None = None  # what the Direct Measurement TLV was filled with


_NO_ACTION = _Reply()


@dataclass
class Reflector:
    """A Session-Reflector bound to one UDP socket. ``stats`` counts every outcome by name."""

    config: ReflectorConfig = field(default_factory=ReflectorConfig)
    counters: CounterReader | None = None
    stats: Counter[str] = field(default_factory=Counter)
    _sock: socket.socket | None = None
    _sessions: dict[tuple[int, str, int], int] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _tai: int = 0
    _sender_tai: int = 0
    _ee: int = 1
    _wildcard: bool = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(
        self, host: str = "::", port: int = STAMP_PORT, freebind: bool = False
    ) -> tuple[str, int]:
        """Bind and start answering; returns the bound (host, port).

        ``freebind``: answer from addresses no interface holds (probe endpoints that exist only
        as ``local`` routes).
        """
        self._loop = asyncio.get_running_loop()
        self._wildcard = host in ("", "::", "0.0.0.0")
        host = host if self._wildcard else sockets.resolve(host)
        self._sock = sockets.open_socket(sockets.family_of(host or "::"), (host, port), freebind=freebind)
        self._sender_tai = tai_offset_s()
        self._tai = self._sender_tai if self.config.timestamp_format is TimestampFormat.PTP else 0
        cfg = self.config
        self._ee = ErrorEstimate.for_error(
            cfg.clock_error, synchronized=cfg.synchronized, fmt=cfg.timestamp_format
        ).to_int()
        self._loop.add_reader(self._sock.fileno(), self._on_readable)
        name = self._sock.getsockname()
        return name[0], name[1]

    def close(self) -> None:
        """Stop answering and close the socket."""
        if self._sock is not None:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    async def __aenter__(self) -> Reflector:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # --- datagram handling -------------------------------------------------------------------

    def _on_readable(self) -> None:
        assert self._sock is not None
        for dgram in sockets.recv_batch(self._sock):
            self.stats["received"] += 1
            try:
                self.handle(dgram)
            except Exception:  # a bug must not stop the reflector; count it and go on
                self.stats["internal_error"] += 1
                log.exception("reflector failed on a datagram from %s", dgram.peer)

    def handle(self, dgram: sockets.Datagram) -> bytes | None:
        """Process one datagram; send and return the reply (None when nothing is sent)."""
        if dgram.truncated:
            self.stats["oversize"] += 1
            return None
        if self.config.protocol == "twamp-light":
            return self._handle_loss_query(dgram)
        return self._handle_stamp(dgram)

    def _handle_stamp(self, dgram: sockets.Datagram) -> bytes | None:
        # The hot path: raw integers and the shared layouts, no per-probe objects beyond the
        # TLVs the probe actually carries.
        cfg = self.config
        key = cfg.key
        try:
            seq, ts, ee, ssid, tail = parse_sender(dgram.data, key)
        except AuthError:
            self.stats["bad_hmac"] += 1
            return None
        except DecodeError as err:
            self.stats[err.reason.replace("-", "_")] += 1
            return None
        reply_tlvs: list[Tlv] = []
        how: _Reply | None = None
        pad = b""
        if tail:
            if any(tail):
                tlvs = decode_tlvs(tail)
                if key is not None and verify_tlvs(key, seq, tlvs) is not True:
                    self.stats["bad_hmac"] += 1  # TLVs not covered by a valid HMAC TLV
                    return None
                sent_ns = from_wire(ts, TimestampFormat(ee >> 14 & 1), self._sender_tai)
                reply_tlvs, how = self._reflect_tlvs(tlvs, ssid, dgram, sent_ns)
                if how.drop:
                    self.stats[how.drop] += 1
                    return None
                if how.no_reply:
                    self.stats["no_reply_requested"] += 1
                    return None
            else:
                pad = tail  # legacy RFC 8762 zero padding: the reply is as long as the probe
        rseq = self._next_seq(ssid, dgram.peer) if cfg.stateful else seq
        fmt, tai = cfg.timestamp_format, self._tai
        hop = dgram.hop_limit
        wire = encode_reflector(
            rseq,
            to_wire(now_ns(), fmt, tai),  # T3, as late as the HMAC allows
            self._ee,
            ssid,
            to_wire(dgram.rx_ns, fmt, tai),  # T2: kernel receive timestamp
            seq,
            ts,
            ee,
            hop if hop is not None else 0,
            reply_tlvs,
            key,
        )
        return self._send(wire + pad if pad else wire, dgram, how)

    def _send(self, wire: bytes, dgram: sockets.Datagram, how: _Reply | None) -> bytes | None:
        assert self._sock is not None
        if how is None:
            how = _NO_ACTION
        dest_host = str(how.dest) if how.dest is not None else dgram.peer[0]
        source = how.source
        if source is None and self._wildcard:
            # Bound to any address: answer from the address the probe was sent to, not from
            # whatever address the route to the sender would pick.
            source = dgram.local
            if source is not None and (source.version == 4) != dest_host.replace(".", "").isdigit():
                source = None  # redirected to the other family: let the kernel pick
        waypoints = how.waypoints
        if waypoints is None and self.config.reply_path == "in-band":
            srh = dgram.srh
            if srh is not None:
                # back along the path it came: the waypoints it visited, reversed, minus ourselves
                waypoints = tuple(reversed(srh.segments[:-1]))
        if waypoints and waypoints[-1] == ipaddress.ip_address(dest_host):
            waypoints = waypoints[:-1]
        try:
            sockets.send(
                self._sock,
                wire,
                (dest_host, dgram.peer[1]),
                tclass=how.tclass,
                waypoints=waypoints or (),
                source=source,
            )
        except (OSError, ValueError) as err:
            self.stats["send_error"] += 1
            log.debug("reply to %s failed: %s", dest_host, err)
            return None
        self.stats["replied"] += 1
        if waypoints:
            self.stats["replied_in_band"] += 1
        return wire

    def _next_seq(self, ssid: int, peer: tuple[str, int]) -> int:
        key = (ssid, peer[0], peer[1])
        seq = self._sessions.get(key)
        if seq is None:
            if len(self._sessions) >= self.config.max_sessions:
                self._sessions.pop(next(iter(self._sessions)))  # forget the oldest session
            seq = 0
        self._sessions[key] = (seq + 1) & 0xFFFFFFFF
        return seq

    @property
    def sessions(self) -> int:
        """Number of sessions a stateful reflector keeps state for."""
        return len(self._sessions)

    # --- TLVs ----------------------------------------------------------------------------------

    def _reflect_tlvs(
        self, tlvs: list[Tlv], ssid: int, dgram: sockets.Datagram, sent_ns: int
    ) -> tuple[list[Tlv], _Reply]:
        how = _Reply(sent_ns=sent_ns)
        out: list[Tlv] = []
        for tlv in tlvs:
            if tlv.malformed:
                self.stats["malformed_tlv"] += 1
                out.append(tlv)
                continue
            try:
                out.append(self._reflect_one(tlv, ssid, dgram, how))
            except DecodeError:
                self.stats["malformed_tlv"] += 1
                out.append(tlv.with_flags(set_=FLAG_M))
            if how.drop:
                break
        return out, how

    def _reflect_one(self, tlv: Tlv, ssid: int, dgram: sockets.Datagram, how: _Reply) -> Tlv:
        cfg = self.config
        t = tlv.type
        if t == TlvType.EXTRA_PADDING:
            return tlv.with_flags(clear=FLAG_U)
        if t == TlvType.TIMESTAMP_INFORMATION:
            ti = TimestampInformation.from_tlv(tlv)
            src = SyncSource.NTP if cfg.synchronized else SyncSource.LOCAL_FREE_RUNNING
            return replace(
                ti, sync_in=src, ts_in=TimestampMethod.SW_LOCAL, sync_out=src, ts_out=TimestampMethod.SW_LOCAL
            ).to_tlv(tlv.flags & ~FLAG_U)
        if t == TlvType.CLASS_OF_SERVICE:
            cos = ClassOfService.from_tlv(tlv)
            got = dgram.tclass or 0
            how.tclass = cos.dscp1 << 2
            return replace(cos, dscp2=got >> 2, ecn=got & 3, rp=0).to_tlv(tlv.flags & ~FLAG_U)
        if t == TlvType.DIRECT_MEASUREMENT:
            dm = DirectMeasurement.from_tlv(tlv)
            if self.counters is None:  # cannot fill the counters: say so with U
                return tlv.with_flags(set_=FLAG_U)
            try:
                c = self.counters.read(
                    ProbeContext(
                        ssid=ssid,
                        peer=dgram.peer,
                        segments=dgram.srh.segments if dgram.srh else (),
                        sent_ns=how.sent_ns,
                        received_ns=dgram.rx_ns,
                    )
                )
            except LookupError:
                self.stats["no_counters"] += 1
                return tlv.with_flags(set_=FLAG_U)
            how.counters = c
            return replace(dm, r_rxc=c.rx_packets, r_txc=c.tx_packets).to_tlv(tlv.flags & ~FLAG_U)
        if t == TlvType.COUNTER_EPOCH:
            CounterEpoch.from_tlv(tlv)
            if how.counters is None:  # no Direct Measurement before it, or no counters to give
                return tlv.with_flags(set_=FLAG_U)
            return CounterEpoch(how.counters.epoch_ns).to_tlv(tlv.flags & ~FLAG_U)
        if t == TlvType.HMAC:
            # Verified already in authenticated mode; without a key it cannot be checked.
            return tlv.with_flags(clear=FLAG_U, set_=0 if cfg.key else FLAG_I)
        if t == TlvType.DESTINATION_NODE_ADDRESS:
            dna = DestinationNodeAddress.from_tlv(tlv)
            ours = cfg.local_addresses or ({dgram.local} if dgram.local is not None else set())
            if dna.address not in ours:
                how.drop = "not_for_us"
            else:
                how.source = dna.address
            return tlv.with_flags(clear=FLAG_U)
        if t == TlvType.RETURN_PATH:
            rp = ReturnPath.from_tlv(tlv)
            cc = rp.control_code
            how.no_reply = bool(cc and cc.no_reply)
            how.dest = rp.return_address
            how.waypoints = rp.segments
            return ReturnPath(rp.items).to_tlv(tlv.flags & ~FLAG_U)
        self.stats["unknown_tlv"] += 1
        return tlv.with_flags(set_=FLAG_U)

    # --- TWAMP-Light loss queries --------------------------------------------------------------

    def _handle_loss_query(self, dgram: sockets.Datagram) -> bytes | None:
        try:
            query = LossQuery.decode(dgram.data)
        except DecodeError as err:
            self.stats[err.reason.replace("-", "_")] += 1
            return None
        rx = tx = 0
        if self.counters is not None:
            c = self.counters.read(
                ProbeContext(
                    ssid=0,
                    peer=dgram.peer,
                    block=query.block,
                    segments=dgram.srh.segments if dgram.srh else (),
                )
            )
            rx, tx = c.rx_packets, c.tx_packets
        seq = self._next_seq(0, dgram.peer) if self.config.stateful else query.seq
        resp = LossResponse.answer(
            query, seq=seq, rx_counter=rx, tx_counter=tx, sender_ttl=dgram.hop_limit or 0
        )
        how = _Reply()
        if query.control_code == 1 and dgram.srh is not None:  # in-band response requested
            how.waypoints = tuple(reversed(dgram.srh.segments[:-1]))
        return self._send(resp.encode(), dgram, how)
