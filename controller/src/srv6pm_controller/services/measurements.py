"""MeasurementService: start and stop measurements on two nodes, and serve their results."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc

from srv6pm.controller.v1 import measurement_service_pb2 as pb
from srv6pm.controller.v1 import measurement_service_pb2_grpc as pb_grpc
from srv6pm.node.v1 import srv6_pm_pb2 as npb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as npb_grpc
from srv6pm_common import measurement_spec
from srv6pm_common.result_queue import replay_then_live

from ..measurements.bus import ResultBus
from ..measurements.collector import ResultCollector
from .errors import AlreadyExists, ControllerError, InvalidArgument, NotFound, rpc
from .nodes import NodeRegistry

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["MeasurementService"].full_name


def _node_error(node: str, what: str, exc: grpc.RpcError) -> ControllerError:
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    return ControllerError(f"node {node}: {what}: {details}", code)


def validate(m: pb.Measurement, registry: NodeRegistry) -> pb.Measurement:
    """Check a measurement and fill what the controller knows (SID lists from the tunnel, defaults)."""
    out = pb.Measurement()
    out.CopyFrom(m)
    measurement_spec.check_id(out.spec.measurement_id)
    for role in ("sender_node", "reflector_node"):
        if not getattr(out, role):
            raise InvalidArgument(f"{role} is required")
        registry.get(getattr(out, role))
    if out.sender_node == out.reflector_node:
        raise InvalidArgument("sender_node and reflector_node must differ")
    spec = out.spec
    if out.tunnel:
        tunnel = registry.store.get_tunnel(out.tunnel)
        if tunnel is None:
            raise NotFound(f"unknown tunnel {out.tunnel!r}")
        ends = (tunnel.left.node, tunnel.right.node)
        if (out.sender_node, out.reflector_node) == ends:
            forward, reverse = tunnel.forward_segments, tunnel.reverse_segments
        elif (out.reflector_node, out.sender_node) == ends:
            forward, reverse = tunnel.reverse_segments, tunnel.forward_segments
        else:
            raise InvalidArgument(
                f"tunnel {out.tunnel!r} joins {ends[0]} and {ends[1]}, not the measurement's nodes"
            )
        if not spec.forward_segments:
            spec.forward_segments.extend(forward)
        if not spec.reverse_segments:
            spec.reverse_segments.extend(reverse)
        # Probe endpoints inside the prefixes the tunnel steers, so probes ride the tunnel.
        sender_end, reflector_end = (
            (tunnel.left, tunnel.right)
            if out.sender_node == tunnel.left.node
            else (tunnel.right, tunnel.left)
        )
        if not spec.sender_address:
            spec.sender_address = measurement_spec.probe_endpoint(
                sender_end.prefix, "the sender end's prefix"
            )
        if not spec.reflector_address:
            spec.reflector_address = measurement_spec.probe_endpoint(
                reflector_end.prefix, "the reflector end's prefix"
            )
    out.spec.CopyFrom(measurement_spec.normalise(spec))
    if not out.tunnel:
        # Without a tunnel the controller cannot pick the probe endpoints: every node refuses a
        # spec without them, so refuse it here before anything is started.
        for field, node in (("sender_address", "sender"), ("reflector_address", "reflector")):
            if not getattr(out.spec, field):
                raise InvalidArgument(
                    f"spec.{field} is required without a tunnel (the probe endpoint on the {node})"
                )
    out.ClearField("state")
    out.ClearField("error")
    return out


def public(m: pb.Measurement) -> pb.Measurement:
    """The measurement without its authentication key."""
    out = pb.Measurement()
    out.CopyFrom(m)
    out.spec.authentication.ClearField("key")
    return out


class MeasurementService(pb_grpc.MeasurementServiceServicer):
    """Implements srv6pm.controller.v1.MeasurementService."""

    def __init__(self, registry: NodeRegistry, bus: ResultBus, collector: ResultCollector) -> None:
        self.registry = registry
        self.bus = bus
        self.collector = collector
        self._lock = threading.Lock()

    def _pm(self, node: str) -> npb_grpc.SRv6PMStub:
        return npb_grpc.SRv6PMStub(self.registry.channel(node))

    @rpc
    def CreateMeasurement(
        self, request: pb.CreateMeasurementRequest, context: grpc.ServicerContext
    ) -> pb.CreateMeasurementResponse:
        m = validate(request.measurement, self.registry)
        mid = m.spec.measurement_id
        with self._lock:
            existing = self.registry.store.get_measurement(mid)
            if existing is not None:
                raise AlreadyExists(f"measurement {mid!r} exists")
            # Reflector first: the sender's first probe must find it listening.
            try:
                self._pm(m.reflector_node).StartReflector(npb.StartReflectorRequest(spec=m.spec), timeout=15)
            except grpc.RpcError as exc:
                raise _node_error(m.reflector_node, "starting the reflector", exc) from None
            try:
                started = self._pm(m.sender_node).StartSender(npb.StartSenderRequest(spec=m.spec), timeout=15)
            except grpc.RpcError as exc:
                try:
                    self._pm(m.reflector_node).StopReflector(
                        npb.StopReflectorRequest(measurement_id=mid), timeout=15
                    )
                except grpc.RpcError as undo:
                    log.error(
                        "could not stop the reflector after a failed start",
                        extra={"measurement_id": mid, "reason": str(undo)},
                    )
                raise _node_error(m.sender_node, "starting the sender", exc) from None
            m.state = npb.MEASUREMENT_STATE_RUNNING
            m.created_at.GetCurrentTime()
            # The sender numbers this run's blocks from the one it started in (by its clock); it
            # still has the results of any earlier measurement of the same id: not ours.
            started_ns = started.status.started_at.ToNanoseconds()
            self.registry.store.set_first_block(mid, started_ns // m.spec.color_period.ToNanoseconds())
            self.registry.store.put_measurement(m)
        self.collector.refresh()
        log.info(
            "measurement started",
            extra={"measurement_id": mid, "sender": m.sender_node, "reflector": m.reflector_node},
        )
        return pb.CreateMeasurementResponse(measurement=public(m))

    def _get(self, mid: str) -> pb.Measurement:
        m = self.registry.store.get_measurement(mid)
        if m is None:
            raise NotFound(f"unknown measurement {mid!r}")
        return m

    @rpc
    def GetMeasurement(
        self, request: pb.GetMeasurementRequest, context: grpc.ServicerContext
    ) -> pb.GetMeasurementResponse:
        m = self._get(request.measurement_id)
        recent = self.registry.store.recent_results(m.spec.measurement_id, request.recent_blocks or 10)
        return pb.GetMeasurementResponse(measurement=public(m), recent_results=recent)

    @rpc
    def ListMeasurements(
        self, request: pb.ListMeasurementsRequest, context: grpc.ServicerContext
    ) -> pb.ListMeasurementsResponse:
        return pb.ListMeasurementsResponse(
            measurements=[public(m) for m in self.registry.store.measurements()]
        )

    @rpc
    def DeleteMeasurement(
        self, request: pb.DeleteMeasurementRequest, context: grpc.ServicerContext
    ) -> pb.DeleteMeasurementResponse:
        with self._lock:
            m = self._get(request.measurement_id)
            mid = m.spec.measurement_id
            # Sender first (no more probes), then the reflector. Already stopped is fine.
            for node, call, req in (
                (m.sender_node, "StopSender", npb.StopSenderRequest(measurement_id=mid)),
                (m.reflector_node, "StopReflector", npb.StopReflectorRequest(measurement_id=mid)),
            ):
                try:
                    getattr(self._pm(node), call)(req, timeout=15)
                except grpc.RpcError as exc:
                    if not (isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.NOT_FOUND):
                        raise _node_error(node, f"{call}", exc) from None
            self.registry.store.delete_measurement(mid)
        self.collector.refresh()
        return pb.DeleteMeasurementResponse()

    def StreamResults(
        self, request: pb.StreamResultsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.StreamResultsResponse]:
        ids = list(dict.fromkeys(request.measurement_ids))
        for mid in ids:
            if self.registry.store.get_measurement(mid) is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"unknown measurement {mid!r}")
        # Subscribe before replaying, so nothing stored and published in between is missed.
        sub = self.bus.subscribe(ids)
        context.add_callback(sub.close)
        store, since = self.registry.store, request.since_block

        def replay() -> Iterator[list[npb.BlockResult]]:
            if not since:
                return
            for mid in ids or [m.spec.measurement_id for m in store.measurements()]:
                for r in store.results_since(mid, since):
                    yield [r]

        try:
            for results in replay_then_live(sub, replay(), since, context):
                for result in results:
                    yield pb.StreamResultsResponse(result=result)
        finally:
            sub.close()


def measurements_using(registry: NodeRegistry, node: str = "", tunnel: str = "") -> list[str]:
    """Measurements on a node or over a tunnel (which then cannot be removed)."""
    return [
        f"measurement {m.spec.measurement_id}"
        for m in registry.store.measurements()
        if (node and node in (m.sender_node, m.reflector_node)) or (tunnel and m.tunnel == tunnel)
    ]
