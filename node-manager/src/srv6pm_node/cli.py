"""``srv6pm-node``: the router agent's command line.

Every flag can also be set in the environment as ``SRV6PM_NODE_<FLAG>`` (e.g.
``SRV6PM_NODE_LISTEN=[::]:50051``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from srv6pm.node.v1 import srv6_manager_pb2_grpc, srv6_pm_pb2_grpc
from srv6pm_common.grpc_server import (
    GrpcServer,
    Service,
    add_server_arguments,
    run_server,
    security_from_args,
)

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
    return parser


def build_server(args: argparse.Namespace) -> GrpcServer:
    """A GrpcServer serving the node's services, configured from parsed flags."""
    services = [
        Service(
            srv6_manager.SERVICE_NAME,
            srv6_manager.SRv6ManagerService(),
            srv6_manager_pb2_grpc.add_SRv6ManagerServicer_to_server,
        ),
        Service(srv6_pm.SERVICE_NAME, srv6_pm.SRv6PMService(), srv6_pm_pb2_grpc.add_SRv6PMServicer_to_server),
    ]
    return GrpcServer(args.listen, security_from_args(args), services)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT."""
    args = build_parser().parse_args(argv)
    names = [srv6_manager.SERVICE_NAME, srv6_pm.SERVICE_NAME]
    return run_server("srv6pm-node", args, lambda: build_server(args), on_started=lambda: {"services": names})


if __name__ == "__main__":
    sys.exit(main())
