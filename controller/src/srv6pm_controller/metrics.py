"""What the controller shows on ``--metrics-listen`` (Prometheus): collection, publishing, spool.

Every figure is read from the part that owns it at scrape time; see :mod:`srv6pm_common.metrics`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from srv6pm.node.v1 import srv6_pm_pb2 as pmpb
from srv6pm_common.metrics import Figure

from .measurements.collector import ResultCollector
from .store import Store

if TYPE_CHECKING:
    from .publish import ResultPublisher

PREFIX = "srv6pm_controller_"
_STATES = {
    pmpb.MEASUREMENT_STATE_RUNNING: "running",
    pmpb.MEASUREMENT_STATE_STOPPED: "stopped",
    pmpb.MEASUREMENT_STATE_FAILED: "failed",
}

# publisher.metrics() key -> (metric name, kind, help)
_KAFKA = {
    "kafka_up": ("kafka_up", "gauge", "1 while results go straight to Kafka, 0 while they are spooled"),
    "published": ("kafka_published", "counter", "block results Kafka acknowledged"),
    "spooled": ("kafka_spooled", "counter", "block results written to the disk spool"),
    "spool_depth": ("kafka_spool_results", "gauge", "block results waiting in the spool"),
    "spool_bytes": ("kafka_spool_bytes", "gauge", "bytes of block results waiting in the spool"),
    "dropped": ("kafka_spool_dropped", "counter", "oldest spooled results dropped at the spool's bound"),
    "duplicates": ("kafka_duplicates", "counter", "results published again and ignored"),
    "invalid": ("kafka_invalid", "counter", "results that could not be encoded"),
    "send_failures": ("kafka_send_failures", "counter", "sends Kafka did not acknowledge (then spooled)"),
    "in_flight": ("kafka_in_flight", "gauge", "sends waiting for Kafka's acknowledgement"),
}


def figures(store: Store, collector: ResultCollector, publisher: ResultPublisher | None) -> Iterator[Figure]:
    """The controller's figures as they stand now."""
    yield Figure.single(PREFIX + "nodes", "registered nodes", "gauge", len(store.nodes()))
    states = Counter(_STATES.get(m.state, "unknown") for m in store.measurements())
    yield Figure(
        PREFIX + "measurements",
        "measurements by state",
        "gauge",
        {(("state", s),): float(states.get(s, 0)) for s in _STATES.values()},
    )
    stats = collector.stats()
    yield Figure.single(
        PREFIX + "results_collected", "new block results stored from the nodes", "counter", stats.collected
    )
    yield Figure.single(
        PREFIX + "results_repeated",
        "block results a node sent again (after a reconnect) and that were already stored",
        "counter",
        stats.repeated,
    )
    yield Figure(
        PREFIX + "node_stream_up",
        "1 while the result stream of a sender node is open",
        "gauge",
        {(("node", n),): float(s.up) for n, s in stats.streams.items()},
    )
    yield Figure(
        PREFIX + "node_stream_connects",
        "times the result stream of a sender node was opened",
        "counter",
        {(("node", n),): float(s.connects) for n, s in stats.streams.items()},
    )
    if publisher is not None:
        for key, value in publisher.metrics().items():
            name, kind, help_text = _KAFKA[key]
            yield Figure.single(PREFIX + name, help_text, kind, value)  # type: ignore[arg-type]
