"""The Session-Sender: many concurrent STAMP sessions over one socket per address family.

Each session has its own destination, interval, padding, DSCP, SSID, optional SID list and
optional key. Probes are scheduled on the event loop (no task or thread per session), replies are
matched by SSID and sequence number, and every reply becomes a :class:`ProbeResult` with the four
timestamps: T1 taken just before ``sendmsg``, T2/T3 from the reflector, T4 from the kernel's
receive timestamp. Per-session state is bounded (``keep_results=False`` keeps no per-probe
history), so sessions can run for days.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import math
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from srv6pm_twamp import sockets
from srv6pm_twamp.arithmetic.delay import (
    RunningDelay,
    Summary,
    jitter,
    one_way_delays,
    summarize,
    two_way_delay,
)
from srv6pm_twamp.arithmetic.loss import ProbeAccounting
from srv6pm_twamp.counters import CounterReader, ProbeContext
from srv6pm_twamp.timestamps import ErrorEstimate, TimestampFormat, from_wire, now_ns, tai_offset_s, to_wire
from srv6pm_twamp.wire.errors import DecodeError
from srv6pm_twamp.wire.stamp import AUTH_BASE_LEN, STAMP_PORT, encode_sender, parse_reflector
from srv6pm_twamp.wire.tlv import ClassOfService, CounterEpoch, DirectMeasurement, ExtraPadding, Tlv

_SSID_UNAUTH = slice(14, 16)
_SSID_AUTH = slice(26, 28)


@dataclass(frozen=True)
class SessionConfig:
    """One STAMP test session.

    ``padding``: octets the Extra Padding TLV adds to the packet (its 4-octet header included,
    so 1-4 give an empty-valued TLV). ``dscp``: DSCP of the probes (and, with
    ``class_of_service``, asked of the replies). ``segments``: SIDs the probe visits before
    ``host``. ``count`` None: until stopped. ``start_delay``: before the first probe.
    ``interval`` None: no schedule of its own; the owner sends each probe with
    :meth:`Sender.probe` (the node manager aligns probes to its measurement blocks).
    """

    host: str
    port: int = STAMP_PORT
    ssid: int | None = None
    count: int | None = 10
    interval: float | None = 1.0
    padding: int = 0
    dscp: int | None = None
    segments: tuple[str, ...] = ()
    key: bytes | None = None
    synchronized: bool = False
    timestamp_format: TimestampFormat = TimestampFormat.NTP
    timeout: float = 2.0
    direct_measurement: bool = False
    class_of_service: bool = False
    extra_tlvs: tuple[Tlv, ...] = ()
    keep_results: bool = True
    stateful_reflector: bool | None = None  # None: guess from the reflector's sequence numbers
    start_delay: float = 0.0
    clock_error: float = 1e-3  # seconds, advertised in the Error Estimate (RFC 4656 §4.1.2)


@dataclass(slots=True)
class ProbeResult:
    """One answered probe (times in Unix nanoseconds)."""

    seq: int
    ssid: int
    t1: int
    t2: int
    t3: int
    t4: int
    reflector_seq: int
    ttl_at_reflector: int
    reply_hop_limit: int | None
    kernel_timestamp: bool
    reflector_synchronized: bool
    tlvs: tuple[Tlv, ...]
    duplicate: bool = False
    t1_kernel: int | None = None  # the kernel's transmit timestamp of the probe, when it gave one

    @property
    def tx_kernel_timestamp(self) -> bool:
        """Whether the delays use the kernel's transmit time rather than T1 as sent (taken just
        before ``sendmsg``); T1 itself stays the value on the wire, the one the reflector saw."""
        return self.t1_kernel is not None

    @property
    def sent_ns(self) -> int:
        """When the probe left: the kernel's transmit timestamp, else T1."""
        return self.t1 if self.t1_kernel is None else self.t1_kernel

    @property
    def rtt_ns(self) -> int:
        """Two-way delay (T4-T1)-(T3-T2)."""
        return two_way_delay(self.sent_ns, self.t2, self.t3, self.t4)

    def one_way_ns(self, sender_synchronized: bool) -> tuple[int, int] | None:
        """(forward, backward) when both ends say they are synchronised."""
        return one_way_delays(
            self.sent_ns,
            self.t2,
            self.t3,
            self.t4,
            sender_synced=sender_synchronized,
            reflector_synced=self.reflector_synchronized,
        )

    @property
    def counter_epoch(self) -> int | None:
        """The reflector's counter epoch (:class:`CounterEpoch`), if it filled one in."""
        for t in self.tlvs:
            if t.type == CounterEpoch.TYPE and not t.unrecognized and not t.malformed:
                return CounterEpoch.from_tlv(t).epoch_ns
        return None

    @property
    def direct_measurement(self) -> DirectMeasurement | None:
        """The reflected Direct Measurement TLV, if the reflector filled it in."""
        for t in self.tlvs:
            if t.type == DirectMeasurement.TYPE and not t.unrecognized and not t.malformed:
                return DirectMeasurement.from_tlv(t)
        return None


