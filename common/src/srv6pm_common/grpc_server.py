"""gRPC server bootstrap shared by the daemons: credentials, health, reflection, graceful stop.

A daemon refuses to serve without credentials (TLS, mutual TLS, or a bearer token) unless it is
told ``--insecure``: the original SRv6-PM agents listened in plaintext with no authentication.
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

log = logging.getLogger(__name__)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class ConfigError(Exception):
    """The daemon's configuration is unusable; the message says why."""


@dataclass(frozen=True)
class ServerSecurity:
    """How clients must authenticate. ``client_ca`` turns TLS into mutual TLS."""

    insecure: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None
    token_file: Path | None = None

    def validate(self) -> None:
        """Raise ConfigError unless the settings are complete and consistent."""
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        if self.client_ca and not self.tls_cert:
            raise ConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
        if not (self.insecure or self.tls_cert or self.token_file):
            raise ConfigError(
                "no credentials: give --tls-cert/--tls-key (optionally --tls-client-ca), "
                "or --token-file, or --insecure for a lab without authentication"
            )
        for path in (self.tls_cert, self.tls_key, self.client_ca, self.token_file):
            if path and not path.is_file():
                raise ConfigError(f"{path}: no such file")

    def token(self) -> str | None:
        """The bearer token, or None when token authentication is off."""
        if not self.token_file:
            return None
        token = self.token_file.read_text().strip()
        if not token:
            raise ConfigError(f"{self.token_file}: empty token")
        return token

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS credentials, or None for plaintext."""
        if not self.tls_cert or not self.tls_key:
            return None
        root = self.client_ca.read_bytes() if self.client_ca else None
        return grpc.ssl_server_credentials(
            [(self.tls_key.read_bytes(), self.tls_cert.read_bytes())],
            root_certificates=root,
            require_client_auth=root is not None,
        )


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Rejects calls without ``authorization: Bearer <token>`` (health checks stay open to probes)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        def deny(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)
        self._deny_stream = grpc.unary_stream_rpc_method_handler(deny)

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], details: grpc.HandlerCallDetails
    ) -> Any:
        if details.method.startswith(f"/{HEALTH_SERVICE}/"):
            return continuation(details)
        supplied = dict(details.invocation_metadata).get("authorization", "")
        if hmac.compare_digest(supplied.encode(), self._expected):
            return continuation(details)
        handler = continuation(details)
        if handler is not None and handler.response_streaming:
            return self._deny_stream
        return self._deny


@dataclass(frozen=True)
class Service:
    """A servicer to register: ``add(servicer, server)`` is the generated ``add_…_to_server``."""

    name: str
    servicer: object
    add: Callable[[Any, grpc.Server], None]


class GrpcServer:
    """A gRPC server with health and reflection that stops gracefully on SIGTERM/SIGINT."""

    def __init__(
        self, listen: str, security: ServerSecurity, services: Sequence[Service], max_workers: int = 32
    ) -> None:
        security.validate()
        token = security.token()
        interceptors = [TokenAuthInterceptor(token)] if token else []
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            interceptors=interceptors,
        )
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        for svc in services:
            svc.add(svc.servicer, self._server)
        names = [svc.name for svc in services]
        reflection.enable_server_reflection([*names, HEALTH_SERVICE, reflection.SERVICE_NAME], self._server)
        self._names = names
        creds = security.server_credentials()
        try:
            if creds:
                self.port = self._server.add_secure_port(listen, creds)
            else:
                self.port = self._server.add_insecure_port(listen)
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen on {listen}: {exc}") from exc
        if self.port == 0:
            raise ConfigError(f"cannot listen on {listen}")
        self.listen = listen
        self.tls = creds is not None
        self._stopped = threading.Event()

    def start(self) -> None:
        """Start serving and mark every service SERVING."""
        self._server.start()
        for name in ["", *self._names]:
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float = 5.0) -> None:
        """Mark NOT_SERVING, let in-flight calls finish for ``grace`` seconds, then stop."""
        self._health.enter_graceful_shutdown()
        self._server.stop(grace).wait()
        self._stopped.set()

    def serve_until_signal(self, grace: float = 5.0) -> None:
        """Block until SIGTERM or SIGINT, then stop gracefully."""
        stop = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal received, shutting down", extra={"signal": signal.Signals(signum).name})
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        stop.wait()
        self.stop(grace)


def env_default(prefix: str, name: str, default: str | None = None) -> str | None:
    """The value of ``{prefix}_{NAME}`` in the environment, else ``default``."""
    return os.environ.get(f"{prefix}_{name.upper().replace('-', '_')}", default)


def add_server_arguments(parser: argparse.ArgumentParser, env_prefix: str, default_listen: str) -> None:
    """Flags shared by the daemons; each also reads ``{env_prefix}_{FLAG}`` from the environment."""

    def env(name: str, default: str | None = None) -> str | None:
        return env_default(env_prefix, name, default)

    parser.add_argument(
        "--listen",
        default=env("listen", default_listen),
        help=f"HOST:PORT to serve on (env {env_prefix}_LISTEN; default %(default)s)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=(env("insecure", "") or "").lower() in ("1", "true", "yes"),
        help="serve without TLS or token (labs only)",
    )
    parser.add_argument("--tls-cert", type=Path, default=env("tls-cert"), help="PEM server certificate")
    parser.add_argument("--tls-key", type=Path, default=env("tls-key"), help="PEM server private key")
    parser.add_argument(
        "--tls-client-ca",
        type=Path,
        default=env("tls-client-ca"),
        help="PEM CA for client certificates: turns on mutual TLS",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=env("token-file"),
        help="file holding the bearer token clients must send",
    )
    parser.add_argument(
        "--metrics-listen",
        default=env("metrics-listen"),
        help=f"serve Prometheus metrics on HOST:PORT, path /metrics (env {env_prefix}_METRICS_LISTEN; "
        "default: off)",
    )
    parser.add_argument(
        "--log-level", default=env("log-level", "info"), choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("--log-format", default=env("log-format", "json"), choices=["json", "text"])


def security_from_args(args: argparse.Namespace) -> ServerSecurity:
    """The ServerSecurity the parsed flags describe."""
    return ServerSecurity(
        insecure=args.insecure,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        client_ca=args.tls_client_ca,
        token_file=args.token_file,
    )


def run_server(
    prog: str,
    args: argparse.Namespace,
    build: Callable[[], GrpcServer],
    *,
    on_started: Callable[[], dict[str, object]] | None = None,
    on_stopped: Callable[[], None] | None = None,
) -> int:
    """A daemon's main loop: logs, build (exit 2 on a configuration error), serve until SIGTERM."""
    from .logs import configure_logging  # here: importing the module must not configure anything

    configure_logging(args.log_level, args.log_format)
    daemon_log = logging.getLogger(prog)
    try:
        server = build()
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    server.start()
    extra = on_started() if on_started else {}
    daemon_log.info("serving", extra={"listen": args.listen, "port": server.port, "tls": server.tls, **extra})
    server.serve_until_signal(args.grace)
    if on_stopped:
        on_stopped()
    daemon_log.info("stopped")
    return 0
