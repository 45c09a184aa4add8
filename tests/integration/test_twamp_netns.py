"""Probes down a SID list across network namespaces, with no custom kernel behaviour.

    fc00::a                                  fc00::c
      a ---------------- fd00:ac::/64 -------- c      the direct path (out-of-band replies)
       \\                                     /
        fd00:ab::/64 -- b (fc00::b) -- fd00:bc::/64   the path via the SID list [fc00::b]

The sender in ``a`` sends through a plain UDP socket with an IPV6_RTHDR type-4 header; ``b`` is a
waypoint only because its address is a segment (kernel SRv6 End behaviour on a local address).
Proof that a probe took the SID list: it reaches ``c`` with hop limit 254 instead of 255 (one
router crossed), ``b``'s interfaces counted it, and an in-band reply comes back through ``b``
(hop limit 254 at ``a``) while an out-of-band reply comes straight (255).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import require

pytestmark = pytest.mark.netns

SCRIPT = str(Path(sys.executable).parent / "srv6pm-stamp")


def build(net):
    a, b, c = (net.add_node(n) for n in "abc")
    net.link("a", "a-b", "b", "b-a", a_addrs=["fd00:ab::1/64"], b_addrs=["fd00:ab::2/64"])
    net.link("b", "b-c", "c", "c-b", a_addrs=["fd00:bc::2/64"], b_addrs=["fd00:bc::3/64"])
    net.link("a", "a-c", "c", "c-a", a_addrs=["fd00:ac::1/64"], b_addrs=["fd00:ac::3/64"])
    for node, addr in ((a, "fc00::a/128"), (b, "fc00::b/128"), (c, "fc00::c/128")):
        node.add_address("lo", addr)
    a.add_route("fc00::b/128", gateway="fd00:ab::2")
    a.add_route("fc00::c/128", gateway="fd00:ac::3")
    b.add_route("fc00::a/128", gateway="fd00:ab::1")
    b.add_route("fc00::c/128", gateway="fd00:bc::3")
    c.add_route("fc00::a/128", gateway="fd00:ac::1")
    c.add_route("fc00::b/128", gateway="fd00:bc::2")
    return a, b, c


def start_reflector(node, port, *extra):
    proc = node.popen(
        [SCRIPT, "reflect", "--listen", f"[fc00::c]:{port}", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert re.match(r"listening on", line), line
    return proc


def send(node, port, *extra):
    out = node.run(
        [
            SCRIPT,
            "send",
            f"[fc00::c]:{port}",
            "--source",
            "fc00::a",
            "--count",
            "5",
            "--interval",
            "0.02",
            "--timeout",
            "3",
            "--json",
            *extra,
        ],
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def b_packets(b):
    return sum(b.link_stats(i)["rx_packets"] for i in ("b-a", "b-c"))


def test_probes_follow_the_sid_list_and_replies_come_back_in_band(net):
    require(Path(SCRIPT).exists(), "srv6pm-stamp console script not installed")
    a, b, c = build(net)
    start_reflector(c, 862, "--in-band")
    start_reflector(c, 863)  # out-of-band replies

    direct = send(a, 862)
    assert direct["summary"]["received"] == 5
    assert {p["ttl_at_reflector"] for p in direct["probes"]} == {255}
    assert {p["reply_hop_limit"] for p in direct["probes"]} == {255}

    before = b_packets(b)
    via_b = send(a, 862, "--segments", "fc00::b")
    crossed_b = b_packets(b) - before
    assert via_b["summary"]["received"] == 5 and via_b["segments"] == ["fc00::b"]
    assert {p["ttl_at_reflector"] for p in via_b["probes"]} == {254}  # one router crossed
    assert {p["reply_hop_limit"] for p in via_b["probes"]} == {254}  # back in-band through b
    assert crossed_b >= 10  # 5 probes there + 5 replies back, each seen by b

    oob = send(a, 863, "--segments", "fc00::b")
    assert oob["summary"]["received"] == 5
    assert {p["ttl_at_reflector"] for p in oob["probes"]} == {254}
    assert {p["reply_hop_limit"] for p in oob["probes"]} == {255}  # straight back


def test_sid_list_through_two_waypoints_with_authentication(net, tmp_path):
    require(Path(SCRIPT).exists(), "srv6pm-stamp console script not installed")
    a, _b, c = build(net)
    key = tmp_path / "key"
    key.write_bytes(b"netns shared key")
    start_reflector(c, 862, "--in-band", "--stateful", "--auth-key-file", str(key))
    # a -> b -> c -> b -> c: the list may visit a node twice; two routers crossed on the way
    doc = send(a, 862, "--segments", "fc00::b,fc00::c,fc00::b", "--auth-key-file", str(key))
    assert doc["summary"]["received"] == 5
    assert {p["ttl_at_reflector"] for p in doc["probes"]} == {252}


MIXED = """
import asyncio, json
from srv6pm_twamp.sender import Sender, SessionConfig

