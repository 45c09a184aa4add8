"""``srv6pm``: the command line for people and scripts.

Human tables by default, ``--json`` for scripts; errors are one line on stderr and exit 1.
The controller address comes from ``--controller`` or ``SRV6PM_CONTROLLER``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from srv6pm.controller.v1 import node_service_pb2 as npb
from srv6pm.controller.v1 import topology_service_pb2 as topb
from srv6pm.node.v1 import srv6_manager_pb2 as mpb
from srv6pm.node.v1 import srv6_pm_pb2 as pmpb

from ..client import ENV_ADDRESS, Client, ClientError, TunnelEnd

_HEALTH = {
    npb.NODE_HEALTH_SERVING: "serving",
    npb.NODE_HEALTH_NOT_SERVING: "not-serving",
    npb.NODE_HEALTH_UNREACHABLE: "unreachable",
    npb.NODE_HEALTH_UNSPECIFIED: "?",
}
_MODES = {
    "encap": mpb.ENCAP_MODE_ENCAP,
    "inline": mpb.ENCAP_MODE_INLINE,
    "encap.red": mpb.ENCAP_MODE_ENCAP_RED,
    "l2encap": mpb.ENCAP_MODE_L2ENCAP,
}


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A plain aligned text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _as_json(messages: Any) -> str:
    if isinstance(messages, list):
        return json.dumps([MessageToDict(m, preserving_proto_field_name=True) for m in messages], indent=2)
    return json.dumps(MessageToDict(messages, preserving_proto_field_name=True), indent=2)


def _split(value: str) -> list[str]:
    return [s.strip() for s in value.split(",") if s.strip()]


def cmd_nodes_list(c: Client, args: argparse.Namespace) -> str:
    nodes = c.nodes()
    if args.json:
        return _as_json(nodes)
    return table(
        [
            [n.name, n.address, _HEALTH[n.health], "tls" if n.credentials.ca_certificate else "plaintext"]
            for n in nodes
        ],
        ["name", "address", "health", "transport"],
    )


def cmd_nodes_add(c: Client, args: argparse.Namespace) -> str:
    token = Path(args.node_token_file).read_text().strip() if args.node_token_file else None
    node = c.register_node(
        args.name,
        args.address,
        insecure=not args.node_ca,
        ca=args.node_ca,
        cert=args.node_cert,
        key=args.node_key,
        token=token,
        router_id=args.router_id or "",
    )
    return _as_json(node) if args.json else f"node {node.name} registered ({_HEALTH[node.health]})"


def cmd_nodes_remove(c: Client, args: argparse.Namespace) -> str:
    c.remove_node(args.name)
    return json.dumps({"removed": args.name}) if args.json else f"node {args.name} removed"


def _tunnel_row(t: Any) -> list[str]:
    return [
        t.name,
        f"{t.left.node} {t.left.prefix}",
        f"{t.right.node} {t.right.prefix}",
        ",".join(t.forward_segments),
        ",".join(t.reverse_segments),
    ]


def cmd_tunnel_create(c: Client, args: argparse.Namespace) -> str:
    left = TunnelEnd(
        node=args.left_node, prefix=args.left_prefix, decap_sid=args.left_sid, device=args.left_dev
    )
    right = TunnelEnd(
        node=args.right_node, prefix=args.right_prefix, decap_sid=args.right_sid, device=args.right_dev
    )
    t = c.create_tunnel(
        args.name, left, right, _split(args.forward), _split(args.reverse), _MODES[args.encap_mode]
    )
    return (
        _as_json(t)
        if args.json
        else f"tunnel {t.name} created\n"
        + table([_tunnel_row(t)], ["name", "left", "right", "forward", "reverse"])
    )


def cmd_tunnel_list(c: Client, args: argparse.Namespace) -> str:
    tunnels = c.tunnels()
    if args.json:
        return _as_json(tunnels)
    return table([_tunnel_row(t) for t in tunnels], ["name", "left", "right", "forward", "reverse"])


def cmd_tunnel_delete(c: Client, args: argparse.Namespace) -> str:
    c.delete_tunnel(args.name)
    return json.dumps({"deleted": args.name}) if args.json else f"tunnel {args.name} deleted"


_TOPOLOGY_SOURCES = {"isis": topb.TOPOLOGY_SOURCE_ISIS, "netlink": topb.TOPOLOGY_SOURCE_NETLINK}


def cmd_topology_show(c: Client, args: argparse.Namespace) -> str:
    extract = args.extract or args.source is not None
    source = _TOPOLOGY_SOURCES.get(args.source, topb.TOPOLOGY_SOURCE_UNSPECIFIED)
    topo = c.extract_topology(source) if extract else c.topology()
    if args.json:
        return _as_json(topo)
    nodes = table(
        [[n.name, n.router_id or "-", ",".join(n.sids) or "-"] for n in topo.nodes],
        ["node", "router id", "sids"],
    )
    links = table(
        [
            [f"{e.source}:{e.source_interface}", f"{e.target}:{e.target_interface}", str(e.metric)]
            for e in topo.links
        ],
        ["from", "to", "metric"],
    )
    return f"{nodes}\n\n{links}"


_PROTOCOLS = {"stamp": pmpb.PROBE_PROTOCOL_STAMP, "twamp-light": pmpb.PROBE_PROTOCOL_TWAMP_LIGHT_LM}
_STATES = {
    pmpb.MEASUREMENT_STATE_RUNNING: "running",
    pmpb.MEASUREMENT_STATE_STOPPED: "stopped",
    pmpb.MEASUREMENT_STATE_FAILED: "failed",
    pmpb.MEASUREMENT_STATE_UNSPECIFIED: "?",
}
RESULT_HEADERS = [
    "measurement",
    "block",
    "col",
    "fwd tx",
    "fwd rx",
    "fwd lost",
    "fwd loss%",
    "rev tx",
    "rev rx",
    "rev lost",
    "rtt avg ms",
    "jitter ms",
]


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def result_row(r: Any) -> list[str]:
    """One block result as table cells."""
    f, b, d = r.forward, r.reverse, r.two_way_delay
    fwd = (
        [str(f.tx_packets), str(f.rx_packets), str(f.lost_packets), f"{100 * f.loss_ratio:.3f}"]
        if f.valid
        else ["-"] * 4
    )
    rev = [str(b.tx_packets), str(b.rx_packets), str(b.lost_packets)] if b.valid else ["-"] * 3
    delay = [_ms(d.avg_ns), _ms(d.jitter_ns)] if d.valid else ["-", "-"]
    block = str(r.block_number) + (f" (+{r.merged_blocks - 1})" if r.merged_blocks > 1 else "")
    return [r.measurement_id, block, str(r.color), *fwd, *rev, *delay]


def cmd_measure_create(c: Client, args: argparse.Namespace) -> str:
    m = c.create_measurement(
        args.id,
        args.sender,
        args.reflector,
        tunnel=args.tunnel or "",
        forward=_split(args.forward or ""),
        reverse=_split(args.reverse or ""),
        sender_address=args.sender_address or "",
        reflector_address=args.reflector_address or "",
        period_s=args.period,
        guard_s=args.guard,
        protocol=_PROTOCOLS[args.protocol],
        loss=not args.no_loss,
        delay=not args.no_delay,
    )
    return _as_json(m) if args.json else f"measurement {m.spec.measurement_id} started"


def _measure_row(m: Any) -> list[str]:
    period = m.spec.color_period.ToNanoseconds() / 1e9
    return [
        m.spec.measurement_id,
        m.sender_node,
        m.reflector_node,
        ",".join(m.spec.forward_segments),
        f"{period:g}s",
        _STATES[m.state],
    ]


def cmd_measure_list(c: Client, args: argparse.Namespace) -> str:
    ms = c.measurements()
    if args.json:
        return _as_json(ms)
    return table([_measure_row(m) for m in ms], ["id", "sender", "reflector", "forward", "period", "state"])


def cmd_measure_show(c: Client, args: argparse.Namespace) -> str:
    got = c.measurement(args.id, args.blocks)
    if args.json:
        return _as_json(got)
    head = table([_measure_row(got.measurement)], ["id", "sender", "reflector", "forward", "period", "state"])
    return head + "\n\n" + table([result_row(r) for r in got.recent_results], RESULT_HEADERS)


def cmd_measure_delete(c: Client, args: argparse.Namespace) -> str:
    c.delete_measurement(args.id)
    return json.dumps({"deleted": args.id}) if args.json else f"measurement {args.id} deleted"


def cmd_watch(c: Client, args: argparse.Namespace) -> str:
    """Print results as they arrive: a refreshing table on a terminal, one line per block otherwise."""
    rows: list[list[str]] = []
    live = sys.stdout.isatty() and not args.json
    for seen, r in enumerate(c.results(args.ids, args.since), start=1):
        if args.json:
            print(json.dumps(MessageToDict(r, preserving_proto_field_name=True)), flush=True)
        elif live:
            rows = ([*rows, result_row(r)])[-args.rows :]
            print("\033[H\033[2J" + table(rows, RESULT_HEADERS), flush=True)
        else:
            if seen == 1:
                print(table([], RESULT_HEADERS), flush=True)
            print("  ".join(result_row(r)), flush=True)
        if args.count and seen >= args.count:
            break
    return ""


def _count(text: str) -> int:
    """A whole number >= 0 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _positive(text: str) -> int:
    """A whole number >= 1 (argparse type)."""
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of srv6pm."""
    p = argparse.ArgumentParser(prog="srv6pm", description="srv6-pm command line")
    p.add_argument("--controller", help=f"controller HOST:PORT (env {ENV_ADDRESS}; default localhost:50061)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--token-file", help="bearer token for the controller")
    p.add_argument("--ca", help="PEM CA of the controller's certificate (TLS)")
    p.add_argument("--cert", help="PEM client certificate (mutual TLS)")
    p.add_argument("--key", help="PEM client key (mutual TLS)")
    sub = p.add_subparsers(dest="group", required=True)

    nodes = sub.add_parser("nodes", help="routers running srv6pm-node").add_subparsers(
        dest="cmd", required=True
    )
    nodes.add_parser("list", help="nodes with their health").set_defaults(func=cmd_nodes_list)
    add = nodes.add_parser("add", help="register a node agent")
    add.add_argument("name")
    add.add_argument("address", help="agent HOST:PORT or unix:PATH")
    add.add_argument("--node-ca", help="PEM CA of the agent's certificate (TLS; plaintext without it)")
    add.add_argument("--node-cert", help="PEM client certificate for the agent (mutual TLS)")
    add.add_argument("--node-key", help="PEM client key for the agent (mutual TLS)")
    add.add_argument("--node-token-file", help="bearer token the agent expects")
    add.add_argument("--router-id", help="the node's loopback / router id")
    add.set_defaults(func=cmd_nodes_add)
    rm = nodes.add_parser("remove", help="forget a node")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_nodes_remove)

    tunnel = sub.add_parser("tunnel", help="bidirectional SRv6 tunnels").add_subparsers(
        dest="cmd", required=True
    )
    create = tunnel.add_parser("create", help="provision a tunnel on both ends (all or nothing)")
    create.add_argument("name")
    for side in ("left", "right"):
        create.add_argument(f"--{side}-node", required=True)
        create.add_argument(f"--{side}-prefix", required=True, help="prefix behind this end")
        create.add_argument(f"--{side}-sid", required=True, help="this end's decapsulation SID (End.DT6)")
        create.add_argument(f"--{side}-dev", required=True, help="this end's interface towards the core")
    create.add_argument("--forward", required=True, help="SID list left->right, comma-separated")
    create.add_argument("--reverse", required=True, help="SID list right->left, comma-separated")
    create.add_argument("--encap-mode", choices=sorted(_MODES), default="encap")
    create.set_defaults(func=cmd_tunnel_create)
    tunnel.add_parser("list", help="all tunnels").set_defaults(func=cmd_tunnel_list)
    delete = tunnel.add_parser("delete", help="remove a tunnel from both ends")
    delete.add_argument("name")
    delete.set_defaults(func=cmd_tunnel_delete)
    measure = sub.add_parser("measure", help="loss and delay measurements").add_subparsers(
        dest="cmd", required=True
    )
    mc = measure.add_parser("create", help="start a measurement on both nodes")
    mc.add_argument("id")
    mc.add_argument("--sender", required=True, help="node that marks and sends probes (ingress)")
    mc.add_argument("--reflector", required=True, help="node that counts and reflects (egress)")
    mc.add_argument("--tunnel", help="measure this tunnel's SID lists")
    mc.add_argument("--forward", help="SID list sender->reflector (instead of --tunnel)")
    mc.add_argument("--reverse", help="SID list reflector->sender")
    mc.add_argument("--sender-address", help="probe endpoint on the sender (required without --tunnel)")
    mc.add_argument("--reflector-address", help="probe endpoint on the reflector (required without --tunnel)")
    mc.add_argument("--period", type=float, default=10.0, help="colour period T in seconds (1-3600)")
    mc.add_argument("--guard", type=float, help="guard time in seconds (default T/2)")
    mc.add_argument("--protocol", choices=sorted(_PROTOCOLS), default="stamp")
    mc.add_argument("--no-loss", action="store_true", help="delay only")
    mc.add_argument("--no-delay", action="store_true", help="loss only")
    mc.set_defaults(func=cmd_measure_create)
    measure.add_parser("list", help="all measurements").set_defaults(func=cmd_measure_list)
    ms = measure.add_parser("show", help="status and recent blocks")
    ms.add_argument("id")
    ms.add_argument("--blocks", type=_positive, default=10, help="recent blocks shown (%(default)s)")
    ms.set_defaults(func=cmd_measure_show)
    md = measure.add_parser("delete", help="stop on both nodes and forget")
    md.add_argument("id")
    md.set_defaults(func=cmd_measure_delete)
    watch = sub.add_parser("watch", help="live per-block loss and delay")
    watch.add_argument("ids", nargs="*", help="measurements (default: all)")
    watch.add_argument(
        "--since", type=_count, default=0, help="first the stored blocks after this block number (1: all)"
    )
    watch.add_argument("--count", type=_count, default=0, help="exit after this many blocks")
    watch.add_argument("--rows", type=_positive, default=20, help="rows kept on screen")
    watch.set_defaults(func=cmd_watch)

    topo = sub.add_parser("topology", help="network topology").add_subparsers(dest="cmd", required=True)
    show = topo.add_parser("show", help="nodes and links")
    show.add_argument(
        "--extract", action="store_true", help="read it from the network now (else the stored one)"
    )
    show.add_argument(
        "--source",
        choices=sorted(_TOPOLOGY_SOURCES),
        help="extract from FRR's IS-IS (through the agents) or the nodes' kernel state; implies "
        "--extract (default: IS-IS where every node runs it, else the kernel state)",
    )
    show.set_defaults(func=cmd_topology_show)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of srv6pm."""
    args = build_parser().parse_args(argv)
    token = None
    try:
        if args.token_file:
            token = Path(args.token_file).read_text().strip()
        with Client(args.controller, token=token, ca=args.ca, cert=args.cert, key=args.key) as c:
            func: Callable[[Client, argparse.Namespace], str] = args.func
            out = func(c, args)
    except (ClientError, OSError) as exc:
        print(f"srv6pm: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if out:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
