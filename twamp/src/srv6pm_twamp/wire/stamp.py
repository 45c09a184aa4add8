"""STAMP test packets (RFC 8762 §4, with the SSID of RFC 8972 §3), both modes, plus TLVs.

Session-Sender test packet, unauthenticated mode (44 octets before TLVs)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                        Sequence Number                        |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                          Timestamp                            |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |         Error Estimate        |             SSID              |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                         MBZ (28 octets)                       |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~                            TLVs                               ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Session-Sender test packet, authenticated mode (112 octets before TLVs)::

    | Sequence Number (4) | MBZ (12) | Timestamp (8) | Error Estimate (2) | SSID (2) |
    | MBZ (68) | HMAC (16) |

Session-Reflector test packet, unauthenticated mode (44 octets before TLVs)::

    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                        Sequence Number                        |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                          Timestamp                            |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |         Error Estimate        |           SSID                |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                        Receive Timestamp                      |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Session-Sender Sequence Number                |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                  Session-Sender Timestamp                     |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    | Session-Sender Error Estimate |           MBZ                 |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |Ses-Sender TTL |                   MBZ                         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~                            TLVs                               ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Session-Reflector test packet, authenticated mode (112 octets before TLVs)::

    | Sequence Number (4) | MBZ (12) | Timestamp (8) | Error Estimate (2) | SSID (2) | MBZ (4) |
    | Receive Timestamp (8) | MBZ (8) | Session-Sender Sequence Number (4) | MBZ (12) |
    | Session-Sender Timestamp (8) | Session-Sender Error Estimate (2) | MBZ (6) |
    | Ses-Sender TTL (1) | MBZ (15) | HMAC (16) |

In authenticated mode the HMAC is HMAC-SHA-256 truncated to 16 octets over every octet before it
(the first 96); TLVs that follow are protected by an HMAC TLV (RFC 8972 §4.8) with the same key.
The Timestamp and Receive Timestamp follow the Z bit of the packet's own Error Estimate; the
Session-Sender Timestamp follows the Z bit of the Session-Sender Error Estimate.
"""

from __future__ import annotations

import hmac as _hmac
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from srv6pm_twamp.timestamps import ErrorEstimate, from_wire
from srv6pm_twamp.wire.errors import AuthError, DecodeError
from srv6pm_twamp.wire.layout import Layout
from srv6pm_twamp.wire.tlv import Tlv, TypedTlv, decode_tlvs, encode_tlvs, hmac16, seal_tlvs, verify_tlvs

STAMP_PORT = 862
BASE_LEN = 44
AUTH_BASE_LEN = 112
_HMAC_COVERS = AUTH_BASE_LEN - 16

SENDER_UNAUTH = Layout(
    ("seq", "I"), ("timestamp", "Q"), ("error_estimate", "H"), ("ssid", "H"), (None, "28x")
)
SENDER_AUTH = Layout(
    ("seq", "I"),
    (None, "12x"),
    ("timestamp", "Q"),
    ("error_estimate", "H"),
    ("ssid", "H"),
    (None, "68x"),
    ("hmac", "16s"),
)
REFLECTOR_UNAUTH = Layout(
    ("seq", "I"),
    ("timestamp", "Q"),
    ("error_estimate", "H"),
    ("ssid", "H"),
    ("rx_timestamp", "Q"),
    ("sender_seq", "I"),
    ("sender_timestamp", "Q"),
    ("sender_error_estimate", "H"),
    (None, "2x"),
    ("sender_ttl", "B"),
    (None, "3x"),
)
REFLECTOR_AUTH = Layout(
    ("seq", "I"),
    (None, "12x"),
    ("timestamp", "Q"),
    ("error_estimate", "H"),
    ("ssid", "H"),
    (None, "4x"),
    ("rx_timestamp", "Q"),
    (None, "8x"),
    ("sender_seq", "I"),
    (None, "12x"),
    ("sender_timestamp", "Q"),
    ("sender_error_estimate", "H"),
    (None, "6x"),
    ("sender_ttl", "B"),
    (None, "15x"),
    ("hmac", "16s"),
)
assert SENDER_UNAUTH.size == REFLECTOR_UNAUTH.size == BASE_LEN
assert SENDER_AUTH.size == REFLECTOR_AUTH.size == AUTH_BASE_LEN

T = TypeVar("T", bound=TypedTlv)
P = TypeVar("P", bound="_Packet")


