"""The IS-IS topology source without FRR: the agent's parser on JSON recorded from FRR 8.4's vtysh
(Debian 12), its vtysh error handling, and the controller's topology building."""

from __future__ import annotations

import stat
from pathlib import Path

import grpc
import pytest

from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm_common.errors import FailedPrecondition
from srv6pm_controller.topology import NodeError, isis_source
from srv6pm_node.frr import isis
from srv6pm_node.services.srv6_manager import isis_to_pb

# r2 of r1 — r2 — r3, level-2 point-to-point circuits (recorded, counters trimmed).
P2P_SUMMARY = '{"vrf":"default","process-id":8698,"system-id":"0000.0000.0002","up-time":"00:00:05",'
P2P_SUMMARY += '"number-areas":1,"areas":[{"area":"core","net":"49.0001.0000.0000.0002.00"}]}'
P2P_OWN_LSP = """{"areas":[{"area":{"name":"core"},"levels":[{},{"id":2,"lsp":{"id":"r2.00-00","own":"*"},
"pdu-len":117,"seq-number":"0x00000003","chksum":"0xebf6","holdtime":1193,"att-p-ol":"0/0/0",
"protocols-supported":{"0":"IPv4","1":"IPv6"},"area-addr":"49.0001","hostname":"r2",
"ext-reach":{"mt-id":"Extended","id":"0000.0000.0003.00","metric":10}}]}]}"""
P2P_INTERFACES = """{"areas":[{"area":"core","circuits":[
{"circuit":0,"interface":{"name":"eth1","state":"Up","is-passive":"active","circuit-id":"0x0","type":"p2p",
 "level":"L2","levels":[{"level":"L2","metric":10,"active-neighbors":0,"hello-interval":1}],
 "ipv6-link-locals":{"ipv6":"fe80::50d4:8dff:fe7a:d864/64"},"ipv6-prefixes":{"ipv6":"fd00:12::2/64"}}},
{"circuit":0,"interface":{"name":"eth2","state":"Up","is-passive":"active","circuit-id":"0x0","type":"p2p",
 "level":"L2","levels":[{"level":"L2","metric":20,"active-neighbors":0,"hello-interval":1}],
 "ipv6-link-locals":{"ipv6":"fe80::8095:8aff:fe8b:dfd5/64"},"ipv6-prefixes":{"ipv6":"fd00:23::2/64"}}},
{"circuit":0,"interface":{"name":"lo","state":"Up","is-passive":"passive","circuit-id":"0x0","type":"loopback",
 "level":"L2","levels":[{"level":"L2","metric":10}],"ipv6-prefixes":{"ipv6":"fc00:2::1/128"}}}]}]}"""
# r3 is not known by hostname yet (its LSP has not arrived): FRR names it by system id.
P2P_NEIGHBORS = """{"areas":[{"area":"core","circuits":[
{"circuit":0,"adj":"r1","interface":{"name":"eth1","state":"Up","adj-flaps":1,"last-ago":"5s",
 "circuit-type":"L2","speaks":"IPv6","snpa":"2020.2020.2020","area-address":{"isonet":"49.0001"},
 "ipv6-link-local":{"ipv6":"fe80::8c12:4bff:fe13:3d43"},"ipv6-global":{"ipv6":"fd00:12::1"},"adj-sid":{}},
 "level":2,"expires-in":"3s"},
{"circuit":0,"adj":"0000.0000.0003","interface":{"name":"eth2","state":"Up","adj-flaps":1,"last-ago":"5s",
 "circuit-type":"L2","speaks":"IPv6","snpa":"2020.2020.2020","area-address":{"isonet":"49.0001"},
 "ipv6-link-local":{"ipv6":"fe80::b897:3dff:fe0d:9c30"},"ipv6-global":{"ipv6":"fd00:23::3"},"adj-sid":{}},
 "level":2,"expires-in":"3s"},
{"circuit":0}]}]}"""
P2P_YANG = """{"frr-interface:lib":{"interface":[
{"name":"eth1","vrf":"default","state":{"if-index":2,"frr-isisd:isis":{"adjacencies":{"adjacency":[
 {"neighbor-sys-type":"level-2","neighbor-sysid":"0000.0000.0001","neighbor-extended-circuit-id":0,
  "neighbor-snpa":"2020.2020.2020","hold-timer":3,"neighbor-priority":0,"state":"up"}]}}}},
{"name":"eth2","vrf":"default","state":{"if-index":3,"frr-isisd:isis":{"adjacencies":{"adjacency":[
 {"neighbor-sys-type":"level-2","neighbor-sysid":"0000.0000.0003","neighbor-extended-circuit-id":0,
  "neighbor-snpa":"2020.2020.2020","hold-timer":3,"neighbor-priority":0,"state":"up"}]}}}},
{"name":"lo","vrf":"default","state":{"if-index":1,"frr-isisd:isis":{"event-counters":{}}}}]}}"""

