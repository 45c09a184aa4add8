"""The measurement engine: one asyncio loop (its own thread) that runs every measurement of the
node — probes, replies, block results — and the result stream.

gRPC handlers call the public methods from their threads; each runs on the loop
(:meth:`Engine._call`), so the engine's state has one owner and needs no locks. The one exception
is the colour flip, on a thread of its own (:mod:`.flipper`: it must not wait behind the loop's
backlog); the data plane it shares with the loop locks its driver. The result streams read
thread-safe queues fed from the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_common import measurement_spec
from srv6pm_common.errors import AlreadyExists, ApiError, FailedPrecondition, InvalidArgument, NotFound
from srv6pm_common.result_queue import ResultQueue
from srv6pm_twamp.reflector import Reflector, ReflectorConfig
from srv6pm_twamp.sender import ProbeResult, Sender, Session, SessionConfig
from srv6pm_twamp.timestamps import TimestampFormat

from ..counters import Direction
from .blocks import BlockClock
from .dataplane import DataPlane, normalise_config
from .flipper import ColourFlipper
from .reflector import ReflectorCounters, ReflectorMeasurement
from .sender import SenderMeasurement, Settled, default_ssid
from .state import State

log = logging.getLogger(__name__)
T = TypeVar("T")
SENDER, REFLECTOR = pb.MEASUREMENT_ROLE_SENDER, pb.MEASUREMENT_ROLE_REFLECTOR
ROLE_NAME = {SENDER: "sender", REFLECTOR: "reflector"}
SUBSCRIPTION_BACKLOG = 100_000


def clock_synchronized() -> bool:
    """Whether the kernel says the system clock is synchronised (adjtimex() != TIME_ERROR)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct timex, modes = 0: read only
        return libc.adjtimex(buf) not in (-1, 5)
    except (OSError, AttributeError):
        return False


@dataclass
class _Run:
    """One measurement in one role on this node, and what it holds."""

    status: pb.MeasurementStatus
    flows: list[tuple[tuple[str, ...], Direction]] = field(default_factory=list)
    endpoint: tuple[str, int] | None = None
    sender: SenderMeasurement | None = None
    session: Session | None = None
    sender_key: tuple[str, int] | None = None
    timer: asyncio.TimerHandle | None = None
    session_key: tuple[int, str] | None = None

    @property
    def spec(self) -> pb.MeasurementSpec:
        return self.status.spec


@dataclass(frozen=True)
class EngineStats:
    """What the node's metrics show: totals since the agent started, and what runs now."""

    driver: str  # counter driver configured ("" before Configure)
    running: dict[str, int]  # measurements running, by role
    counts: dict[str, int]  # probes_sent, probe_replies, results, results_unmeasured
    reflector: dict[str, int]  # probes that reached the reflector, by what became of them


