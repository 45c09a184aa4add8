"""STAMP TLVs of RFC 8972 §4: the generic TLV and the typed ones this package speaks.

Generic TLV (RFC 8972 §4, Figure 3)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |STAMP TLV Flags|     Type      |           Length              |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~                            Value                              ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

    STAMP TLV Flags:  +-+-+-+-+-+-+-+-+
                      |U|M|I|R|R|R|R|R|
                      +-+-+-+-+-+-+-+-+

U (Unrecognized): the Session-Sender sets it to 1; a Session-Reflector that understands the TLV
clears it, one that does not reflects the TLV unchanged with U still set. M (Malformed): set by the
Session-Reflector when the TLV is malformed (e.g. its Length runs past the packet). I (Integrity):
set by the Session-Reflector when the HMAC TLV does not verify. Length counts the Value only.

Typed TLVs (each value has one :class:`~srv6pm_twamp.wire.layout.Layout`)::

    Type 1  Extra Padding          Value: padding octets (SHOULD be zero, or a pattern)

    Type 3  Timestamp Information  Length 4 (+ optional sub-TLVs, carried opaquely)
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Sync Src In  |  Timestamp In | Sync Src Out  | Timestamp Out |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

    Type 4  Class of Service       Length 4
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |   DSCP1   |   DSCP2   |ECN| RP|          Reserved             |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    DSCP1: the DSCP the sender asks the reflector to use on the reply; DSCP2: the DSCP the test
    packet arrived with; ECN: the ECN it arrived with; RP: 0 when the reflector honoured DSCP1.

    Type 5  Direct Measurement     Length 12
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                Session-Sender Tx counter (S_TxC)              |
    |                Session-Reflector Rx counter (R_RxC)           |
    |                Session-Reflector Tx counter (R_TxC)           |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

    Type 8  HMAC                   Length 16
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                     HMAC (16 octets)                          |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    HMAC-SHA-256 truncated to 128 bits over the base packet's Sequence Number and every TLV
    before the HMAC TLV, which MUST be the last TLV.
"""

from __future__ import annotations

import enum
import hashlib
import hmac as _hmac
import struct
from dataclasses import dataclass, field, replace
from typing import ClassVar

from srv6pm_twamp.wire.errors import DecodeError
from srv6pm_twamp.wire.layout import Layout

FLAG_U = 0x80
FLAG_M = 0x40
FLAG_I = 0x20
TLV_HEADER = Layout(("flags", "B"), ("type", "B"), ("length", "H"))
HMAC_LEN = 16


class TlvType(enum.IntEnum):
    """STAMP TLV types (IANA "STAMP TLV Types" registry) used here."""

    EXTRA_PADDING = 1
    LOCATION = 2
    TIMESTAMP_INFORMATION = 3
    CLASS_OF_SERVICE = 4
    DIRECT_MEASUREMENT = 5
    ACCESS_REPORT = 6
    FOLLOW_UP_TELEMETRY = 7
    HMAC = 8
    DESTINATION_NODE_ADDRESS = 9  # RFC 9503
    RETURN_PATH = 10  # RFC 9503
    COUNTER_EPOCH = 250  # Experimental Use range (240-251): srv6-pm's counter epoch, see CounterEpoch


@dataclass(frozen=True)
class Tlv:
    """A TLV as it is on the wire: flags, type and the raw value."""

    type: int
    value: bytes = b""
    flags: int = FLAG_U  # a Session-Sender sends every TLV with U set (RFC 8972 §4)

    @property
    def unrecognized(self) -> bool:
        """U flag."""
        return bool(self.flags & FLAG_U)

    @property
    def malformed(self) -> bool:
        """M flag."""
        return bool(self.flags & FLAG_M)

    @property
    def integrity_failed(self) -> bool:
        """I flag."""
        return bool(self.flags & FLAG_I)

    def with_flags(self, set_: int = 0, clear: int = 0) -> Tlv:
        """A copy with the flags in ``set_`` set and those in ``clear`` cleared."""
        return replace(self, flags=(self.flags | set_) & ~clear & 0xFF)

    def encode(self) -> bytes:
        """Header + value."""
        if len(self.value) > 0xFFFF:
            raise ValueError("TLV value longer than 65535 octets")
        return TLV_HEADER.pack({"flags": self.flags, "type": self.type, "length": len(self.value)}) + bytes(
            self.value
        )


def encode_tlvs(tlvs: list[Tlv] | tuple[Tlv, ...]) -> bytes:
    """Concatenate encoded TLVs."""
    return b"".join(t.encode() for t in tlvs)


