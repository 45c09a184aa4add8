"""``srv6pm-node``: the router agent's command line.

Every flag can also be set in the environment as ``SRV6PM_NODE_<FLAG>`` (e.g.
``SRV6PM_NODE_LISTEN=[::]:50051``).
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from srv6pm.node.v1 import srv6_manager_pb2_grpc, srv6_pm_pb2_grpc
from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_common.errors import ApiError
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

from . import metrics
from .counters import pins
from .frr import isis
from .pm.engine import Engine
from .pm.state import default_state_dir
from .services import srv6_manager, srv6_pm

ENV_PREFIX = "SRV6PM_NODE"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of srv6pm-node."""
    parser = argparse.ArgumentParser(
        prog="srv6pm-node",
        description="srv6-pm router agent: SRv6Manager (SRv6 paths and behaviours over netlink) and SRv6PM.",
    )
    add_server_arguments(parser, ENV_PREFIX, default_listen="[::]:50051")
    parser.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="seconds in-flight calls get to finish on SIGTERM (default %(default)s)",
    )

    def env(name: str, default: str | None = None) -> str | None:
        return env_default(ENV_PREFIX, name, default)

    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(env("state_dir") or default_state_dir()),
        help="where measurements, counter snapshots and results are kept across restarts "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--node-name",
        default=env("node_name", socket.gethostname()),
        help="name this node gives its results (default: the host name)",
    )
    parser.add_argument(
        "--bpf-pin-root",
        default=env("bpf_pin_root", pins.DEFAULT_PIN_ROOT),
        help="bpffs directory for the eBPF driver's pinned maps (default %(default)s)",
    )
    parser.add_argument(
        "--clock-synchronized",
        choices=("auto", "yes", "no"),
        default=env("clock_synchronized", "auto"),
        help="whether one-way delays may be reported: the kernel's NTP state (auto), or forced "
        "(yes: e.g. namespaces sharing one clock)",
    )
    parser.add_argument(
        "--pm-interfaces",
        default=env("pm_interfaces"),
        help="configure SRv6PM at start: comma-separated interfaces where monitored traffic leaves "
        "and arrives (the same as calling SRv6PM.Configure; the last configuration is kept anyway)",
    )
    parser.add_argument(
        "--pm-driver",
        choices=("ebpf", "netfilter"),
        default=env("pm_driver", "ebpf"),
        help="counter driver for --pm-interfaces (default %(default)s)",
    )
    parser.add_argument(
        "--frr-vty-socket",
        default=env("frr_vty_socket", isis.DEFAULT_SOCKET_DIR),
        help="directory of FRR's vty sockets, where vtysh reaches isisd for SRv6Manager.GetIsisTopology "
        "(default %(default)s)",
    )
    return parser


def build_engine(args: argparse.Namespace) -> Engine:
    """The measurement engine, resuming what the state directory holds."""
    synced = {"auto": None, "yes": True, "no": False}[args.clock_synchronized]
    engine = Engine(args.state_dir, node_name=args.node_name, pin_root=args.bpf_pin_root, synchronized=synced)
    if args.pm_interfaces:
        ifs = [i.strip() for i in args.pm_interfaces.split(",") if i.strip()]
        driver = {"ebpf": pb.COUNTER_DRIVER_EBPF, "netfilter": pb.COUNTER_DRIVER_NETFILTER}[args.pm_driver]
        try:
            engine.configure(pb.NodeConfig(driver=driver, egress_interfaces=ifs, ingress_interfaces=ifs))
        except ApiError as exc:
            engine.close()
            raise ConfigError(f"--pm-interfaces: {exc}") from None
    return engine


def build_server(args: argparse.Namespace, engine: Engine) -> GrpcServer:
    """A GrpcServer serving the node's services, configured from parsed flags (credentials are
    checked before anything else is touched)."""
    services = [
        Service(
            srv6_manager.SERVICE_NAME,
            srv6_manager.SRv6ManagerService(vtysh=isis.Vtysh(args.frr_vty_socket)),
            srv6_manager_pb2_grpc.add_SRv6ManagerServicer_to_server,
        ),
        Service(
            srv6_pm.SERVICE_NAME, srv6_pm.SRv6PMService(engine), srv6_pm_pb2_grpc.add_SRv6PMServicer_to_server
        ),
    ]
    return GrpcServer(args.listen, security_from_args(args), services)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT."""
    args = build_parser().parse_args(argv)
    names = [srv6_manager.SERVICE_NAME, srv6_pm.SERVICE_NAME]
    engine: list[Engine] = []
    exporter: list[MetricsServer] = []

    def build() -> GrpcServer:
        security_from_args(args)  # refuse bad credentials before opening any state
        engine.append(build_engine(args))
        server = build_server(args, engine[0])
        try:
            if m := serve_metrics(args.metrics_listen, lambda: metrics.figures(engine[0])):
                exporter.append(m)
        except ConfigError:
            engine[0].close()
            raise
        return server

    def stopped() -> None:
        for m in exporter:
            m.close()
        for e in engine:
            e.close()

    return run_server("srv6pm-node", args, build, on_started=lambda: {"services": names}, on_stopped=stopped)


if __name__ == "__main__":
    sys.exit(main())