# r1 of two level-1-2 LAN circuits to r2 (eth1 dual-stack): 8.4's neighbor JSON lists only the
# level-2 entry of each LAN adjacency; the YANG state lists both levels.
LAN_INTERFACES = """{"areas":[{"area":"core","circuits":[
{"circuit":2,"interface":{"name":"eth1","state":"Up","type":"lan","level":"L1L2","snpa":"a638.673b.9c97",
 "levels":[{"level":"L1","metric":10},{"level":"L2","metric":30}],"ip-prefix":{"ip":"10.0.12.1/24"},
 "ipv6-link-locals":{"ipv6":"fe80::a438:67ff:fe3b:9c97/64"},"ipv6-prefixes":{"ipv6":"fd00:12::1/64"}}},
{"circuit":3,"interface":{"name":"eth2","state":"Up","type":"lan","level":"L1L2","snpa":"1e2f.8d23.0f1d",
 "levels":[{"level":"L1","metric":10},{"level":"L2","metric":10}],
 "ipv6-link-locals":{"ipv6":"fe80::1c2f:8dff:fe23:f1d/64"},"ipv6-prefixes":{"ipv6":"fd00:99::1/64"}}}]}]}"""
LAN_NEIGHBORS = """{"areas":[{"area":"core","circuits":[
{"circuit":2,"adj":"r2","interface":{"name":"eth1","state":"Up","circuit-type":"L1L2","speaks":"IPv4, IPv6",
 "snpa":"1efa.9ed2.89fa","lan-id":"0000.0000.0000-00","ipv4-address":{"ipv4":"10.0.12.2"},
 "ipv6-link-local":{"ipv6":"fe80::1cfa:9eff:fed2:89fa"},"ipv6-global":{"ipv6":"fd00:12::2"}},"level":2},
{"circuit":3,"adj":"r2","interface":{"name":"eth2","state":"Up","circuit-type":"L1L2","speaks":"IPv6",
 "snpa":"4a0d.98e5.2ff6","ipv6-link-local":{"ipv6":"fe80::480d:98ff:fee5:2ff6"},
 "ipv6-global":{"ipv6":"fd00:99::2"}},"level":2},
{"circuit":0}]}]}"""
LAN_YANG = """{"frr-interface:lib":{"interface":[
{"name":"eth1","state":{"frr-isisd:isis":{"adjacencies":{"adjacency":[
 {"neighbor-sys-type":"level-1","neighbor-sysid":"0000.0000.0002","neighbor-snpa":"1efa.9ed2.89fa","state":"up"},
 {"neighbor-sys-type":"level-2","neighbor-sysid":"0000.0000.0002","neighbor-snpa":"1efa.9ed2.89fa","state":"up"}
]}}}},
{"name":"eth2","state":{"frr-isisd:isis":{"adjacencies":{"adjacency":[
 {"neighbor-sys-type":"level-1-2","neighbor-sysid":"0000.0000.0002","neighbor-snpa":"4a0d.98e5.2ff6",
  "state":"init"}]}}}}]}}"""


def parse(*texts: str) -> isis.IsisView:
    return isis.parse(*(isis.loads(t) for t in texts))


def test_point_to_point_view_from_frr_84_json():
    view = parse(P2P_SUMMARY, P2P_OWN_LSP, P2P_INTERFACES, P2P_NEIGHBORS, P2P_YANG)
    assert (view.system_id, view.hostname, view.loopback_addresses) == (
        "0000.0000.0002",
        "r2",
        ("fc00:2::1/128",),
    )
    assert view.adjacencies == (
        isis.Adjacency(
            interface="eth1",
            level=2,
            state="up",
            neighbor_system_id="0000.0000.0001",
            neighbor_hostname="r1",
            neighbor_addresses=("fd00:12::1", "fe80::8c12:4bff:fe13:3d43"),
            local_addresses=("fd00:12::2/64", "fe80::50d4:8dff:fe7a:d864/64"),
            metric=10,
            area="core",
        ),
        isis.Adjacency(
            interface="eth2",
            level=2,
            state="up",
            neighbor_system_id="0000.0000.0003",
            neighbor_hostname="",  # FRR printed the system id: no hostname known yet
            neighbor_addresses=("fd00:23::3", "fe80::b897:3dff:fe0d:9c30"),
            local_addresses=("fd00:23::2/64", "fe80::8095:8aff:fe8b:dfd5/64"),
            metric=20,
            area="core",
        ),
    )
    msg = isis_to_pb(view)
    assert msg.adjacencies[0].state == mpb.ISIS_ADJACENCY_STATE_UP and msg.adjacencies[1].metric == 20


