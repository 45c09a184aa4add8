"""``srv6pm-counters``: the operator's view of the data-plane counters (like bpftool, for our maps).

    srv6pm-counters [--driver ebpf|netfilter] attach IFACE --direction egress|ingress [--mode M]
    srv6pm-counters detach IFACE --direction egress|ingress
    srv6pm-counters flow add|del --direction egress|ingress SID [SID ...]   (travel order)
    srv6pm-counters flow list [--direction D] [--json]
    srv6pm-counters color set 0|1 | color show
    srv6pm-counters show [--json]

It acts on the network namespace it runs in (``ip netns exec NS srv6pm-counters …``) or on
``--netns NS``. eBPF pins live under ``--pin-root`` (default ``$SRV6PM_PIN_ROOT`` or
/run/srv6pm/bpf). Exit status: 0 done, 1 the operation failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from . import DRIVERS, open_driver
from .api import CounterDriver, CounterError, Direction, FlowCounters
from .pins import DEFAULT_PIN_ROOT


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srv6pm-counters", description=__doc__.split("\n\n")[0])
    p.add_argument("--driver", choices=DRIVERS, default=os.environ.get("SRV6PM_COUNTER_DRIVER", "ebpf"))
    p.add_argument(
        "--pin-root",
        default=os.environ.get("SRV6PM_PIN_ROOT", DEFAULT_PIN_ROOT),
        help="bpffs directory for the eBPF driver's pinned maps",
    )
    p.add_argument("--netns", help="network namespace to act in (default: this one)")
    p.add_argument(
        "--mark-bit",
        type=int,
        choices=range(6),
        metavar="0-5",
        help="DSCP bit carrying the colour (default: keep the current one)",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    def direction(sp: argparse.ArgumentParser, required: bool = True) -> None:
        sp.add_argument("--direction", "-d", choices=[str(d) for d in Direction], required=required)

    a = sub.add_parser("attach", help="start marking/counting on an interface")
    a.add_argument("ifname")
    direction(a)
    a.add_argument(
        "--mode",
        choices=["auto", "xdp", "tc"],
        default="auto",
        help="ingress: XDP, TC, or XDP falling back to TC (eBPF driver)",
    )
    d = sub.add_parser("detach", help="stop marking/counting on an interface")
    d.add_argument("ifname")
    direction(d)

    f = sub.add_parser("flow", help="monitored SID lists").add_subparsers(dest="flow_cmd", required=True)
    for name in ("add", "del"):
        sp = f.add_parser(name)
        direction(sp)
        sp.add_argument("sids", nargs="+", metavar="SID", help="the SID list, first segment first")
    fl = f.add_parser("list")
    direction(fl, required=False)
    fl.add_argument("--json", action="store_true")

    c = sub.add_parser("color", aliases=["colour"], help="the active colour")
    cs = c.add_subparsers(dest="color_cmd", required=True)
    cs.add_parser("set").add_argument("colour", type=int, choices=[0, 1])
    cs.add_parser("show")

    s = sub.add_parser("show", help="attachments, colour and every flow's counters")
    s.add_argument("--json", action="store_true")
    return p


def _table(flows: Sequence[FlowCounters]) -> str:
    rows = [("DIR", "SID LIST", "PKTS c0", "BYTES c0", "PKTS c1", "BYTES c1")]
    for f in flows:
        c0, c1 = f.colours
        rows.append(
            (
                str(f.direction),
                ",".join(f.sids),
                str(c0.packets),
                str(c0.bytes),
                str(c1.packets),
                str(c1.bytes),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    )


def _run(args: argparse.Namespace, drv: CounterDriver) -> None:
    if args.cmd == "attach":
        mode = drv.attach(args.ifname, Direction(args.direction), args.mode)
        print(f"attached {args.direction} on {args.ifname} ({mode})")
    elif args.cmd == "detach":
        drv.detach(args.ifname, Direction(args.direction))
        print(f"detached {args.direction} from {args.ifname}")
    elif args.cmd == "flow":
        if args.flow_cmd == "add":
            drv.add_flow(args.sids, Direction(args.direction))
        elif args.flow_cmd == "del":
            if not drv.remove_flow(args.sids, Direction(args.direction)):
                raise CounterError(f"{args.direction} flow {','.join(args.sids)} is not monitored")
        else:
            flows = drv.flows(Direction(args.direction) if args.direction else None)
            if args.json:
                print(json.dumps([f.to_dict() for f in flows], indent=2))
            else:
                for f in flows:
                    print(f"{f.direction}\t{','.join(f.sids)}")
    elif args.cmd in ("color", "colour"):
        if args.color_cmd == "set":
            drv.set_colour(args.colour)
        print(drv.colour())
    elif args.cmd == "show":
        flows = drv.flows()
        atts = drv.attachments()
        if args.json:
            print(
                json.dumps(
                    {
                        "driver": drv.name,
                        "colour": drv.colour(),
                        "mark_bit": drv.mark_bit,
                        "attachments": [
                            {"ifname": a.ifname, "direction": str(a.direction), "mode": a.mode} for a in atts
                        ],
                        "flows": [f.to_dict() for f in flows],
                    },
                    indent=2,
                )
            )
        else:
            print(f"driver {drv.name}  colour {drv.colour()}  mark bit DSCP {drv.mark_bit}")
            for a in atts:
                print(f"attached {a.direction} {a.ifname} ({a.mode})")
            print(_table(flows))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``srv6pm-counters``."""
    args = _parser().parse_args(argv)
    kwargs: dict[str, object] = {"netns": args.netns, "mark_bit": args.mark_bit}
    if args.driver == "ebpf":
        kwargs["pin_root"] = args.pin_root
    try:
        with open_driver(args.driver, **kwargs) as drv:
            _run(args, drv)
    except (CounterError, OSError, ValueError) as exc:
        print(f"srv6pm-counters: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