def decode_tlvs(data: bytes | memoryview) -> list[Tlv]:
    """Split a TLV area into TLVs, never raising.

    A TLV whose Length runs past the end of the data is returned with the M flag set and with the
    octets that are actually there as its value (so it can be reflected as RFC 8972 asks); a tail
    shorter than a TLV header becomes one such malformed TLV of type 0. An all-zero area is legacy
    RFC 8762 padding, not TLVs, and decodes to no TLV at all.
    """
    data = bytes(data)
    if not any(data):
        return []
    out: list[Tlv] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < TLV_HEADER.size:
            out.append(Tlv(type=0, value=data[pos:], flags=FLAG_M))
            break
        hdr = TLV_HEADER.unpack(data, pos)
        start, end = pos + TLV_HEADER.size, pos + TLV_HEADER.size + hdr["length"]
        if end > len(data):
            out.append(Tlv(type=hdr["type"], value=data[start:], flags=hdr["flags"] | FLAG_M))
            break
        out.append(Tlv(type=hdr["type"], value=data[start:end], flags=hdr["flags"]))
        pos = end
    return out


# --- typed TLVs ------------------------------------------------------------------------------


class TypedTlv:
    """Base of the typed TLVs: ``to_tlv()`` and ``from_tlv()`` share one value layout."""

    TYPE: ClassVar[int]
    VALUE: ClassVar[Layout | None] = None

    def values(self) -> dict[str, object]:  # pragma: no cover - overridden
        raise NotImplementedError

    def value_bytes(self) -> bytes:
        """The encoded value."""
        assert self.VALUE is not None
        return self.VALUE.pack(self.values())

    def to_tlv(self, flags: int = FLAG_U) -> Tlv:
        """This TLV as a generic :class:`Tlv` (a sender's TLV has U set)."""
        return Tlv(type=self.TYPE, value=self.value_bytes(), flags=flags)

    @classmethod
    def check(cls, tlv: Tlv) -> None:
        """Raise :class:`DecodeError` unless ``tlv`` has this type and the fixed length."""
        if tlv.type != cls.TYPE:
            raise DecodeError("wrong-type", f"expected TLV type {cls.TYPE}, got {tlv.type}")
        if tlv.malformed:
            raise DecodeError("malformed-tlv", f"type {tlv.type} is truncated")
        if cls.VALUE is not None and len(tlv.value) != cls.VALUE.size:
            raise DecodeError(
                "bad-tlv-length", f"type {tlv.type} length {len(tlv.value)} != {cls.VALUE.size}"
            )


@dataclass(frozen=True)
class ExtraPadding(TypedTlv):
    """Type 1: makes the test packet (and so the reply) longer."""

    TYPE: ClassVar[int] = TlvType.EXTRA_PADDING
    padding: bytes = b""

    @classmethod
    def of_length(cls, n: int) -> ExtraPadding:
        """``n`` zero octets of padding."""
        return cls(bytes(n))

    def value_bytes(self) -> bytes:
        return self.padding

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> ExtraPadding:
        """Decode."""
        cls.check(tlv)
        return cls(tlv.value)


class SyncSource(enum.IntEnum):
    """Synchronization Source values (RFC 8972 §4.3, IANA)."""

    RESERVED = 0
    NTP = 1
    PTP = 2
    SSU_BITS = 3
    GPS = 4
    LOCAL_FREE_RUNNING = 5


class TimestampMethod(enum.IntEnum):
    """Timestamping Method values (RFC 8972 §4.3, IANA)."""

    RESERVED = 0
    HW_ASSIST = 1
    SW_LOCAL = 2
    CONTROL_PLANE = 3


@dataclass(frozen=True)
class TimestampInformation(TypedTlv):
    """Type 3: how the reflector's clock is synchronised and how it timestamps in and out."""

    TYPE: ClassVar[int] = TlvType.TIMESTAMP_INFORMATION
    VALUE: ClassVar[Layout] = Layout(("sync_in", "B"), ("ts_in", "B"), ("sync_out", "B"), ("ts_out", "B"))
    sync_in: int = 0
    ts_in: int = 0
    sync_out: int = 0
    ts_out: int = 0
    sub_tlvs: bytes = b""  # optional sub-TLVs, carried opaquely

    def values(self) -> dict[str, object]:
        return {
            "sync_in": self.sync_in,
            "ts_in": self.ts_in,
            "sync_out": self.sync_out,
            "ts_out": self.ts_out,
        }

    def value_bytes(self) -> bytes:
        return self.VALUE.pack(self.values()) + self.sub_tlvs

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> TimestampInformation:
        """Decode (the value is at least 4 octets; the rest is sub-TLVs)."""
        if tlv.type != cls.TYPE or tlv.malformed or len(tlv.value) < cls.VALUE.size:
            raise DecodeError("bad-tlv-length", "Timestamp Information needs at least 4 octets")
        return cls(**cls.VALUE.unpack(tlv.value), sub_tlvs=tlv.value[cls.VALUE.size :])


