"""ggml's RPC wire protocol as this package speaks it (commands, reply sizes), its errors, and
endpoints: parsing, probing a worker before ggml's client (which aborts on an unreachable one) sees it."""

from __future__ import annotations

import enum
import socket
import struct
import subprocess
import time
from collections.abc import Sequence

from llama_ffi import lib

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50052
CONNECT_TIMEOUT_S = 5.0

# The wire protocol at RPC_PROTO_MAJOR_VERSION 8 (ggml/src/ggml-rpc/ggml-rpc.cpp): a request is
# | command (1 byte) | size (u64) | payload |, a reply | size (u64) | payload |, only for the
# commands in REPLY_SIZES. The command numbers live in the .cpp file, not in a header; a bump that
# changes the major version fails loudly in check_protocol().
PROTOCOL_MAJOR = 8
CONN_CAPS_SIZE = 24
U64 = struct.Struct("<Q")


class Cmd(enum.IntEnum):
    ALLOC_BUFFER = 0
    GET_ALIGNMENT = 1
    GET_MAX_SIZE = 2
    BUFFER_GET_BASE = 3
    FREE_BUFFER = 4
    BUFFER_CLEAR = 5
    SET_TENSOR = 6
    SET_TENSOR_HASH = 7
    GET_TENSOR = 8
    COPY_TENSOR = 9
    GRAPH_COMPUTE = 10
    GET_DEVICE_MEMORY = 11
    INIT_TENSOR = 12
    GET_ALLOC_SIZE = 13
    HELLO = 14
    DEVICE_COUNT = 15
    GRAPH_RECOMPUTE = 16
    MEMSET_TENSOR = 17
    SET_TENSOR_2D = 18  # v8: strided copies in one message
    GET_TENSOR_2D = 19
    COMM_INIT = 20  # v8: a communicator between two workers (tensor-parallel all-reduce)
    COMM_ALLREDUCE = 21
    COMM_FREE = 22


# Reply payload sizes; None: computed from the request (reply_size).
REPLY_SIZES: dict[int, int | None] = {
    Cmd.HELLO: 4 + CONN_CAPS_SIZE,
    Cmd.DEVICE_COUNT: 4,
    Cmd.ALLOC_BUFFER: 16,
    Cmd.GET_ALIGNMENT: 8,
    Cmd.GET_MAX_SIZE: 8,
    Cmd.BUFFER_GET_BASE: 8,
    Cmd.SET_TENSOR_HASH: 1,
    Cmd.GET_TENSOR: None,
    Cmd.GET_TENSOR_2D: None,
    Cmd.COPY_TENSOR: 1,
    Cmd.GET_ALLOC_SIZE: 8,
    Cmd.GET_DEVICE_MEMORY: 16,
    Cmd.COMM_INIT: 1,
}


def reply_size(cmd: int, request: bytes) -> int:
    """GET_TENSOR ends in | offset | size |; GET_TENSOR_2D in | offset | size | n_copies | stride |."""
    if cmd == Cmd.GET_TENSOR:
        return U64.unpack(request[-8:])[0]
    if cmd == Cmd.GET_TENSOR_2D:
        return U64.unpack(request[-24:-16])[0] * U64.unpack(request[-16:-8])[0]
    return REPLY_SIZES[cmd]


CHUNK = 1 << 20


class RpcError(ConnectionError):
    """A worker cannot be reached, refuses the protocol, or cannot be served."""


class RpcWorkerLost(RpcError):
    """A worker went away while a model used it; that model can no longer compute."""


# ---- endpoints ---------------------------------------------------------------------------------
def parse_servers(servers: str | Sequence[str]) -> list[str]:
    """``"h1:p1,h2:p2"`` or a list of ``"host:port"`` → validated endpoints."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    if not items or any(not isinstance(s, str) for s in items):
        raise ValueError(f"rpc_servers must be 'host:port' strings or one comma-separated string: {servers!r}")
    endpoints = [split_endpoint(s.strip()) for s in items]
    if len(endpoints) > lib.GGML_RPC_MAX_SERVERS:
        raise ValueError(f"{len(endpoints)} RPC servers; ggml takes at most {lib.GGML_RPC_MAX_SERVERS}")
    return [f"{h}:{p}" for h, p in endpoints]


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"RPC server {endpoint!r} is not 'host:port' (e.g. '192.168.1.7:50052')")
    return host, int(port)


def check_protocol() -> None:
    if lib.RPC_PROTO_MAJOR_VERSION != PROTOCOL_MAJOR:
        raise RpcError(
            f"ggml's RPC protocol is v{lib.RPC_PROTO_MAJOR_VERSION}; llama_ffi.rpc speaks "
            f"v{PROTOCOL_MAJOR}: update its command table"
        )


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """n bytes, or None when the peer closed first."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return bytes(buf)


def probe(endpoint: str, timeout: float = CONNECT_TIMEOUT_S) -> tuple[int, int, int]:
    """Connect and shake hands as ggml's client would; the worker's protocol version.

    Raises :class:`RpcError` naming the endpoint, within about ``timeout`` seconds."""
    host, port = split_endpoint(endpoint)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError:
        raise RpcError(f"cannot reach RPC server {endpoint}: no connection within {timeout:g} s") from None
    except OSError as exc:
        raise RpcError(f"cannot reach RPC server {endpoint}: {exc.strerror or exc}") from None
    with sock:
        try:
            sock.sendall(bytes([Cmd.HELLO]) + U64.pack(CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE))
            head = recv_exact(sock, 8)
            reply = recv_exact(sock, REPLY_SIZES[Cmd.HELLO]) if head else None
        except TimeoutError:
            raise RpcError(
                f"RPC server {endpoint} did not answer within {timeout:g} s (a worker serves "
                "one client at a time: is another one connected?)"
            ) from None
        except OSError:
            head = reply = None
    if head is None or reply is None or U64.unpack(head)[0] != REPLY_SIZES[Cmd.HELLO]:
        raise RpcError(f"{endpoint} is not a ggml RPC server (its handshake reply is missing or malformed)")
    major, minor, patch = reply[0], reply[1], reply[2]
    if major != lib.RPC_PROTO_MAJOR_VERSION or minor > lib.RPC_PROTO_MINOR_VERSION:
        raise RpcError(
            f"RPC server {endpoint} speaks protocol {major}.{minor}.{patch}; this build speaks "
            f"{lib.RPC_PROTO_MAJOR_VERSION}.{lib.RPC_PROTO_MINOR_VERSION}: run the same "
            "llama.cpp version on both sides"
        )
    return major, minor, patch


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port nobody listens on now (for a worker started next)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until_serving(endpoint: str, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    """Until a worker answers the handshake on ``endpoint``; :class:`RpcError` if it does not within
    ``timeout`` s, or at once when its process ``proc`` has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            probe(endpoint, timeout=1)
            return
        except RpcError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def keepalive(sock: socket.socket) -> None:
    """A worker machine that vanishes without closing (power, network) is noticed in ~30 s."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 4)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
