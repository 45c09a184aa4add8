"""Build hook: compile every .proto under srv6pm/ into Python, type stubs and gRPC stubs."""

from __future__ import annotations

import pathlib
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def generate(proto_root: pathlib.Path, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Run protoc (from grpcio-tools) over all protos; return the generated files."""
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(proto_root)) for p in (proto_root / "srv6pm").rglob("*.proto"))
    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {protos}")
    # Regular packages (not namespace ones) so importlib.resources and tools find them.
    for d in [out_dir / "srv6pm", *(p for p in (out_dir / "srv6pm").rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    (out_dir / "srv6pm" / "py.typed").touch()
    return sorted(p for p in out_dir.rglob("*") if p.is_file())


class ProtoBuildHook(BuildHookInterface):
    """Generates the srv6pm package into a temporary directory and includes it in the wheel."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = pathlib.Path(self.root)
        self._tmp = tempfile.TemporaryDirectory(prefix="srv6pm-api-")
        out = pathlib.Path(self._tmp.name)
        generate(root, out)
        build_data["force_include"][str(out / "srv6pm")] = "srv6pm"
        # The protos themselves ship too: reflection and other languages can use them.
        for proto in (root / "srv6pm").rglob("*.proto"):
            build_data["force_include"][str(proto)] = str(proto.relative_to(root))

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        self._tmp.cleanup()
