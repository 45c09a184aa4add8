"""The queue behind one result stream, on the node (SRv6PM.StreamResults) and on the controller
(its northbound StreamResults) alike: filtered by measurement, bounded, never blocking the
producer. A reader that falls too far behind is told so (``overflowed``) rather than silently
missing results; it resumes from the last block it has."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable, Iterator, Sequence

import grpc

from srv6pm.node.v1 import srv6_pm_pb2 as pb


class ResultQueue:
    """Results for one stream, of ``measurement_ids`` (empty: every measurement)."""

    def __init__(
        self,
        measurement_ids: Iterable[str] = (),
        maxsize: int = 10_000,
        on_close: Callable[[ResultQueue], None] | None = None,
    ) -> None:
        self.measurement_ids = frozenset(measurement_ids)
        self.queue: queue.Queue[pb.BlockResult] = queue.Queue(maxsize)
        self.closed = False
        self.dropped = 0  # results offered while full
        self._on_close = on_close

    @property
    def overflowed(self) -> bool:
        """Whether a result was dropped because the reader fell ``maxsize`` behind."""
        return self.dropped > 0

    def offer(self, result: pb.BlockResult) -> None:
        """Queue a result if it is wanted (producer's thread; never blocks)."""
        if self.closed or (self.measurement_ids and result.measurement_id not in self.measurement_ids):
            return
        try:
            self.queue.put_nowait(result)
        except queue.Full:
            self.dropped += 1

    def get(self, timeout: float, limit: int = 1) -> list[pb.BlockResult]:
        """The next results, up to ``limit`` of those ready; waits up to ``timeout`` seconds for
        the first (an empty list then)."""
        out: list[pb.BlockResult] = []
        try:
            out.append(self.queue.get(timeout=timeout))
            while len(out) < limit:
                out.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        return out

    def close(self) -> None:
        """Stop receiving."""
        if not self.closed:
            self.closed = True
            if self._on_close is not None:
                self._on_close(self)


def replay_then_live(
    sub: ResultQueue,
    replay: Iterable[Sequence[pb.BlockResult]],
    since_block: int,
    context: grpc.ServicerContext,
    poll_s: float = 0.5,
    batch: int = 1,
) -> Iterator[list[pb.BlockResult]]:
    """Batches of a server's result stream: the stored results in ``replay`` (chunks, oldest first
    per measurement), then live ones from ``sub`` newer than ``since_block`` and than the last one
    replayed, so a result stored and published while the replay ran comes once. ``sub`` must be
    subscribed before ``replay`` is read, or such a result could be missed. A reader that fell
    behind gets RESOURCE_EXHAUSTED rather than a silent gap. Runs until the client goes away."""
    last: dict[str, int] = {}
    for chunk in replay:
        for r in chunk:
            last[r.measurement_id] = r.block_number
        yield list(chunk)
    while context.is_active():
        if sub.overflowed:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "the stream fell behind; resume with since_block"
            )
        fresh = []
        for r in sub.get(poll_s, batch):
            if r.block_number > last.get(r.measurement_id, since_block):
                last[r.measurement_id] = r.block_number
                fresh.append(r)
        if fresh:
            yield fresh
