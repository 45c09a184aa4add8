"""Network topology: extracted from the nodes, stored embedded (default) or in ArangoDB."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc


class NodeError(Exception):
    """A node's agent refused or failed: which node, the status it answered and why."""

    def __init__(self, node: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"node {node}: {details}")
        self.node, self.code, self.details = node, code, details


@contextlib.contextmanager
def asking(node: str) -> Iterator[None]:
    """Turn a failed call to ``node``'s agent into a :class:`NodeError` naming it."""
    try:
        yield
    except grpc.RpcError as exc:
        if isinstance(exc, grpc.Call):
            raise NodeError(node, exc.code(), exc.details() or exc.code().name) from None
        raise NodeError(node, grpc.StatusCode.UNKNOWN, str(exc)) from None
