"""The generated API in .venv matches the .proto sources, and the contract has the shape the
issues promise (service names, streaming RPC, repeated SID lists)."""

from __future__ import annotations

import importlib.util
import pathlib

import srv6pm
from srv6pm.controller.v1 import (
    measurement_service_pb2,
    node_service_pb2,
    topology_service_pb2,
    tunnel_service_pb2,
)
from srv6pm.node.v1 import srv6_manager_pb2, srv6_pm_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "proto" / "hatch_build.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader
    spec.loader.exec_module(module)
    return module


def test_installed_generated_code_is_not_stale(tmp_path):
    """Regenerate from proto/ and compare with what is installed: a .proto edited without
    re-running the set-up step fails here, so stale stubs cannot go unnoticed."""
    generated = _load_generator().generate(ROOT / "proto", tmp_path)
    installed = pathlib.Path(srv6pm.__file__).parent
    fresh = {p.relative_to(tmp_path / "srv6pm") for p in generated if p.suffix in (".py", ".pyi")}
    have = {p.relative_to(installed) for p in installed.rglob("*.py*") if p.suffix in (".py", ".pyi")}
    assert fresh == have
    for rel in fresh:
        assert (tmp_path / "srv6pm" / rel).read_bytes() == (installed / rel).read_bytes(), rel


def test_node_services_and_methods():
    svc = srv6_manager_pb2.DESCRIPTOR.services_by_name["SRv6Manager"]
    assert svc.full_name == "srv6pm.node.v1.SRv6Manager"
    assert {m.name for m in svc.methods} == {
        f"{verb}{noun}" for verb in ("Create", "Get", "Update", "Delete") for noun in ("Path", "Behavior")
    } | {"ListPaths", "ListBehaviors", "ListInterfaces", "GetIsisTopology"}
    pm = srv6_pm_pb2.DESCRIPTOR.services_by_name["SRv6PM"]
    assert pm.full_name == "srv6pm.node.v1.SRv6PM"
    assert pm.methods_by_name["StreamResults"].server_streaming
    assert not pm.methods_by_name["GetResults"].server_streaming


def test_sid_lists_are_repeated_strings_never_joined():
    spec = srv6_pm_pb2.MeasurementSpec.DESCRIPTOR
    for name in ("forward_segments", "reverse_segments"):
        assert spec.fields_by_name[name].is_repeated
    assert srv6_manager_pb2.Path.DESCRIPTOR.fields_by_name["segments"].is_repeated
    assert srv6_manager_pb2.Behavior.DESCRIPTOR.fields_by_name["segments"].is_repeated


def test_block_result_carries_both_directions_delay_and_probe_counts():
    fields = set(srv6_pm_pb2.BlockResult.DESCRIPTOR.fields_by_name)
    assert {
        "block_number",
        "color",
        "start_time",
        "end_time",
        "forward",
        "reverse",
        "two_way_delay",
        "one_way_delay_forward",
        "one_way_delay_backward",
        "probes",
        "merged_blocks",
    } <= fields
    assert {"tx_packets", "rx_packets", "lost_packets", "loss_ratio"} <= set(
        srv6_pm_pb2.DirectionResult.DESCRIPTOR.fields_by_name
    )
    assert "jitter_ns" in srv6_pm_pb2.DelayStats.DESCRIPTOR.fields_by_name


def test_controller_services():
    names = {
        m.DESCRIPTOR.services_by_name[n].full_name
        for m, n in [
            (node_service_pb2, "NodeService"),
            (tunnel_service_pb2, "TunnelService"),
            (measurement_service_pb2, "MeasurementService"),
            (topology_service_pb2, "TopologyService"),
        ]
    }
    assert names == {
        f"srv6pm.controller.v1.{n}"
        for n in ("NodeService", "TunnelService", "MeasurementService", "TopologyService")
    }
    ms = measurement_service_pb2.DESCRIPTOR.services_by_name["MeasurementService"]
    assert ms.methods_by_name["StreamResults"].server_streaming
