"""The counter-driver interface the PM service uses, whatever implements it (eBPF, nftables).

A *flow* is a SID list (travel order: the first segment first, as in ``ip route … encap seg6 …
segs``) monitored in one direction:

* ``egress``  — on the ingress edge router, as packets leave: colour them with the active colour
  (one DSCP bit of the outer IPv6 header) and count per colour;
* ``ingress`` — on the egress edge router, as they arrive: count per colour read from the packet.

Counters are packets and bytes (the outer IPv6 packet: header onwards, no link layer) per colour,
summed over CPUs. Loss of block *c* = egress count(c) - ingress count(c), once colour *c* is no
longer active (RFC 9341).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass


class Direction(enum.StrEnum):
    """Where a flow is counted."""

    EGRESS = "egress"
    INGRESS = "ingress"


class CounterError(Exception):
    """A driver operation failed (the message says why)."""


class FlowNotFound(CounterError, KeyError):
    """The SID list is not monitored in that direction."""


class HashCollision(CounterError):
    """Two monitored SID lists hash alike (p ≈ 2^-64 per pair); the second cannot be added."""


@dataclass(frozen=True)
class ColourCount:
    """Counters of one colour."""

    packets: int
    bytes: int


@dataclass(frozen=True)
class FlowCounters:
    """A flow and its counters, per colour (index = colour)."""

    direction: Direction
    sids: tuple[str, ...]
    colours: tuple[ColourCount, ColourCount]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "direction": str(self.direction),
            "sids": list(self.sids),
            "colours": [asdict(c) for c in self.colours],
        }


@dataclass(frozen=True)
class Attachment:
    """A program (or rule set) attached to an interface."""

    ifname: str
    direction: Direction
    mode: str  # "tc", "xdp" or "nft"


class CounterDriver(abc.ABC):
    """Colour marking and per (SID list, colour) counting on one node (network namespace)."""

    name: str = ""

    @abc.abstractmethod
    def attach(self, ifname: str, direction: Direction, mode: str = "auto") -> str:
        """Start marking/counting on an interface; idempotent. Returns the mode used."""

    @abc.abstractmethod
    def detach(self, ifname: str, direction: Direction) -> None:
        """Stop marking/counting on an interface; idempotent (counters are kept)."""

    @abc.abstractmethod
    def attachments(self) -> list[Attachment]:
        """Where this driver is attached."""

    @abc.abstractmethod
    def add_flow(self, sids: Sequence[str], direction: Direction) -> None:
        """Monitor a SID list in a direction, counters from zero; adding it again is a no-op."""

    @abc.abstractmethod
    def remove_flow(self, sids: Sequence[str], direction: Direction) -> bool:
        """Stop monitoring a SID list; False if it was not monitored."""

    @abc.abstractmethod
    def read(self, sids: Sequence[str], direction: Direction) -> FlowCounters:
        """A flow's counters per colour; :class:`FlowNotFound` if not monitored."""

    @abc.abstractmethod
    def flows(self, direction: Direction | None = None) -> list[FlowCounters]:
        """Every monitored flow (of one direction, or both) with its counters."""

    @abc.abstractmethod
    def set_colour(self, colour: int) -> None:
        """Make ``colour`` (0 or 1) the one egress packets are marked with from now on."""

    @abc.abstractmethod
    def colour(self) -> int:
        """The active colour."""

    @property
    @abc.abstractmethod
    def mark_bit(self) -> int:
        """The DSCP bit (0..5, 0 = least significant) carrying the colour."""

    def close(self) -> None:  # noqa: B027 - optional hook, most drivers hold nothing
        """Release resources held by this handle (attachments, flows and counters stay)."""

    def __enter__(self) -> CounterDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_colour(colour: int) -> int:
    """Validate a colour."""
    if colour not in (0, 1):
        raise ValueError("the colour is 0 or 1")
    return colour
