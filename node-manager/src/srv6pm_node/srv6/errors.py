"""Errors of SRv6 provisioning: the API's shared error classes (each bound to a gRPC status)."""

from __future__ import annotations

from srv6pm_common.errors import AlreadyExists, ApiError, FailedPrecondition, InvalidArgument, NotFound

SRv6Error = ApiError  # raised for kernel refusals without a more precise class

__all__ = ["AlreadyExists", "FailedPrecondition", "InvalidArgument", "NotFound", "SRv6Error"]
