"""Cross-checks with implementations we did not write: scapy.contrib.stamp and tshark's TWAMP-Test.

scapy decodes what we send and we decode what scapy builds, byte for byte, and scapy-built probes
are answered by our running reflector. tshark (Wireshark 4.0 dissector, which predates RFC 8972:
it shows the SSID as "mbz1" and reads every packet with the reflector layout) decodes packets
our codec wrote into a pcap, and the field values it reports must be ours.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from decimal import Decimal

import scapy.contrib.stamp as stamp  # scapy==2.8.0 is in the dev group: a missing one fails here
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw
from scapy.utils import wrpcap

from srv6pm_twamp import sockets
from srv6pm_twamp.reflector import Reflector, ReflectorConfig
from srv6pm_twamp.timestamps import ErrorEstimate, TimestampFormat, ntp_from_ns
from srv6pm_twamp.wire.stamp import ReflectorPacket, SenderPacket
from srv6pm_twamp.wire.tlv import DirectMeasurement, ExtraPadding, Tlv
from tests.support import require_tool

# 2026-01-02T03:04:05.25Z: a fraction exact in binary, so both NTP readings agree to the digit.
T_NS = 1_767_323_045_250_000_000
T_NTP = ntp_from_ns(T_NS)
EE_SYNC = ErrorEstimate(True, TimestampFormat.NTP, 2, 3)


def ntp_seconds(value: int) -> Decimal:
    return Decimal(value) / Decimal(2**32)


def our_sender():
    return SenderPacket(
        seq=0xDEADBEEF,
        timestamp=T_NTP,
        error_estimate=EE_SYNC,
        ssid=0x1234,
        tlvs=(
            DirectMeasurement(s_txc=123456).to_tlv(),
            Tlv(type=200, value=b"\x01\x02\x03"),
            ExtraPadding.of_length(8).to_tlv(),
        ),
    )


def our_reflector():
    return ReflectorPacket(
        seq=42,
        timestamp=T_NTP + (1 << 31),  # +0.5 s
        error_estimate=ErrorEstimate(False, TimestampFormat.NTP, 0, 1),
        ssid=0x1234,
        rx_timestamp=T_NTP + (1 << 30),  # +0.25 s
        sender_seq=0xDEADBEEF,
        sender_timestamp=T_NTP,
        sender_error_estimate=EE_SYNC,
        sender_ttl=253,
    )


# --- scapy ---------------------------------------------------------------------------------------


def test_scapy_decodes_our_sender_packet():
    p = stamp.STAMPSessionSenderTestUnauthenticated(our_sender().encode())
    assert p.seq == 0xDEADBEEF and p.ssid == 0x1234
    assert (p.err_estimate.S, p.err_estimate.Z, p.err_estimate.scale, p.err_estimate.multiplier) == (
        1,
        0,
        2,
        3,
    )
    assert p.ts == ntp_seconds(T_NTP)
    assert [(int(t.flags), t.type, t.len, bytes(t.value)) for t in p.tlv_objects] == [
        (0x80, 5, 12, DirectMeasurement(s_txc=123456).value_bytes()),
        (0x80, 200, 3, b"\x01\x02\x03"),
        (0x80, 1, 8, bytes(8)),
    ]


def test_scapy_decodes_our_reflector_packet():
    p = stamp.STAMPSessionReflectorTestUnauthenticated(our_reflector().encode())
    assert (p.seq, p.ssid, p.seq_sender, p.ttl_sender) == (42, 0x1234, 0xDEADBEEF, 253)
    assert p.ts == ntp_seconds(T_NTP) + Decimal("0.5")
    assert p.ts_rx == ntp_seconds(T_NTP) + Decimal("0.25")
    assert p.ts_sender == ntp_seconds(T_NTP)
    assert (p.err_estimate_sender.S, p.err_estimate_sender.scale, p.err_estimate_sender.multiplier) == (
        1,
        2,
        3,
    )


def test_we_decode_what_scapy_builds():
    s = stamp.STAMPSessionSenderTestUnauthenticated(
        seq=77,
        ts=ntp_seconds(T_NTP),
        err_estimate=stamp.ErrorEstimate(S=1, Z=0, scale=5, multiplier=9),
        ssid=4321,
        tlv_objects=[stamp.STAMPTestTLV(flags=0x80, type=5, len=12, value=bytes(range(12)))],
    )
    ours = SenderPacket.decode(bytes(s))
    assert (ours.seq, ours.ssid, ours.timestamp) == (77, 4321, T_NTP)
    assert ours.error_estimate == ErrorEstimate(True, TimestampFormat.NTP, 5, 9)
    assert ours.find(DirectMeasurement) == DirectMeasurement.from_tlv(Tlv(5, bytes(range(12))))
    r = stamp.STAMPSessionReflectorTestUnauthenticated(
        seq=3,
        ts=ntp_seconds(T_NTP),
        ssid=9,
        ts_rx=ntp_seconds(T_NTP),
        seq_sender=77,
        ts_sender=ntp_seconds(T_NTP),
        ttl_sender=61,
    )
    back = ReflectorPacket.decode(bytes(r))
    assert (back.seq, back.ssid, back.sender_seq, back.sender_ttl) == (3, 9, 77, 61)
    assert back.timestamp == back.rx_timestamp == back.sender_timestamp == T_NTP


def test_our_reflector_answers_scapy_probes_and_scapy_reads_the_answers():
    async def main():
        refl = Reflector(ReflectorConfig(stateful=True))
        _, port = await refl.start("::1", 0)
        c = sockets.open_socket(sockets.family_of("::1"), ("::1", 0))
        try:
            for seq in (10, 11, 12):
                probe = stamp.STAMPSessionSenderTestUnauthenticated(
                    seq=seq,
                    ts=ntp_seconds(T_NTP),
                    ssid=500,
                    tlv_objects=[stamp.STAMPTestTLV(flags=0x80, type=1, len=4, value=bytes(4))],
                )
                sockets.send(c, bytes(probe), ("::1", port))
            got = []
            for _ in range(100):
                got += sockets.recv_batch(c)
                if len(got) == 3:
                    break
                await asyncio.sleep(0.01)
        finally:
            c.close()
            refl.close()
        return got

    got = asyncio.run(main())
    replies = [stamp.STAMPSessionReflectorTestUnauthenticated(d.data) for d in got]
    assert [(r.seq, r.seq_sender, r.ssid) for r in replies] == [(0, 10, 500), (1, 11, 500), (2, 12, 500)]
    for r in replies:
        assert r.ts_sender == ntp_seconds(T_NTP)
        assert r.ts_rx <= r.ts and r.ttl_sender == 255
        [tlv] = r.tlv_objects
        assert (int(tlv.flags), tlv.type, tlv.len) == (0, 1, 4)  # recognised: U cleared


# --- tshark --------------------------------------------------------------------------------------


def tshark_decode(tmp_path, payloads):
    tshark = require_tool("tshark")
    pcap = tmp_path / "stamp.pcap"
    frames = [
        IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=sport, dport=dport) / Raw(p)
        for p, (sport, dport) in payloads
    ]
    wrpcap(str(pcap), frames)
    out = subprocess.run(
        [tshark, "-r", str(pcap), "-d", "udp.port==862,twamp.test", "-T", "json", "-x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [p["_source"]["layers"]["twamp.test"] for p in json.loads(out.stdout)]


def test_tshark_decodes_our_packets(tmp_path):
    sender, reflector = our_sender().encode(), our_reflector().encode()
    fs, fr = tshark_decode(tmp_path, [(sender, (40000, 862)), (reflector, (862, 40000))])

    assert fs["twamp.test.seq_number"] == str(0xDEADBEEF)
    assert fs["twamp.test.timestamp"] == "Jan  2, 2026 03:04:05.250000000 UTC"
    tree = fs["twamp.test.error_estimate_tree"]
    assert (tree["twamp.test.error_estimate.s"], tree["twamp.test.error_estimate.z"]) == ("1", "0")
    assert (tree["twamp.test.error_estimate.scale"], tree["twamp.test.error_estimate.multiplier"]) == (
        "2",
        "3",
    )
    assert fs["twamp.test.mbz1"] == str(0x1234)  # the SSID, in the field RFC 8972 took from MBZ

    assert fr["twamp.test.seq_number"] == "42"
    assert fr["twamp.test.timestamp"] == "Jan  2, 2026 03:04:05.750000000 UTC"
    assert fr["twamp.test.receive_timestamp"] == "Jan  2, 2026 03:04:05.500000000 UTC"
    assert fr["twamp.test.sender_seq_number"] == str(0xDEADBEEF)
    # Wireshark 4.0 renders the Session-Sender Timestamp as seconds+nanoseconds whatever Z
    # says, so compare the octets it found there instead of its rendering.
    assert fr["twamp.test.sender_timestamp_raw"][0] == T_NTP.to_bytes(8, "big").hex()
    stree = fr["twamp.test.sender_error_estimate_tree"]
    assert (stree["twamp.test.error_estimate.s"], stree["twamp.test.error_estimate.multiplier"]) == ("1", "3")
    assert fr["twamp.test.sender_ttl"] == "253"
    assert fr["twamp.test.mbz1"] == str(0x1234)
