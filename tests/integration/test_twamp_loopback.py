"""Sender and reflector over real UDP sockets on loopback (no root needed)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time

import pytest

from srv6pm_twamp import sockets
from srv6pm_twamp.counters import Counters, FixedCounterReader
from srv6pm_twamp.reflector import Reflector, ReflectorConfig
from srv6pm_twamp.sender import Sender, SessionConfig
from srv6pm_twamp.timestamps import TimestampFormat
from srv6pm_twamp.wire.sr_tlv import (
    ControlCode,
    DestinationNodeAddress,
    ReturnAddress,
    ReturnPath,
)
from srv6pm_twamp.wire.stamp import ReflectorPacket, SenderPacket
from srv6pm_twamp.wire.tlv import (
    FLAG_M,
    ClassOfService,
    DirectMeasurement,
    ExtraPadding,
    TimestampInformation,
    Tlv,
    decode_tlvs,
)
from srv6pm_twamp.wire.twamp_light import LossQuery, LossResponse
from tests.support import KERNEL_TX_IDS

KEY = b"a shared secret of 32 octets...."


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def exchange(sock, payloads, dest, wait=0.3):
    """Send raw payloads from ``sock`` to ``dest``; collect what comes back within ``wait``."""
    for p in payloads:
        sockets.send(sock, p, dest)
    got = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while loop.time() < deadline:
        got.extend(sockets.recv_batch(sock))
        await asyncio.sleep(0.01)
    return got


def client(host="::1", port=0):
    return sockets.open_socket(sockets.family_of(host), (host, port))


@pytest.mark.parametrize("host", ["::1", "127.0.0.1", "localhost"])
def test_probes_answered_with_sane_timestamps(host):
    async def main():
        refl = Reflector()
        _, port = await refl.start(host, 0)
        sender = Sender()
        try:
            session = sender.start(SessionConfig(host=host, port=port, count=20, interval=0.005, timeout=3))
            report = await session.done
        finally:
            sender.close()
            refl.close()
        return report, session, refl

    report, session, refl = run(main())
    assert (report.sent, report.received, report.lost, report.duplicates) == (20, 20, 0, 0)
    assert refl.stats["replied"] == 20
    for r in session.results:
        assert r.kernel_timestamp
        assert r.tx_kernel_timestamp == KERNEL_TX_IDS  # delays from the kernel's transmit time
        assert r.t1 <= r.sent_ns <= r.t2  # stamped, left, arrived (one clock)
        assert r.t1 <= r.t4
        assert r.t2 <= r.t3  # reflector residence time is non-negative
        assert 0 < r.rtt_ns < (r.t4 - r.t1) + 1
        assert r.ttl_at_reflector == 255  # sent with 255, no router in between
    assert 0 < report.rtt_ns.min <= report.rtt_ns.p50 <= report.rtt_ns.p99 <= report.rtt_ns.max
    assert report.forward_ns is None  # clocks not declared synchronised


def test_one_way_delay_when_both_synchronised_and_ptp_format():
    async def main():
        refl = Reflector(ReflectorConfig(synchronized=True, timestamp_format=TimestampFormat.PTP))
        _, port = await refl.start("::1", 0)
        sender = Sender()
        try:
            return await sender.run(
                SessionConfig(host="::1", port=port, count=5, interval=0.01, timeout=3, synchronized=True)
            )
        finally:
            sender.close()
            refl.close()

    report = run(main())
    assert report.received == 5
    # same host, same clock: one-way delays are small and positive
    assert report.forward_ns.min >= 0 and report.forward_ns.max < 50_000_000
    assert report.backward_ns.min >= 0 and report.backward_ns.max < 50_000_000


def test_authenticated_mode_and_wrong_key_never_answered():
    async def main():
        refl = Reflector(ReflectorConfig(key=KEY))
        _, port = await refl.start("::1", 0)
        sender = Sender()
        try:
            good = await sender.run(
                SessionConfig(host="::1", port=port, count=5, interval=0.01, timeout=3, key=KEY, padding=16)
            )
            bad = await sender.run(
                SessionConfig(host="::1", port=port, count=5, interval=0.01, timeout=0.3, key=b"wrong")
            )
            plain = await sender.run(
                SessionConfig(host="::1", port=port, count=3, interval=0.01, timeout=0.3)
            )
        finally:
            sender.close()
            refl.close()
        return good, bad, plain, refl

    good, bad, plain, refl = run(main())
    assert good.received == 5
    assert bad.received == 0 and bad.lost == 5
    assert plain.received == 0
    assert refl.stats["bad_hmac"] == 5
    assert refl.stats["short"] == 3  # a 44-octet packet is too short for authenticated mode
    assert refl.stats["replied"] == 5


def test_stateless_copies_seq_stateful_numbers_per_session():
    async def main(stateful):
        refl = Reflector(ReflectorConfig(stateful=stateful))
        _, port = await refl.start("::1", 0)
        a, b = client(), client()
        try:
            ra = await exchange(a, [SenderPacket(seq=s, ssid=1).encode() for s in (100, 200)], ("::1", port))
            rb = await exchange(b, [SenderPacket(seq=7, ssid=2).encode()], ("::1", port))
        finally:
            a.close()
            b.close()
            refl.close()
        decode = lambda got: [ReflectorPacket.decode(d.data) for d in got]  # noqa: E731
        return decode(ra), decode(rb), refl.sessions

    ra, rb, n = run(main(False))
    assert [(r.seq, r.sender_seq) for r in ra] == [(100, 100), (200, 200)]
    assert [(r.seq, r.sender_seq) for r in rb] == [(7, 7)] and n == 0
    ra, rb, n = run(main(True))
    assert [(r.seq, r.sender_seq) for r in ra] == [(0, 100), (1, 200)]
    assert [(r.seq, r.ssid) for r in rb] == [(0, 2)] and n == 2


def test_hostile_input_is_counted_dropped_and_the_reflector_keeps_answering():
    async def main():
        refl = Reflector(ReflectorConfig(key=KEY))
        _, port = await refl.start("::1", 0)
        c = client()
        good = SenderPacket(seq=1, ssid=9).encode(KEY)
        bad_hmac = bytearray(good)
        bad_hmac[-1] ^= 0xFF
        hostile = [
            b"",
            b"\x00" * 11,
            b"garbage" * 3,
            bytes(bad_hmac),
            SenderPacket(seq=2, ssid=9, tlvs=(ExtraPadding.of_length(4).to_tlv(),)).encode(b"other key"),
            bytes(20000),  # longer than the reflector reads: truncated
            good[:111],
        ]
        try:
            got = await exchange(c, [*hostile, good], ("::1", port), wait=0.5)
        finally:
            c.close()
            refl.close()
        return got, refl.stats

    got, stats = run(main())
    replies = [ReflectorPacket.decode(d.data, KEY) for d in got]
    assert [r.sender_seq for r in replies] == [1]  # only the good probe is answered
    assert stats["received"] == 8
    assert stats["short"] == 4  # empty, 11 octets, 21 octets, 111 octets
    assert stats["bad_hmac"] == 2
    assert stats["oversize"] == 1
    assert stats["replied"] == 1
    assert stats["internal_error"] == 0


def test_bad_tlv_lengths_and_unknown_tlvs_are_reflected_flagged():
    async def main():
        reader = FixedCounterReader(default=Counters(tx_packets=555, rx_packets=444))
        refl = Reflector(counters=reader)
        _, port = await refl.start("::1", 0)
        c = client()
        base = SenderPacket(seq=3, ssid=4).encode()
        tlvs = (
            Tlv(type=251, value=b"mystery").encode()  # unknown: U stays set
            + DirectMeasurement(s_txc=1000).to_tlv().encode()
            + TimestampInformation().to_tlv().encode()
            + ClassOfService(dscp1=10).to_tlv().encode()
            + Tlv(type=4, value=bytes(6)).encode()  # CoS with a wrong length: M
            + bytes.fromhex("80010010")
            + bytes(4)  # padding whose Length overruns: M
        )
        try:
            got = await exchange(c, [base + tlvs], ("::1", port))
        finally:
            c.close()
            refl.close()
        return got, refl.stats, reader, len(base + tlvs)

    got, stats, reader, sent_len = run(main())
    [d] = got
    assert len(d.data) == sent_len == 44 + 11 + 16 + 8 + 8 + 10 + 8  # reply as long as the probe
    reply = ReflectorPacket.decode(d.data)
    unknown, dm, ti, cos, bad_cos, bad_pad = reply.tlvs
    assert unknown.type == 251 and unknown.unrecognized and unknown.value == b"mystery"
    assert not dm.unrecognized
    assert DirectMeasurement.from_tlv(dm) == DirectMeasurement(s_txc=1000, r_rxc=444, r_txc=555)
    assert reader.calls[0].ssid == 4
    t = TimestampInformation.from_tlv(ti)
    assert (t.sync_in, t.ts_in) == (5, 2)  # free-running clock, software timestamps
    assert not cos.unrecognized
    assert ClassOfService.from_tlv(cos).dscp1 == 10
    assert d.tclass >> 2 == 10  # the reply used DSCP1
    assert bad_cos.malformed and bad_pad.malformed and bad_pad.flags & FLAG_M
    assert stats["malformed_tlv"] == 2 and stats["unknown_tlv"] == 1


def test_direct_measurement_counters_from_both_readers():
    """S_TxC comes from the sender's reader, R_RxC/R_TxC from the reflector's: loss per direction."""
    from srv6pm_twamp.arithmetic.loss import BlockCounters, block_loss

    async def main():
        refl = Reflector(counters=FixedCounterReader(default=Counters(tx_packets=400, rx_packets=995)))
        _, port = await refl.start("::1", 0)
        sender_reader = FixedCounterReader(default=Counters(tx_packets=1000, rx_packets=398))
        sender = Sender(counters=sender_reader)
        try:
            s = sender.start(
                SessionConfig(
                    host="::1", port=port, count=2, interval=0.01, timeout=3, direct_measurement=True
                )
            )
            await s.done
        finally:
            sender.close()
            refl.close()
        return s, sender_reader

    s, sender_reader = run(main())
    assert len(s.results) == 2 and sender_reader.calls[0].role == "sender"
    dm = s.results[0].direct_measurement
    assert dm == DirectMeasurement(s_txc=1000, r_rxc=995, r_txc=400)
    loss = block_loss(0, BlockCounters(dm.s_txc, dm.r_rxc, dm.r_txc, sender_reader.default.rx_packets))
    assert (loss.forward.lost, loss.backward.lost) == (5, 2)


class BlockReader:
    """A reader that answers by the probe's T1 (as the node does) and refuses unknown sessions."""

    def __init__(self) -> None:
        self.calls = []

    def read(self, ctx):
        self.calls.append(ctx)
        if ctx.ssid != 7:
            raise LookupError("not ours")
        return Counters(tx_packets=ctx.sent_ns % 1000, rx_packets=1, epoch_ns=123456789)


