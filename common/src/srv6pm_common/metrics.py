"""The daemons' Prometheus endpoint (``--metrics-listen HOST:PORT``, path ``/metrics``).

A daemon gives a function that returns its figures as they stand; every scrape calls it. The
figures live where the work happens (the publisher counts what it published, the spool what it
holds): this module only shows them, so a scrape can never disagree with the daemon's own state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Figure:
    """One metric family: a name (``_total`` is added to counters), help, kind, samples by labels."""

    name: str
    help: str
    kind: Literal["counter", "gauge"]
    samples: Mapping[tuple[tuple[str, str], ...], float] = field(default_factory=dict)

    @classmethod
    def single(cls, name: str, help: str, kind: Literal["counter", "gauge"], value: float) -> Figure:
        """A family with one unlabelled sample."""
        return cls(name, help, kind, {(): value})


Reader = Callable[[], Iterable[Figure]]


class _FigureCollector(Collector):
    def __init__(self, read: Reader) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        for fig in self._read():
            labels = sorted({k for key in fig.samples for k, _ in key})
            family_type = CounterMetricFamily if fig.kind == "counter" else GaugeMetricFamily
            family = family_type(fig.name, fig.help, labels=labels)
            for key, value in fig.samples.items():
                values = dict(key)
                family.add_metric([values.get(k, "") for k in labels], value)
            yield family


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); ValueError with the reason otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{listen!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{listen!r}: write an IPv6 address in brackets, [ADDR]:PORT")
    return host or "::", int(port)


class MetricsServer:
    """An HTTP server for ``/metrics`` on its own thread, showing what ``read`` returns.

    Raises ValueError (a malformed address) or OSError (cannot listen there)."""

    def __init__(self, listen: str, read: Reader) -> None:
        host, port = parse_listen(listen)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_FigureCollector(read))
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port: int = self._server.server_address[1]
        log.info("metrics endpoint up", extra={"listen": listen, "port": self.port})

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(listen: str | None, read: Reader) -> MetricsServer | None:
    """The daemons' ``--metrics-listen``: a server, None when not asked for, ConfigError when the
    address is unusable."""
    if not listen:
        return None
    from .grpc_server import ConfigError  # here: grpc_server does not need this module

    try:
        return MetricsServer(listen, read)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"--metrics-listen: {exc}") from exc
