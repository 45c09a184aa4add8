"""TunnelService: bidirectional SRv6 tunnels between two registered edge routers."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import grpc

from srv6pm.controller.v1 import tunnel_service_pb2 as pb
from srv6pm.controller.v1 import tunnel_service_pb2_grpc as pb_grpc
from srv6pm_common import addresses

from .. import provisioning
from .errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, rpc
from .nodes import NodeRegistry

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TunnelService"].full_name
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def validate(tunnel: pb.Tunnel, registry: NodeRegistry) -> pb.Tunnel:
    """Check and normalise a tunnel; raise InvalidArgument / NotFound naming the problem."""
    out = pb.Tunnel()
    out.CopyFrom(tunnel)
    if not _NAME_RE.match(tunnel.name):
        raise InvalidArgument(f"tunnel name {tunnel.name!r} is invalid (letters, digits, '-', '_', '.')")
    try:
        for side, end in (("left", out.left), ("right", out.right)):
            if not end.node:
                raise InvalidArgument(f"{side}.node is required")
            registry.get(end.node)
            end.prefix = addresses.prefix(end.prefix, f"{side}.prefix")
            end.decap_sid = addresses.sid(end.decap_sid, f"{side}.decap_sid")
            if not end.device:
                raise InvalidArgument(f"{side}.device is required (the interface towards the core)")
            if end.decap_action not in provisioning.DECAP_ACTIONS:
                raise InvalidArgument(f"{side}.decap_action must be END_DT6, END_DT4 or END_DT46")
        for field, segs, end_name, end in (
            ("forward_segments", out.forward_segments, "right", out.right),
            ("reverse_segments", out.reverse_segments, "left", out.left),
        ):
            normal = addresses.segments(segs, field)
            if normal[-1] != end.decap_sid:
                raise InvalidArgument(f"{field} must end with {end_name}.decap_sid {end.decap_sid}")
            del segs[:]
            segs.extend(normal)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    if out.left.node == out.right.node:
        raise InvalidArgument("left.node and right.node must differ")
    return out


class TunnelService(pb_grpc.TunnelServiceServicer):
    """Implements srv6pm.controller.v1.TunnelService."""

    def __init__(self, registry: NodeRegistry, in_use: Callable[[str], list[str]] = lambda name: []) -> None:
        self.registry = registry
        self._in_use = in_use
        self._lock = threading.Lock()  # one tunnel change at a time: rollbacks must not interleave

    @rpc
    def CreateTunnel(
        self, request: pb.CreateTunnelRequest, context: grpc.ServicerContext
    ) -> pb.CreateTunnelResponse:
        tunnel = validate(request.tunnel, self.registry)
        with self._lock:
            existing = self.registry.store.get_tunnel(tunnel.name)
            if existing is not None:
                if existing == tunnel:
                    return pb.CreateTunnelResponse(tunnel=existing)
                raise AlreadyExists(f"a different tunnel named {tunnel.name!r} exists")
            provisioning.provision(tunnel, self.registry.channel)
            self.registry.store.put_tunnel(tunnel)
        return pb.CreateTunnelResponse(tunnel=tunnel)

    @rpc
    def GetTunnel(self, request: pb.GetTunnelRequest, context: grpc.ServicerContext) -> pb.GetTunnelResponse:
        tunnel = self.registry.store.get_tunnel(request.name)
        if tunnel is None:
            raise NotFound(f"unknown tunnel {request.name!r}")
        return pb.GetTunnelResponse(tunnel=tunnel)

    @rpc
    def ListTunnels(
        self, request: pb.ListTunnelsRequest, context: grpc.ServicerContext
    ) -> pb.ListTunnelsResponse:
        return pb.ListTunnelsResponse(tunnels=self.registry.store.tunnels())

    @rpc
    def DeleteTunnel(
        self, request: pb.DeleteTunnelRequest, context: grpc.ServicerContext
    ) -> pb.DeleteTunnelResponse:
        with self._lock:
            tunnel = self.registry.store.get_tunnel(request.name)
            if tunnel is None:
                raise NotFound(f"unknown tunnel {request.name!r}")
            users = self._in_use(request.name)
            if users:
                raise FailedPrecondition(f"tunnel {request.name!r} is used by {', '.join(users)}")
            provisioning.deprovision(tunnel, self.registry.channel)
            self.registry.store.delete_tunnel(request.name)
        return pb.DeleteTunnelResponse()


def tunnels_using(registry: NodeRegistry, node: str) -> list[str]:
    """Names of the tunnels with an end on ``node`` (a node in use cannot be removed)."""
    return [f"tunnel {t.name}" for t in registry.store.tunnels() if node in (t.left.node, t.right.node)]