async def main():
    sender = Sender(bind_host="fc00::a")
    cfg = dict(host="fc00::c", port=862, count=6, interval=0.02, timeout=3)
    via = sender.start(SessionConfig(segments=("fc00::b",), **cfg))
    direct = sender.start(SessionConfig(**cfg))
    await asyncio.gather(via.done, direct.done)
    sender.close()
    print(json.dumps({name: sorted({r.ttl_at_reflector for r in s.results}) + [len(s.results)]
                      for name, s in (("via", via), ("direct", direct))}))

asyncio.run(main())
"""


def test_one_socket_mixes_sid_list_and_plain_probes(net):
    """The routing header is set around one send only: interleaved sessions do not leak it."""
    a, _, c = build(net)
    start_reflector(c, 862)
    out = a.run([sys.executable, "-c", MIXED], check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"via": [254, 6], "direct": [255, 6]}


LOSS_QUERY = """
import asyncio, json
from srv6pm_twamp.loss_query import query_loss
a = asyncio.run(query_loss("fc00::c", 1205, seq=9, block=1, tx_counter=4242, segments=("fc00::b",),
                           source="fc00::a", timeout=2))
print(json.dumps(None if a is None else {"hop": a.hop_limit, "seq": a.response.sender_seq,
                                        "counter": a.response.sender_counter, "ttl": a.response.sender_ttl}))
"""


def test_twamp_light_loss_query_down_the_sid_list_answered_in_band(net):
    """The original SRv6-PM's loss query, sent through b; the in-band response returns through b."""
    a, _, c = build(net)
    start_reflector(c, 1205, "--twamp-light")
    out = a.run([sys.executable, "-c", LOSS_QUERY], check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"hop": 254, "seq": 9, "counter": 4242, "ttl": 254}


