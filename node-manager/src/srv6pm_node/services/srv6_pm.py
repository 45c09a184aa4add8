"""The SRv6PM gRPC service: a thin translation onto the measurement engine (:mod:`..pm`)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pb_grpc
from srv6pm_common.errors import NotFound, rpc
from srv6pm_common.result_queue import replay_then_live

from ..pm.engine import REFLECTOR, SENDER, Engine

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SRv6PM"].full_name
STREAM_POLL_S = 0.5


class SRv6PMService(pb_grpc.SRv6PMServicer):
    """Implements srv6pm.node.v1.SRv6PM over an :class:`~..pm.engine.Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @rpc
    def Configure(self, request: pb.ConfigureRequest, context: grpc.ServicerContext) -> pb.ConfigureResponse:
        return pb.ConfigureResponse(config=self.engine.configure(request.config))

    @rpc
    def GetConfiguration(
        self, request: pb.GetConfigurationRequest, context: grpc.ServicerContext
    ) -> pb.GetConfigurationResponse:
        return pb.GetConfigurationResponse(config=self.engine.get_config())

    @rpc
    def StartSender(
        self, request: pb.StartSenderRequest, context: grpc.ServicerContext
    ) -> pb.StartSenderResponse:
        return pb.StartSenderResponse(status=self.engine.start(request.spec, SENDER))

    @rpc
    def StopSender(
        self, request: pb.StopSenderRequest, context: grpc.ServicerContext
    ) -> pb.StopSenderResponse:
        return pb.StopSenderResponse(status=self.engine.stop(request.measurement_id, SENDER))

    @rpc
    def StartReflector(
        self, request: pb.StartReflectorRequest, context: grpc.ServicerContext
    ) -> pb.StartReflectorResponse:
        return pb.StartReflectorResponse(status=self.engine.start(request.spec, REFLECTOR))

    @rpc
    def StopReflector(
        self, request: pb.StopReflectorRequest, context: grpc.ServicerContext
    ) -> pb.StopReflectorResponse:
        return pb.StopReflectorResponse(status=self.engine.stop(request.measurement_id, REFLECTOR))

    @rpc
    def ListMeasurements(
        self, request: pb.ListMeasurementsRequest, context: grpc.ServicerContext
    ) -> pb.ListMeasurementsResponse:
        return pb.ListMeasurementsResponse(measurements=self.engine.list())

    @rpc
    def GetResults(
        self, request: pb.GetResultsRequest, context: grpc.ServicerContext
    ) -> pb.GetResultsResponse:
        return pb.GetResultsResponse(
            results=self.engine.results(request.measurement_id, request.since_block, request.limit)
        )

    def StreamResults(
        self, request: pb.StreamResultsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.StreamResultsResponse]:
        """Stored results newer than since_block, then live ones, without a gap or a repeat."""
        wanted = set(request.measurement_ids)
        for mid in wanted:
            if not self.engine.known(mid):
                context.abort(grpc.StatusCode.NOT_FOUND, str(NotFound(f"unknown measurement {mid!r}")))
        # Subscribe before replaying, so nothing published in between is missed.
        sub = self.engine.subscribe(wanted or None)
        context.add_callback(sub.close)
        batch = max(1, request.max_batch)

        def response(results: list[pb.BlockResult]) -> pb.StreamResultsResponse:
            if request.max_batch <= 1:
                return pb.StreamResultsResponse(result=results[0])
            return pb.StreamResultsResponse(results=results)

        def replay() -> Iterator[list[pb.BlockResult]]:
            for mid in sorted(wanted) or self.engine.measurement_ids():
                stored = self.engine.results(mid, request.since_block)
                for i in range(0, len(stored), batch):
                    yield stored[i : i + batch]

        try:
            for results in replay_then_live(
                sub, replay(), request.since_block, context, STREAM_POLL_S, batch
            ):
                yield response(results)
        finally:
            sub.close()
