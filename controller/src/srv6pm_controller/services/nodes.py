"""NodeService: the registry of routers (srv6pm-node agents) the controller drives."""

from __future__ import annotations

import re
from collections.abc import Callable

import grpc

from srv6pm.controller.v1 import node_service_pb2 as pb
from srv6pm.controller.v1 import node_service_pb2_grpc as pb_grpc
from srv6pm_common import addresses

from ..southbound.channels import NodeChannels, check_health
from ..store import Store
from .errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, rpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["NodeService"].full_name
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def public(node: pb.Node) -> pb.Node:
    """The node without its secrets (private key, token), as answers show it."""
    out = pb.Node()
    out.CopyFrom(node)
    out.credentials.ClearField("client_key")
    out.credentials.ClearField("token")
    return out


class NodeRegistry:
    """Registered nodes and their channels, shared by every service."""

    def __init__(self, store: Store, channels: NodeChannels) -> None:
        self.store = store
        self.channels = channels

    def get(self, name: str) -> pb.Node:
        """A registered node; NotFound with a clear message otherwise."""
        node = self.store.get_node(name)
        if node is None:
            raise NotFound(f"unknown node {name!r} (register it first)")
        return node

    def channel(self, name: str) -> grpc.Channel:
        """The channel to a registered node."""
        return self.channels.get(self.get(name))


class NodeService(pb_grpc.NodeServiceServicer):
    """Implements srv6pm.controller.v1.NodeService."""

    def __init__(self, registry: NodeRegistry, in_use: Callable[[str], list[str]] = lambda name: []) -> None:
        self.registry = registry
        self._in_use = in_use

    def _with_health(self, node: pb.Node) -> pb.Node:
        out = public(node)
        out.health = check_health(self.registry.channels.get(node))
        return out

    @rpc
    def RegisterNode(
        self, request: pb.RegisterNodeRequest, context: grpc.ServicerContext
    ) -> pb.RegisterNodeResponse:
        node = request.node
        if not _NAME_RE.match(node.name):
            raise InvalidArgument(f"node name {node.name!r} is invalid (letters, digits, '-', '_', '.')")
        try:
            addresses.grpc_target(node.address, "node address")
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        node.ClearField("health")
        existing = self.registry.store.get_node(node.name)
        if existing is not None and existing.address != node.address:
            raise AlreadyExists(f"node {node.name!r} is registered with address {existing.address}")
        self.registry.store.put_node(node)
        return pb.RegisterNodeResponse(node=self._with_health(node))

    @rpc
    def GetNode(self, request: pb.GetNodeRequest, context: grpc.ServicerContext) -> pb.GetNodeResponse:
        return pb.GetNodeResponse(node=self._with_health(self.registry.get(request.name)))

    @rpc
    def ListNodes(self, request: pb.ListNodesRequest, context: grpc.ServicerContext) -> pb.ListNodesResponse:
        return pb.ListNodesResponse(nodes=[self._with_health(n) for n in self.registry.store.nodes()])

    @rpc
    def RemoveNode(
        self, request: pb.RemoveNodeRequest, context: grpc.ServicerContext
    ) -> pb.RemoveNodeResponse:
        self.registry.get(request.name)
        users = self._in_use(request.name)
        if users:
            raise FailedPrecondition(
                f"node {request.name!r} is used by {', '.join(users)}: delete them first"
            )
        self.registry.store.delete_node(request.name)
        self.registry.channels.drop(request.name)
        return pb.RemoveNodeResponse()