@dataclass(frozen=True)
class _Packet:
    """What the two packet kinds share: encode/decode driven by their two layouts."""

    UNAUTH: ClassVar[Layout]
    AUTH: ClassVar[Layout]
    _EE_FIELDS: ClassVar[tuple[str, ...]] = ("error_estimate",)
    _HMAC_FLAGS: ClassVar[int] = 0x80  # a sender's TLVs carry U; a reflector's recognised ones not

    seq: int = 0
    timestamp: int = 0  # raw 64-bit wire value (format per error_estimate.fmt)
    error_estimate: ErrorEstimate = field(default_factory=ErrorEstimate)
    ssid: int = 0
    tlvs: tuple[Tlv, ...] = ()

    def _fields(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in self.UNAUTH.names}
        for name in self._EE_FIELDS:
            values[name] = values[name].to_int()
        return values

    def encode(self, key: bytes | None = None) -> bytes:
        """Wire bytes; authenticated mode when ``key`` is given (then TLVs get an HMAC TLV)."""
        values = self._fields()
        if key is None:
            return self.UNAUTH.pack(values) + encode_tlvs(self.tlvs)
        base = bytearray(self.AUTH.pack({**values, "hmac": bytes(16)}))
        base[_HMAC_COVERS:] = hmac16(key, bytes(base[:_HMAC_COVERS]))
        tlvs = seal_tlvs(key, self.seq, list(self.tlvs), flags=self._hmac_flags()) if self.tlvs else []
        return bytes(base) + encode_tlvs(tlvs)

    def _hmac_flags(self) -> int:
        existing = [t for t in self.tlvs if t.type == 8]
        return existing[0].flags if existing else self._HMAC_FLAGS

    @classmethod
    def decode(cls: type[P], data: bytes | memoryview, key: bytes | None = None) -> P:
        """Parse a packet; with ``key`` it must be authenticated and verify (else :class:`AuthError`)."""
        data = bytes(data)
        layout = cls.UNAUTH if key is None else cls.AUTH
        values = layout.unpack(data)  # raises DecodeError("short") first
        if key is not None and not _hmac.compare_digest(values.pop("hmac"), hmac16(key, data[:_HMAC_COVERS])):
            raise AuthError("base packet HMAC does not verify")
        tlvs = decode_tlvs(data[layout.size :])
        if key is not None and tlvs and verify_tlvs(key, values["seq"], tlvs) is not True:
            raise AuthError("TLVs lack a valid HMAC TLV")
        for name in cls._EE_FIELDS:
            values[name] = ErrorEstimate.from_int(values[name])
        return cls(**values, tlvs=tuple(tlvs))

    def find(self, kind: type[T]) -> T | None:
        """The first TLV of a typed kind, decoded; None if absent. :class:`DecodeError` if malformed."""
        for tlv in self.tlvs:
            if tlv.type == kind.TYPE:
                return kind.from_tlv(tlv)  # type: ignore[attr-defined, no-any-return]
        return None

    @property
    def timestamp_ns(self) -> int:
        """The Timestamp as Unix nanoseconds."""
        return from_wire(self.timestamp, self.error_estimate.fmt)

    def with_tlvs(self: P, tlvs: tuple[Tlv, ...] | list[Tlv]) -> P:
        """A copy with other TLVs."""
        return replace(self, tlvs=tuple(tlvs))


@dataclass(frozen=True)
class SenderPacket(_Packet):
    """A Session-Sender test packet."""

    UNAUTH: ClassVar[Layout] = SENDER_UNAUTH
    AUTH: ClassVar[Layout] = SENDER_AUTH


@dataclass(frozen=True)
class ReflectorPacket(_Packet):
    """A Session-Reflector test packet (the reply)."""

    UNAUTH: ClassVar[Layout] = REFLECTOR_UNAUTH
    AUTH: ClassVar[Layout] = REFLECTOR_AUTH
    _EE_FIELDS: ClassVar[tuple[str, ...]] = ("error_estimate", "sender_error_estimate")
    _HMAC_FLAGS: ClassVar[int] = 0

    rx_timestamp: int = 0
    sender_seq: int = 0
    sender_timestamp: int = 0
    sender_error_estimate: ErrorEstimate = field(default_factory=ErrorEstimate)
    sender_ttl: int = 0

    @property
    def rx_timestamp_ns(self) -> int:
        """T2 as Unix nanoseconds."""
        return from_wire(self.rx_timestamp, self.error_estimate.fmt)

    @property
    def sender_timestamp_ns(self) -> int:
        """T1 (echoed) as Unix nanoseconds."""
        return from_wire(self.sender_timestamp, self.sender_error_estimate.fmt)


