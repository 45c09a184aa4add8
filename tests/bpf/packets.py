"""Frames for the golden-packet tests, built byte by byte (scapy for the well-formed layers).

SID lists are in travel order (first segment first), as the driver API takes them; the SRH
carries them reversed.
"""

from __future__ import annotations

from collections.abc import Sequence

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrSegmentRouting,
    PadN,
)
from scapy.layers.l2 import ARP, Dot1Q, Ether

SRC = "2001:db8::1"
INNER = IPv6(src="2001:db8:a::1", dst="2001:db8:b::1") / UDP(sport=4000, dport=5000)
L2 = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def sids(n: int, base: str = "fc00:0:{}::") -> list[str]:
    """``n`` distinct SIDs."""
    return [base.format(i + 1) for i in range(n)]


def srv6(segs: Sequence[str], *, tc: int = 0, payload: bytes = b"x" * 64, ext: Sequence = (),
         routing_type: int = 4, inner=None, vlan: int | None = None) -> bytes:
    """An Ethernet frame: outer IPv6 (DA = first SID) [+ ext headers] + SRH + inner packet."""
    srh = IPv6ExtHdrSegmentRouting(addresses=list(reversed(segs)), segleft=len(segs) - 1,
                                   type=routing_type)
    pkt = IPv6(src=SRC, dst=segs[0], tc=tc)
    for hdr in ext:
        pkt = pkt / hdr
    l2 = L2 / Dot1Q(vlan=vlan) if vlan is not None else L2
    return bytes(l2 / pkt / srh / (inner if inner is not None else INNER) / payload)


def plain_ipv6(tc: int = 0) -> bytes:
    return bytes(L2 / IPv6(src=SRC, dst="2001:db8::2", tc=tc) / UDP() / (b"y" * 32))


def ipv4() -> bytes:
    return bytes(L2 / IP(src="192.0.2.1", dst="192.0.2.2") / UDP() / (b"z" * 32))


def arp() -> bytes:
    return bytes(L2 / ARP(psrc="192.0.2.1", pdst="192.0.2.2"))


def hbh_dest() -> list:
    """Hop-by-hop (8 bytes) then destination options (16 bytes) before the SRH."""
    return [IPv6ExtHdrHopByHop(options=[PadN(optdata=bytes(4))]),
            IPv6ExtHdrDestOpt(options=[PadN(optdata=bytes(12))])]


def tcp_inner(payload_len: int) -> tuple[object, bytes]:
    """An inner TCP packet (20-byte header + 12 bytes of options) and its payload."""
    inner = IPv6(src="2001:db8:a::1", dst="2001:db8:b::1") / TCP(sport=1, dport=2, options=[
        ("NOP", None), ("NOP", None), ("Timestamp", (1, 2))])
    return inner, b"p" * payload_len


def l3_len(frame: bytes, l2: int = 14) -> int:
    """Bytes the counters account a frame for: the IPv6 packet, no link layer."""
    return len(frame) - l2


def set_tc(frame: bytes, tc: int, l2: int = 14) -> bytes:
    """The frame with the outer traffic class replaced (what the marker should output)."""
    b = bytearray(frame)
    b[l2] = (b[l2] & 0xF0) | (tc >> 4)
    b[l2 + 1] = ((tc & 0x0F) << 4) | (b[l2 + 1] & 0x0F)
    return bytes(b)


def skb_ctx(gso_segs: int = 0, gso_size: int = 0) -> bytes:
    """A ``struct __sk_buff`` (192 bytes) for BPF_PROG_TEST_RUN with GSO fields set."""
    ctx = bytearray(192)
    ctx[164:168] = gso_segs.to_bytes(4, "little")
    ctx[176:180] = gso_size.to_bytes(4, "little")
    return bytes(ctx)