@dataclass(frozen=True)
class ClassOfService(TypedTlv):
    """Type 4: ask for a DSCP on the reply; learn the DSCP/ECN the test packet arrived with."""

    TYPE: ClassVar[int] = TlvType.CLASS_OF_SERVICE
    VALUE: ClassVar[Layout] = Layout(("bits", "H"), (None, "2x"))
    dscp1: int = 0
    dscp2: int = 0
    ecn: int = 0
    rp: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.dscp1 < 64 and 0 <= self.dscp2 < 64 and 0 <= self.ecn < 4 and 0 <= self.rp < 4):
            raise ValueError("DSCP is 6 bits, ECN and RP 2 bits")

    def values(self) -> dict[str, object]:
        return {"bits": self.dscp1 << 10 | self.dscp2 << 4 | self.ecn << 2 | self.rp}

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> ClassOfService:
        """Decode."""
        cls.check(tlv)
        bits = cls.VALUE.unpack(tlv.value)["bits"]
        return cls(dscp1=bits >> 10, dscp2=bits >> 4 & 0x3F, ecn=bits >> 2 & 3, rp=bits & 3)


@dataclass(frozen=True)
class DirectMeasurement(TypedTlv):
    """Type 5: the data-traffic counters (32 bits each) for direct loss measurement."""

    TYPE: ClassVar[int] = TlvType.DIRECT_MEASUREMENT
    VALUE: ClassVar[Layout] = Layout(("s_txc", "I"), ("r_rxc", "I"), ("r_txc", "I"))
    s_txc: int = 0
    r_rxc: int = 0
    r_txc: int = 0

    def values(self) -> dict[str, object]:
        mask = 0xFFFFFFFF  # counters wrap at 32 bits on the wire; the arithmetic undoes the wrap
        return {"s_txc": self.s_txc & mask, "r_rxc": self.r_rxc & mask, "r_txc": self.r_txc & mask}

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> DirectMeasurement:
        """Decode."""
        cls.check(tlv)
        return cls(**cls.VALUE.unpack(tlv.value))


@dataclass(frozen=True)
class CounterEpoch(TypedTlv):
    """Type 250 (Experimental Use, RFC 8972 §5.1): when the reflector's counters started.

    Direct Measurement counters are cumulative; if a flow's counters at the reflector are
    removed and created again they restart from zero, and a difference across that restart means
    nothing. The reflector puts the creation time of the counters it reported (Unix ns; 0 if
    unknown) here, so the sender can tell and start a new baseline. A reflector that does not know
    the type returns it with U set, and the sender falls back to a plausibility check.
    """

    TYPE: ClassVar[int] = TlvType.COUNTER_EPOCH
    VALUE: ClassVar[Layout] = Layout(("epoch_ns", "Q"))
    epoch_ns: int = 0

    def values(self) -> dict[str, object]:
        return {"epoch_ns": self.epoch_ns}

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> CounterEpoch:
        """Decode."""
        cls.check(tlv)
        return cls(**cls.VALUE.unpack(tlv.value))


@dataclass(frozen=True)
class HmacTlv(TypedTlv):
    """Type 8: integrity of the TLVs; computed with :func:`tlv_hmac`."""

    TYPE: ClassVar[int] = TlvType.HMAC
    VALUE: ClassVar[Layout] = Layout(("digest", f"{HMAC_LEN}s"))
    digest: bytes = field(default=bytes(HMAC_LEN))

    def values(self) -> dict[str, object]:
        return {"digest": self.digest}

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> HmacTlv:
        """Decode."""
        cls.check(tlv)
        return cls(tlv.value)


def hmac16(key: bytes, data: bytes) -> bytes:
    """HMAC-SHA-256 truncated to 128 bits (RFC 8762 §4.1.2, RFC 4868)."""
    return _hmac.new(key, data, hashlib.sha256).digest()[:HMAC_LEN]


def tlv_hmac(key: bytes, seq: int, tlvs_before: list[Tlv] | tuple[Tlv, ...]) -> bytes:
    """The HMAC TLV digest: over the Sequence Number and the TLVs that precede the HMAC TLV."""
    return hmac16(key, struct.pack("!I", seq) + encode_tlvs(tlvs_before))


def seal_tlvs(key: bytes, seq: int, tlvs: list[Tlv], flags: int) -> list[Tlv]:
    """``tlvs`` with any HMAC TLV removed and a fresh one appended last."""
    body = [t for t in tlvs if t.type != TlvType.HMAC]
    # A freshly computed HMAC is by definition not malformed and verifies: clear M and I.
    return [*body, HmacTlv(tlv_hmac(key, seq, body)).to_tlv(flags & ~(FLAG_M | FLAG_I))]


def verify_tlvs(key: bytes, seq: int, tlvs: list[Tlv]) -> bool | None:
    """True/False when the TLVs end with an HMAC TLV that does / does not verify; None without one.

    An HMAC TLV anywhere but last, or more than one, fails.
    """
    positions = [i for i, t in enumerate(tlvs) if t.type == TlvType.HMAC]
    if not positions:
        return None
    if positions != [len(tlvs) - 1] or tlvs[-1].malformed or len(tlvs[-1].value) != HMAC_LEN:
        return False
    return _hmac.compare_digest(tlvs[-1].value, tlv_hmac(key, seq, tlvs[:-1]))
