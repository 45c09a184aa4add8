"""Errors of the controller's services: the API's shared error classes and their decorator."""

from __future__ import annotations

from srv6pm_common.errors import AlreadyExists, ApiError, FailedPrecondition, InvalidArgument, NotFound, rpc

ControllerError = ApiError  # a failure with the status a node answered, or INTERNAL

__all__ = ["AlreadyExists", "ControllerError", "FailedPrecondition", "InvalidArgument", "NotFound", "rpc"]