def parse_sender(data: bytes, key: bytes | None = None) -> tuple[int, int, int, int, bytes]:
    """Hot-path decode of a Session-Sender packet for the reflector.

    Returns ``(seq, timestamp, error_estimate, ssid, tlv_area)`` with raw integers, having checked
    the length and, with ``key``, the base HMAC (the HMAC TLV is the caller's, once it has split
    the TLVs). Same layouts as :class:`SenderPacket`, without building objects.
    """
    if key is None:
        seq, ts, ee, ssid = SENDER_UNAUTH.unpack_tuple(data)
        return seq, ts, ee, ssid, data[BASE_LEN:]
    seq, ts, ee, ssid, digest = SENDER_AUTH.unpack_tuple(data)
    if not _hmac.compare_digest(digest, hmac16(key, data[:_HMAC_COVERS])):
        raise AuthError("base packet HMAC does not verify")
    return seq, ts, ee, ssid, data[AUTH_BASE_LEN:]


def encode_reflector(
    seq: int,
    timestamp: int,
    error_estimate: int,
    ssid: int,
    rx_timestamp: int,
    sender_seq: int,
    sender_timestamp: int,
    sender_error_estimate: int,
    sender_ttl: int,
    tlvs: list[Tlv] | tuple[Tlv, ...] = (),
    key: bytes | None = None,
) -> bytes:
    """Hot-path encode of a Session-Reflector packet from raw integers (same layouts as
    :class:`ReflectorPacket`)."""
    values = (seq, timestamp, error_estimate, ssid, rx_timestamp, sender_seq, sender_timestamp)
    if key is None:
        base = REFLECTOR_UNAUTH.pack_tuple(*values, sender_error_estimate, sender_ttl)
        return base + encode_tlvs(tlvs) if tlvs else base
    body = REFLECTOR_AUTH.pack_tuple(*values, sender_error_estimate, sender_ttl, bytes(16))[:_HMAC_COVERS]
    base = body + hmac16(key, body)
    if not tlvs:
        return base
    hmac_flags = next((t.flags for t in tlvs if t.type == 8), 0)
    return base + encode_tlvs(seal_tlvs(key, seq, list(tlvs), flags=hmac_flags))


def encode_sender(
    seq: int,
    timestamp: int,
    error_estimate: int,
    ssid: int,
    tlvs: list[Tlv] | tuple[Tlv, ...] = (),
    key: bytes | None = None,
) -> bytes:
    """Hot-path encode of a Session-Sender packet from raw integers (layouts of :class:`SenderPacket`)."""
    if key is None:
        base = SENDER_UNAUTH.pack_tuple(seq, timestamp, error_estimate, ssid)
        return base + encode_tlvs(tlvs) if tlvs else base
    body = SENDER_AUTH.pack_tuple(seq, timestamp, error_estimate, ssid, bytes(16))[:_HMAC_COVERS]
    base = body + hmac16(key, body)
    if not tlvs:
        return base
    return base + encode_tlvs(seal_tlvs(key, seq, list(tlvs), flags=0x80))


def parse_reflector(data: bytes, key: bytes | None = None) -> tuple[Any, ...]:
    """Hot-path decode of a Session-Reflector packet for the sender.

    Returns ``(seq, timestamp, error_estimate, ssid, rx_timestamp, sender_seq, sender_timestamp,
    sender_error_estimate, sender_ttl, tlvs)``; with ``key`` both the base HMAC and the HMAC TLV
    must verify (:class:`AuthError` otherwise).
    """
    if key is None:
        fields = REFLECTOR_UNAUTH.unpack_tuple(data)
        tail = data[BASE_LEN:]
    else:
        *fields, digest = REFLECTOR_AUTH.unpack_tuple(data)
        if not _hmac.compare_digest(digest, hmac16(key, data[:_HMAC_COVERS])):
            raise AuthError("base packet HMAC does not verify")
        tail = data[AUTH_BASE_LEN:]
    tlvs = decode_tlvs(tail) if tail else []
    if key is not None and tlvs and verify_tlvs(key, fields[0], tlvs) is not True:
        raise AuthError("TLVs lack a valid HMAC TLV")
    return (*fields, tuple(tlvs))


def base_length(authenticated: bool) -> int:
    """Length of the base packet in either mode."""
    return AUTH_BASE_LEN if authenticated else BASE_LEN


__all__ = [
    "AUTH_BASE_LEN",
    "BASE_LEN",
    "STAMP_PORT",
    "AuthError",
    "DecodeError",
    "ReflectorPacket",
    "SenderPacket",
    "base_length",
    "encode_reflector",
    "encode_sender",
    "parse_reflector",
    "parse_sender",
]
