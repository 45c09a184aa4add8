"""What srv6pm-node shows on ``--metrics-listen`` (Prometheus): measurements, probes, results.

Read from the engine at scrape time; see :mod:`srv6pm_common.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator

from srv6pm_common.metrics import Figure

from .pm.engine import Engine

PREFIX = "srv6pm_node_"
_COUNTS = {
    "probes_sent": "STAMP probes the senders sent",
    "probe_replies": "replies to them that came back (duplicates included)",
    "results": "block results published",
    "results_unmeasured": "block results without loss figures (every probe of the block lost)",
}


def figures(engine: Engine) -> Iterator[Figure]:
    """The node's figures as they stand now."""
    stats = engine.stats()
    if stats.driver:
        yield Figure(
            PREFIX + "counter_driver",
            "the counter driver configured",
            "gauge",
            {(("driver", stats.driver),): 1},
        )
    yield Figure(
        PREFIX + "measurements",
        "measurements running here, by role",
        "gauge",
        {(("role", role),): n for role, n in stats.running.items()},
    )
    for key, help_text in _COUNTS.items():
        yield Figure.single(PREFIX + key, help_text, "counter", stats.counts.get(key, 0))
    yield Figure(
        PREFIX + "reflector_probes",
        "probes that reached the reflector (outcome=received), were answered (replied), or were "
        "dropped or flagged, by reason",
        "counter",
        {(("outcome", k),): v for k, v in sorted(stats.reflector.items())},
    )
