"""The SRv6Manager gRPC service: validation, then netlink, with precise status codes."""

from __future__ import annotations

import logging

import grpc

from srv6pm.node.v1 import srv6_manager_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as pb_grpc
from srv6pm_common.errors import rpc

from ..frr import isis
from ..srv6 import validate
from ..srv6.model import Action, BehaviorSpec, EncapMode, PathSpec
from ..srv6.netlink import SRv6Netlink

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SRv6Manager"].full_name

_MODES = {m: getattr(pb, f"ENCAP_MODE_{m.name}") for m in EncapMode}
_ACTIONS = {a: getattr(pb, f"BEHAVIOR_ACTION_{a.name}") for a in Action}


def path_to_pb(spec: PathSpec) -> pb.Path:
    """A PathSpec as the API's Path message."""
    return pb.Path(
        destination=spec.destination,
        segments=list(spec.segments),
        encap_mode=_MODES[spec.mode],
        device=spec.device,
        table=spec.table,
        metric=spec.metric,
    )


def behavior_to_pb(spec: BehaviorSpec) -> pb.Behavior:
    """A BehaviorSpec as the API's Behavior message."""
    return pb.Behavior(
        sid=spec.sid,
        action=_ACTIONS[spec.action],
        device=spec.device,
        table=spec.table,
        metric=spec.metric,
        nexthop=spec.nexthop,
        lookup_table=spec.lookup_table,
        vrf_table=spec.vrf_table,
        segments=list(spec.segments),
    )


def _list_table(request: pb.ListPathsRequest | pb.ListBehaviorsRequest) -> int | None:
    return None if request.all_tables else validate.table(request.table)


class SRv6ManagerService(pb_grpc.SRv6ManagerServicer):
    """Implements srv6pm.node.v1.SRv6Manager on top of :class:`SRv6Netlink` (and FRR's vtysh for
    GetIsisTopology)."""

    def __init__(self, kernel: SRv6Netlink | None = None, vtysh: isis.Vtysh | None = None) -> None:
        self.kernel = kernel or SRv6Netlink()
        self.vtysh = vtysh or isis.Vtysh()

    @rpc
    def CreatePath(
        self, request: pb.CreatePathRequest, context: grpc.ServicerContext
    ) -> pb.CreatePathResponse:
        path, created = self.kernel.create_path(validate.path(request.path))
        return pb.CreatePathResponse(path=path_to_pb(path), created=created)

    @rpc
    def GetPath(self, request: pb.GetPathRequest, context: grpc.ServicerContext) -> pb.GetPathResponse:
        path = self.kernel.get_path(validate.prefix(request.destination), validate.table(request.table))
        return pb.GetPathResponse(path=path_to_pb(path))

    @rpc
    def ListPaths(self, request: pb.ListPathsRequest, context: grpc.ServicerContext) -> pb.ListPathsResponse:
        return pb.ListPathsResponse(
            paths=[path_to_pb(p) for p in self.kernel.list_paths(_list_table(request))]
        )

    @rpc
    def UpdatePath(
        self, request: pb.UpdatePathRequest, context: grpc.ServicerContext
    ) -> pb.UpdatePathResponse:
        return pb.UpdatePathResponse(path=path_to_pb(self.kernel.update_path(validate.path(request.path))))

    @rpc
    def DeletePath(
        self, request: pb.DeletePathRequest, context: grpc.ServicerContext
    ) -> pb.DeletePathResponse:
        path = self.kernel.delete_path(validate.prefix(request.destination), validate.table(request.table))
        return pb.DeletePathResponse(path=path_to_pb(path))

    @rpc
    def CreateBehavior(
        self, request: pb.CreateBehaviorRequest, context: grpc.ServicerContext
    ) -> pb.CreateBehaviorResponse:
        behavior, created = self.kernel.create_behavior(validate.behavior(request.behavior))
        return pb.CreateBehaviorResponse(behavior=behavior_to_pb(behavior), created=created)

    @rpc
    def GetBehavior(
        self, request: pb.GetBehaviorRequest, context: grpc.ServicerContext
    ) -> pb.GetBehaviorResponse:
        behavior = self.kernel.get_behavior(
            validate.prefix(request.sid, "sid", v6_only=True), validate.table(request.table)
        )
        return pb.GetBehaviorResponse(behavior=behavior_to_pb(behavior))

    @rpc
    def ListBehaviors(
        self, request: pb.ListBehaviorsRequest, context: grpc.ServicerContext
    ) -> pb.ListBehaviorsResponse:
        found = self.kernel.list_behaviors(_list_table(request))
        return pb.ListBehaviorsResponse(behaviors=[behavior_to_pb(b) for b in found])

    @rpc
    def UpdateBehavior(
        self, request: pb.UpdateBehaviorRequest, context: grpc.ServicerContext
    ) -> pb.UpdateBehaviorResponse:
        behavior = self.kernel.update_behavior(validate.behavior(request.behavior))
        return pb.UpdateBehaviorResponse(behavior=behavior_to_pb(behavior))

    @rpc
    def DeleteBehavior(
        self, request: pb.DeleteBehaviorRequest, context: grpc.ServicerContext
    ) -> pb.DeleteBehaviorResponse:
        behavior = self.kernel.delete_behavior(
            validate.prefix(request.sid, "sid", v6_only=True), validate.table(request.table)
        )
        return pb.DeleteBehaviorResponse(behavior=behavior_to_pb(behavior))

    @rpc
    def ListInterfaces(
        self, request: pb.ListInterfacesRequest, context: grpc.ServicerContext
    ) -> pb.ListInterfacesResponse:
        return pb.ListInterfacesResponse(
            interfaces=[
                pb.Interface(
                    name=i.name, index=i.index, up=i.up, mac=i.mac, mtu=i.mtu, addresses=list(i.addresses)
                )
                for i in self.kernel.list_interfaces()
            ]
        )

    @rpc
    def GetIsisTopology(
        self, request: pb.GetIsisTopologyRequest, context: grpc.ServicerContext
    ) -> pb.GetIsisTopologyResponse:
        return isis_to_pb(isis.read(self.vtysh))


_ISIS_STATES = {
    "up": pb.ISIS_ADJACENCY_STATE_UP,
    "initializing": pb.ISIS_ADJACENCY_STATE_INITIALIZING,
    "down": pb.ISIS_ADJACENCY_STATE_DOWN,
}


def isis_to_pb(view: isis.IsisView) -> pb.GetIsisTopologyResponse:
    """The router's IS-IS view as the API's GetIsisTopologyResponse."""
    return pb.GetIsisTopologyResponse(
        system_id=view.system_id,
        hostname=view.hostname,
        loopback_addresses=list(view.loopback_addresses),
        adjacencies=[
            pb.IsisAdjacency(
                interface=a.interface,
                level=a.level,
                state=_ISIS_STATES.get(a.state, pb.ISIS_ADJACENCY_STATE_UNSPECIFIED),
                neighbor_system_id=a.neighbor_system_id,
                neighbor_hostname=a.neighbor_hostname,
                neighbor_addresses=list(a.neighbor_addresses),
                local_addresses=list(a.local_addresses),
                metric=a.metric,
                area=a.area,
            )
            for a in view.adjacencies
        ],
    )


__all__ = ["SERVICE_NAME", "SRv6ManagerService", "behavior_to_pb", "isis_to_pb", "path_to_pb"]
