"""FRR (zebra + isisd) inside lab nodes, for IS-IS tests.

Each router gets its own daemons, started in its namespace through ``node.popen`` (so the Lab ends
them by pid), with every file they use — configuration, pid files, the vty sockets vtysh talks to
and the zebra API socket — in a run directory of its own. Nothing touches a system-wide FRR
(/etc/frr, /var/run/frr) and nothing is scraped: the helpers read FRR through ``vtysh
--vty_socket DIR -c '… json'``.

The daemons drop to the ``frr`` user (``-u frr -g frr``) when that user exists, as FRR's own
service does, so their run directory lives in /tmp (pytest's tmp_path is not reachable by another
user) and is removed by :meth:`FrrRouter.close`.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .lab import Node, wait_until

FRR_LIBEXEC = Path("/usr/lib/frr")
ZEBRA = FRR_LIBEXEC / "zebra"
ISISD = FRR_LIBEXEC / "isisd"
DAEMON_TIMEOUT = 10.0  # seconds a daemon gets to open its vty socket


def missing() -> str | None:
    """Why FRR cannot run here (for a skip/fail message), or None when zebra, isisd and vtysh exist."""
    for path in (ZEBRA, ISISD):
        if not os.access(path, os.X_OK):
            return f"FRR is not installed ({path} missing; apt-get install frr)"
    if shutil.which("vtysh") is None:
        return "FRR's vtysh is not installed (apt-get install frr)"
    return None


def _frr_user() -> tuple[str, str]:
    try:
        pwd.getpwnam("frr")
        grp.getgrnam("frr")
    except KeyError:
        return "root", "root"
    return "frr", "frr"


def isis_config(
    hostname: str,
    net: str,
    interfaces: Iterable[str],
    *,
    area_tag: str = "core",
    is_type: str = "level-2-only",
    metrics: dict[str, int] | None = None,
    hello_interval: int = 1,
    hello_multiplier: int = 3,
    point_to_point: bool = True,
) -> str:
    """isisd's configuration: one instance ``area_tag`` with NET ``net``; IPv6 IS-IS on ``lo``
    (passive) and on each of ``interfaces``, point-to-point circuits unless ``point_to_point`` is
    false (broadcast, with a DIS), with short hello timers
    (adjacencies form within seconds, and a dead one is noticed after hello-interval * hello-multiplier)."""
    lines = [
        f"hostname {hostname}",
        "log stdout informational",
        "!",
        f"router isis {area_tag}",
        # Timers first: setting is-type schedules an LSP regeneration at the interval in force.
        " lsp-gen-interval 1",
        " spf-interval 1",
        f" net {net}",
        f" is-type {is_type}",
        "!",
        "interface lo",
        f" ipv6 router isis {area_tag}",
        " isis passive",
        "!",
    ]
    for ifname in interfaces:
        lines += [
            f"interface {ifname}",
            f" ipv6 router isis {area_tag}",
            f" isis hello-interval {hello_interval}",
            f" isis hello-multiplier {hello_multiplier}",
        ]
        if point_to_point:
            lines.append(" isis network point-to-point")
        if metrics and ifname in metrics:
            lines.append(f" isis metric {metrics[ifname]}")
        lines.append("!")
    return "\n".join(lines) + "\n"


@dataclass(eq=False)
class FrrRouter:
    """zebra + isisd running in one lab node, with their own run directory."""

    node: Node
    run_dir: Path  # the vty socket directory: pass it to vtysh --vty_socket / srv6pm-node --frr-vty-socket
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    owns_run_dir: bool = False

    def vtysh(self, *commands: str, daemon: str | None = None, timeout: float = 10) -> str:
        """Run vtysh commands against this router's daemons and return what they printed."""
        argv = ["vtysh", "--vty_socket", str(self.run_dir)]
        if daemon:
            argv += ["-d", daemon]
        for command in commands:
            argv += ["-c", command]
        out = self.node.run(argv, timeout=timeout, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"{self.node.name}: vtysh {commands} failed: {out.stdout}{out.stderr}")
        return out.stdout

    def json(self, command: str, daemon: str | None = "isisd") -> Any:
        """The parsed output of one ``… json`` command."""
        return json.loads(self.vtysh(command, daemon=daemon))

    def up_neighbors(self) -> list[tuple[str, str]]:
        """(interface, neighbour) of every adjacency FRR reports Up (``show isis neighbor json``)."""
        found = []
        for area in self.json("show isis neighbor json").get("areas", []):
            for circuit in area.get("circuits", []):
                if circuit.get("state") == "Up":
                    found.append((circuit.get("interface", ""), circuit.get("adj", "")))
        return sorted(found)

    def log(self) -> str:
        """What the daemons have logged (for failure messages)."""
        parts = []
        for name in self.procs:
            path = self.run_dir / f"{name}.log"
            with contextlib.suppress(OSError):
                parts.append(f"--- {self.node.name} {name}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """End the daemons (isisd first) by pid."""
        for name in ("isisd", "zebra"):
            proc = self.procs.get(name)
            if proc is not None:
                self.node.lab.stop(proc)

    def close(self) -> None:
        """Stop the daemons and remove the run directory if this helper created it."""
        self.stop()
        if self.owns_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def _start_daemon(
    router: FrrRouter, name: str, binary: Path, config: str, user: str, group: str
) -> subprocess.Popen:
    run = router.run_dir
    conf = run / f"{name}.conf"
    conf.write_text(config)
    shutil.chown(conf, user, group)
    argv = [
        str(binary),
        "-u",
        user,
        "-g",
        group,
        "-f",
        str(conf),
        "-i",
        str(run / f"{name}.pid"),
        "--vty_socket",
        str(run),
        "-z",
        str(run / "zserv.api"),
        "-P",
        "0",  # no TCP vty: vtysh reaches the daemon through its socket only
    ]
    sock = run / f"{name}.vty"
    sock.unlink(missing_ok=True)  # a socket left by an earlier run would look ready at once
    with open(run / f"{name}.log", "wb") as log:
        proc = router.node.popen(argv, stdout=log, stderr=subprocess.STDOUT)
    router.procs[name] = proc

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{router.node.name}: {name} exited with {proc.returncode}\n{router.log()}")
        return sock.exists()

    wait_until(ready, timeout=DAEMON_TIMEOUT)
    return proc


def start_isis(
    node: Node,
    net: str,
    interfaces: Sequence[str],
    *,
    run_dir: Path | None = None,
    hostname: str | None = None,
    **config: Any,
) -> FrrRouter:
    """Start zebra, then isisd (once zebra answers), in ``node`` with :func:`isis_config`.

    ``run_dir`` defaults to a fresh directory in /tmp that :meth:`FrrRouter.close` removes.
    Extra keyword arguments go to :func:`isis_config`.
    """
    user, group = _frr_user()
    owns = run_dir is None
    if run_dir is None:
        run_dir = Path(tempfile.mkdtemp(prefix=f"{node.netns}-frr-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(run_dir, 0o755)
    shutil.chown(run_dir, user, group)
    router = FrrRouter(node, run_dir, owns_run_dir=owns)
    name = hostname or node.name
    try:
        _start_daemon(router, "zebra", ZEBRA, f"hostname {name}\nlog stdout informational\n", user, group)
        _start_daemon(router, "isisd", ISISD, isis_config(name, net, interfaces, **config), user, group)
    except BaseException:
        router.close()
        raise
    return router


def _is_system_id(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 3 and all(len(p) == 4 for p in parts)


def _done(view: list[tuple[str, str]] | str, count: int, hostnames: bool) -> bool:
    if not isinstance(view, list) or len(view) < count:
        return False
    return not hostnames or not any(_is_system_id(name) for _, name in view)


def wait_for_adjacencies(
    expected: dict[FrrRouter, int], timeout: float = 60.0, hostnames: bool = True
) -> float:
    """Poll FRR until each router has (at least) its expected number of Up adjacencies — and, with
    ``hostnames``, knows every neighbour's hostname (its LSP has arrived; until then FRR names the
    neighbour by system id). Return the seconds it took; raise TimeoutError with every router's
    view and the daemons' logs."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        seen: dict[FrrRouter, list[tuple[str, str]] | str] = {}
        for router in expected:
            try:
                seen[router] = router.up_neighbors()
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                seen[router] = f"error: {exc}"
        if all(_done(seen[r], n, hostnames) for r, n in expected.items()):
            return time.monotonic() - start
        if time.monotonic() > deadline:
            views = "; ".join(f"{r.node.name}: {seen[r]} (want {n})" for r, n in expected.items())
            logs = "\n".join(r.log() for r in expected)
            raise TimeoutError(f"IS-IS adjacencies not up within {timeout}s: {views}\n{logs}")
        time.sleep(0.25)
