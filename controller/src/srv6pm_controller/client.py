"""A small Python client of the controller's northbound API, for scripts.

    from srv6pm_controller.client import Client

    with Client("localhost:50061") as c:                 # or SRV6PM_CONTROLLER=host:port
        c.register_node("r1", "[fd00::1]:50051", insecure=True)
        for node in c.nodes():
            print(node.name, node.address, node.health)

Answers are the API's protobuf messages (``srv6pm.controller.v1``). Every failure raises
:class:`ClientError`, whose ``str()`` is one line: ``NOT_FOUND: unknown node 'r9' …``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from srv6pm.controller.v1 import measurement_service_pb2 as mpb
from srv6pm.controller.v1 import measurement_service_pb2_grpc as mpb_grpc
from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.controller.v1 import node_service_pb2_grpc as npb_grpc
from srv6pm.controller.v1 import topology_service_pb2 as topb
from srv6pm.controller.v1 import topology_service_pb2_grpc as topb_grpc
from srv6pm.controller.v1 import tunnel_service_pb2 as tpb
from srv6pm.controller.v1 import tunnel_service_pb2_grpc as tpb_grpc
from srv6pm.node.v1 import srv6_pm_pb2 as pmpb

from .southbound.channels import open_channel

DEFAULT_ADDRESS = "localhost:50061"
ENV_ADDRESS = "SRV6PM_CONTROLLER"


class ClientError(Exception):
    """A refused or failed call: ``code`` is the gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _read(path: str | Path | None) -> bytes:
    return Path(path).read_bytes() if path else b""


