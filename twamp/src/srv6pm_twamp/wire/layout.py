"""One field list per message, used for both directions.

A :class:`Layout` is an ordered list of ``(name, struct code)`` pairs in network byte order. The
same list packs a message and unpacks it, so an encoder and its decoder cannot drift apart. A
field named ``None`` is MBZ ("must be zero"): it is written as zero octets and ignored on receipt,
as RFC 8762 asks of every MBZ field.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from srv6pm_twamp.wire.errors import DecodeError


class Layout:
    """A fixed-size run of fields, e.g. ``Layout(("seq", "I"), (None, "28x"))``."""

    def __init__(self, *fields: tuple[str | None, str]) -> None:
        for name, code in fields:
            if (name is None) != code.endswith("x"):
                raise ValueError(f"MBZ fields (name None) and only they use pad codes: {name} {code}")
        self.fields = fields
        self.names = tuple(name for name, _ in fields if name is not None)
        self._struct = struct.Struct("!" + "".join(code for _, code in fields))
        self.size = self._struct.size

    def pack(self, values: Mapping[str, Any]) -> bytes:
        """Encode ``values`` (one entry per named field)."""
        try:
            return self._struct.pack(*(values[name] for name in self.names))
        except struct.error as exc:
            raise ValueError(f"cannot encode {dict(values)!r}: {exc}") from exc

    def pack_tuple(self, *values: Any) -> bytes:
        """Encode the named fields given in order (the hot-path twin of :meth:`pack`)."""
        return self._struct.pack(*values)

    def unpack_tuple(self, data: bytes | memoryview, offset: int = 0) -> tuple[Any, ...]:
        """Decode the named fields in order, without building a dict (hot path)."""
        if len(data) - offset < self.size:
            raise DecodeError("short", f"need {self.size} octets at {offset}, have {len(data) - offset}")
        return self._struct.unpack_from(data, offset)

    def unpack(self, data: bytes | memoryview, offset: int = 0) -> dict[str, Any]:
        """Decode the fields at ``offset``; :class:`DecodeError` if the data is too short."""
        if len(data) - offset < self.size:
            raise DecodeError("short", f"need {self.size} octets at {offset}, have {len(data) - offset}")
        return dict(zip(self.names, self._struct.unpack_from(data, offset), strict=True))
