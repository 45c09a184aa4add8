"""Start srv6pm-node inside a lab node and talk to it.

Agents listen on a unix socket: its path works from the root namespace too, so a test or the demo
can drive agents in many namespaces without routing into them.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .lab import Lab, Node, wait_until


def executable(name: str) -> str:
    """A console script (srv6pm-node, srv6pm-controller, …) installed next to the running interpreter."""
    return str(Path(sys.executable).with_name(name))


def agent_executable() -> str:
    """The srv6pm-node script installed next to the running interpreter."""
    return executable("srv6pm-node")


@dataclass
class Agent:
    """A running srv6pm-node: its process, its address and a channel to it."""

    node: Node
    proc: subprocess.Popen
    target: str
    channel: grpc.Channel
    log_path: Path

    def health(self, service: str = "") -> int:
        """The health status (health_pb2.HealthCheckResponse.ServingStatus) of ``service``."""
        stub = health_pb2_grpc.HealthStub(self.channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status

    def log(self) -> str:
        """Everything the agent has logged so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM the agent and wait; return its exit code."""
        self.channel.close()
        return self.node.lab.stop(self.proc)


def start_agent(
    node: Node,
    workdir: Path | None = None,
    security_args: tuple[str, ...] = ("--insecure",),
    credentials: grpc.ChannelCredentials | None = None,
    server_name: str = "",
    extra_args: Sequence[str] = (),
) -> Agent:
    """Start srv6pm-node in ``node`` on a unix socket and wait until it is SERVING.

    ``security_args`` are the agent's credential flags; ``credentials`` (and the expected
    ``server_name`` of its certificate) are what the returned channel uses to reach it. The
    agent keeps its state in ``workdir/<node>-state`` (start it again with the same workdir to
    resume) and names its results after the node.
    """
    workdir = workdir or Path(tempfile.mkdtemp(prefix=f"{node.netns}-"))
    sock = workdir / f"{node.name}.sock"
    log_path = workdir / f"{node.name}.log"
    target = f"unix:{sock}"
    with open(log_path, "wb") as log:
        proc = node.popen(
            [
                agent_executable(),
                "--listen",
                target,
                *security_args,
                "--state-dir",
                str(workdir / f"{node.name}-state"),
                "--node-name",
                node.name,
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if credentials is None:
        channel = grpc.insecure_channel(target)
    else:
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        channel = grpc.secure_channel(target, credentials, options=options)
    agent = Agent(node, proc, target, channel, log_path)

    def serving() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"srv6pm-node exited with {proc.returncode}: {agent.log()}")
        return agent.health() == health_pb2.HealthCheckResponse.SERVING

    wait_until(serving, timeout=20)
    return agent


@dataclass
class Controller:
    """A running srv6pm-controller (in the root namespace) and a channel to it."""

    proc: subprocess.Popen
    target: str
    channel: grpc.Channel
    log_path: Path
    state_dir: Path

    def stop(self, lab: Lab) -> int:
        """SIGTERM the controller and wait; return its exit code."""
        self.channel.close()
        return lab.stop(self.proc)


def start_controller(
    lab: Lab, workdir: Path, name: str = "controller", extra_args: Sequence[str] = ()
) -> Controller:
    """Start srv6pm-controller on a unix socket with its state in ``workdir`` (and ``extra_args``,
    e.g. ``--kafka-bootstrap``); wait until SERVING."""
    sock, log_path, state = workdir / f"{name}.sock", workdir / f"{name}.log", workdir / f"{name}-state"
    target = f"unix:{sock}"
    argv = [executable("srv6pm-controller"), "--listen", target, "--insecure", "--state-dir", str(state)]
    with open(log_path, "ab") as log:
        proc = lab.popen_host(
            [*argv, *extra_args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    channel = grpc.insecure_channel(target)

    def serving() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"srv6pm-controller exited with {proc.returncode}: {log_path.read_text()}")
        stub = health_pb2_grpc.HealthStub(channel)
        return (
            stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status
            == health_pb2.HealthCheckResponse.SERVING
        )

    wait_until(serving, timeout=20)
    return Controller(proc, target, channel, log_path, state)
