"""The colour flipper: every block boundary is entered once, inside its block, from its own
thread, whatever the caller's thread is doing; it stops when told."""

from __future__ import annotations

import threading
import time

from srv6pm_node.pm.blocks import BlockClock
from srv6pm_node.pm.flipper import ColourFlipper

PERIOD = 200_000_000  # 0.2 s blocks: a few boundaries in a second


class Recorder:
    """Stands in for the data plane: records which block was entered, and when."""

    def __init__(self) -> None:
        self.entered: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def enter_block(self, clock: BlockClock, block: int, now_ns: int) -> None:
        with self.lock:
            self.entered.append((block, now_ns))


def test_every_boundary_is_entered_inside_its_block_while_the_caller_is_busy():
    rec = Recorder()
    flipper = ColourFlipper(lambda: rec)  # type: ignore[arg-type,return-value]
    clock = BlockClock(PERIOD)
    try:
        flipper.follow(clock)
        first = clock.block_of(time.time_ns())
        deadline = time.monotonic() + 1.1
        while time.monotonic() < deadline:  # a busy caller (the engine's loop under load)
            sum(range(10_000))
        flipper.follow(None)
        with rec.lock:
            entered = list(rec.entered)
        time.sleep(2 * PERIOD / 1e9)
        with rec.lock:
            assert rec.entered == entered  # stopped
    finally:
        flipper.close()
    blocks = sorted({b for b, _ in entered})
    assert blocks[0] == first and len(blocks) >= 5
    assert blocks == list(range(blocks[0], blocks[0] + len(blocks)))  # none skipped
    for b, t in entered:
        assert clock.block_of(t) == b  # entered inside its own block, never before it began
