"""Prerequisite checks shared by every test level.

Prerequisites (root, a kernel feature, a tool) go through :func:`require`: outside CI a missing
one skips the test with the reason; under CI (CI=true) it fails the test, so CI never goes green
by skipping.
"""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(condition: bool, reason: str) -> None:
    """Skip (or, under CI, fail) the calling test unless ``condition`` holds."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI: {reason}")
    pytest.skip(reason)


def require_root() -> None:
    """Namespace tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)."""
    require(os.geteuid() == 0, "needs root to create network namespaces")


def require_tool(name: str) -> str:
    """Return the path of a command-line tool, or skip/fail if it is not installed."""
    path = shutil.which(name)
    require(path is not None, f"{name} is not installed")
    assert path is not None
    return path
