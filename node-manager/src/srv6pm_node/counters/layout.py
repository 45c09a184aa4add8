"""Byte layouts shared with the BPF programs (mirror of ``node-manager/bpf/srv6pm.h``).

Keep this file and the C header in step: the golden-packet tests load the real object and fail if
the two disagree (sizes are also checked against the maps' BTF-declared value sizes at load).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence

MAX_SIDS = 16
MAX_FLOWS = 16384  # monitored SID lists per direction
TABLE_SIZE = 65536  # slots of the open-addressing index (power of two)
MAX_PROBE = 32  # slots probed from a list's home slot
COLOURS = 2
EMPTY, USED, DELETED = 0, 1, 2  # enum srv6pm_state
HASH_SEED = 0x9E3779B97F4A7C15
FMIX_MUL = 0xFF51AFD7ED558CCD
HASH_KEYS = (  # SRV6PM_HASH_KEYS
    0x9AE16A3B2F90404F,
    0xC3A5C85C97CB3127,
    0xB492B66FBE98F273,
    0x9AE16A3B2F90404B,
    0xC949D7C7509E6557,
    0xFF51AFD7ED558CCD,
    0xC4CEB9FE1A85EC53,
    0x87C37B91114253D5,
    0x4CF5AD432745937F,
    0x52DCE729DA3ED9C3,
    0x38495AB5B5E2CB6B,
    0x7A3F5BB5C4D5E6F7,
    0xA0761D6478BD642F,
    0xE7037ED1A0B428DB,
    0x8EBC6AF09C88C6E3,
    0x589965CC75374CC3,
    0x1D8E4E27C47D124F,
    0x9E3779B97F4A7C15,
    0xBF58476D1CE4E5B9,
    0x94D049BB133111EB,
    0x2127599BF4325C37,
    0x880355F21E6D1965,
    0xD6E8FEB86659FD93,
    0xA5CB9243F2C8E8B1,
    0x165667B19E3779F9,
    0x27D4EB2F165667C5,
    0x85EBCA6BC2B2AE35,
    0xCC9E2D51B873F2D5,
    0x1B873593E6546B64,
    0xE6546B64CC9E2D51,
    0x61C8864680B583EB,
    0x7FEB352D846CA6B3,
)
_M64 = (1 << 64) - 1

SLOT_FMT = struct.Struct("<QII")  # struct srv6pm_slot: hash, state, flow id
FLOW_FMT = struct.Struct(f"<II{MAX_SIDS * 16}s")  # struct srv6pm_flow: nsids, pad, sids
CTR_FMT = struct.Struct("<4Q")  # struct srv6pm_ctr: packets[2], bytes[2]
CFG_FMT = struct.Struct("<II")  # struct srv6pm_cfg: colour, tc_mask
INDEX_FMT = struct.Struct("<I")  # key of every array map

# Map names in the object (and file names of their pins).
INDEX_MAP = {"egress": "srv6pm_idx_egr", "ingress": "srv6pm_idx_ing"}
FLOW_MAP = {"egress": "srv6pm_flow_egr", "ingress": "srv6pm_flow_ing"}
CTR_MAP = {"egress": "srv6pm_ctr_egr", "ingress": "srv6pm_ctr_ing"}
CFG_MAP = "srv6pm_cfg"
PROG_TC_EGRESS = "srv6pm_tc_egr"
PROG_XDP_INGRESS = "srv6pm_xdp_ing"
PROG_TC_INGRESS = "srv6pm_tc_ing"


def normalize_sids(sids: Sequence[str]) -> tuple[str, ...]:
    """Validate a SID list (travel order, first segment first) and return it in canonical form."""
    if not 1 <= len(sids) <= MAX_SIDS:
        raise ValueError(f"a SID list has 1..{MAX_SIDS} SIDs, got {len(sids)}")
    out = []
    for sid in sids:
        addr = ipaddress.ip_address(sid)
        if addr.version != 6:
            raise ValueError(f"not an IPv6 SID: {sid}")
        out.append(str(addr))
    return tuple(out)


def srh_bytes(sids: Sequence[str]) -> bytes:
    """The SID list as the SRH carries it: reversed (Segment List[0] is the last segment)."""
    return b"".join(ipaddress.IPv6Address(s).packed for s in reversed(sids))


def sids_from_srh(raw: bytes, nsids: int) -> tuple[str, ...]:
    """Inverse of :func:`srh_bytes` for the first ``nsids`` entries."""
    segs = [str(ipaddress.IPv6Address(raw[i * 16 : (i + 1) * 16])) for i in range(nsids)]
    return tuple(reversed(segs))


def sidlist_hash(sids: Sequence[str]) -> int:
    """64-bit hash of a SID list, bit-identical to ``srv6_parse`` in ``bpf/parse.h``.

    Words are read little-endian from the SRH bytes, as the BPF program loads them on x86/arm64.
    It only picks the index slot; the program compares the full SID list before counting.
    """
    words = [w for (w,) in struct.iter_unpack("<Q", srh_bytes(sids))]
    h = HASH_SEED ^ len(sids)
    for i in range(0, len(words), 2):
        h = (h + ((words[i] + HASH_KEYS[i]) & _M64) * ((words[i + 1] + HASH_KEYS[i + 1]) & _M64)) & _M64
    h ^= h >> 33
    h = (h * FMIX_MUL) & _M64
    return h ^ (h >> 33)


def home_slot(h: int) -> int:
    """First slot probed for a SID list of hash ``h`` (``flow_lookup`` in the BPF program)."""
    return h & (TABLE_SIZE - 1)


def tc_mask(mark_bit: int) -> int:
    """Traffic-class mask of DSCP bit ``mark_bit`` (0 = least significant DSCP bit)."""
    if not 0 <= mark_bit <= 5:
        raise ValueError("the marking bit is a DSCP bit: 0..5 (the ECN bits are never used)")
    return 1 << (2 + mark_bit)