def test_lan_adjacencies_come_once_per_level_from_the_yang_state():
    view = parse(P2P_SUMMARY, "{}", LAN_INTERFACES, LAN_NEIGHBORS, LAN_YANG)
    assert view.hostname == "" and view.loopback_addresses == ()
    got = [(a.interface, a.level, a.state, a.neighbor_hostname, a.metric) for a in view.adjacencies]
    assert got == [
        ("eth1", 1, "up", "r2", 10),
        ("eth1", 2, "up", "r2", 30),
        ("eth2", 1, "initializing", "r2", 10),
        ("eth2", 2, "initializing", "r2", 10),
    ]
    assert view.adjacencies[0].neighbor_addresses == ("10.0.12.2", "fd00:12::2", "fe80::1cfa:9eff:fed2:89fa")
    assert view.adjacencies[0].local_addresses[0] == "10.0.12.1/24"


def test_without_yang_state_the_neighbor_json_is_used():
    view = parse(P2P_SUMMARY, "{}", P2P_INTERFACES, P2P_NEIGHBORS, "{}")
    assert [(a.interface, a.neighbor_system_id, a.neighbor_hostname) for a in view.adjacencies] == [
        ("eth1", "", "r1"),
        ("eth2", "0000.0000.0003", ""),
    ]


def test_isis_not_configured_is_a_failed_precondition():
    with pytest.raises(FailedPrecondition, match="IS-IS is not configured"):
        parse("{\n}\n", "{}", "{}", "{}", "{}")


def test_repeated_json_keys_are_all_kept():
    obj = isis.loads('{"ipv6-global": {"ipv6": "fd00::1", "ipv6": "fd00::2"}}')
    assert isis._addresses(obj, "ipv6-global", "ipv6") == ["fd00::1", "fd00::2"]


def fake_vtysh(tmp_path: Path, body: str) -> str:
    path = tmp_path / "vtysh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_vtysh_failures_are_failed_preconditions_that_say_why(tmp_path: Path):
    missing = isis.Vtysh(tmp_path, binary=str(tmp_path / "nope"))
    with pytest.raises(FailedPrecondition, match=r"vtysh \(.*\) is not installed"):
        missing.json("show isis summary json")
    down = isis.Vtysh(
        tmp_path, binary=fake_vtysh(tmp_path, "echo 'Exiting: failed to connect to any daemons.' >&2; exit 1")
    )
    with pytest.raises(
        FailedPrecondition, match=f"does not answer on the vty sockets in {tmp_path}: vtysh: Exiting"
    ):
        down.json("show isis summary json")
    slow = isis.Vtysh(tmp_path, binary=fake_vtysh(tmp_path, "exec sleep 5"), timeout=0.2)
    with pytest.raises(FailedPrecondition, match=r"did not answer 'show isis summary json' within 0\.2s"):
        slow.json("show isis summary json")
    text = isis.Vtysh(tmp_path, binary=fake_vtysh(tmp_path, "echo '% Unknown command: show isis x json'"))
    with pytest.raises(FailedPrecondition, match=r"not answer .* with JSON: % Unknown command"):
        text.json("show isis x json")
    args = isis.Vtysh(tmp_path, binary=fake_vtysh(tmp_path, 'printf \'{"argv": "%s"}\' "$*"'))
    assert args.json("show isis summary json") == {
        "argv": f"--vty_socket {tmp_path} -d isisd -c show isis summary json"
    }


# --- controller --------------------------------------------------------------------------------


def adj(
    interface: str,
    neighbor: str,
    *,
    level: int = 2,
    metric: int = 10,
    hostname: str = "",
    up: bool = True,
    local: tuple[str, ...] = (),
    remote: tuple[str, ...] = (),
) -> mpb.IsisAdjacency:
    return mpb.IsisAdjacency(
        interface=interface,
        level=level,
        state=mpb.ISIS_ADJACENCY_STATE_UP if up else mpb.ISIS_ADJACENCY_STATE_INITIALIZING,
        neighbor_system_id=neighbor,
        neighbor_hostname=hostname,
        metric=metric,
        local_addresses=list(local),
        neighbor_addresses=list(remote),
    )


