"""The router's IS-IS view, read from FRR through vtysh's JSON output (never its text).

vtysh is FRR's command line (there is no library), so it runs as a subprocess with a timeout,
against the daemons' vty sockets in ``socket_dir`` (``vtysh --vty_socket DIR -d isisd -c …``).
Every command used answers JSON in FRR 8.4 (Debian 12's):

* ``show isis summary json`` — the router's system id;
* ``show isis database detail SYSTEM-ID json`` — its own LSP: the hostname it advertises;
* ``show isis interface detail json`` — its circuits: area, type, metric per level, addresses;
* ``show yang operational-data /frr-interface:lib isisd`` — the adjacencies, per interface: the
  neighbour's system id, SNPA, level(s) and state (FRR's YANG model, the complete list: 8.4's
  ``show isis neighbor json`` names the neighbour by hostname once known and drops a LAN
  adjacency's level-1 entry);
* ``show isis neighbor detail json`` — the neighbour's hostname and addresses on the link,
  matched to the YANG adjacency by interface and SNPA.

FRR 8.4's JSON writers give every item of a list the same key (two global IPv6 addresses are both
``"ipv6"``); json-c keeps one of them, and :func:`loads` keeps all of them if a version prints both.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srv6pm_common.errors import FailedPrecondition

DEFAULT_SOCKET_DIR = "/var/run/frr"
DEFAULT_TIMEOUT = 5.0
_SYSTEM_ID = re.compile(r"^[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}$")
# FRR's words (YANG: up/init/down/failed; show isis: Up/Initializing/Down) -> the API's states
_STATES = {
    "up": "up",
    "init": "initializing",
    "initializing": "initializing",
    "down": "down",
    "failed": "down",
}
_YANG_LEVELS = {"level-1": (1,), "level-2": (2,), "level-1-2": (1, 2)}


@dataclass(frozen=True)
class Adjacency:
    """One adjacency at one level, as FRR reports it."""

    interface: str
    level: int
    state: str  # "up", "initializing", "down", or "" when FRR says something else
    neighbor_system_id: str
    neighbor_hostname: str
    neighbor_addresses: tuple[str, ...]
    local_addresses: tuple[str, ...]
    metric: int
    area: str


@dataclass(frozen=True)
class IsisView:
    """The router's own identity and its adjacencies."""

    system_id: str
    hostname: str
    loopback_addresses: tuple[str, ...]
    adjacencies: tuple[Adjacency, ...]


# --- JSON -------------------------------------------------------------------------------------


class _Repeated(list):
    """Every value of a key a JSON object repeats (FRR names list items with one key)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key not in out:
            out[key] = value
        elif isinstance(out[key], _Repeated):
            out[key].append(value)
        else:
            out[key] = _Repeated([out[key], value])
    return out


def loads(text: str) -> Any:
    """Parse vtysh JSON, keeping every value of a repeated key."""
    return json.loads(text, object_pairs_hook=_pairs)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _values(obj: Any, key: str) -> list[Any]:
    """The value(s) of ``key`` in ``obj``: none, one, or every one of a repeated key."""
    if not isinstance(obj, dict) or key not in obj:
        return []
    value = obj[key]
    return list(value) if isinstance(value, _Repeated) else [value]


def _addresses(obj: Any, container: str, key: str) -> list[str]:
    """Addresses listed as ``{container: {key: addr, key: addr…}}``."""
    found = []
    for inner in _values(obj, container):
        for value in _values(inner, key):
            if isinstance(value, str) and value:
                found.append(value)
    return found


# --- vtysh ------------------------------------------------------------------------------------


class Vtysh:
    """Runs ``vtysh -c '… json'`` against the isisd whose vty socket is in ``socket_dir``."""

    def __init__(
        self,
        socket_dir: str | Path = DEFAULT_SOCKET_DIR,
        binary: str = "vtysh",
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.socket_dir = str(socket_dir)
        self.binary = binary
        self.timeout = timeout

    def json(self, command: str) -> Any:
        """The parsed output of one JSON command; FailedPrecondition when FRR cannot answer."""
        argv = [self.binary, "--vty_socket", self.socket_dir, "-d", "isisd", "-c", command]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except FileNotFoundError:
            raise FailedPrecondition(
                f"FRR's vtysh ({self.binary}) is not installed: cannot read IS-IS from FRR"
            ) from None
        except subprocess.TimeoutExpired:
            raise FailedPrecondition(
                f"FRR's isisd did not answer {command!r} within {self.timeout:g}s "
                f"(vty sockets in {self.socket_dir})"
            ) from None
        if out.returncode != 0:
            said = " ".join((out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").split())
            raise FailedPrecondition(
                f"FRR's isisd does not answer on the vty sockets in {self.socket_dir}: vtysh: {said}"
            )
        try:
            return loads(out.stdout)
        except ValueError:
            first = out.stdout.strip().splitlines()[:1]
            raise FailedPrecondition(
                f"FRR did not answer {command!r} with JSON: {first[0] if first else '(nothing)'}"
            ) from None


# --- parsing (pure) ---------------------------------------------------------------------------


def _level_number(value: Any) -> int:
    """1 or 2 from FRR's 1 / 2 / "L1" / "L2" / "level-1"; 0 if unknown."""
    text = str(value).lower().removeprefix("level-").removeprefix("l")
    return int(text) if text in ("1", "2") else 0


