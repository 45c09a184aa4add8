"""gRPC channels to node agents, built from each node's registered credentials and cached."""

from __future__ import annotations

import threading

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from srv6pm.controller.v1 import node_service_pb2 as npb


class _TokenAuth(grpc.AuthMetadataPlugin):
    """Adds ``authorization: Bearer <token>`` to every call."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback) -> None:
        callback((("authorization", f"Bearer {self._token}"),), None)


class _TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Token on a plaintext channel (gRPC refuses call credentials without TLS)."""

    def __init__(self, token: str) -> None:
        self._md = ("authorization", f"Bearer {token}")

    def _add(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _Details(details, [*(details.metadata or ()), self._md])

    def intercept_unary_unary(self, continuation, details, request):  # noqa: ANN001
        return continuation(self._add(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # noqa: ANN001
        return continuation(self._add(details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, d: grpc.ClientCallDetails, metadata: list) -> None:
        self.method, self.timeout, self.credentials = d.method, d.timeout, d.credentials
        self.wait_for_ready, self.compression = d.wait_for_ready, d.compression
        self.metadata = metadata


def open_channel(address: str, creds: npb.NodeCredentials) -> grpc.Channel:
    """A channel to ``address`` with TLS/mTLS and/or a bearer token as ``creds`` say."""
    if creds.insecure or not creds.ca_certificate:
        channel = grpc.insecure_channel(address)
        return grpc.intercept_channel(channel, _TokenInterceptor(creds.token)) if creds.token else channel
    tls = grpc.ssl_channel_credentials(
        root_certificates=creds.ca_certificate,
        private_key=creds.client_key or None,
        certificate_chain=creds.client_certificate or None,
    )
    if creds.token:
        tls = grpc.composite_channel_credentials(tls, grpc.metadata_call_credentials(_TokenAuth(creds.token)))
    options = [("grpc.ssl_target_name_override", creds.server_name)] if creds.server_name else []
    return grpc.secure_channel(address, tls, options=options)


class NodeChannels:
    """One cached channel per registered node; replaced when the node is re-registered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[bytes, grpc.Channel]] = {}

    def get(self, node: npb.Node) -> grpc.Channel:
        """The channel for ``node`` (opened on first use)."""
        key = node.SerializeToString(deterministic=True)
        with self._lock:
            cached = self._channels.get(node.name)
            if cached and cached[0] == key:
                return cached[1]
            if cached:
                cached[1].close()
            channel = open_channel(node.address, node.credentials)
            self._channels[node.name] = (key, channel)
            return channel

    def drop(self, name: str) -> None:
        """Close and forget the channel of a removed node."""
        with self._lock:
            cached = self._channels.pop(name, None)
        if cached:
            cached[1].close()

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            for _, channel in self._channels.values():
                channel.close()
            self._channels.clear()


def check_health(channel: grpc.Channel, timeout: float = 2.0) -> int:
    """The agent's health as a NodeHealth value (UNREACHABLE when it does not answer)."""
    try:
        status = (
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status
        )
    except grpc.RpcError:
        return npb.NODE_HEALTH_UNREACHABLE
    if status == health_pb2.HealthCheckResponse.SERVING:
        return npb.NODE_HEALTH_SERVING
    return npb.NODE_HEALTH_NOT_SERVING