class Client:
    """Connection to srv6pm-controller. Credentials: plaintext by default; ``ca`` for TLS,
    ``cert``/``key`` for mutual TLS, ``token`` for a bearer token."""

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        server_name: str = "",
        timeout: float = 30.0,
    ) -> None:
        self.address = address or os.environ.get(ENV_ADDRESS) or DEFAULT_ADDRESS
        creds = npb.NodeCredentials(
            insecure=not ca,
            ca_certificate=_read(ca),
            client_certificate=_read(cert),
            client_key=_read(key),
            token=token or "",
            server_name=server_name,
        )
        self._channel = open_channel(self.address, creds)
        self._nodes = npb_grpc.NodeServiceStub(self._channel)
        self._tunnels = tpb_grpc.TunnelServiceStub(self._channel)
        self._topology = topb_grpc.TopologyServiceStub(self._channel)
        self._measurements = mpb_grpc.MeasurementServiceStub(self._channel)
        self.timeout = timeout

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self._channel.close()

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            if code == grpc.StatusCode.UNAVAILABLE:
                raise ClientError(code.name, f"controller at {self.address} is unreachable") from None
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise ClientError(code.name, details or "no details") from None

    # nodes
    def register_node(
        self,
        name: str,
        address: str,
        *,
        insecure: bool = False,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        token: str | None = None,
        server_name: str = "",
        router_id: str = "",
    ) -> npb.Node:
        """Register (or re-register) a node agent."""
        creds = npb.NodeCredentials(
            insecure=insecure,
            ca_certificate=_read(ca),
            client_certificate=_read(cert),
            client_key=_read(key),
            token=token or "",
            server_name=server_name,
        )
        node = npb.Node(name=name, address=address, credentials=creds, router_id=router_id)
        return self._call(self._nodes.RegisterNode, npb.RegisterNodeRequest(node=node)).node

    def nodes(self) -> list[npb.Node]:
        """All nodes with their health."""
        return list(self._call(self._nodes.ListNodes, npb.ListNodesRequest()).nodes)

    def node(self, name: str) -> npb.Node:
        """One node with its health."""
        return self._call(self._nodes.GetNode, npb.GetNodeRequest(name=name)).node

    def remove_node(self, name: str) -> None:
        """Forget a node."""
        self._call(self._nodes.RemoveNode, npb.RemoveNodeRequest(name=name))

    # tunnels
    def create_tunnel(
        self,
        name: str,
        left: tpb.TunnelEnd,
        right: tpb.TunnelEnd,
        forward: Sequence[str],
        reverse: Sequence[str],
        encap_mode: int = 0,
    ) -> tpb.Tunnel:
        """Provision a bidirectional tunnel (all or nothing)."""
        tunnel = tpb.Tunnel(
            name=name,
            left=left,
            right=right,
            forward_segments=list(forward),
            reverse_segments=list(reverse),
            encap_mode=encap_mode,
        )
        return self._call(self._tunnels.CreateTunnel, tpb.CreateTunnelRequest(tunnel=tunnel)).tunnel

    def tunnels(self) -> list[tpb.Tunnel]:
        """All tunnels."""
        return list(self._call(self._tunnels.ListTunnels, tpb.ListTunnelsRequest()).tunnels)

    def tunnel(self, name: str) -> tpb.Tunnel:
        """One tunnel."""
        return self._call(self._tunnels.GetTunnel, tpb.GetTunnelRequest(name=name)).tunnel

    def delete_tunnel(self, name: str) -> None:
        """Remove a tunnel from both nodes."""
        self._call(self._tunnels.DeleteTunnel, tpb.DeleteTunnelRequest(name=name))

    # topology
    def extract_topology(self, source: int = 0) -> topb.Topology:
        """Read the topology from the network now, store it and return it."""
        return self._call(self._topology.ExtractTopology, topb.ExtractTopologyRequest(source=source)).topology

    def topology(self) -> topb.Topology:
        """The stored topology."""
        return self._call(self._topology.GetTopology, topb.GetTopologyRequest()).topology

    # measurements
    def create_measurement(
        self,
        measurement_id: str,
        sender: str,
        reflector: str,
        *,
        tunnel: str = "",
        forward: Sequence[str] = (),
        reverse: Sequence[str] = (),
        sender_address: str = "",
        reflector_address: str = "",
        period_s: float = 10.0,
        guard_s: float | None = None,
        protocol: int = pmpb.PROBE_PROTOCOL_STAMP,
        loss: bool = True,
        delay: bool = True,
    ) -> mpb.Measurement:
        """Start a measurement from ``sender`` to ``reflector`` (over a tunnel or explicit SID lists).

        Without a tunnel, ``sender_address`` and ``reflector_address`` (the probe endpoints, inside
        prefixes the far node steers into the SID list towards them) are required too.
        """
        spec = pmpb.MeasurementSpec(
            measurement_id=measurement_id,
            forward_segments=list(forward),
            reverse_segments=list(reverse),
            sender_address=sender_address,
            reflector_address=reflector_address,
            protocol=protocol,
            loss_enabled=loss,
            delay_enabled=delay,
        )
        spec.color_period.FromNanoseconds(_nanoseconds(period_s, "period_s"))
        if guard_s is not None:
            spec.guard_time.FromNanoseconds(_nanoseconds(guard_s, "guard_s"))
        m = mpb.Measurement(sender_node=sender, reflector_node=reflector, tunnel=tunnel, spec=spec)
        return self._call(
            self._measurements.CreateMeasurement, mpb.CreateMeasurementRequest(measurement=m)
        ).measurement

    def measurements(self) -> list[mpb.Measurement]:
        """All measurements."""
        return list(
            self._call(self._measurements.ListMeasurements, mpb.ListMeasurementsRequest()).measurements
        )

    def measurement(self, measurement_id: str, recent_blocks: int = 10) -> mpb.GetMeasurementResponse:
        """A measurement and its most recent block results."""
        if recent_blocks < 0:
            raise ClientError("INVALID_ARGUMENT", f"recent_blocks {recent_blocks} is negative")
        return self._call(
            self._measurements.GetMeasurement,
            mpb.GetMeasurementRequest(measurement_id=measurement_id, recent_blocks=recent_blocks),
        )

    def delete_measurement(self, measurement_id: str) -> None:
        """Stop a measurement on both nodes and forget it."""
        self._call(
            self._measurements.DeleteMeasurement, mpb.DeleteMeasurementRequest(measurement_id=measurement_id)
        )

    def results(
        self, measurement_ids: Sequence[str] = (), since_block: int = 0
    ) -> Iterator[pmpb.BlockResult]:
        """Block results as they arrive (blocks forever; break out of the loop to stop). With
        ``since_block``, the stored blocks after it come first: pass the last block you have to
        resume without a gap or a repeat."""
        if since_block < 0:
            raise ClientError("INVALID_ARGUMENT", f"since_block {since_block} is negative")
        call = self._measurements.StreamResults(
            mpb.StreamResultsRequest(measurement_ids=list(measurement_ids), since_block=since_block)
        )
        try:
            for response in call:
                yield response.result
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            if code == grpc.StatusCode.CANCELLED:
                return
            if code == grpc.StatusCode.UNAVAILABLE:
                raise ClientError(code.name, f"controller at {self.address} is unreachable") from None
            raise ClientError(code.name, exc.details() if isinstance(exc, grpc.Call) else str(exc)) from None
        finally:
            call.cancel()


def _nanoseconds(seconds: float, what: str) -> int:
    # Only what cannot become a Duration is refused here; the controller judges the range.
    if not math.isfinite(seconds) or abs(seconds) > 1e10:
        raise ClientError("INVALID_ARGUMENT", f"{what} {seconds} is not a usable number of seconds")
    return round(seconds * 1e9)


TunnelEnd = tpb.TunnelEnd
