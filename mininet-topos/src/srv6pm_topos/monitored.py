"""A monitored network: h1 — r1 — c — r2 — h2 (:mod:`.three_routers`) with srv6pm-node on every
router, SRv6 provisioned through SRv6Manager, SRv6PM configured on the edges, helpers to start
measurements, traffic and exact drop injectors. The demo and the engine's tests run on it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm.node.v1 import srv6_pm_pb2_grpc as pb_grpc

from . import injector, three_routers
from .agents import Agent, start_agent
from .lab import Lab, wait_until
from .three_routers import Policy, ThreeRouters
from .traffic import UdpStream

NS = 1_000_000_000


@dataclass
class MonitoredNetwork:
    """The topology, its agents and helpers to drive measurements."""

    net: Lab
    topo: ThreeRouters
    workdir: Path
    driver: int
    pin_root: Path
    agents: dict[str, Agent] = field(default_factory=dict)

    @classmethod
    def edges(
        cls, net: Lab, workdir: Path, driver: int, pin_root: Path, stack: contextlib.ExitStack
    ) -> MonitoredNetwork:
        """The topology with agents on r1 and r2 only (SRv6 left to the caller, e.g. a controller),
        SRv6PM configured; ``stack`` stops the agents."""
        lab = cls(net, three_routers.build(net), workdir, driver, pin_root)
        stack.callback(lab.stop_agents)
        for name in ("r1", "r2"):
            lab.start_agent(name)
            lab.configure(name)
        return lab

    def start_agent(self, name: str) -> Agent:
        node = getattr(self.topo, name)
        self.agents[name] = start_agent(
            node,
            self.workdir,
            extra_args=(
                *("--bpf-pin-root", str(self.pin_root), "--clock-synchronized", "yes"),
                *("--metrics-listen", "127.0.0.1:0"),  # in the node's namespace: its own loopback
            ),
        )
        return self.agents[name]

    def restart(self, name: str, down_s: float = 0.0) -> Agent:
        """Stop an agent (SIGTERM), wait ``down_s`` and start it again on the same state directory."""
        self.agents[name].stop()
        time.sleep(down_s)
        return self.start_agent(name)

    def stop_agents(self) -> None:
        """Stop every agent (those still running)."""
        for a in self.agents.values():
            with contextlib.suppress(Exception):
                a.stop()

    def pm(self, name: str) -> pb_grpc.SRv6PMStub:
        return pb_grpc.SRv6PMStub(self.agents[name].channel)

    def configure(self, name: str) -> pb.NodeConfig:
        ifname = self.topo.edge_core_if
        cfg = pb.NodeConfig(driver=self.driver, egress_interfaces=[ifname], ingress_interfaces=[ifname])
        return self.pm(name).Configure(pb.ConfigureRequest(config=cfg), timeout=30).config

    @staticmethod
    def spec(policy: Policy, mid: str, period_s: float = 1.0, **kw: object) -> pb.MeasurementSpec:
        s = pb.MeasurementSpec(
            measurement_id=mid,
            forward_segments=policy.forward,
            reverse_segments=policy.reverse,
            sender_address=policy.r1_probe,
            reflector_address=policy.r2_probe,
            loss_enabled=True,
            delay_enabled=True,
            **kw,
        )
        s.color_period.FromNanoseconds(int(period_s * NS))
        return s

    def start(self, spec: pb.MeasurementSpec) -> None:
        """Reflector on r2 first, then the sender on r1 (as the controller does)."""
        self.pm("r2").StartReflector(pb.StartReflectorRequest(spec=spec), timeout=30)
        self.pm("r1").StartSender(pb.StartSenderRequest(spec=spec), timeout=30)

    def results(self, mid: str) -> list[pb.BlockResult]:
        return list(self.pm("r1").GetResults(pb.GetResultsRequest(measurement_id=mid), timeout=10).results)

    def wait_blocks(self, mid: str, count: int, timeout: float) -> list[pb.BlockResult]:
        """Wait until ``count`` results with loss figures exist; return all results."""

        def enough() -> list[pb.BlockResult] | None:
            rs = self.results(mid)
            return rs if sum(r.forward.valid for r in rs) >= count else None

        return wait_until(enough, timeout=timeout, interval=0.5)  # type: ignore[return-value]

    def traffic(self, policy: Policy, pps: int = 1000) -> tuple[UdpStream, UdpStream]:
        """Steady traffic both ways over a policy's prefixes."""
        fwd = UdpStream(self.topo.h1, policy.h2_addr, pps, src=policy.h1_addr).start()
        rev = UdpStream(self.topo.h2, policy.h1_addr, pps, src=policy.h2_addr).start()
        return fwd, rev

    def lossy_traffic(
        self,
        stack: contextlib.ExitStack,
        policy: Policy,
        every_fwd: int,
        every_rev: int,
        period_s: float = 1.0,
    ) -> list[injector.DropBook]:
        """Traffic both ways over ``policy`` (1,000 packets/s) and drop injectors on the core (every
        ``every_fwd``-th forward, ``every_rev``-th reverse packet) whose drops are booked per block
        (forward book first); ``stack`` stops it all."""
        period_ns = int(period_s * NS)
        books = [injector.DropBook(i, period_ns) for i in self.injectors(policy, every_fwd, every_rev)]
        stack.enter_context(injector.Sampler(books, period_ns))
        for stream in self.traffic(policy, pps=1000):
            stack.callback(stream.stop)
        return books

    def injectors(self, policy: Policy, every_fwd: int, every_rev: int) -> tuple[injector.Injector, ...]:
        """Drop injectors on the core, one per direction of a policy (by the SID it is headed to)."""
        c = self.topo.c
        return (
            injector.add(
                c,
                self.topo.c_from_r1,
                every_fwd,
                match=f"ip6 daddr {policy.forward[0]}",
                name=f"inj{policy.name}f",
            ),
            injector.add(
                c,
                self.topo.c_from_r2,
                every_rev,
                match=f"ip6 daddr {policy.reverse[0]}",
                name=f"inj{policy.name}r",
            ),
        )


@contextlib.contextmanager
def monitored_network(net: Lab, driver: int, pin_root: Path, workdir: Path) -> Iterator[MonitoredNetwork]:
    """Build the topology, start the agents, provision SRv6 and configure r1 and r2."""
    topo = three_routers.build(net)
    lab = MonitoredNetwork(net, topo, workdir, driver, pin_root)
    for name in ("r1", "c", "r2"):
        lab.start_agent(name)
    three_routers.provision(*(lab.agents[n].channel for n in ("r1", "c", "r2")))
    for name in ("r1", "r2"):
        lab.configure(name)
    try:
        yield lab
    finally:
        lab.stop_agents()