def _circuits(interfaces_json: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(area, interface object) of every circuit in ``show isis interface detail json``."""
    for area in _list(_obj(interfaces_json).get("areas")):
        for circuit in _list(_obj(area).get("circuits")):
            iface = _obj(circuit).get("interface")
            if isinstance(iface, dict) and iface.get("name"):
                yield str(_obj(area).get("area", "")), iface


def _circuit_addresses(iface: dict[str, Any]) -> list[str]:
    return [
        *_addresses(iface, "ip-prefix", "ip"),
        *_addresses(iface, "ipv6-prefixes", "ipv6"),
        *_addresses(iface, "ipv6-link-locals", "ipv6"),
    ]


def _neighbor_details(neighbors_json: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """(interface, neighbour SNPA) -> entry of ``show isis neighbor detail json`` (an entry is
    ``{"adj": name, "interface": {...}, "level": n}``; FRR also lists circuits without adjacency
    as ``{"circuit": 0}``: those are skipped)."""
    found = {}
    for area in _list(_obj(neighbors_json).get("areas")):
        for entry in _list(_obj(area).get("circuits")):
            if isinstance(entry, dict) and entry.get("adj"):
                detail = entry.get("interface")
                if not isinstance(detail, dict):  # the non-detail form
                    detail = {"name": detail, "state": entry.get("state"), "snpa": entry.get("snpa")}
                found[(str(detail.get("name", "")), str(detail.get("snpa", "")))] = {
                    **entry,
                    "interface": detail,
                }
    return found


def _yang_adjacencies(yang_json: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(interface, adjacency) of the frr-isisd YANG state of every interface."""
    for iface in _list(_obj(_obj(yang_json).get("frr-interface:lib")).get("interface")):
        isis = _obj(_obj(_obj(iface).get("state")).get("frr-isisd:isis"))
        for adj in _list(_obj(isis.get("adjacencies")).get("adjacency")):
            if isinstance(adj, dict):
                yield str(iface.get("name", "")), adj


def _own_hostname(lsp_json: Any) -> str:
    """The hostname in the router's own LSP (``"own": "*"``) of ``show isis database detail``."""
    for area in _list(_obj(lsp_json).get("areas")):
        for level in _list(_obj(area).get("levels")):
            level = _obj(level)
            if str(_obj(level.get("lsp")).get("own", "")).strip() == "*" and level.get("hostname"):
                return str(level["hostname"])
    return ""


def parse(summary: Any, own_lsp: Any, interfaces: Any, neighbors: Any, yang: Any) -> IsisView:
    """Combine the five commands' JSON (see the module docstring) into the router's view."""
    system_id = str(_obj(summary).get("system-id", ""))
    if not system_id:
        raise FailedPrecondition("IS-IS is not configured in FRR (show isis summary json has no system-id)")
    circuits: dict[str, tuple[str, dict[str, Any]]] = {}
    loopbacks: list[str] = []
    for area, iface in _circuits(interfaces):
        circuits[str(iface["name"])] = (area, iface)
        if iface.get("type") == "loopback":
            loopbacks += [a for a in _circuit_addresses(iface) if not ipaddress.ip_interface(a).is_link_local]
    details = _neighbor_details(neighbors)

    def adjacency(ifname: str, level: int, state: str, sysid: str, detail: dict[str, Any]) -> Adjacency:
        name = str(detail.get("adj", ""))
        iface = _obj(detail.get("interface"))
        area, circuit = circuits.get(ifname, ("", {}))
        metric = 0
        for lv in _list(circuit.get("levels")):
            if _level_number(_obj(lv).get("level")) == level:
                metric = int(_obj(lv).get("metric", 0) or 0)
        return Adjacency(
            interface=ifname,
            level=level,
            state=_STATES.get(state.lower(), ""),
            neighbor_system_id=sysid or (name if _SYSTEM_ID.match(name) else ""),
            neighbor_hostname="" if _SYSTEM_ID.match(name) else name,
            neighbor_addresses=tuple(
                [
                    *_addresses(iface, "ipv4-address", "ipv4"),
                    *_addresses(iface, "ipv6-global", "ipv6"),
                    *_addresses(iface, "ipv6-link-local", "ipv6"),
                ]
            ),
            local_addresses=tuple(_circuit_addresses(circuit)),
            metric=metric,
            area=area,
        )

    adjacencies = []
    described = set()
    for ifname, adj in _yang_adjacencies(yang):
        key = (ifname, str(adj.get("neighbor-snpa", "")))
        detail = details.get(key, {})
        described.add(key)
        for level in _YANG_LEVELS.get(str(adj.get("neighbor-sys-type", "")), (0,)):
            adjacencies.append(
                adjacency(
                    ifname, level, str(adj.get("state", "")), str(adj.get("neighbor-sysid", "")), detail
                )
            )
    for (ifname, snpa), detail in details.items():
        if (ifname, snpa) in described:
            continue
        # Not in the YANG state (an FRR without it): as show isis neighbor says.
        state = str(_obj(detail.get("interface")).get("state", ""))
        adjacencies.append(adjacency(ifname, _level_number(detail.get("level", "")), state, "", detail))
    adjacencies.sort(key=lambda a: (a.interface, a.neighbor_system_id, a.level))
    return IsisView(system_id, _own_hostname(own_lsp), tuple(loopbacks), tuple(adjacencies))


def read(vtysh: Vtysh) -> IsisView:
    """Ask FRR now (five vtysh calls) and return the router's IS-IS view."""
    summary = vtysh.json("show isis summary json")
    system_id = str(_obj(summary).get("system-id", ""))
    if not system_id:
        return parse(summary, {}, {}, {}, {})  # raises: IS-IS not configured
    return parse(
        summary,
        vtysh.json(f"show isis database detail {system_id} json"),
        vtysh.json("show isis interface detail json"),
        vtysh.json("show isis neighbor detail json"),
        vtysh.json("show yang operational-data /frr-interface:lib isisd"),
    )


__all__ = ["DEFAULT_SOCKET_DIR", "Adjacency", "IsisView", "Vtysh", "loads", "parse", "read"]
