"""The listening sockets of ``tagalign serve``: one TCP socket declared as such
(`tcp_socket`, so accepted connections get TCP_NODELAY), and with several workers one socket
each, all bound to the port with ``SO_REUSEPORT`` (`worker_sockets`: why)."""

from __future__ import annotations

import logging
import socket

from uvicorn import Config

log = logging.getLogger(__name__)


def tcp_socket(config: Config) -> socket.socket:
    """uvicorn's listening socket, marked as TCP. uvicorn makes it with protocol 0, which
    asyncio takes for "not TCP" and then leaves Nagle's algorithm on for every accepted
    connection: a response written in two parts (head, body) then waits for the client's
    delayed ACK, 40 ms a request (measured: 54 ms median per suggest against 4 ms from one
    process). The same socket, declared TCP, gets TCP_NODELAY as one process's does."""
    bound = config.bind_socket()
    if bound.family not in (socket.AF_INET, socket.AF_INET6):
        return bound  # a Unix socket: no Nagle
    sock = socket.socket(bound.family, bound.type, socket.IPPROTO_TCP, fileno=bound.detach())
    sock.set_inheritable(True)
    return sock


def worker_sockets(config: Config, n: int) -> list[socket.socket]:
    """``n`` TCP sockets bound to the same host and port with ``SO_REUSEPORT``, one per
    worker (a Unix socket or a system without it: one socket all workers share).

    Why not one shared socket: a kept-alive connection stays with the worker that accepted
    it, and asyncio accepts every pending connection at once when it wakes; so the worker
    that wakes first took all 16 clients of a load test (measured: 0.00 + 1.18 cores busy,
    0.92× one worker's throughput). With a socket each, the kernel hands every new
    connection to one of them by a hash of its addresses, evenly spread. The supervisor
    keeps each worker's socket open: connections waiting in it are accepted by the worker
    that replaces one that died. A probe bound first without ``SO_REUSEPORT`` makes a port
    another server holds fail as it would without it."""
    first = tcp_socket(config)
    if n == 1 or first.family not in (socket.AF_INET, socket.AF_INET6) \
            or not hasattr(socket, "SO_REUSEPORT"):
        return [first]
    address = first.getsockname()[:2]
    first.close()
    out = []
    try:
        for _ in range(n):
            out.append(reuseport_socket(first.family, address))
    except OSError as exc:
        for sock in out:
            sock.close()
        log.error("could not bind %s:%s: %s", address[0], address[1], exc)
        raise SystemExit(1) from exc
    return out


def reuseport_socket(family: socket.AddressFamily, address: tuple) -> socket.socket:
    """A TCP socket bound to ``address`` with ``SO_REUSEPORT`` (inheritable: a worker's)."""
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.set_inheritable(True)
    return sock


__all__ = ["reuseport_socket", "tcp_socket", "worker_sockets"]
