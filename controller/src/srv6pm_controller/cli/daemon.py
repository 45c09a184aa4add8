"""``srv6pm-controller``: the controller daemon.

Every flag can also be set in the environment as ``SRV6PM_CONTROLLER_<FLAG>``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from srv6pm.controller.v1 import (
    measurement_service_pb2_grpc,
    node_service_pb2_grpc,
    topology_service_pb2_grpc,
    tunnel_service_pb2_grpc,
)
from srv6pm_common.grpc_server import (
    ConfigError,
    GrpcServer,
    Service,
    add_server_arguments,
    env_default,
    run_server,
    security_from_args,
)
from srv6pm_common.metrics import MetricsServer, serve_metrics

from .. import metrics
from ..measurements.bus import ResultBus
from ..measurements.collector import ResultCollector
from ..publish import ResultPublisher
from ..publish.kafka_publisher import DEFAULT_TOPIC
from ..services import measurements, nodes, topology, tunnels
from ..southbound.channels import NodeChannels
from ..store import Store, default_state_dir
from ..topology.store import ArangoTopologyStore, EmbeddedTopologyStore, TopologyStore

ENV_PREFIX = "SRV6PM_CONTROLLER"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of srv6pm-controller."""
    parser = argparse.ArgumentParser(
        prog="srv6pm-controller", description="srv6-pm controller (northbound gRPC API)"
    )
    add_server_arguments(parser, ENV_PREFIX, default_listen="[::]:50061")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(env_default(ENV_PREFIX, "state-dir") or default_state_dir()),
        help="where the registry of nodes and tunnels lives (default %(default)s)",
    )
    parser.add_argument(
        "--arango-url",
        default=env_default(ENV_PREFIX, "arango-url"),
        help="keep the topology in ArangoDB at this URL (default: embedded store)",
    )
    parser.add_argument("--arango-db", default=env_default(ENV_PREFIX, "arango-db", "srv6pm"))
    parser.add_argument("--arango-user", default=env_default(ENV_PREFIX, "arango-user", "root"))
    parser.add_argument(
        "--arango-password-file", type=Path, default=env_default(ENV_PREFIX, "arango-password-file")
    )
    parser.add_argument(
        "--kafka-bootstrap",
        default=env_default(ENV_PREFIX, "kafka-bootstrap"),
        help="publish every block result to Kafka at HOST:PORT[,HOST:PORT] (default: do not publish)",
    )
    parser.add_argument(
        "--kafka-topic",
        default=env_default(ENV_PREFIX, "kafka-topic", DEFAULT_TOPIC),
        help="topic (%(default)s)",
    )
    parser.add_argument("--grace", type=float, default=5.0, help="seconds in-flight calls get on SIGTERM")
    return parser


@dataclass
class Controller:
    """Everything the running controller owns, for an orderly shutdown."""

    server: GrpcServer
    store: Store
    channels: NodeChannels
    collector: ResultCollector
    publisher: ResultPublisher | None
    metrics: MetricsServer | None = None

    def close(self) -> None:
        """Stop collecting, hand pending results to Kafka (or its spool), close channels and state."""
        if self.metrics is not None:
            self.metrics.close()
        self.collector.close()
        if self.publisher is not None:
            self.publisher.close()
        self.channels.close()
        self.store.close()


def _topology_store(args: argparse.Namespace, store: Store) -> TopologyStore:
    if not args.arango_url:
        return EmbeddedTopologyStore(store.path)
    password = args.arango_password_file.read_text().strip() if args.arango_password_file else ""
    try:
        return ArangoTopologyStore(args.arango_url, args.arango_db, args.arango_user, password)
    except Exception as exc:  # python-arango raises many types; all mean "cannot use it"
        raise ConfigError(f"cannot use ArangoDB at {args.arango_url}: {exc}") from exc


def build(args: argparse.Namespace) -> Controller:
    """The controller's gRPC server and the state it owns, from parsed flags."""
    store = Store(args.state_dir)
    channels = NodeChannels()
    registry = nodes.NodeRegistry(store, channels)
    publisher = None
    if args.kafka_bootstrap:
        # Results wait in a spool next to the state while Kafka is away: nothing is lost.
        publisher = ResultPublisher(
            args.kafka_bootstrap.split(","), args.state_dir / "kafka-spool.sqlite3", topic=args.kafka_topic
        )
    bus = ResultBus([publisher.publish] if publisher else [])
    collector = ResultCollector(registry, store, bus.publish)

    def node_users(name: str) -> list[str]:
        return tunnels.tunnels_using(registry, name) + measurements.measurements_using(registry, node=name)

    services = [
        Service(
            nodes.SERVICE_NAME,
            nodes.NodeService(registry, node_users),
            node_service_pb2_grpc.add_NodeServiceServicer_to_server,
        ),
        Service(
            tunnels.SERVICE_NAME,
            tunnels.TunnelService(registry, lambda t: measurements.measurements_using(registry, tunnel=t)),
            tunnel_service_pb2_grpc.add_TunnelServiceServicer_to_server,
        ),
        Service(
            measurements.SERVICE_NAME,
            measurements.MeasurementService(registry, bus, collector),
            measurement_service_pb2_grpc.add_MeasurementServiceServicer_to_server,
        ),
        Service(
            topology.SERVICE_NAME,
            topology.TopologyService(registry, _topology_store(args, store)),
            topology_service_pb2_grpc.add_TopologyServiceServicer_to_server,
        ),
    ]
    server = GrpcServer(args.listen, security_from_args(args), services)
    controller = Controller(server, store, channels, collector, publisher)
    try:
        controller.metrics = serve_metrics(
            args.metrics_listen, lambda: metrics.figures(store, collector, publisher)
        )
    except ConfigError:
        controller.close()
        raise
    return controller


def main(argv: Sequence[str] | None = None) -> int:
    """Run the controller until SIGTERM/SIGINT."""
    args = build_parser().parse_args(argv)
    parts: list[Controller] = []

    def build_server() -> GrpcServer:
        parts.append(build(args))
        return parts[0].server

    def started() -> dict[str, object]:
        parts[0].collector.refresh()  # re-attach to the measurements that were running before a restart
        return {"state": str(parts[0].store.path)}

    return run_server(
        "srv6pm-controller", args, build_server, on_started=started, on_stopped=lambda: parts[0].close()
    )


if __name__ == "__main__":
    sys.exit(main())
