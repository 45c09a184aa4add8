"""A stand-in for the SRv6PM service of srv6pm-node, for the controller's tests only.

srv6pm-node answers SRv6PM with UNIMPLEMENTED until the measurement engine lands; this double
lets the controller's measurement life cycle and result collection be tested against a real gRPC
server in a real process that can be killed and restarted. Its results are synthetic but
deterministic: block b of measurement m has tx = 1000 + b % 100 and rx = tx - (b % 7), so a test
can check every published figure. Run: ``python -m tests.fakes.fake_pm_agent unix:/path.sock``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToJson, Parse
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pb_grpc


def block_result(mid: str, block: int, period: float) -> pb.BlockResult:
    """The synthetic result of ``block`` (see the module docstring)."""
    tx = 1000 + block % 100
    lost = block % 7
    r = pb.BlockResult(measurement_id=mid, block_number=block, color=block % 2, merged_blocks=1, node="fake")
    r.start_time.FromNanoseconds(int(block * period * 1e9))
    r.end_time.FromNanoseconds(int((block + 1) * period * 1e9))
    r.forward.CopyFrom(
        pb.DirectionResult(
            tx_packets=tx, rx_packets=tx - lost, lost_packets=lost, loss_ratio=lost / tx, valid=True
        )
    )
    r.reverse.CopyFrom(pb.DirectionResult(tx_packets=tx, rx_packets=tx, valid=True))
    r.probes.CopyFrom(pb.ProbeCounts(sent=1, received=1))
    return r


class FakePM(pb_grpc.SRv6PMServicer):
    """Keeps its measurements in a JSON file so a restarted fake resumes them."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.lock = threading.Condition()
        self.specs: dict[tuple[str, int], pb.MeasurementSpec] = {}
        if state.exists():
            for item in json.loads(state.read_text()):
                self.specs[(item["id"], item["role"])] = Parse(item["spec"], pb.MeasurementSpec())
        self.results: dict[str, list[pb.BlockResult]] = {}
        threading.Thread(target=self._tick, daemon=True).start()

    def _save(self) -> None:
        self.state.write_text(
            json.dumps([{"id": k[0], "role": k[1], "spec": MessageToJson(v)} for k, v in self.specs.items()])
        )

    def _tick(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.time()
            with self.lock:
                for (mid, role), spec in self.specs.items():
                    if role != pb.MEASUREMENT_ROLE_SENDER:
                        continue
                    period = spec.color_period.ToNanoseconds() / 1e9
                    closed = int(now / period) - 1
                    done = self.results.setdefault(mid, [])
                    if not done or done[-1].block_number < closed:
                        done.append(block_result(mid, closed, period))
                        self.lock.notify_all()

    def _start(
        self, spec: pb.MeasurementSpec, role: int, context: grpc.ServicerContext
    ) -> pb.MeasurementStatus:
        if spec.measurement_id.startswith("refuse") and role == pb.MEASUREMENT_ROLE_SENDER:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this node refuses")
        with self.lock:
            self.specs[(spec.measurement_id, role)] = spec
            self._save()
        return pb.MeasurementStatus(spec=spec, role=role, state=pb.MEASUREMENT_STATE_RUNNING)

    def _stop(self, mid: str, role: int, context: grpc.ServicerContext) -> pb.MeasurementStatus:
        with self.lock:
            spec = self.specs.pop((mid, role), None)
            self._save()
        if spec is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no measurement {mid}")
        return pb.MeasurementStatus(spec=spec, role=role, state=pb.MEASUREMENT_STATE_STOPPED)

    def StartSender(self, request, context):
        return pb.StartSenderResponse(status=self._start(request.spec, pb.MEASUREMENT_ROLE_SENDER, context))

    def StartReflector(self, request, context):
        return pb.StartReflectorResponse(
            status=self._start(request.spec, pb.MEASUREMENT_ROLE_REFLECTOR, context)
        )

    def StopSender(self, request, context):
        return pb.StopSenderResponse(
            status=self._stop(request.measurement_id, pb.MEASUREMENT_ROLE_SENDER, context)
        )

    def StopReflector(self, request, context):
        status = self._stop(request.measurement_id, pb.MEASUREMENT_ROLE_REFLECTOR, context)
        return pb.StopReflectorResponse(status=status)

    def ListMeasurements(self, request, context):
        with self.lock:
            return pb.ListMeasurementsResponse(
                measurements=[
                    pb.MeasurementStatus(spec=s, role=r, state=pb.MEASUREMENT_STATE_RUNNING)
                    for (_, r), s in self.specs.items()
                ]
            )

    def StreamResults(self, request, context):
        wanted = set(request.measurement_ids)
        sent: dict[str, int] = {}
        while context.is_active():
            batch = []
            with self.lock:
                for mid, results in self.results.items():
                    if wanted and mid not in wanted:
                        continue
                    floor = max(sent.get(mid, 0), request.since_block)
                    batch += [r for r in results if r.block_number > floor]
                if not batch:
                    self.lock.wait(0.2)
            for r in batch:
                sent[r.measurement_id] = r.block_number
                yield pb.StreamResultsResponse(result=r)


def main() -> None:
    """Serve the fake on the address given (and keep state next to a unix socket)."""
    address = sys.argv[1]
    state = Path(address.removeprefix("unix:") + ".state.json")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    pb_grpc.add_SRv6PMServicer_to_server(FakePM(state), server)
    h = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(h, server)
    server.add_insecure_port(address)
    server.start()
    h.set("", health_pb2.HealthCheckResponse.SERVING)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