def test_tshark_decodes_the_probes_captured_on_the_wire(net, tmp_path):
    """Capture a real sender/reflector exchange in c and have tshark decode every field we rely on."""
    from srv6pm_twamp.timestamps import ns_from_ntp
    from tests.support import require_tool

    tshark = require_tool("tshark")
    a, _, c = build(net)
    start_reflector(c, 862)
    pcap = tmp_path / "live.pcap"
    cap = c.popen(
        [tshark, "-i", "c-a", "-w", str(pcap), "-f", "udp port 862", "-c", "10"],  # 5 probes + 5 replies
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(50):  # tshark says "Capturing on 'c-a'" once the capture is live
        if "Capturing on" in cap.stderr.readline():
            break
    else:
        pytest.fail("tshark did not start capturing")
    doc = send(a, 862)
    cap.wait(timeout=20)  # tshark exits once it has written the 10 packets
    out = subprocess.run(
        [tshark, "-r", str(pcap), "-d", "udp.port==862,twamp.test", "-T", "json", "-x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    frames = [p["_source"]["layers"] for p in json.loads(out.stdout)]
    to_refl = [f["twamp.test"] for f in frames if f["udp"]["udp.dstport"] == "862"]
    from_refl = [f["twamp.test"] for f in frames if f["udp"]["udp.srcport"] == "862"]
    probes = {p["seq"]: p for p in doc["probes"]}
    assert len(to_refl) == len(from_refl) == len(probes) == 5

    def raw_ntp(field):
        return ns_from_ntp(int(field[0], 16))

    for t in to_refl:
        p = probes[int(t["twamp.test.seq_number"])]
        assert raw_ntp(t["twamp.test.timestamp_raw"]) == p["t1_ns"]
        assert t["twamp.test.mbz1"] == str(doc["ssid"])
    for t in from_refl:
        p = probes[int(t["twamp.test.sender_seq_number"])]
        assert int(t["twamp.test.seq_number"]) == p["reflector_seq"]
        assert raw_ntp(t["twamp.test.receive_timestamp_raw"]) == p["t2_ns"]
        assert raw_ntp(t["twamp.test.timestamp_raw"]) == p["t3_ns"]
        assert raw_ntp(t["twamp.test.sender_timestamp_raw"]) == p["t1_ns"]
        assert int(t["twamp.test.sender_ttl"]) == p["ttl_at_reflector"] == 255


REPLY_SOURCES = """
import socket, sys, time
from srv6pm_twamp import sockets
from srv6pm_twamp.wire.stamp import SenderPacket
s = sockets.open_socket(socket.AF_INET6, ("::", 0))
for seq, target in enumerate(sys.argv[1:]):
    sockets.send(s, SenderPacket(seq=seq).encode(), (target, 864))
got = []
for _ in range(100):
    got += sockets.recv_batch(s)
    if len(got) == len(sys.argv) - 1:
        break
    time.sleep(0.02)
print(" ".join(sorted(d.peer[0].split("%")[0] for d in got)))
"""


def link_local(node, ifname):
    for _ in range(50):
        info = json.loads(node.run(["ip", "-6", "-j", "addr", "show", "dev", ifname]).stdout)[0]["addr_info"]
        found = [x["local"] for x in info if x.get("scope") == "link" and "local" in x]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no link-local address on {ifname}")


def test_wildcard_reflector_answers_from_the_probed_address_including_link_local(net):
    """Bound to [::], replies leave from the address the probe was sent to (not the route's
    preferred source), and link-local probes (zone given) are answered back on the link."""
    a, _, c = build(net)
    start_reflector_any(c, 864)
    ll = link_local(c, "c-a")
    out = a.run([sys.executable, "-c", REPLY_SOURCES, "fc00::c", "fd00:ac::3", f"{ll}%a-c"], check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == sorted(["fc00::c", "fd00:ac::3", ll])
    doc = json.loads(
        a.run([SCRIPT, "send", f"[{ll}%a-c]:864", "--count", "3", "--interval", "0.02", "--json"]).stdout
    )
    assert doc["summary"]["received"] == 3


def start_reflector_any(node, port):
    proc = node.popen(
        [SCRIPT, "reflect", "--listen", f"[::]:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert re.match(r"listening on", proc.stdout.readline())
    return proc


def test_return_path_tlv_sends_the_reply_along_the_requested_sid_list(net):
    """RFC 9503: an out-of-band reflector honours the sender's Return Path (SRv6 Segment List)
    and Destination Node Address TLVs."""
    a, _, c = build(net)
    start_reflector(c, 865)  # out-of-band by default
    plain = send(a, 865)
    assert {p["reply_hop_limit"] for p in plain["probes"]} == {255}
    steered = send(a, 865, "--return-segments", "fc00::b", "--destination-node", "fc00::c")
    assert steered["summary"]["received"] == 5
    assert {p["reply_hop_limit"] for p in steered["probes"]} == {254}  # came back through b
    wrong = a.run(
        [
            SCRIPT,
            "send",
            "[fc00::c]:865",
            "--count",
            "2",
            "--interval",
            "0.02",
            "--timeout",
            "0.5",
            "--destination-node",
            "fc00::b",
            "--json",
        ],
        check=False,
    )
    assert wrong.returncode == 1 and json.loads(wrong.stdout)["summary"]["lost"] == 2  # not c: dropped
