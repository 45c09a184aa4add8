"""Provisioning a bidirectional SRv6 tunnel on two nodes, all or nothing.

A tunnel is four kernel objects: the decapsulation behaviour at each end and the encap path at
each end. They are created in that order (decapsulation first, so no packet is ever steered into
a SID nobody handles); if any step fails, the steps already done — only those that created
something new — are undone in reverse order, so a failed CreateTunnel leaves both nodes as they
were.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from srv6pm.controller.v1 import tunnel_service_pb2 as tpb
from srv6pm.node.v1 import srv6_manager_pb2 as npb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as npb_grpc

from .services.errors import ControllerError

log = logging.getLogger(__name__)

DECAP_ACTIONS = {
    npb.BEHAVIOR_ACTION_UNSPECIFIED,
    npb.BEHAVIOR_ACTION_END_DT6,
    npb.BEHAVIOR_ACTION_END_DT4,
    npb.BEHAVIOR_ACTION_END_DT46,
}


def decap_behavior(end: tpb.TunnelEnd) -> npb.Behavior:
    """The decapsulation behaviour of one tunnel end."""
    action = end.decap_action or npb.BEHAVIOR_ACTION_END_DT6
    behavior = npb.Behavior(sid=end.decap_sid, action=action, device=end.device)
    if action == npb.BEHAVIOR_ACTION_END_DT6:
        behavior.lookup_table = end.decap_table or 254
    else:
        behavior.vrf_table = end.decap_table
    return behavior


def encap_path(tunnel: tpb.Tunnel, here: tpb.TunnelEnd, there: tpb.TunnelEnd, segs: list[str]) -> npb.Path:
    """The path at ``here`` that steers traffic for ``there``'s prefix into ``segs``."""
    return npb.Path(destination=there.prefix, segments=segs, encap_mode=tunnel.encap_mode, device=here.device)


@dataclass
class _Step:
    node: str
    what: str
    do: Callable[[], bool]  # returns True when it created something new
    undo: Callable[[], None]


def _node_error(node: str, what: str, exc: grpc.RpcError) -> ControllerError:
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    return ControllerError(
        f"node {node}: {what}: {exc.details() if isinstance(exc, grpc.Call) else exc}", code
    )


def _steps(tunnel: tpb.Tunnel, channel: Callable[[str], grpc.Channel]) -> list[_Step]:
    left, right = tunnel.left, tunnel.right
    steps = []
    for end in (right, left):
        stub = npb_grpc.SRv6ManagerStub(channel(end.node))
        b = decap_behavior(end)
        steps.append(
            _Step(
                end.node,
                f"decapsulation {b.sid}",
                lambda stub=stub, b=b: (
                    stub.CreateBehavior(npb.CreateBehaviorRequest(behavior=b), timeout=10).created
                ),
                lambda stub=stub, b=b: (
                    stub.DeleteBehavior(npb.DeleteBehaviorRequest(sid=b.sid, table=b.table), timeout=10)
                    and None
                ),
            )
        )
    for here, there, segs in (
        (left, right, list(tunnel.forward_segments)),
        (right, left, list(tunnel.reverse_segments)),
    ):
        stub = npb_grpc.SRv6ManagerStub(channel(here.node))
        p = encap_path(tunnel, here, there, segs)
        steps.append(
            _Step(
                here.node,
                f"path to {p.destination}",
                lambda stub=stub, p=p: stub.CreatePath(npb.CreatePathRequest(path=p), timeout=10).created,
                lambda stub=stub, p=p: (
                    stub.DeletePath(
                        npb.DeletePathRequest(destination=p.destination, table=p.table), timeout=10
                    )
                    and None
                ),
            )
        )
    return steps


def provision(tunnel: tpb.Tunnel, channel: Callable[[str], grpc.Channel]) -> None:
    """Create every object of ``tunnel``; on failure undo what this call created and raise."""
    done: list[_Step] = []
    for step in _steps(tunnel, channel):
        try:
            if step.do():
                done.append(step)
        except grpc.RpcError as exc:
            error = _node_error(step.node, step.what, exc)
            log.warning(
                "tunnel provisioning failed, rolling back",
                extra={"tunnel": tunnel.name, "reason": str(error), "undo": len(done)},
            )
            for undo in reversed(done):
                try:
                    undo.undo()
                except grpc.RpcError as undo_exc:  # report, keep undoing the rest
                    log.error(
                        "rollback step failed",
                        extra={
                            "tunnel": tunnel.name,
                            "node": undo.node,
                            "what": undo.what,
                            "reason": str(undo_exc),
                        },
                    )
            raise error from None


def deprovision(tunnel: tpb.Tunnel, channel: Callable[[str], grpc.Channel]) -> None:
    """Remove every object of ``tunnel`` (paths first); objects already gone are fine."""
    for step in reversed(_steps(tunnel, channel)):
        try:
            step.undo()
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.NOT_FOUND:
                continue
            raise _node_error(step.node, f"removing {step.what}", exc) from None
