"""The controller's result collection stopping under load: every result it stored was handed on to
the sinks (Kafka), and nothing is stored or handed on once ``close`` returned — else a stored block
would never reach Kafka (the node is only asked for blocks after the last one stored)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from srv6pm.controller.v1 import measurement_service_pb2 as mpb
from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pb_grpc
from srv6pm_controller.measurements.collector import ResultCollector
from srv6pm_controller.services.nodes import NodeRegistry
from srv6pm_controller.southbound.channels import NodeChannels
from srv6pm_controller.store import Store

IDS = [f"m{i}" for i in range(50)]


class FastNode(pb_grpc.SRv6PMServicer):
    """Streams block after block of every measurement asked for, as fast as the reader takes them."""

    def StreamResults(self, request: pb.StreamResultsRequest, context) -> Iterator[pb.StreamResultsResponse]:
        block = max(request.since_block, 1000) + 1
        while context.is_active():
            batch = [pb.BlockResult(measurement_id=m, block_number=block) for m in request.measurement_ids]
            yield pb.StreamResultsResponse(results=batch)
            block += 1


def test_closing_under_load_hands_on_every_stored_result_and_then_nothing(tmp_path: Path):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_SRv6PMServicer_to_server(FastNode(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    store = Store(tmp_path)
    for node in ("n1", "n2"):  # two sender nodes: two streams, two threads
        store.put_node(
            npb.Node(name=node, address=f"127.0.0.1:{port}", credentials=npb.NodeCredentials(insecure=True))
        )
    for i, mid in enumerate(IDS):
        store.put_measurement(
            mpb.Measurement(
                sender_node=f"n{i % 2 + 1}",
                spec=pb.MeasurementSpec(measurement_id=mid),
                state=pb.MEASUREMENT_STATE_RUNNING,
            )
        )
    handed: list[tuple[str, int]] = []
    lock = threading.Lock()
    closing, stalled = threading.Event(), threading.Event()

    def slow_sink(r: pb.BlockResult) -> None:
        # Like Kafka under load: a send may block (kafka-python: up to max_block_ms, 5 s). The
        # other stream goes on meanwhile.
        if closing.is_set() and not stalled.is_set() and int(r.measurement_id[1:]) % 2 == 0:
            stalled.set()
            time.sleep(6)
        with lock:
            handed.append((r.measurement_id, r.block_number))

    channels = NodeChannels()
    collector = ResultCollector(NodeRegistry(store, channels), store, slow_sink)
    closer = threading.Thread(target=collector.close, daemon=True)
    try:
        collector.refresh()
        deadline = time.monotonic() + 20
        while len(handed) < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(handed) >= 2000
        closing.set()
        assert stalled.wait(5)  # a send is stuck as the controller stops
        closer.start()
        closer.join(20)
        assert not closer.is_alive(), "close() hangs"
        with lock:
            at_close = len(handed)
        time.sleep(0.5)
        assert len(handed) == at_close  # nothing after close returned
        stored = {(m, r.block_number) for m in IDS for r in store.results_since(m, 0)}
        assert stored == set(handed) and len(handed) == len(set(handed))
        assert collector.stats().collected == len(handed)
    finally:
        if not closer.is_alive():  # else close() is stuck: a second one would be too
            collector.close()
        channels.close()
        store.close()
        server.stop(0)
