"""TopologyService: extract the topology from the network and serve the stored one."""

from __future__ import annotations

import grpc

from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.controller.v1 import topology_service_pb2 as pb
from srv6pm.controller.v1 import topology_service_pb2_grpc as pb_grpc

from ..topology import NodeError, isis_source, netlink_source
from ..topology.store import TopologyStore
from .errors import ControllerError, FailedPrecondition, InvalidArgument, NotFound, rpc
from .nodes import NodeRegistry

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["TopologyService"].full_name
# A node answering these has no IS-IS to read (no FRR, isisd down, an agent without the RPC).
_NO_ISIS = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED)


class TopologyService(pb_grpc.TopologyServiceServicer):
    """Implements srv6pm.controller.v1.TopologyService."""

    def __init__(self, registry: NodeRegistry, store: TopologyStore) -> None:
        self.registry = registry
        self.store = store

    @rpc
    def ExtractTopology(
        self, request: pb.ExtractTopologyRequest, context: grpc.ServicerContext
    ) -> pb.ExtractTopologyResponse:
        nodes = self.registry.store.nodes()
        if not nodes:
            raise FailedPrecondition("no nodes are registered")
        if request.source not in pb.TopologySource.values():
            raise InvalidArgument(f"source {request.source} is not a TopologySource")
        if request.source == pb.TOPOLOGY_SOURCE_NETLINK:
            topology = self._from_netlink(nodes)
        else:  # ISIS; UNSPECIFIED: FRR's IS-IS where every node runs it, else the nodes' kernel state
            topology = self._from_isis(nodes, fall_back=request.source != pb.TOPOLOGY_SOURCE_ISIS)
        self.store.save(topology)
        return pb.ExtractTopologyResponse(topology=topology)

    def _from_isis(self, nodes: list[npb.Node], fall_back: bool) -> pb.Topology:
        try:
            return isis_source.extract(nodes, self.registry.channels.get)
        except NodeError as exc:
            if fall_back and exc.code in _NO_ISIS:
                return self._from_netlink(nodes)
            raise ControllerError(f"IS-IS topology: node {exc.node}: {exc.details}", exc.code) from None
        except isis_source.InconsistentTopology as exc:
            raise FailedPrecondition(f"IS-IS topology: {exc}") from None

    def _from_netlink(self, nodes: list[npb.Node]) -> pb.Topology:
        try:
            return netlink_source.extract(nodes, self.registry.channels.get)
        except NodeError as exc:
            raise ControllerError(f"kernel topology: node {exc.node}: {exc.details}", exc.code) from None

    @rpc
    def GetTopology(
        self, request: pb.GetTopologyRequest, context: grpc.ServicerContext
    ) -> pb.GetTopologyResponse:
        topology = self.store.load()
        if topology is None:
            raise NotFound("no topology yet: run ExtractTopology first")
        return pb.GetTopologyResponse(topology=topology)
