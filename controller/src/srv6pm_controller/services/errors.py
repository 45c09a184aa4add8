"""Errors of the controller's services, each bound to the gRPC status it is reported with."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

log = logging.getLogger(__name__)


class ControllerError(Exception):
    """Base class: ``code`` is the gRPC status the API answers with."""

    code = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(ControllerError):
    """Malformed request."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ControllerError):
    """Unknown node, tunnel or measurement."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ControllerError):
    """A different object already has the name."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ControllerError):
    """The request conflicts with the current state (e.g. a node still in use)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


F = TypeVar("F", bound=Callable[..., Any])


def rpc(method: F) -> F:
    """Answer ControllerErrors with their status; log every refusal."""

    @functools.wraps(method)
    def wrapper(self: object, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except ControllerError as exc:
            log.info("refused", extra={"rpc": method.__name__, "code": exc.code.name, "reason": str(exc)})
            context.abort(exc.code, str(exc))

    return wrapper  # type: ignore[return-value]