@dataclass(frozen=True)
class SessionReport:
    """What a session measured. p50/p99 are None when the session kept no per-probe history."""

    ssid: int
    sent: int
    received: int
    lost: int
    duplicates: int
    reordered: int
    forward_lost: int | None  # stateful reflector only
    backward_lost: int | None
    rtt_ns: Summary
    jitter_ns: float
    forward_ns: Summary | None
    backward_ns: Summary | None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        d: dict[str, object] = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("rtt_ns", "forward_ns", "backward_ns"):
            if d[k] is not None:
                d[k] = d[k].as_dict()  # type: ignore[attr-defined]
        return d


@dataclass
class Session:
    """A running session: what was sent, what came back."""

    config: SessionConfig
    ssid: int
    on_result: Callable[[ProbeResult], None] | None = None
    results: list[ProbeResult] = field(default_factory=list)
    accounting: ProbeAccounting = field(default_factory=ProbeAccounting)
    rtt: RunningDelay = field(default_factory=RunningDelay)
    done: asyncio.Future[SessionReport] | None = None
    # precomputed per-session wire parameters (set by Sender.start)
    outstanding: dict[int, int] = field(default_factory=dict)  # seq -> T1 of unanswered probes
    kernel_t1: dict[int, int] = field(default_factory=dict)  # seq -> kernel transmit time
    _sock: socket.socket | None = None
    _peer: tuple[str, int] = ("", 0)
    _tclass: int | None = None
    _waypoints: tuple[ipaddress.IPv6Address, ...] = ()
    _ee: int = 1
    _static_tlvs: tuple[Tlv, ...] = ()
    _handle: asyncio.TimerHandle | None = None
    _stateful_seen: bool = False

    @property
    def next_seq(self) -> int:
        """Sequence number of the next probe."""
        return self.accounting.sent

    def report(self) -> SessionReport:
        """Figures so far."""
        acc = self.accounting
        firsts = [r for r in self.results if not r.duplicate]
        stateful = self.config.stateful_reflector
        if stateful is None:
            stateful = self._stateful_seen
        split = acc.split() if stateful else None
        if self.config.keep_results:
            rtts = [r.rtt_ns for r in firsts]
            rtt, jit = summarize(rtts), jitter(rtts)
        else:
            rtt, jit = self.rtt.summary(), self.rtt.jitter
        ow = [x for r in firsts if (x := r.one_way_ns(self.config.synchronized)) is not None]
        return SessionReport(
            ssid=self.ssid,
            sent=acc.sent,
            received=acc.received,
            lost=acc.lost,
            duplicates=acc.duplicates,
            reordered=acc.reordered,
            forward_lost=split.forward if split else None,
            backward_lost=split.backward if split else None,
            rtt_ns=rtt,
            jitter_ns=jit,
            forward_ns=summarize([f for f, _ in ow]) if ow else None,
            backward_ns=summarize([b for _, b in ow]) if ow else None,
        )


