"""TWAMP-Light loss-measurement query and response (draft-gandhi-spring-twamp-srpm).

The format the original SRv6-PM (ROSE) exchanged on the wire, kept so our nodes interoperate with
it. Both messages are sent unauthenticated over UDP.

Probe query message (Session-Sender -> Session-Reflector), 20 octets::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                        Sequence Number                        |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                      Transmit Counter                         |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |X|B|   MBZ     | Block Number  |             MBZ               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                      MBZ                      | Sender Ctrl   |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

    X: 1 = 64-bit counters, 0 = 32-bit.  B: 0 = packet counters, 1 = octet counters.
    Sender Control Code: 0 = out-of-band response requested, 1 = in-band response requested.

Probe response message (Session-Reflector -> Session-Sender), 41 octets::

    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                        Sequence Number                        |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Transmit Counter (reflector)                  |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |X|B|   MBZ     | Block Number  |             MBZ               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Receive Counter (reflector)                   |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Session-Sender Sequence Number                |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Session-Sender Counter                        |
    |                                                               |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |X|B|   MBZ     |Sender Block Nr|      MBZ      | Resp Ctrl Code|
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    | Sender TTL    |
    +-+-+-+-+-+-+-+-+

    Responder Control Code: 0 = success, 1 = error (invalid message).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from srv6pm_twamp.wire.layout import Layout

CONTROL_OUT_OF_BAND = 0
CONTROL_IN_BAND = 1
RESPONSE_OK = 0
RESPONSE_ERROR = 1

_X = 0x80
_B = 0x40


def _flags(counter_64bit: bool, octets: bool) -> int:
    return (_X if counter_64bit else 0) | (_B if octets else 0)


@dataclass(frozen=True)
class LossQuery:
    """The probe query carrying the sender's TX counter for one block."""

    LAYOUT: ClassVar[Layout] = Layout(
        ("seq", "I"),
        ("tx_counter", "Q"),
        ("flags", "B"),
        ("block", "B"),
        (None, "5x"),
        ("control_code", "B"),
    )
    seq: int = 0
    tx_counter: int = 0
    block: int = 0
    control_code: int = CONTROL_IN_BAND
    counter_64bit: bool = True
    octets: bool = False

    def encode(self) -> bytes:
        """Wire bytes."""
        return self.LAYOUT.pack(
            {
                "seq": self.seq,
                "tx_counter": self.tx_counter,
                "flags": _flags(self.counter_64bit, self.octets),
                "block": self.block,
                "control_code": self.control_code,
            }
        )

    @classmethod
    def decode(cls, data: bytes | memoryview) -> LossQuery:
        """Parse; trailing padding is ignored."""
        v = cls.LAYOUT.unpack(data)
        flags = v.pop("flags")
        return cls(**v, counter_64bit=bool(flags & _X), octets=bool(flags & _B))


@dataclass(frozen=True)
class LossResponse:
    """The probe response: the reflector's RX (and own TX) counters plus the echoed query."""

    LAYOUT: ClassVar[Layout] = Layout(
        ("seq", "I"),
        ("tx_counter", "Q"),
        ("flags", "B"),
        ("block", "B"),
        (None, "2x"),
        ("rx_counter", "Q"),
        ("sender_seq", "I"),
        ("sender_counter", "Q"),
        ("sender_flags", "B"),
        ("sender_block", "B"),
        (None, "1x"),
        ("control_code", "B"),
        ("sender_ttl", "B"),
    )
    seq: int = 0
    tx_counter: int = 0
    block: int = 0
    rx_counter: int = 0
    sender_seq: int = 0
    sender_counter: int = 0
    sender_block: int = 0
    control_code: int = RESPONSE_OK
    sender_ttl: int = 0
    counter_64bit: bool = True
    octets: bool = False
    sender_counter_64bit: bool = True
    sender_octets: bool = False

    def encode(self) -> bytes:
        """Wire bytes."""
        v: dict[str, Any] = {n: getattr(self, n) for n in self.LAYOUT.names if "flags" not in n}
        v["flags"] = _flags(self.counter_64bit, self.octets)
        v["sender_flags"] = _flags(self.sender_counter_64bit, self.sender_octets)
        return self.LAYOUT.pack(v)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> LossResponse:
        """Parse; trailing padding is ignored."""
        v = cls.LAYOUT.unpack(data)
        flags, sflags = v.pop("flags"), v.pop("sender_flags")
        return cls(
            **v,
            counter_64bit=bool(flags & _X),
            octets=bool(flags & _B),
            sender_counter_64bit=bool(sflags & _X),
            sender_octets=bool(sflags & _B),
        )

    @classmethod
    def answer(
        cls, query: LossQuery, *, seq: int, rx_counter: int, tx_counter: int, sender_ttl: int
    ) -> LossResponse:
        """The response to ``query`` given the reflector's counters for the same block."""
        return cls(
            seq=seq,
            tx_counter=tx_counter,
            block=query.block,
            rx_counter=rx_counter,
            sender_seq=query.seq,
            sender_counter=query.tx_counter,
            sender_block=query.block,
            sender_ttl=sender_ttl,
            counter_64bit=query.counter_64bit,
            octets=query.octets,
            sender_counter_64bit=query.counter_64bit,
            sender_octets=query.octets,
        )
