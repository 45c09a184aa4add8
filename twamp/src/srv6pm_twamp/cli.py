"""``srv6pm-stamp``: a standalone STAMP reflector and sender, like ``twping`` for STAMP.

    srv6pm-stamp reflect --listen HOST:PORT [--stateful] [--auth-key-file F] [--in-band]
    srv6pm-stamp send HOST:PORT [--count N] [--interval S] [--segments SID,SID,...] [--padding B]
                     [--dscp D] [--auth-key-file F] [--json]
                     [--return-segments SID,...] [--destination-node ADDR] [--source ADDR]

``send`` prints a line per probe and a summary (sent, received, lost, RTT min/avg/max/p99,
jitter); ``--json`` prints one JSON document instead. Exit status 0 when at least one probe was
answered, 1 when none was, 2 on a usage error. The key file holds the shared HMAC key; a trailing
newline is not part of the key.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from srv6pm_twamp.reflector import Reflector, ReflectorConfig
from srv6pm_twamp.sender import ProbeResult, Sender, SessionConfig, SessionReport
from srv6pm_twamp.sockets import parse_host_port
from srv6pm_twamp.timestamps import TimestampFormat
from srv6pm_twamp.wire.sr_tlv import DestinationNodeAddress, ReturnPath, Srv6SegmentList
from srv6pm_twamp.wire.stamp import STAMP_PORT
from srv6pm_twamp.wire.tlv import Tlv


def _key(path: str | None) -> bytes | None:
    if path is None:
        return None
    key = Path(path).read_bytes().rstrip(b"\r\n")
    if not key:
        raise SystemExit(f"srv6pm-stamp: key file {path} is empty")
    return key


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    p = argparse.ArgumentParser(
        prog="srv6pm-stamp", description="STAMP (RFC 8762/8972/9503) reflector and sender"
    )
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("reflect", help="answer STAMP test packets until interrupted")
    r.add_argument("--listen", default=f"[::]:{STAMP_PORT}", help="HOST:PORT to listen on ([::]:862)")
    r.add_argument("--stateful", action="store_true", help="number replies per session (RFC 8762 stateful)")
    r.add_argument("--auth-key-file", help="authenticated mode with the HMAC key in this file")
    r.add_argument("--in-band", action="store_true", help="reply back along the reversed SID list")
    r.add_argument("--synchronized", action="store_true", help="declare the clock synchronised (S bit)")
    r.add_argument("--ptp", action="store_true", help="PTPv2 timestamps instead of NTP")
    r.add_argument("--twamp-light", action="store_true", help="answer TWAMP-Light loss queries instead")

    s = sub.add_parser("send", help="send STAMP probes and report delay and loss")
    s.add_argument("target", help="HOST:PORT of the reflector ([::1]:862, 10.0.0.1:862, fc00::1)")
    s.add_argument("--count", type=int, default=5, help="probes to send (default 5)")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between probes (default 1)")
    s.add_argument("--segments", default="", help="SIDs to visit before the target, comma separated")
    s.add_argument(
        "--padding",
        type=int,
        default=0,
        help="octets added to each probe (an Extra Padding TLV, header included)",
    )
    s.add_argument("--dscp", type=int, help="DSCP of the probes (0-63)")
    s.add_argument("--ssid", type=int, help="STAMP Session-Sender Identifier")
    s.add_argument("--auth-key-file", help="authenticated mode with the HMAC key in this file")
    s.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for late replies")
    s.add_argument("--source", help="local address to send from (and receive replies on)")
    s.add_argument(
        "--return-segments", default="", help="ask for replies along this SID list (RFC 9503 Return Path TLV)"
    )
    s.add_argument("--destination-node", help="RFC 9503 Destination Node Address TLV: who must reflect")
    s.add_argument("--synchronized", action="store_true", help="declare the clock synchronised (S bit)")
    s.add_argument("--json", action="store_true", help="print one JSON document")
    return p


async def _reflect(args: argparse.Namespace) -> int:
    host, port = parse_host_port(args.listen, STAMP_PORT)
    cfg = ReflectorConfig(
        stateful=args.stateful,
        key=_key(args.auth_key_file),
        reply_path="in-band" if args.in_band else "out-of-band",
        synchronized=args.synchronized,
        timestamp_format=TimestampFormat.PTP if args.ptp else TimestampFormat.NTP,
        protocol="twamp-light" if args.twamp_light else "stamp",
    )
    refl = Reflector(cfg)
    bound = await refl.start(host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"listening on [{bound[0]}]:{bound[1]}", flush=True)
    try:
        await stop.wait()
    finally:
        refl.close()
        print(json.dumps({"reflector_stats": dict(refl.stats)}), file=sys.stderr, flush=True)
    return 0


def _probe_line(r: ProbeResult, synced: bool) -> str:
    line = f"seq={r.seq} rtt={_ms(r.rtt_ns)} ms ttl={r.ttl_at_reflector} reflector_seq={r.reflector_seq}"
    ow = r.one_way_ns(synced)
    if ow is not None:
        line += f" fwd={_ms(ow[0])} ms bwd={_ms(ow[1])} ms"
    return line + (" (duplicate)" if r.duplicate else "")


def _probe_json(r: ProbeResult, synced: bool) -> dict[str, object]:
    ow = r.one_way_ns(synced)
    return {
        "seq": r.seq,
        "reflector_seq": r.reflector_seq,
        "t1_ns": r.t1,
        "t1_kernel_ns": r.t1_kernel,
        "t2_ns": r.t2,
        "t3_ns": r.t3,
        "t4_ns": r.t4,
        "rtt_ns": r.rtt_ns,
        "forward_ns": ow[0] if ow else None,
        "backward_ns": ow[1] if ow else None,
        "ttl_at_reflector": r.ttl_at_reflector,
        "reply_hop_limit": r.reply_hop_limit,
        "kernel_timestamp": r.kernel_timestamp,
        "duplicate": r.duplicate,
    }


def _summary_text(target: str, rep: SessionReport) -> str:
    pct = 100.0 * rep.lost / rep.sent if rep.sent else 0.0
    rtt = rep.rtt_ns
    lines = [
        f"--- {target} STAMP statistics (SSID {rep.ssid}) ---",
        f"{rep.sent} sent, {rep.received} received, {rep.lost} lost ({pct:.1f}%), "
        f"{rep.duplicates} duplicates, {rep.reordered} reordered",
        f"rtt min/avg/max/p99 = {_ms(rtt.min)}/{_ms(rtt.avg)}/{_ms(rtt.max)}/{_ms(rtt.p99)} ms, "
        f"jitter {_ms(rep.jitter_ns)} ms",
    ]
    if rep.forward_lost is not None:
        lines.append(f"lost forward {rep.forward_lost}, backward {rep.backward_lost}")
    return "\n".join(lines)


async def _send(args: argparse.Namespace) -> int:
    host, port = parse_host_port(args.target, STAMP_PORT)
    if args.dscp is not None and not 0 <= args.dscp < 64:
        print("srv6pm-stamp: --dscp must be 0-63", file=sys.stderr)
        return 2
    segments = tuple(s.strip() for s in args.segments.split(",") if s.strip())
    extra: list[Tlv] = []
    if args.destination_node:
        extra.append(DestinationNodeAddress(ipaddress.ip_address(args.destination_node)).to_tlv())
    back = [ipaddress.IPv6Address(s.strip()) for s in args.return_segments.split(",") if s.strip()]
    if back:
        extra.append(ReturnPath((Srv6SegmentList(tuple(back)),)).to_tlv())
    cfg = SessionConfig(
        host=host,
        port=port,
        ssid=args.ssid,
        count=args.count,
        interval=args.interval,
        padding=args.padding,
        dscp=args.dscp,
        segments=segments,
        key=_key(args.auth_key_file),
        timeout=args.timeout,
        synchronized=args.synchronized,
        extra_tlvs=tuple(extra),
    )
    sender = Sender(bind_host=args.source)
    on_result = None
    if not args.json:

        def on_result(r: ProbeResult) -> None:
            print(_probe_line(r, cfg.synchronized), flush=True)

    try:
        session = sender.start(cfg, on_result)
        assert session.done is not None
        report = await session.done
    finally:
        sender.close()
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if args.json:
        doc = {
            "target": target,
            "ssid": report.ssid,
            "segments": list(segments),
            "authenticated": cfg.key is not None,
            "probes": [_probe_json(r, cfg.synchronized) for r in session.results],
            "summary": report.as_dict(),
        }
        print(json.dumps(doc, indent=2))
    else:
        print(_summary_text(target, report))
    return 0 if report.received else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``srv6pm-stamp`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "reflect":
            return asyncio.run(_reflect(args))
        return asyncio.run(_send(args))
    except (OSError, ValueError) as err:
        print(f"srv6pm-stamp: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130


if __name__ == "__main__":  # pragma: no cover
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
