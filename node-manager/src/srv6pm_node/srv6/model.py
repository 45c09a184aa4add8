"""Validated, normalised SRv6 paths and behaviours, independent of gRPC and of netlink."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

MAIN_TABLE = 254
MAX_SEGMENTS = 16


class EncapMode(enum.Enum):
    """seg6 encapsulation modes, valued by the kernel's SEG6_IPTUN_MODE_* numbers."""

    INLINE = 0
    ENCAP = 1
    L2ENCAP = 2
    ENCAP_RED = 3

    @property
    def iproute2_name(self) -> str:
        """The name iproute2 and pyroute2 use ("encap.red", …)."""
        return {0: "inline", 1: "encap", 2: "l2encap", 3: "encap.red"}[self.value]


class Action(enum.Enum):
    """seg6local actions, valued by the kernel's SEG6_LOCAL_ACTION_* numbers."""

    END = 1
    END_X = 2
    END_T = 3
    END_DX6 = 5
    END_DX4 = 6
    END_DT6 = 7
    END_DT4 = 8
    END_B6 = 9
    END_B6_ENCAPS = 10
    END_DT46 = 16

    @property
    def kernel_name(self) -> str:
        """The RFC 8986 / iproute2 name ("End.B6.Encaps", …)."""
        return {
            "END": "End",
            "END_X": "End.X",
            "END_T": "End.T",
            "END_DX6": "End.DX6",
            "END_DX4": "End.DX4",
            "END_DT6": "End.DT6",
            "END_DT4": "End.DT4",
            "END_B6": "End.B6",
            "END_B6_ENCAPS": "End.B6.Encaps",
            "END_DT46": "End.DT46",
        }[self.name]


@dataclass(frozen=True)
class PathSpec:
    """A destination prefix steered into a SID list. Key: (destination, table)."""

    destination: str  # normalised network, e.g. "fd00:2::/64"
    segments: tuple[str, ...]  # visiting order, normalised (compressed) IPv6 addresses
    mode: EncapMode
    device: str
    table: int = MAIN_TABLE
    metric: int = 0  # 0: the kernel's default

    @property
    def family(self) -> int:
        """6 or 4, the family of the destination."""
        return 6 if ":" in self.destination else 4


@dataclass(frozen=True)
class BehaviorSpec:
    """A local SID and what the node does with packets for it. Key: (sid, table)."""

    sid: str  # normalised IPv6 network, e.g. "fc00:2::d6/128"
    action: Action
    device: str
    table: int = MAIN_TABLE
    metric: int = 0
    nexthop: str = ""  # End.X, End.DX6 (IPv6); End.DX4 (IPv4)
    lookup_table: int = 0  # End.T; End.DT6 in table mode
    vrf_table: int = 0  # End.DT4, End.DT46; End.DT6 in VRF mode
    segments: tuple[str, ...] = field(default=())  # End.B6, End.B6.Encaps


@dataclass(frozen=True)
class InterfaceInfo:
    """An interface as the kernel reports it (for topology discovery)."""

    name: str
    index: int
    up: bool
    mac: str
    mtu: int
    addresses: tuple[str, ...]  # "addr/prefixlen", link-local excluded