class Sender:
    """Runs any number of sessions; one UDP socket per address family, opened on first use."""

    def __init__(
        self,
        counters: CounterReader | None = None,
        bind_host: str | None = None,
        bind_port: int = 0,
        freebind: bool = False,
    ) -> None:
        self.counters = counters
        self.bind_host = bind_host
        self.bind_port = bind_port
        self.freebind = freebind
        self.stats: Counter[str] = Counter()
        self._socks: dict[int, socket.socket] = {}
        self._unauth: dict[int, Session] = {}
        self._auth: dict[int, Session] = {}
        self._next_ssid = 1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tai = tai_offset_s()

    # --- sessions -----------------------------------------------------------------------------

    def start(self, config: SessionConfig, on_result: Callable[[ProbeResult], None] | None = None) -> Session:
        """Start a session; its ``done`` future resolves to the report when it ends."""
        self._loop = asyncio.get_running_loop()
        ssid = config.ssid if config.ssid is not None else self._free_ssid()
        if ssid in self._unauth or ssid in self._auth:
            raise ValueError(f"SSID {ssid} is already in use")
        host = sockets.resolve(config.host)
        fam = sockets.family_of(host)
        if config.segments and fam != socket.AF_INET6:
            raise ValueError("a SID list needs an IPv6 destination")
        if config.dscp is not None and not 0 <= config.dscp < 64:
            raise ValueError("DSCP is 0-63")
        # Remember enough probes to recognise duplicates for the whole reply timeout.
        interval = config.interval if config.interval is not None else config.timeout
        window = max(64, math.ceil(config.timeout / max(interval, 1e-6)) + 2)
        session = Session(
            config,
            ssid,
            on_result,
            accounting=ProbeAccounting(window),
            done=self._loop.create_future(),
            _sock=self._socket(fam),
            _peer=(host, config.port),
            _tclass=(config.dscp << 2) if config.dscp is not None else None,
            _waypoints=tuple(ipaddress.IPv6Address(s) for s in config.segments),
            _ee=ErrorEstimate.for_error(
                config.clock_error, synchronized=config.synchronized, fmt=config.timestamp_format
            ).to_int(),
            _static_tlvs=self._static_tlvs(config),
        )
        (self._auth if config.key else self._unauth)[ssid] = session
        if config.interval is not None:
            start = self._loop.time() + config.start_delay
            session._handle = self._loop.call_at(start, self._tick, session, start)
        return session

    def probe(self, session: Session, tlvs: tuple[Tlv, ...] = ()) -> int:
        """Send one probe of ``session`` now, with ``tlvs`` before the session's own; return its
        sequence number. For sessions without a schedule (``interval`` None) and extra probes."""
        return self._send_probe(session, tlvs)

    async def run(
        self, config: SessionConfig, on_result: Callable[[ProbeResult], None] | None = None
    ) -> SessionReport:
        """Run one session to the end and return its report."""
        session = self.start(config, on_result)
        assert session.done is not None
        return await session.done

    def stop(self, session: Session) -> SessionReport:
        """Stop a session at once and return its report."""
        if session._handle is not None:
            session._handle.cancel()
        (self._auth if session.config.key else self._unauth).pop(session.ssid, None)
        report = session.report()
        if session.done is not None and not session.done.done():
            session.done.set_result(report)
        return report

    def close(self) -> None:
        """Stop every session and close the sockets."""
        for s in [*self._unauth.values(), *self._auth.values()]:
            self.stop(s)
        for sock in self._socks.values():
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(sock.fileno())
            sock.close()
        self._socks.clear()

    @property
    def session_count(self) -> int:
        """Sessions running."""
        return len(self._unauth) + len(self._auth)

    def _free_ssid(self) -> int:
        for _ in range(0xFFFF):
            ssid = self._next_ssid
            self._next_ssid = self._next_ssid % 0xFFFF + 1
            if ssid not in self._unauth and ssid not in self._auth:
                return ssid
        raise RuntimeError("all 65535 SSIDs are in use")

    def _socket(self, family: int) -> socket.socket:
        sock = self._socks.get(family)
        if sock is None:
            host = "::" if family == socket.AF_INET6 else "0.0.0.0"
            if self.bind_host and sockets.family_of(self.bind_host) == family:
                host = self.bind_host
            sock = sockets.open_socket(
                family, (host, self.bind_port), freebind=self.freebind, tx_timestamps=True
            )
            assert self._loop is not None
            self._loop.add_reader(sock.fileno(), self._on_readable, sock)
            self._socks[family] = sock
        return sock

    # --- sending ------------------------------------------------------------------------------

    @staticmethod
    def _static_tlvs(cfg: SessionConfig) -> tuple[Tlv, ...]:
        """The TLVs that are the same in every probe of the session."""
        tlvs: list[Tlv] = []
        if cfg.class_of_service:
            tlvs.append(ClassOfService(dscp1=cfg.dscp or 0).to_tlv())
        tlvs.extend(cfg.extra_tlvs)
        if cfg.padding:
            tlvs.append(ExtraPadding.of_length(max(0, cfg.padding - 4)).to_tlv())
        return tuple(tlvs)

    def _tick(self, session: Session, start: float) -> None:
        cfg = session.config
        if cfg.count is not None and session.next_seq >= cfg.count:
            assert self._loop is not None
            session._handle = self._loop.call_later(cfg.timeout, self.stop, session)
            return
        self._send_probe(session)
        assert self._loop is not None
        # Absolute schedule: start + k*interval, so a slow turn never accumulates drift.
        assert cfg.interval is not None
        due = start + session.next_seq * cfg.interval
        session._handle = self._loop.call_at(due, self._tick, session, start)

    def _send_probe(self, session: Session, extra: tuple[Tlv, ...] = ()) -> int:
        cfg = session.config
        tlvs = (*extra, *session._static_tlvs) if extra else session._static_tlvs
        if cfg.direct_measurement:
            s_txc = 0
            if self.counters is not None:
                ctx = ProbeContext(ssid=session.ssid, peer=session._peer, role="sender")
                s_txc = self.counters.read(ctx).tx_packets
            tlvs = (DirectMeasurement(s_txc=s_txc).to_tlv(), *tlvs)
        seq = session.accounting.on_sent()
        t1 = now_ns()
        wire = encode_sender(
            seq, to_wire(t1, cfg.timestamp_format, self._tai), session._ee, session.ssid, tlvs, cfg.key
        )
        outstanding = session.outstanding
        outstanding[seq] = t1
        if len(outstanding) > session.accounting.window:
            gone = next(iter(outstanding))  # long unanswered: lost, forget its T1
            del outstanding[gone]
            session.kernel_t1.pop(gone, None)
        assert session._sock is not None
        try:
            sockets.send(
                session._sock,
                wire,
                session._peer,
                tclass=session._tclass,
                waypoints=session._waypoints,
                tx_id=session.ssid << 16 | seq & 0xFFFF,
            )
        except OSError:
            self.stats["send_error"] += 1
        self.stats["sent"] += 1
        return seq

    # --- receiving ----------------------------------------------------------------------------

    def _on_readable(self, sock: socket.socket) -> None:
        # Transmit timestamps first: a probe's is queued as it leaves, before any reply to it.
        for tx_id, ns in sockets.recv_tx_timestamps(sock):
            self._on_transmitted(tx_id, ns)
        for dgram in sockets.recv_batch(sock):
            self._on_reply(dgram)

    def _on_transmitted(self, tx_id: int, ns: int) -> None:
        """Keep the kernel's transmit time of a probe, for its delays."""
        ssid, low = tx_id >> 16, tx_id & 0xFFFF
        session = self._unauth.get(ssid) or self._auth.get(ssid)
        if session is None:
            return
        last = session.next_seq - 1  # the id holds 16 bits of seq: the newest probe with them
        seq = last - ((last - low) & 0xFFFF)
        if seq in session.outstanding:
            session.kernel_t1[seq] = ns
            self.stats["tx_timestamps"] += 1

    def _find_session(self, data: bytes) -> Session | None:
        if self._auth and len(data) >= AUTH_BASE_LEN:
            s = self._auth.get(int.from_bytes(data[_SSID_AUTH], "big"))
            if s is not None:
                return s
        if len(data) >= 16:
            return self._unauth.get(int.from_bytes(data[_SSID_UNAUTH], "big"))
        return None

    def _on_reply(self, dgram: sockets.Datagram) -> None:
        self.stats["received"] += 1
        session = self._find_session(dgram.data)
        if session is None:
            self.stats["unknown_session"] += 1
            return
        cfg = session.config
        try:
            rseq, t3w, ee, _ssid, t2w, sseq, _t1w, _see, ttl, tlvs = parse_reflector(dgram.data, cfg.key)
        except DecodeError as err:
            self.stats[err.reason.replace("-", "_")] += 1
            return
        t1 = session.outstanding.pop(sseq, None)
        kernel_t1 = session.kernel_t1.pop(sseq, None)
        first = session.accounting.on_reply(sseq, rseq) if t1 is not None else False
        if t1 is None:
            # a duplicate, a reply to a forgotten probe, or one we never sent
            session.accounting.on_reply(sseq, rseq)
            self.stats["unmatched_reply"] += 1
            if not cfg.keep_results and session.on_result is None:
                return
        if rseq != sseq:
            session._stateful_seen = True
        fmt = TimestampFormat(ee >> 14 & 1)
        result = ProbeResult(
            sseq,
            session.ssid,
            t1 if t1 is not None else from_wire(_t1w, TimestampFormat(_see >> 14 & 1), self._tai),
            from_wire(t2w, fmt, self._tai),
            from_wire(t3w, fmt, self._tai),
            dgram.rx_ns,
            rseq,
            ttl,
            dgram.hop_limit,
            dgram.kernel_timestamp,
            bool(ee >> 15),
            tlvs,
            not first,
            kernel_t1,  # kept only while the probe is outstanding, like its T1
        )
        if first and not cfg.keep_results:
            session.rtt.add(result.rtt_ns)
        if cfg.keep_results:
            session.results.append(result)
        if session.on_result is not None:
            session.on_result(result)
        if first and cfg.count is not None and session.next_seq >= cfg.count and not session.outstanding:
            # Every probe is answered: no need to sit out the timeout (late duplicates go uncounted).
            assert self._loop is not None
            if session._handle is not None:
                session._handle.cancel()
            session._handle = self._loop.call_soon(self.stop, session)
