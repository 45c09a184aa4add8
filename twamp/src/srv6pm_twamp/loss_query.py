"""TWAMP-Light loss queries (draft-gandhi-spring-twamp-srpm), the querying side.

One call sends a :class:`~srv6pm_twamp.wire.twamp_light.LossQuery` carrying the sender's TX
counter for a block, optionally down a SID list, and waits for the matching
:class:`~srv6pm_twamp.wire.twamp_light.LossResponse`. The node manager uses it to talk to an
original SRv6-PM reflector (or ours in ``protocol="twamp-light"`` mode).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

from srv6pm_twamp import sockets
from srv6pm_twamp.wire.errors import DecodeError
from srv6pm_twamp.wire.twamp_light import CONTROL_IN_BAND, LossQuery, LossResponse


@dataclass(frozen=True)
class LossAnswer:
    """The response and what the kernel told about it."""

    response: LossResponse
    rx_ns: int
    hop_limit: int | None


async def query_loss(
    host: str,
    port: int,
    *,
    seq: int,
    block: int,
    tx_counter: int,
    segments: tuple[str, ...] = (),
    control_code: int = CONTROL_IN_BAND,
    source: str | None = None,
    timeout: float = 1.0,
) -> LossAnswer | None:
    """Send one loss query and return its response, or None after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    host = sockets.resolve(host)
    fam = sockets.family_of(host)
    bind = source or ("::" if fam == socket.AF_INET6 else "0.0.0.0")
    sock = sockets.open_socket(fam, (bind, 0))
    got: asyncio.Future[LossAnswer] = loop.create_future()

    def readable() -> None:
        for d in sockets.recv_batch(sock):
            try:
                resp = LossResponse.decode(d.data)
            except DecodeError:
                continue  # not a response: ignore it, keep waiting
            if resp.sender_seq == seq and resp.sender_block == block and not got.done():
                got.set_result(LossAnswer(resp, d.rx_ns, d.hop_limit))

    loop.add_reader(sock.fileno(), readable)
    try:
        query = LossQuery(seq=seq, tx_counter=tx_counter, block=block, control_code=control_code)
        waypoints = [ipaddress.IPv6Address(s) for s in segments]
        sockets.send(sock, query.encode(), (host, port), waypoints=waypoints)
        try:
            return await asyncio.wait_for(got, timeout)
        except TimeoutError:
            return None
    finally:
        loop.remove_reader(sock.fileno())
        sock.close()
