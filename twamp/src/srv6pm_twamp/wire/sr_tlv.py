"""Segment Routing TLVs of RFC 9503 (STAMP extensions for SR networks).

Destination Node Address TLV (RFC 9503 §3), Type 9, Length 4 (IPv4) or 16 (IPv6)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |STAMP TLV Flags|    Type=9     |         Length                |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                      Address (IPv4 or IPv6)                   |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Return Path TLV (RFC 9503 §4), Type 10, whose value is a list of sub-TLVs that use the STAMP TLV
header too::

    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |STAMP TLV Flags|    Type=10    |         Length                |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~                     Return Path Sub-TLVs                      ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

    Sub-TLV 1, Return Path Control Code, Length 4:
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |STAMP TLV Flags|    Type=1     |         Length=4              |
    |                     Control Code Flags                        |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    0x1: No Reply Requested;  0x2: Reply Requested on the Same Link.

    Sub-TLV 2, Return Address, Length 4 or 16: the address to send the reply to.

    Sub-TLV 4, SRv6 Segment List, Length 16*n:
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |STAMP TLV Flags|    Type=4     |         Length                |
    |              Segment(1) (128-bit IPv6 Address)                |
    .                               ...                             .
    |      Segment(n) (128-bit IPv6 Address) (bottom of stack)      |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Segment(1) is the first segment the reply visits, Segment(n) the last. (Sub-TLV 3, the SR-MPLS
Label Stack, is kept as an opaque sub-TLV.)
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import ClassVar

from srv6pm_twamp.wire.errors import DecodeError
from srv6pm_twamp.wire.layout import Layout
from srv6pm_twamp.wire.tlv import FLAG_U, Tlv, TlvType, TypedTlv, decode_tlvs, encode_tlvs

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class ReturnPathSubType(enum.IntEnum):
    """Return Path sub-TLV types (RFC 9503 §4.1)."""

    CONTROL_CODE = 1
    RETURN_ADDRESS = 2
    SR_MPLS_LABEL_STACK = 3
    SRV6_SEGMENT_LIST = 4


NO_REPLY_REQUESTED = 0x1
REPLY_SAME_LINK = 0x2


def _address(value: bytes, what: str) -> IPAddress:
    if len(value) == 4:
        return ipaddress.IPv4Address(value)
    if len(value) == 16:
        return ipaddress.IPv6Address(value)
    raise DecodeError("bad-tlv-length", f"{what}: address length {len(value)} is neither 4 nor 16")


@dataclass(frozen=True)
class DestinationNodeAddress(TypedTlv):
    """Type 9: the node that is meant to reflect this packet."""

    TYPE: ClassVar[int] = TlvType.DESTINATION_NODE_ADDRESS
    address: IPAddress

    def value_bytes(self) -> bytes:
        return self.address.packed

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> DestinationNodeAddress:
        """Decode."""
        cls.check(tlv)
        return cls(_address(tlv.value, "Destination Node Address"))


@dataclass(frozen=True)
class ControlCode:
    """Return Path sub-TLV 1."""

    VALUE: ClassVar[Layout] = Layout(("flags", "I"))
    flags: int = 0

    @property
    def no_reply(self) -> bool:
        """The sender asks for no reply at all (e.g. one-way measurement)."""
        return bool(self.flags & NO_REPLY_REQUESTED)

    def to_tlv(self, flags: int = FLAG_U) -> Tlv:
        """Encode."""
        return Tlv(ReturnPathSubType.CONTROL_CODE, self.VALUE.pack({"flags": self.flags}), flags)


@dataclass(frozen=True)
class ReturnAddress:
    """Return Path sub-TLV 2."""

    address: IPAddress

    def to_tlv(self, flags: int = FLAG_U) -> Tlv:
        """Encode."""
        return Tlv(ReturnPathSubType.RETURN_ADDRESS, self.address.packed, flags)


@dataclass(frozen=True)
class Srv6SegmentList:
    """Return Path sub-TLV 4: the SID list the reply should travel."""

    segments: tuple[ipaddress.IPv6Address, ...]

    def to_tlv(self, flags: int = FLAG_U) -> Tlv:
        """Encode."""
        return Tlv(ReturnPathSubType.SRV6_SEGMENT_LIST, b"".join(s.packed for s in self.segments), flags)


ReturnPathItem = ControlCode | ReturnAddress | Srv6SegmentList | Tlv


@dataclass(frozen=True)
class ReturnPath(TypedTlv):
    """Type 10: how the reflector must send its reply. Unknown sub-TLVs stay as :class:`Tlv`."""

    TYPE: ClassVar[int] = TlvType.RETURN_PATH
    items: tuple[ReturnPathItem, ...] = ()

    def value_bytes(self, sub_flags: int = FLAG_U) -> bytes:
        """The sub-TLVs; known ones get ``sub_flags``, unknown ones keep their own flags."""
        return encode_tlvs([i if isinstance(i, Tlv) else i.to_tlv(sub_flags) for i in self.items])

    def to_tlv(self, flags: int = FLAG_U) -> Tlv:
        """Encode; the sub-TLVs this code understands carry the same U flag as the TLV itself
        (set by a sender, cleared by a reflector that recognised them)."""
        return Tlv(type=self.TYPE, value=self.value_bytes(flags & FLAG_U), flags=flags)

    def _first(self, kind: type) -> object | None:
        return next((i for i in self.items if isinstance(i, kind)), None)

    @property
    def control_code(self) -> ControlCode | None:
        """The Control Code sub-TLV, if any."""
        return self._first(ControlCode)  # type: ignore[return-value]

    @property
    def return_address(self) -> IPAddress | None:
        """The Return Address, if any."""
        item = self._first(ReturnAddress)
        return item.address if isinstance(item, ReturnAddress) else None

    @property
    def segments(self) -> tuple[ipaddress.IPv6Address, ...] | None:
        """The SRv6 Segment List, if any."""
        item = self._first(Srv6SegmentList)
        return item.segments if isinstance(item, Srv6SegmentList) else None

    @classmethod
    def from_tlv(cls, tlv: Tlv) -> ReturnPath:
        """Decode; a malformed sub-TLV or a duplicate sub-TLV makes the whole TLV malformed."""
        cls.check(tlv)
        items: list[ReturnPathItem] = []
        seen: set[int] = set()
        for sub in decode_tlvs(tlv.value) if tlv.value else []:
            if sub.malformed:
                raise DecodeError("malformed-tlv", "Return Path sub-TLV runs past its parent")
            if sub.type in seen:
                raise DecodeError("malformed-tlv", f"Return Path sub-TLV {sub.type} appears twice")
            seen.add(sub.type)
            if sub.type == ReturnPathSubType.CONTROL_CODE:
                if len(sub.value) != ControlCode.VALUE.size:
                    raise DecodeError("bad-tlv-length", "Control Code sub-TLV length must be 4")
                items.append(ControlCode(**ControlCode.VALUE.unpack(sub.value)))
            elif sub.type == ReturnPathSubType.RETURN_ADDRESS:
                items.append(ReturnAddress(_address(sub.value, "Return Address")))
            elif sub.type == ReturnPathSubType.SRV6_SEGMENT_LIST:
                if not sub.value or len(sub.value) % 16:
                    raise DecodeError("bad-tlv-length", "SRv6 Segment List length must be 16*n, n>0")
                segs = tuple(
                    ipaddress.IPv6Address(sub.value[i : i + 16]) for i in range(0, len(sub.value), 16)
                )
                items.append(Srv6SegmentList(segs))
            else:
                items.append(sub)
        return cls(tuple(items))
