"""Byte-for-byte test vectors for every STAMP / TWAMP-Light format, in both directions.

The expected bytes are written out by hand from the RFC diagrams, not produced by the codec.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

import pytest

from srv6pm_twamp.timestamps import ErrorEstimate, TimestampFormat
from srv6pm_twamp.wire.errors import AuthError, DecodeError
from srv6pm_twamp.wire.sr_tlv import (
    ControlCode,
    DestinationNodeAddress,
    ReturnAddress,
    ReturnPath,
    Srv6SegmentList,
)
from srv6pm_twamp.wire.stamp import ReflectorPacket, SenderPacket
from srv6pm_twamp.wire.tlv import (
    FLAG_I,
    FLAG_M,
    FLAG_U,
    ClassOfService,
    DirectMeasurement,
    ExtraPadding,
    HmacTlv,
    TimestampInformation,
    Tlv,
    decode_tlvs,
    encode_tlvs,
    verify_tlvs,
)
from srv6pm_twamp.wire.twamp_light import LossQuery, LossResponse

H = bytes.fromhex
KEY = b"0123456789abcdef0123456789abcdef"
EE = ErrorEstimate(synchronized=True, fmt=TimestampFormat.NTP, scale=2, multiplier=3)  # 0x8203


def hmac16(data: bytes) -> bytes:
    return hmac.new(KEY, data, hashlib.sha256).digest()[:16]


# --- STAMP base packets ------------------------------------------------------------------------

SENDER = SenderPacket(seq=0x01020304, timestamp=0x1122334455667788, error_estimate=EE, ssid=0xABCD)
SENDER_BYTES = H("0102030411223344556677888203abcd") + bytes(28)


def test_sender_unauth_both_ways():
    assert SENDER.encode() == SENDER_BYTES
    assert len(SENDER_BYTES) == 44
    assert SenderPacket.decode(SENDER_BYTES) == SENDER


def test_sender_auth_both_ways():
    body = H("01020304") + bytes(12) + H("11223344556677888203abcd") + bytes(68)
    expected = body + hmac16(body)
    assert len(expected) == 112
    assert SENDER.encode(KEY) == expected
    assert SenderPacket.decode(expected, KEY) == SENDER


REFLECTOR = ReflectorPacket(
    seq=7,
    timestamp=0xAAAAAAAABBBBBBBB,
    error_estimate=ErrorEstimate(False, TimestampFormat.PTP, 0, 1),  # 0x4001
    ssid=0x0102,
    rx_timestamp=0xCCCCCCCCDDDDDDDD,
    sender_seq=0x01020304,
    sender_timestamp=0x1122334455667788,
    sender_error_estimate=EE,
    sender_ttl=254,
)


def test_reflector_unauth_both_ways():
    expected = H("00000007aaaaaaaabbbbbbbb40010102ccccccccdddddddd01020304112233445566778882030000fe000000")
    assert len(expected) == 44
    assert REFLECTOR.encode() == expected
    assert ReflectorPacket.decode(expected) == REFLECTOR


def test_reflector_auth_both_ways():
    body = (
        H("00000007")
        + bytes(12)
        + H("aaaaaaaabbbbbbbb40010102")
        + bytes(4)
        + H("ccccccccdddddddd")
        + bytes(8)
        + H("01020304")
        + bytes(12)
        + H("11223344556677888203")
        + bytes(6)
        + H("fe")
        + bytes(15)
    )
    assert len(body) == 96
    expected = body + hmac16(body)
    assert REFLECTOR.encode(KEY) == expected
    assert ReflectorPacket.decode(expected, KEY) == REFLECTOR


def test_auth_rejects_tampering_and_wrong_key():
    wire = bytearray(SENDER.encode(KEY))
    with pytest.raises(AuthError):
        SenderPacket.decode(bytes(wire), b"another key")
    wire[5] ^= 1  # inside MBZ: still covered by the HMAC
    with pytest.raises(AuthError):
        SenderPacket.decode(bytes(wire), KEY)


def test_mbz_ignored_on_receipt():
    wire = bytearray(SENDER_BYTES)
    wire[20] = 0xFF  # a byte in the MBZ area: a receiver ignores it
    assert SenderPacket.decode(bytes(wire)) == SENDER


@pytest.mark.parametrize("n", [0, 1, 43])
def test_short_packets(n):
    with pytest.raises(DecodeError) as err:
        SenderPacket.decode(SENDER_BYTES[:n])
    assert err.value.reason == "short"
    with pytest.raises(DecodeError):
        ReflectorPacket.decode(SENDER_BYTES[:n])
    with pytest.raises(DecodeError):
        SenderPacket.decode(SENDER_BYTES[:n] + bytes(60)[: max(0, 111 - n)], KEY)


def test_legacy_zero_padding_is_not_tlvs():
    assert SenderPacket.decode(SENDER_BYTES + bytes(20)).tlvs == ()


# --- RFC 8972 TLVs -----------------------------------------------------------------------------


def test_error_estimate_bits():
    assert EE.to_int() == 0x8203
    assert ErrorEstimate.from_int(0x8203) == EE
    assert ErrorEstimate.from_int(0x7FFF) == ErrorEstimate(False, TimestampFormat.PTP, 0x3F, 0xFF)


@pytest.mark.parametrize(
    ("tlv", "wire"),
    [
        (ExtraPadding.of_length(3).to_tlv(), "80 01 0003 000000"),
        (TimestampInformation(1, 2, 2, 1).to_tlv(), "80 03 0004 01020201"),
        (TimestampInformation(5, 3, 4, 2, b"\x01\x02").to_tlv(), "80 03 0006 05030402 0102"),
        (ClassOfService(dscp1=46, dscp2=10, ecn=2, rp=1).to_tlv(), "80 04 0004 b8a9 0000"),
        (DirectMeasurement(1, 2, 0xFFFFFFFF).to_tlv(), "80 05 000c 00000001 00000002 ffffffff"),
        (HmacTlv(bytes(range(16))).to_tlv(0), "00 08 0010 000102030405060708090a0b0c0d0e0f"),
    ],
)
def test_typed_tlvs_both_ways(tlv, wire):
    raw = H(wire.replace(" ", ""))
    assert tlv.encode() == raw
    [decoded] = decode_tlvs(raw)
    assert decoded == tlv
    kind = {1: ExtraPadding, 3: TimestampInformation, 4: ClassOfService, 5: DirectMeasurement, 8: HmacTlv}
    assert kind[tlv.type].from_tlv(decoded).to_tlv(tlv.flags) == tlv


def test_direct_measurement_masks_counters_to_32_bits():
    assert DirectMeasurement(s_txc=(1 << 32) + 5).value_bytes()[:4] == H("00000005")


def test_tlv_flags():
    t = Tlv(type=200, value=b"x")
    assert t.unrecognized and not t.malformed and not t.integrity_failed
    t2 = t.with_flags(set_=FLAG_M | FLAG_I, clear=FLAG_U)
    assert t2.flags == 0x60 and t2.malformed and t2.integrity_failed and not t2.unrecognized


def test_overrunning_tlv_is_flagged_malformed():
    raw = H("80 05 000c 00000001 0002".replace(" ", ""))  # Length 12, only 6 octets follow
    [t] = decode_tlvs(raw)
    assert t.malformed and t.type == 5 and t.value == H("000000010002")
    with pytest.raises(DecodeError):
        DirectMeasurement.from_tlv(t)
    [t] = decode_tlvs(H("8001"))  # shorter than a header
    assert t.malformed and t.value == H("8001")


def test_tlv_sequence_round_trip():
    tlvs = [ExtraPadding.of_length(8).to_tlv(), Tlv(type=77, value=b"abc"), DirectMeasurement(9).to_tlv()]
    assert decode_tlvs(encode_tlvs(tlvs)) == tlvs


def test_wrong_fixed_length_rejected():
    with pytest.raises(DecodeError) as err:
        ClassOfService.from_tlv(Tlv(type=4, value=bytes(5)))
    assert err.value.reason == "bad-tlv-length"


def test_hmac_tlv_covers_seq_and_preceding_tlvs():
    pad = ExtraPadding.of_length(4).to_tlv()
    pkt = SENDER.with_tlvs([pad])
    wire = pkt.encode(KEY)
    tlv_area = wire[112:]
    expected_digest = hmac16(H("01020304") + pad.encode())
    assert tlv_area == pad.encode() + H("80080010") + expected_digest
    decoded = SenderPacket.decode(wire, KEY)
    assert verify_tlvs(KEY, decoded.seq, list(decoded.tlvs)) is True
    tampered = wire[:-21] + bytes([wire[-21] ^ 1]) + wire[-20:]  # flip the last padding octet
    with pytest.raises(AuthError):
        SenderPacket.decode(tampered, KEY)


def test_hmac_tlv_must_be_last():
    pad = ExtraPadding.of_length(4).to_tlv()
    digest = HmacTlv(bytes(16)).to_tlv()
    assert verify_tlvs(KEY, 1, [digest, pad]) is False
    assert verify_tlvs(KEY, 1, [pad]) is None


def test_packet_with_tlvs_unauth():
    pkt = SENDER.with_tlvs([DirectMeasurement(s_txc=100).to_tlv(), Tlv(type=99, value=b"zz")])
    wire = pkt.encode()
    assert wire == SENDER_BYTES + H("8005000c000000640000000000000000806300027a7a")
    back = SenderPacket.decode(wire)
    assert back == pkt
    assert back.find(DirectMeasurement) == DirectMeasurement(s_txc=100)
    assert back.find(ClassOfService) is None


# --- RFC 9503 SR TLVs --------------------------------------------------------------------------


def test_destination_node_address_both_ways():
    v4 = DestinationNodeAddress(ipaddress.ip_address("192.0.2.1"))
    assert v4.to_tlv().encode() == H("80090004c0000201")
    v6 = DestinationNodeAddress(ipaddress.ip_address("2001:db8::1"))
    raw = H("8009001020010db8000000000000000000000001")
    assert v6.to_tlv().encode() == raw
    assert DestinationNodeAddress.from_tlv(decode_tlvs(raw)[0]) == v6
    with pytest.raises(DecodeError):
        DestinationNodeAddress.from_tlv(Tlv(type=9, value=bytes(5)))


def test_return_path_both_ways():
    rp = ReturnPath(
        (
            ControlCode(0x1),
            ReturnAddress(ipaddress.IPv6Address("2001:db8::9")),
            Srv6SegmentList((ipaddress.IPv6Address("fc00::1"), ipaddress.IPv6Address("fc00::2"))),
        )
    )
    raw = H(
        "800a"
        "0040"
        "8001"
        "0004"
        "00000001"
        "8002"
        "0010"
        "20010db8000000000000000000000009"
        "8004"
        "0020"
        "fc000000000000000000000000000001"
        "fc000000000000000000000000000002"
    )
    assert rp.to_tlv().encode() == raw
    back = ReturnPath.from_tlv(decode_tlvs(raw)[0])
    assert back == rp
    assert back.control_code.no_reply
    assert back.return_address == ipaddress.IPv6Address("2001:db8::9")
    assert back.segments == (ipaddress.IPv6Address("fc00::1"), ipaddress.IPv6Address("fc00::2"))


@pytest.mark.parametrize(
    "value",
    [
        "80040011" + "00" * 17,  # segment list not a multiple of 16
        "80010003000000",  # control code of length 3
        "80020004c000020180020004c0000202",  # duplicate return address
        "8002000ac0000201",  # sub-TLV runs past the parent
    ],
)
def test_return_path_malformed(value):
    with pytest.raises(DecodeError):
        ReturnPath.from_tlv(Tlv(type=10, value=H(value)))


# --- draft-gandhi-spring-twamp-srpm ------------------------------------------------------------


def test_loss_query_both_ways():
    q = LossQuery(seq=5, tx_counter=0x0102030405060708, block=3, control_code=1)
    raw = H("0000000501020304050607088003000000000001")
    assert q.encode() == raw
    assert LossQuery.decode(raw) == q
    assert LossQuery.decode(raw + bytes(30)) == q  # trailing padding ignored
    q32 = LossQuery(seq=1, counter_64bit=False, octets=True)
    assert q32.encode()[12] == 0x40


def test_loss_response_both_ways():
    q = LossQuery(seq=5, tx_counter=1000, block=3)
    r = LossResponse.answer(q, seq=9, rx_counter=998, tx_counter=500, sender_ttl=63)
    raw = H("0000000900000000000001f48003000000000000000003e60000000500000000000003e8800300003f")
    assert r.encode() == raw
    assert LossResponse.decode(raw) == r
    with pytest.raises(DecodeError):
        LossResponse.decode(raw[:40])
