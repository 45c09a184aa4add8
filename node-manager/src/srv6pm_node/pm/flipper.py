"""The colour flip: sets the node's marking colour at every block boundary, from its own thread.

It does not run on the engine's loop: with a thousand measurements the loop holds a backlog of
probe and reply callbacks, and a flip waiting behind them would reach the data plane hundreds of
milliseconds late, past the half guard time after which the block's counters are refused
(:meth:`~.dataplane.DataPlane.snapshot`). Its own thread only waits for the interpreter lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .blocks import BlockClock
from .dataplane import DataPlane

log = logging.getLogger(__name__)
FLIP_LATE_S = 0.0002  # wake just after a block boundary, never just before


class ColourFlipper:
    """Flips ``dataplane()``'s colour on ``clock``'s boundaries while a clock is set."""

    def __init__(self, dataplane: Callable[[], DataPlane | None]) -> None:
        self._dataplane = dataplane
        self._clock: BlockClock | None = None
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="srv6pm-flip", daemon=True)
        self._thread.start()

    def follow(self, clock: BlockClock | None) -> None:
        """Flip on ``clock``'s boundaries from now on, starting with the current block's colour
        before returning; None: stop flipping."""
        self._clock = clock
        if clock is not None:
            self._flip(clock)
        self._wake.set()

    def close(self) -> None:
        """Stop the thread."""
        self._closed, self._clock = True, None
        self._wake.set()
        self._thread.join(timeout=5)

    def _flip(self, clock: BlockClock) -> int:
        """Enter the current block; the time to sleep until just after its end, in seconds."""
        now = time.time_ns()
        block = clock.block_of(now)
        dp = self._dataplane()
        if dp is not None:
            try:
                dp.enter_block(clock, block, now)
            except Exception:
                log.exception("colour flip failed")
        return (clock.end(block) - time.time_ns()) / 1e9 + FLIP_LATE_S

    def _run(self) -> None:
        while not self._closed:
            clock = self._clock
            timeout = None if clock is None else self._flip(clock)
            if self._wake.wait(timeout):
                self._wake.clear()