class Engine:
    """Every measurement of this node. Thread-safe public methods; ``close()`` when done."""

    def __init__(
        self,
        state_dir: Path,
        *,
        node_name: str,
        pin_root: str | None = None,
        synchronized: bool | None = None,
    ) -> None:
        self.state = State(state_dir)
        self.node_name = node_name
        self.pin_root = pin_root
        self.synchronized = clock_synchronized() if synchronized is None else synchronized
        self.dataplane: DataPlane | None = None
        self.config: pb.NodeConfig | None = None
        self.statuses: dict[tuple[str, int], pb.MeasurementStatus] = {}
        self.runs: dict[tuple[str, int], _Run] = {}
        self.senders: dict[tuple[str, int], Sender] = {}
        self.reflector: Reflector | None = None
        self.reflector_counters: ReflectorCounters | None = None
        self.flipper = ColourFlipper(lambda: self.dataplane)
        self._unsaved: list[tuple[_Run, Settled]] = []  # settled this tick, see _flush
        self._counts: Counter[str] = Counter()  # engine loop only
        self._closed_reflectors: Counter[str] = Counter()  # stats of reflectors closed since start
        self._subs: list[ResultQueue] = []
        self._subs_lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="srv6pm-engine", daemon=True)
        self._thread.start()
        self._call(self._restore())

    # --- plumbing ----------------------------------------------------------------------------

    def _call(self, work: Coroutine[Any, Any, T] | Callable[[], T], timeout: float = 60) -> T:
        async def run() -> T:
            return await work if asyncio.iscoroutine(work) else work()  # type: ignore[operator,misc]

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def close(self) -> None:
        """Stop probing (measurements stay registered and resume at the next start)."""
        if not self.loop.is_running():
            return

        def shutdown() -> None:
            self._flush()
            for run in self.runs.values():
                if run.timer is not None:
                    run.timer.cancel()
            self.flipper.close()
            for s in self.senders.values():
                s.close()
            if self.reflector is not None:
                self.reflector.close()
            if self.dataplane is not None:
                self.dataplane.close()

        with contextlib.suppress(Exception):
            self._call(shutdown, timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.state.close()

    # --- public API (any thread) -------------------------------------------------------------

    def configure(self, config: pb.NodeConfig) -> pb.NodeConfig:
        """Apply a node configuration (see SRv6PM.Configure)."""
        return self._call(lambda: self._configure(normalise_config(config)))

    def get_config(self) -> pb.NodeConfig:
        """The configuration in force."""
        if self.config is None:
            raise FailedPrecondition("the node is not configured for measurements yet (call Configure)")
        return self.config

    def start(self, spec: pb.MeasurementSpec, role: int) -> pb.MeasurementStatus:
        """Start one side of a measurement (idempotent for an identical spec)."""
        return self._call(self._start(spec, role, restore=False))

    def stop(self, measurement_id: str, role: int) -> pb.MeasurementStatus:
        """Stop one side of a measurement."""
        return self._call(self._stop(measurement_id, role))

    def list(self) -> list[pb.MeasurementStatus]:
        """Every measurement this node knows, running or stopped."""
        return self._call(lambda: [_public(s) for s in self.statuses.values()])

    def stats(self) -> EngineStats:
        """Figures for the metrics endpoint, read on the engine's loop."""

        def read() -> EngineStats:
            running = Counter(ROLE_NAME[role] for _, role in self.runs)
            reflector = self._closed_reflectors + (self.reflector.stats if self.reflector else Counter())
            driver = pb.CounterDriver.Name(self.config.driver) if self.config is not None else ""
            return EngineStats(
                driver.removeprefix("COUNTER_DRIVER_").lower(),
                {name: running.get(name, 0) for name in ROLE_NAME.values()},
                dict(self._counts),
                dict(reflector),
            )

        return self._call(read)

    def known(self, measurement_id: str) -> bool:
        """Whether the node has (had) a measurement of that id."""
        return measurement_id in self.measurement_ids()

    def measurement_ids(self) -> list[str]:
        """Ids of every known measurement."""
        return self._call(lambda: sorted({k[0] for k in self.statuses}))

    def results(self, measurement_id: str, since_block: int = 0, limit: int = 0) -> list[pb.BlockResult]:
        """Stored results, oldest first (NOT_FOUND for an unknown measurement)."""
        if not self.known(measurement_id):
            raise NotFound(f"unknown measurement {measurement_id!r}")
        return self.state.results(measurement_id, since_block, limit)

    def subscribe(self, measurement_ids: set[str] | None) -> ResultQueue:
        """A queue of results as blocks are published (of every measurement if None)."""
        sub = ResultQueue(measurement_ids or (), SUBSCRIPTION_BACKLOG)
        with self._subs_lock:
            self._subs = [s for s in self._subs if not s.closed] + [sub]
        return sub

    # --- configuration (loop) ----------------------------------------------------------------

    def _configure(self, config: pb.NodeConfig, persist: bool = True) -> pb.NodeConfig:
        old = self.config
        if self.runs and old is not None:
            for fld in ("driver", "color_bit", "reflector_port", "sender_port"):
                if getattr(old, fld) != getattr(config, fld):
                    raise FailedPrecondition(f"cannot change {fld} while measurements run on this node")
        if (
            self.dataplane is not None
            and old is not None
            and (old.driver, old.color_bit) == (config.driver, config.color_bit)
        ):
            self.dataplane.apply_interfaces(config)
        else:
            fresh = DataPlane(
                config, self.pin_root, self.state
            )  # FAILED_PRECONDITION leaves the old one alone
            if self.dataplane is not None:
                self.dataplane.close(detach=True)
            self.dataplane = fresh
        self.config = config
        if persist:
            self.state.put_config(config)
        log.info(
            "node configured",
            extra={
                "driver": config.driver,
                "egress": list(config.egress_interfaces),
                "ingress": list(config.ingress_interfaces),
            },
        )
        return config

    async def _restore(self) -> None:
        config = self.state.config()
        if config is not None:
            try:
                self._configure(config, persist=False)
            except ApiError as exc:
                log.error("stored configuration cannot be applied", extra={"reason": str(exc)})
        for status in self.state.measurements():
            key = (status.spec.measurement_id, status.role)
            self.statuses[key] = status
            if status.state == pb.MEASUREMENT_STATE_RUNNING:
                try:
                    await self._start(status.spec, status.role, restore=True)
                except ApiError as exc:
                    status.state = pb.MEASUREMENT_STATE_FAILED
                    status.error = f"could not resume after restart: {exc}"
                    self.state.put_measurement(status)
                    log.error("measurement not resumed", extra={"measurement_id": key[0], "reason": str(exc)})

    # --- start / stop (loop) -----------------------------------------------------------------

    def _checked(self, spec: pb.MeasurementSpec) -> pb.MeasurementSpec:
        spec = measurement_spec.normalise(spec)
        for fld in ("sender_address", "reflector_address"):
            if not getattr(spec, fld):
                raise InvalidArgument(f"spec.{fld} is required (the probe endpoint on that node)")
        if spec.protocol != pb.PROBE_PROTOCOL_STAMP:
            raise FailedPrecondition("this node measures with STAMP probes only (protocol STAMP)")
        if spec.authentication.mode == pb.AUTH_MODE_HMAC_SHA256:
            raise FailedPrecondition("authenticated STAMP is not supported by the measurement engine yet")
        if not spec.ssid:
            spec.ssid = default_ssid(spec.measurement_id)
        if self.dataplane is None or self.config is None:
            raise FailedPrecondition("the node is not configured for measurements yet (call Configure)")
        period = spec.color_period.ToNanoseconds()
        for run in self.runs.values():
            other = run.spec.color_period.ToNanoseconds()
            if other != period and run.spec.measurement_id != spec.measurement_id:
                raise FailedPrecondition(
                    f"this node runs measurements with a colour period of {other / 1e9:g} s; all "
                    f"measurements of a node share one (asked for {period / 1e9:g} s)"
                )
        return spec

    async def _start(self, spec: pb.MeasurementSpec, role: int, restore: bool) -> pb.MeasurementStatus:
        spec = self._checked(spec)
        key = (spec.measurement_id, role)
        run = self.runs.get(key)
        if run is not None:
            if (
                _public_spec(run.spec) == _public_spec(spec)
                and run.spec.authentication == spec.authentication
            ):
                return _public(run.status)
            raise AlreadyExists(
                f"measurement {spec.measurement_id!r} already runs here as "
                f"{ROLE_NAME[role]} with a different spec"
            )
        dp = self.dataplane
        assert dp is not None and self.config is not None
        fwd, rev = tuple(spec.forward_segments), tuple(spec.reverse_segments)
        if role == SENDER:
            await _off_loop(dp.check_path, fwd, spec.reflector_address, "the reflector address")
            endpoint = None
            if rev:
                endpoint = (
                    spec.sender_address,
                    await _off_loop(dp.decap_table, rev[-1], "the last reverse SID"),
                )
            flows = [(fwd, Direction.EGRESS)] + ([(rev, Direction.INGRESS)] if rev else [])
        else:
            if rev:
                await _off_loop(dp.check_path, rev, spec.sender_address, "the sender address")
            endpoint = (
                spec.reflector_address,
                await _off_loop(dp.decap_table, fwd[-1], "the last forward SID"),
            )
            flows = [(fwd, Direction.INGRESS)] + ([(rev, Direction.EGRESS)] if rev else [])
            if self.reflector_counters is not None:
                other = self.reflector_counters.by_session.get((spec.ssid, spec.sender_address))
                if other is not None:
                    raise AlreadyExists(
                        f"SSID {spec.ssid} from {spec.sender_address} is already used by "
                        f"measurement {other.spec.measurement_id!r}; choose another spec.ssid"
                    )
        now = time.time_ns()
        status = pb.MeasurementStatus(spec=spec, role=role, state=pb.MEASUREMENT_STATE_RUNNING)
        old = self.statuses.get(key)
        if restore and old is not None:
            status.started_at.CopyFrom(old.started_at)
            status.last_block_number = old.last_block_number
        else:
            status.started_at.FromNanoseconds(now)
        run = _Run(status)
        try:
            for sids, d in flows:
                dp.use_flow(sids, d)
                run.flows.append((sids, d))
            if endpoint is not None:
                await _off_loop(dp.use_endpoint, *endpoint)
                run.endpoint = endpoint
            if role == SENDER:
                await self._start_sender(run, restore, now)
            else:
                await self._start_reflector(run)
        except BaseException:
            await self._release(run)
            raise
        self.runs[key] = run
        self.statuses[key] = status
        self.state.put_measurement(status)
        self.flipper.follow(BlockClock(spec.color_period.ToNanoseconds()))
        log.info(
            "measurement started",
            extra={"measurement_id": spec.measurement_id, "role": ROLE_NAME[role], "resumed": restore},
        )
        return _public(status)

    async def _start_sender(self, run: _Run, restore: bool, now: int) -> None:
        spec, cfg = run.spec, self.config
        assert cfg is not None
        mid = spec.measurement_id
        if not restore:
            self.state.forget_chains(mid)
        clock = BlockClock(spec.color_period.ToNanoseconds())
        run.sender = SenderMeasurement(
            spec,
            self.node_name,
            self.state.chains(mid),
            self.state.last_block(mid),
            self.synchronized,
            first_block=0 if restore else clock.block_of(now),
        )
        skey = (spec.sender_address, cfg.sender_port)
        sender = self.senders.get(skey)
        if sender is None:
            sender = Sender(bind_host=spec.sender_address, bind_port=cfg.sender_port, freebind=True)
            self.senders[skey] = sender
        try:
            run.session = sender.start(
                SessionConfig(
                    host=spec.reflector_address,
                    port=cfg.reflector_port,
                    ssid=spec.ssid,
                    count=None,
                    interval=None,
                    dscp=spec.probe_dscp or None,
                    keep_results=False,
                    timestamp_format=_FORMAT[spec.timestamp_format],
                    synchronized=self.synchronized,
                    timeout=min(spec.guard_time.ToNanoseconds() / 1e9, 2.0),
                ),
                on_result=lambda r, run=run: self._on_reply(run, r),
            )
        except (ValueError, OSError) as exc:
            if not sender.session_count:
                sender.close()
                del self.senders[skey]
            raise AlreadyExists(f"cannot start the probe session: {exc}") from None
        run.sender_key = skey
        self._schedule_probe(run)

    async def _start_reflector(self, run: _Run) -> None:
        spec, cfg, dp = run.spec, self.config, self.dataplane
        assert cfg is not None and dp is not None
        if self.reflector is None:
            counters = ReflectorCounters(dp)
            reflector = Reflector(ReflectorConfig(synchronized=self.synchronized), counters=counters)
            try:
                await reflector.start("::", cfg.reflector_port, freebind=True)
            except OSError as exc:
                raise FailedPrecondition(f"cannot listen on UDP port {cfg.reflector_port}: {exc}") from None
            self.reflector, self.reflector_counters = reflector, counters
        assert self.reflector_counters is not None
        clock = BlockClock(spec.color_period.ToNanoseconds())
        run.session_key = (spec.ssid, spec.sender_address)
        self.reflector_counters.by_session[run.session_key] = ReflectorMeasurement(
            spec,
            clock,
            spec.guard_time.ToNanoseconds(),
            tuple(spec.forward_segments),
            tuple(spec.reverse_segments),
        )

    async def _stop(self, measurement_id: str, role: int) -> pb.MeasurementStatus:
        key = (measurement_id, role)
        run = self.runs.pop(key, None)
        if run is None:
            raise NotFound(f"measurement {measurement_id!r} is not running here as {ROLE_NAME[role]}")
        if run.sender is not None:
            self._publish(run, run.sender.due(time.time_ns()))
            self._flush()
        await self._release(run)
        run.status.state = pb.MEASUREMENT_STATE_STOPPED
        self.state.put_measurement(run.status)
        if not self.runs:
            self.flipper.follow(None)
        log.info("measurement stopped", extra={"measurement_id": measurement_id, "role": ROLE_NAME[role]})
        return _public(run.status)

    async def _release(self, run: _Run) -> None:
        """Give back everything a run holds (safe on a half-started run)."""
        if run.timer is not None:
            run.timer.cancel()
        if run.session is not None and run.sender_key is not None:
            sender = self.senders[run.sender_key]
            sender.stop(run.session)
            if not sender.session_count:
                sender.close()
                del self.senders[run.sender_key]
        if run.session_key is not None and self.reflector_counters is not None:
            self.reflector_counters.by_session.pop(run.session_key, None)
            if not self.reflector_counters.by_session and self.reflector is not None:
                self._closed_reflectors.update(self.reflector.stats)
                self.reflector.close()
                self.reflector, self.reflector_counters = None, None
        dp = self.dataplane
        if dp is not None:
            for sids, d in run.flows:
                dp.release_flow(sids, d)
            if run.endpoint is not None:
                await _off_loop(dp.release_endpoint, *run.endpoint)
        run.flows, run.endpoint = [], None

    # --- probes and results (loop) -----------------------------------------------------------

    def _schedule_probe(self, run: _Run) -> None:
        assert run.sender is not None
        now = time.time_ns()
        run.timer = self.loop.call_later((run.sender.next_probe_ns(now) - now) / 1e9, self._probe, run)

    def _probe(self, run: _Run) -> None:
        meas, session, dp = run.sender, run.session, self.dataplane
        assert meas is not None and session is not None and dp is not None and run.sender_key is not None
        now = time.time_ns()
        try:
            try:
                snap = dp.snapshot(meas.clock, meas.clock.block_of(now) - 1, meas.guard_ns, now)
            except LookupError:
                snap = None
            tlvs, pending = meas.probe_tlvs(now, snap, dp.epoch)
            seq = self.senders[run.sender_key].probe(session, tlvs)
            self._counts["probes_sent"] += 1
            meas.sent(seq, session.outstanding.get(seq, now), pending)
            self._publish(run, meas.due(time.time_ns()))
        except Exception:
            log.exception("probe failed", extra={"measurement_id": run.spec.measurement_id})
        self._schedule_probe(run)

    def _on_reply(self, run: _Run, result: ProbeResult) -> None:
        if run.sender is None or self.runs.get((run.spec.measurement_id, SENDER)) is not run:
            return
        self._counts["probe_replies"] += 1
        run.sender.on_reply(result)
        self._publish(run, run.sender.due(time.time_ns()))

    def _publish(self, run: _Run, ready: list[Settled]) -> None:
        """Queue settled blocks; they are stored, then streamed, once per loop tick (one
        transaction for every block settled in the tick, not one per block)."""
        if not ready:
            return
        if not self._unsaved:
            self.loop.call_soon(self._flush)
        self._unsaved.extend((run, s) for s in ready)

    def _flush(self) -> None:
        batch, self._unsaved = self._unsaved, []
        if not batch:
            return
        # Stored before anyone sees them: a streamed block is one a restart will not re-measure.
        self.state.add_blocks(
            (s.result, (r.spec.measurement_id, s.chain.block % 2, s.chain) if s.chain is not None else None)
            for r, s in batch
        )
        published = [(r, s.result) for r, s in batch if s.result is not None]
        self._counts["results"] += len(published)
        self._counts["results_unmeasured"] += sum(
            r.spec.loss_enabled and not result.forward.valid for r, result in published
        )
        with self._subs_lock:
            subs = list(self._subs)
        for r, result in published:
            r.status.last_block_number = result.block_number
            for sub in subs:
                sub.offer(result)
        to_prune = {r.spec.measurement_id for r, result in published if result.block_number % 1000 == 0}
        if to_prune:
            self.state.prune(to_prune)


async def _off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking work (netlink: pyroute2's sync API refuses a running event loop) in a thread."""
    return await asyncio.to_thread(fn, *args)


_FORMAT = {pb.TIMESTAMP_FORMAT_NTP: TimestampFormat.NTP, pb.TIMESTAMP_FORMAT_PTP: TimestampFormat.PTP}


def _public_spec(spec: pb.MeasurementSpec) -> pb.MeasurementSpec:
    out = pb.MeasurementSpec()
    out.CopyFrom(spec)
    out.authentication.ClearField("key")
    return out


def _public(status: pb.MeasurementStatus) -> pb.MeasurementStatus:
    out = pb.MeasurementStatus()
    out.CopyFrom(status)
    out.spec.CopyFrom(_public_spec(status.spec))
    return out