def test_manual_probes_carry_extra_tlvs_and_the_reflector_reads_by_t1():
    """Probes sent one by one (Sender.probe) with the node's TLVs; the reader gets T1 and the
    kernel receive time, fills the counter epoch, and refuses (U flag) a session it does not know."""
    from srv6pm_twamp.wire.tlv import CounterEpoch

    async def main():
        reader = BlockReader()
        refl = Reflector(counters=reader)
        _, port = await refl.start("::1", 0, freebind=True)
        sender = Sender(bind_host="::1", freebind=True)
        got = []
        try:
            ours = sender.start(
                SessionConfig(host="::1", port=port, ssid=7, count=None, interval=None, keep_results=False),
                on_result=got.append,
            )
            other = sender.start(
                SessionConfig(host="::1", port=port, ssid=8, count=None, interval=None, keep_results=False),
                on_result=got.append,
            )
            tlvs = (DirectMeasurement(s_txc=42).to_tlv(), CounterEpoch().to_tlv())
            seqs = [sender.probe(ours, tlvs), sender.probe(ours, tlvs), sender.probe(other, tlvs)]
            for _ in range(100):
                if len(got) == 3:
                    break
                await asyncio.sleep(0.01)
        finally:
            sender.close()
            refl.close()
        return reader, got, seqs

    reader, got, seqs = run(main())
    assert seqs == [0, 1, 0] and len(got) == 3
    mine = [r for r in got if r.ssid == 7]
    for r in mine:
        assert r.direct_measurement == DirectMeasurement(s_txc=42, r_rxc=1, r_txc=r.t1 % 1000)
        assert r.counter_epoch == 123456789
    refused = next(r for r in got if r.ssid == 8)
    assert refused.direct_measurement is None and refused.counter_epoch is None  # flagged U
    ctx = reader.calls[0]
    assert ctx.sent_ns == mine[0].t1 and ctx.received_ns >= ctx.sent_ns


