"""Errors raised by the wire codecs.

Every decoder raises :class:`DecodeError` (or a subclass) on input it cannot accept, and nothing
else: a caller that handles packets from the network catches this one type, counts the reason and
drops the packet.
"""

from __future__ import annotations


class DecodeError(ValueError):
    """The bytes are not a valid message of the expected kind.

    ``reason`` is a short, stable keyword (``"short"``, ``"bad-hmac"``, ...) that counters use.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class AuthError(DecodeError):
    """An authenticated-mode packet whose HMAC does not verify: never answered."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("bad-hmac", detail)
