"""Domain errors of SRv6 provisioning, each bound to the gRPC status it is reported with."""

from __future__ import annotations

import grpc


class SRv6Error(Exception):
    """Base class: ``code`` is the gRPC status the API answers with."""

    code = grpc.StatusCode.INTERNAL


class InvalidArgument(SRv6Error):
    """A malformed SID, prefix or parameter."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(SRv6Error):
    """No such path or behaviour."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(SRv6Error):
    """A different route already holds the key."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(SRv6Error):
    """The kernel or the node lacks what the request needs (VRF support, a device)."""

    code = grpc.StatusCode.FAILED_PRECONDITION