def test_class_of_service_reports_the_dscp_the_probe_arrived_with():
    async def main():
        refl = Reflector()
        _, port = await refl.start("::1", 0)
        sender = Sender()
        try:
            s = sender.start(
                SessionConfig(
                    host="::1", port=port, count=3, interval=0.01, timeout=3, dscp=46, class_of_service=True
                )
            )
            await s.done
        finally:
            sender.close()
            refl.close()
        return s

    s = run(main())
    assert len(s.results) == 3
    for r in s.results:
        cos = ClassOfService.from_tlv(next(t for t in r.tlvs if t.type == 4))
        assert (cos.dscp1, cos.dscp2, cos.rp) == (46, 46, 0)


def test_return_path_and_destination_node_address():
    async def main():
        refl = Reflector()
        _, port = await refl.start("::", 0)  # dual stack
        v6 = client("::1")
        p = v6.getsockname()[1]
        v4 = client("127.0.0.1", p)  # same port number, other family
        here = ipaddress.ip_address("::1")
        elsewhere = ipaddress.ip_address("2001:db8::77")
        no_reply = ReturnPath((ControlCode(0x1),)).to_tlv()
        to_v4 = ReturnPath((ReturnAddress(ipaddress.ip_address("127.0.0.1")),)).to_tlv()
        probes = {
            "plain-dna": SenderPacket(seq=1, tlvs=(DestinationNodeAddress(here).to_tlv(),)),
            "not-us": SenderPacket(seq=2, tlvs=(DestinationNodeAddress(elsewhere).to_tlv(),)),
            "no-reply": SenderPacket(seq=3, tlvs=(no_reply,)),
            "redirect": SenderPacket(seq=4, tlvs=(to_v4,)),
        }
        try:
            got6 = await exchange(v6, [x.encode() for x in probes.values()], ("::1", port))
            got4 = sockets.recv_batch(v4)
        finally:
            v6.close()
            v4.close()
            refl.close()
        return got6, got4, refl.stats

    got6, got4, stats = run(main())
    assert [ReflectorPacket.decode(d.data).sender_seq for d in got6] == [1]
    assert [ReflectorPacket.decode(d.data).sender_seq for d in got4] == [4]
    assert stats["not_for_us"] == 1 and stats["no_reply_requested"] == 1
    reflected = ReflectorPacket.decode(got4[0].data).tlvs[0]
    assert not reflected.unrecognized and reflected.value[0] == 0  # sub-TLV recognised: U cleared
    assert str(ReturnPath.from_tlv(reflected).return_address) == "127.0.0.1"


