"""TopologyService: extract the topology from the network and serve the stored one."""

from __future__ import annotations

import grpc

from srv6pm.controller.v1 import topology_service_pb2 as pb
from srv6pm.controller.v1 import topology_service_pb2_grpc as pb_grpc

from ..topology import netlink_source
from ..topology.store import TopologyStore
from .errors import ControllerError, FailedPrecondition, NotFound, rpc
from .nodes import NodeRegistry

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TopologyService"].full_name


class TopologyService(pb_grpc.TopologyServiceServicer):
    """Implements srv6pm.controller.v1.TopologyService."""

    def __init__(self, registry: NodeRegistry, store: TopologyStore) -> None:
        self.registry = registry
        self.store = store

    @rpc
    def ExtractTopology(
        self, request: pb.ExtractTopologyRequest, context: grpc.ServicerContext
    ) -> pb.ExtractTopologyResponse:
        if request.source == pb.TOPOLOGY_SOURCE_ISIS:
            raise FailedPrecondition("the IS-IS source is not available yet; use TOPOLOGY_SOURCE_NETLINK")
        nodes = self.registry.store.nodes()
        if not nodes:
            raise FailedPrecondition("no nodes are registered")
        try:
            topology = netlink_source.extract(nodes, self.registry.channels.get)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            raise ControllerError(f"reading a node's state failed: {exc}", code) from None
        self.store.save(topology)
        return pb.ExtractTopologyResponse(topology=topology)

    @rpc
    def GetTopology(
        self, request: pb.GetTopologyRequest, context: grpc.ServicerContext
    ) -> pb.GetTopologyResponse:
        topology = self.store.load()
        if topology is None:
            raise NotFound("no topology yet: run ExtractTopology first")
        return pb.GetTopologyResponse(topology=topology)
