"""The SRv6PM gRPC service.

Registered and visible through reflection from day one (the original SRv6-PM agent silently
never registered its PM service). Until the measurement engine lands, every method answers
UNIMPLEMENTED with a message saying so.
"""

from __future__ import annotations

from typing import Any

import grpc

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pb_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SRv6PM"].full_name


def _unimplemented(name: str) -> Any:
    def method(self: SRv6PMService, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"SRv6PM.{name} is not implemented yet on this node")

    method.__name__ = name
    return method


class SRv6PMService(pb_grpc.SRv6PMServicer):
    """Placeholder implementation of srv6pm.node.v1.SRv6PM: every RPC is UNIMPLEMENTED."""


for _method in pb.DESCRIPTOR.services_by_name["SRv6PM"].methods:
    setattr(SRv6PMService, _method.name, _unimplemented(_method.name))