def test_many_concurrent_sessions():
    async def main():
        refl = Reflector(ReflectorConfig(stateful=True))
        _, port = await refl.start("::1", 0)
        sender = Sender()
        try:
            sessions = [
                sender.start(
                    SessionConfig(
                        host="::1", port=port, count=10, interval=0.02, timeout=3, padding=i % 3 * 8
                    )
                )
                for i in range(200)
            ]
            assert sender.session_count == 200
            reports = await asyncio.gather(*(s.done for s in sessions))
        finally:
            sender.close()
            refl.close()
        return reports, refl

    reports, refl = run(main())
    assert len({r.ssid for r in reports}) == 200
    assert all(r.received == 10 and r.lost == 0 for r in reports)
    assert refl.sessions == 200 and refl.stats["replied"] == 2000


def test_twamp_light_loss_query_and_response():
    async def main():
        reader = FixedCounterReader(by_block={3: Counters(tx_packets=500, rx_packets=998)})
        refl = Reflector(ReflectorConfig(protocol="twamp-light"), counters=reader)
        _, port = await refl.start("::1", 0)
        c = client()
        try:
            q = LossQuery(seq=5, tx_counter=1000, block=3, control_code=0)
            got = await exchange(c, [q.encode(), b"short"], ("::1", port))
        finally:
            c.close()
            refl.close()
        return got, refl.stats, reader

    got, stats, reader = run(main())
    [d] = got
    r = LossResponse.decode(d.data)
    assert (r.sender_seq, r.sender_counter, r.block, r.rx_counter, r.tx_counter) == (5, 1000, 3, 998, 500)
    assert r.sender_ttl == 255 and reader.calls[0].block == 3
    assert stats["short"] == 1


def test_loss_query_client_against_our_twamp_light_reflector():
    from srv6pm_twamp.loss_query import query_loss

    async def main():
        reader = FixedCounterReader(
            by_block={0: Counters(10, 20), 1: Counters(tx_packets=7, rx_packets=1999)}
        )
        refl = Reflector(ReflectorConfig(protocol="twamp-light", stateful=True), counters=reader)
        _, port = await refl.start("127.0.0.1", 0)
        try:
            a = await query_loss("127.0.0.1", port, seq=1, block=1, tx_counter=2000)
            b = await query_loss("127.0.0.1", port, seq=2, block=0, tx_counter=30)
            none = await query_loss(
                "127.0.0.1", port + 1 if port < 65535 else port - 1, seq=3, block=0, tx_counter=0, timeout=0.2
            )
        finally:
            refl.close()
        return a, b, none

    a, b, none = run(main())
    assert (a.response.sender_counter - a.response.rx_counter) == 1  # one packet lost in block 1
    assert (a.response.tx_counter, a.response.block, a.hop_limit) == (7, 1, 255)
    assert (b.response.rx_counter, b.response.sender_counter) == (20, 30)
    assert none is None


