"""API errors shared by the daemons: each class is bound to the gRPC status it is answered with,
and :func:`rpc` turns them into that status on the way out of a servicer method."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

log = logging.getLogger(__name__)


class ApiError(Exception):
    """Base class: ``code`` is the gRPC status the API answers with (INTERNAL unless said)."""

    code = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(ApiError):
    """A malformed request: SID, prefix, name or parameter."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ApiError):
    """The named object does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ApiError):
    """A different object already holds the key."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ApiError):
    """The system lacks what the request needs, or the request conflicts with its state."""

    code = grpc.StatusCode.FAILED_PRECONDITION


F = TypeVar("F", bound=Callable[..., Any])


def rpc(method: F) -> F:
    """Answer ApiErrors with their status; log refusals, and every successful change
    (methods not named Get…/List…)."""
    changes = not method.__name__.startswith(("Get", "List"))

    @functools.wraps(method)
    def wrapper(self: object, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            response = method(self, request, context)
        except ApiError as exc:
            log.info("refused", extra={"rpc": method.__name__, "code": exc.code.name, "reason": str(exc)})
            context.abort(exc.code, str(exc))
        if changes:
            log.info("applied", extra={"rpc": method.__name__})
        return response

    return wrapper  # type: ignore[return-value]