def view(
    sysid: str, hostname: str, *adjs: mpb.IsisAdjacency, loopback: str = ""
) -> mpb.GetIsisTopologyResponse:
    return mpb.GetIsisTopologyResponse(
        system_id=sysid,
        hostname=hostname,
        adjacencies=list(adjs),
        loopback_addresses=[loopback] if loopback else [],
    )


S1, S2, S3, S9 = "0000.0000.0001", "0000.0000.0002", "0000.0000.0003", "0000.0000.0009"


def test_topology_maps_system_ids_to_registered_names():
    nodes = {
        "a": (
            npb.Node(name="a"),
            view(S1, "r1", adj("eth1", S2, hostname="r2"), loopback="fc00:1::1/128"),
            [],
        ),
        "b": (
            npb.Node(name="b", router_id="10.0.0.2"),
            view(
                S2,
                "r2",
                adj("eth1", S1, hostname="r1", metric=5),
                adj("eth1", S1, level=1, metric=3),  # both levels: the lowest metric
                adj("eth2", S9, hostname="edge9", metric=30),  # no agent
                adj("eth3", S3, up=False),  # not up: no link
            ),
            ["fc00:2::e/128"],
        ),
    }
    topo = isis_source.build(nodes)
    assert [(n.name, n.router_id, list(n.sids)) for n in topo.nodes] == [
        ("a", "fc00:1::1", []),
        ("b", "10.0.0.2", ["fc00:2::e/128"]),
        ("edge9", "", []),
    ]
    assert [(e.source, e.source_interface, e.target, e.target_interface, e.metric) for e in topo.links] == [
        ("a", "eth1", "b", "eth1", 10),
        ("b", "eth1", "a", "eth1", 3),
        ("b", "eth2", "edge9", "", 30),
    ]


def test_parallel_links_are_paired_by_their_addresses():
    a = view(
        S1,
        "r1",
        adj("eth1", S2, local=("fd00:12::1/64",), remote=("fd00:12::2",)),
        adj("eth2", S2, local=("fd00:99::1/64",), remote=("fd00:99::2",)),
    )
    b = view(
        S2,
        "r2",
        adj("p1", S1, local=("fd00:99::2/64",), remote=("fd00:99::1",)),
        adj("p0", S1, local=("fd00:12::2/64",), remote=("fd00:12::1",)),
    )
    topo = isis_source.build({"r1": (npb.Node(), a, []), "r2": (npb.Node(), b, [])})
    assert {(e.source, e.source_interface, e.target_interface) for e in topo.links} == {
        ("r1", "eth1", "p0"),
        ("r1", "eth2", "p1"),
        ("r2", "p0", "eth1"),
        ("r2", "p1", "eth2"),
    }


def test_unknown_system_id_falls_back_to_the_hostname_and_names_never_collide():
    a = view(S1, "r1", adj("eth1", "", hostname="r2"), adj("eth2", S9, hostname="r1"))
    b = view(S2, "r2")
    topo = isis_source.build({"r1": (npb.Node(), a, []), "r2": (npb.Node(), b, [])})
    assert [n.name for n in topo.nodes] == ["r1", "r2", S9]  # "r1" is taken: S9 keeps its system id
    assert [(e.source, e.target) for e in topo.links] == [("r1", S9), ("r1", "r2")]


def test_two_nodes_with_one_system_id_are_refused():
    with pytest.raises(
        isis_source.InconsistentTopology, match="nodes a and b report the same IS-IS system id"
    ):
        isis_source.build({"a": (npb.Node(), view(S1, "x"), []), "b": (npb.Node(), view(S1, "y"), [])})


class _Refusing(grpc.RpcError, grpc.Call):
    """What a stub raises for an agent answering FAILED_PRECONDITION."""

    def code(self):
        return grpc.StatusCode.FAILED_PRECONDITION

    def details(self):
        return "FRR's vtysh (vtysh) is not installed: cannot read IS-IS from FRR"

    def initial_metadata(self):
        return ()

    def trailing_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, callback):
        return False


def test_extract_names_the_node_that_refused(monkeypatch):
    class Stub:
        def __init__(self, channel):
            pass

        def GetIsisTopology(self, request, timeout):
            raise _Refusing()

    monkeypatch.setattr(isis_source.mpb_grpc, "SRv6ManagerStub", Stub)
    with pytest.raises(NodeError) as err:
        isis_source.extract([npb.Node(name="r7")], lambda node: None)
    assert err.value.node == "r7" and err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert str(err.value) == "node r7: FRR's vtysh (vtysh) is not installed: cannot read IS-IS from FRR"