def test_a_flood_of_random_datagrams_is_fully_accounted_for():
    """Every datagram ends in exactly one counter; valid probes in the flood are still answered."""
    import random

    rnd = random.Random(8762)

    async def main():
        refl = Reflector()
        _, port = await refl.start("::1", 0)
        c = client()
        payloads = []
        for i in range(600):
            kind = i % 3
            if kind == 0:
                payloads.append(rnd.randbytes(rnd.randrange(0, 44)))  # too short
            elif kind == 1:
                body = bytearray(rnd.randbytes(rnd.randrange(1, 60)))  # random TLVs: flagged, not fatal
                # No well-formed Return Path / Destination Node Address: every reply stays on lo.
                while any(t.type in (9, 10) and not t.malformed for t in decode_tlvs(b"\x80" + body)):
                    body = bytearray(rnd.randbytes(len(body)))
                payloads.append(SenderPacket(seq=i, ssid=3).encode() + b"\x80" + body)
            else:
                payloads.append(SenderPacket(seq=i, ssid=3).encode())
        try:
            got = await exchange(c, payloads, ("::1", port), wait=1.0)
        finally:
            c.close()
            refl.close()
        return got, refl.stats

    got, stats = run(main())
    assert stats["received"] == 600
    assert stats["short"] == 200
    assert stats["replied"] + stats["short"] + stats["not_for_us"] + stats["no_reply_requested"] == 600
    assert stats["internal_error"] == 0
    answered = {ReflectorPacket.decode(d.data).sender_seq for d in got}
    assert {i for i in range(600) if i % 3 == 2} <= answered


def test_sid_list_needs_ipv6():
    async def main():
        with pytest.raises(ValueError):
            Sender().start(SessionConfig(host="127.0.0.1", segments=("fc00::1",)))

    run(main())


def test_srh_encoding_matches_kernel_layout():
    raw = sockets.srh(["fc00::1", "fc00::2"], "fc00::9")
    assert raw[:8] == bytes([0, 6, 4, 2, 2, 0, 0, 0])
    assert raw[8:24] == ipaddress.IPv6Address("fc00::9").packed  # Segment List[0]: final
    assert raw[40:56] == ipaddress.IPv6Address("fc00::1").packed  # Segment List[2]: first
    info = sockets.parse_srh(raw)
    assert [str(s) for s in info.segments] == ["fc00::1", "fc00::2", "fc00::9"]
    assert info.segments_left == 2
    assert sockets.parse_srh(raw[:20]) is None
    assert sockets.family_of("fc00::1") == socket.AF_INET6


@pytest.mark.parametrize("host", ["::1", "127.0.0.1"])
def test_transmit_timestamps_come_tagged_with_the_datagram_they_belong_to(host):
    family = sockets.family_of(host)
    rx = sockets.open_socket(family, (host, 0))
    tx = sockets.open_socket(family, (host, 0), tx_timestamps=True)
    plain = sockets.open_socket(family, (host, 0))
    try:
        dest = (host, rx.getsockname()[1])
        before = time.time_ns()
        for i in range(5):
            sockets.send(tx, b"probe", dest, tx_id=0xABCD0000 + i)
        sockets.send(tx, b"untagged", dest)  # asks for nothing, gets nothing
        after = time.time_ns()
        sockets.send(plain, b"tagged", dest, tx_id=7)  # no timestamping on this socket: sent anyway
        time.sleep(0.05)
        stamps = sockets.recv_tx_timestamps(tx)
        assert len(sockets.recv_batch(rx)) == 7
        if not KERNEL_TX_IDS:
            assert stamps == []
            return
        assert [i for i, _ in stamps] == [0xABCD0000 + i for i in range(5)]
        assert all(before <= ns <= after for _, ns in stamps)
        assert sockets.recv_tx_timestamps(tx) == [] and sockets.recv_tx_timestamps(plain) == []
    finally:
        for s in (rx, tx, plain):
            s.close()
