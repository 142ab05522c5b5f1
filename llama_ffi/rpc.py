"""Several machines: ggml's RPC backend as devices of a model, and the worker that serves it.

Client side (``Llama(..., rpc_servers=[...])``): every worker becomes one or more devices that the
model offloads layers to, as llama.cpp's ``--rpc`` does. ggml's RPC client aborts the whole
process when a worker goes away mid-request (``GGML_ABORT`` in its dispatcher thread), so each
worker is reached through a small relay in this process: it forwards the protocol unchanged while
the worker lives and, once the worker is gone, answers in its place with well-formed empty replies.
llama.cpp then returns normally (with meaningless numbers), and the model's owner raises
:class:`RpcWorkerLost` after the decode instead of the process dying.

Worker side (``llama-ffi rpc-server``): :func:`serve` runs ggml's server on local devices.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from llama_ffi import backends, ffi, lib
from llama_ffi.devices import device_by_name

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


# Reply payload sizes; None: computed from the request (_reply_size).
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


def _reply_size(cmd: int, request: bytes) -> int:
    """GET_TENSOR ends in | offset | size |; GET_TENSOR_2D in | offset | size | n_copies | stride |."""
    if cmd == Cmd.GET_TENSOR:
        return U64.unpack(request[-8:])[0]
    if cmd == Cmd.GET_TENSOR_2D:
        return U64.unpack(request[-24:-16])[0] * U64.unpack(request[-16:-8])[0]
    return REPLY_SIZES[cmd]


_CHUNK = 1 << 20


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


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
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
            head = _recv_exact(sock, 8)
            reply = _recv_exact(sock, REPLY_SIZES[Cmd.HELLO]) if head else None
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


def _keepalive(sock: socket.socket) -> None:
    """A worker machine that vanishes without closing (power, network) is noticed in ~30 s."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 4)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


# ---- the relay ---------------------------------------------------------------------------------
class _StandIn:
    """Replies in a lost worker's place: well-formed and empty, so the client never aborts."""

    def __init__(self) -> None:
        self.last: dict[int, bytes] = {}  # the worker's last real reply per command
        self.next_ptr = 1 << 40

    def reply(self, cmd: int, request: bytes) -> bytes:
        if cmd == Cmd.HELLO:
            return bytes([lib.RPC_PROTO_MAJOR_VERSION, lib.RPC_PROTO_MINOR_VERSION, 0, 0]) + bytes(CONN_CAPS_SIZE)
        if cmd in (Cmd.GET_TENSOR, Cmd.GET_TENSOR_2D):
            return bytes(_reply_size(cmd, request))
        if cmd == Cmd.COMM_INIT:
            return b"\x00"  # not initialised: ggml falls back to its own all-reduce
        if cmd in (Cmd.ALLOC_BUFFER, Cmd.BUFFER_GET_BASE):
            self.next_ptr += 1 << 32
            size = U64.unpack(request[4:12])[0] if cmd == Cmd.ALLOC_BUFFER else 0
            return U64.pack(self.next_ptr) + (U64.pack(size) if cmd == Cmd.ALLOC_BUFFER else b"")
        if cmd in (Cmd.SET_TENSOR_HASH, Cmd.COPY_TENSOR):
            return b"\x01"
        if cmd == Cmd.GET_ALLOC_SIZE:
            return bytes(8)  # the client takes max(this, the tensor's size) and caches it
        size = REPLY_SIZES[cmd]
        return self.last.get(cmd, bytes(size))


class Relay:
    """127.0.0.1:<free port> → one worker. One upstream connection per accepted client
    connection; requests and replies strictly alternate, so a plain loop forwards them."""

    def __init__(self, upstream: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
        self.upstream, self.timeout = upstream, timeout
        self.lost: str | None = None  # why the worker is gone, once it is
        self.forwarded: collections.Counter[str] = collections.Counter()  # commands the worker got
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(4)
        self.endpoint = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept_loop, name=f"rpc-relay {upstream}", daemon=True).start()

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why

    def _connect(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(split_endpoint(self.upstream), timeout=self.timeout)
        except OSError as exc:
            self._lose(f"cannot reconnect: {exc.strerror or exc}")
            return None
        sock.settimeout(None)  # a graph computation may take as long as it takes
        _keepalive(sock)
        return sock

    def _serve(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        worker = self._connect() if self.lost is None else None
        stand_in = _StandIn()
        try:
            while True:
                head = _recv_exact(client, 9)
                if head is None:
                    return  # the client let go (its model was freed)
                cmd, size = head[0], U64.unpack(head[1:])[0]
                if cmd not in Cmd._value2member_map_:
                    return  # not the protocol we know: drop the connection rather than guess
                worker = self._relay_one(client, worker, cmd, size, stand_in)
        except OSError:
            return  # the client's side broke: nothing left to serve
        finally:
            client.close()
            if worker is not None:
                worker.close()

    def _relay_one(self, client, worker, cmd: int, size: int, stand_in: _StandIn):
        """Forward one request (and its reply); after a failure, answer it in the worker's place.
        Returns the worker socket, or None once the worker is lost."""
        small = size <= _CHUNK
        request = _recv_exact(client, size) if small else None
        if small and request is None:
            raise OSError("client closed mid-request")
        if cmd == Cmd.HELLO:  # plain TCP on both legs: no transport upgrade through the relay
            request = bytes(len(request))
        if cmd == Cmd.COMM_INIT and small:
            # Two workers would connect to each other at the host the client names, which through
            # the relay is 127.0.0.1: wrong for remote workers, and rank 0 would wait forever in
            # accept(). Refused here, ggml keeps its own all-reduce through this process.
            reply = stand_in.reply(cmd, request)
            client.sendall(U64.pack(len(reply)) + reply)
            return worker
        if worker is not None:
            self.forwarded[Cmd(cmd).name] += 1
            try:
                worker.sendall(bytes([cmd]) + U64.pack(size))
                if small:
                    worker.sendall(request)
                else:
                    self._stream(client, worker, size)
                    size = 0
            except OSError as exc:
                self._lose(f"connection failed while sending: {exc.strerror or exc}")
                worker = None
        if worker is None and not small and size:
            self._drain(client, size)
        if cmd not in REPLY_SIZES:
            return worker
        if worker is not None:
            try:
                reply_head = _recv_exact(worker, 8)
                reply = _recv_exact(worker, U64.unpack(reply_head)[0]) if reply_head else None
                if reply is None:
                    raise OSError("the worker closed the connection")
                if cmd == Cmd.HELLO:
                    reply = reply[:4] + bytes(CONN_CAPS_SIZE)
                stand_in.last[cmd] = reply
                client.sendall(U64.pack(len(reply)) + reply)
                return worker
            except OSError as exc:
                self._lose(f"{exc.strerror or exc}")
                worker.close()
                worker = None
        reply = stand_in.reply(cmd, request or b"")
        client.sendall(U64.pack(len(reply)) + reply)
        return None

    @staticmethod
    def _stream(client, worker, size: int) -> None:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while size:
            k = client.recv_into(view[: min(size, _CHUNK)])
            if k == 0:
                raise OSError("client closed mid-request")
            worker.sendall(view[:k])
            size -= k

    @staticmethod
    def _drain(client, size: int) -> None:
        buf = bytearray(_CHUNK)
        while size:
            k = client.recv_into(buf, min(size, _CHUNK))
            if k == 0:
                raise OSError("client closed mid-request")
            size -= k


# ---- devices for a model -----------------------------------------------------------------------
def _add_server(endpoint: bytes):
    add_server = backends.function("RPC", "ggml_backend_rpc_add_server", "ggml_backend_reg_t (*)(const char *)")
    return add_server(endpoint)


class RpcDevices:
    """The devices of ``servers``, for ``llama_model_params.devices``: every worker's devices
    first (as llama.cpp orders them, to keep network transfers few), then local GPUs."""

    def __init__(self, servers: str | Sequence[str], timeout: float = CONNECT_TIMEOUT_S) -> None:
        check_protocol()
        self.servers = parse_servers(servers)
        if lib.ggml_backend_reg_by_name(b"RPC") == ffi.NULL:
            raise RpcError("this build of llama.cpp has no RPC backend (GGML_RPC=OFF)")
        for endpoint in self.servers:
            probe(endpoint, timeout)  # ggml's client would abort the process on an unreachable one
        self.relays: list[Relay] = []
        devices = []
        try:
            for endpoint in self.servers:
                relay = Relay(endpoint, timeout)
                self.relays.append(relay)
                reg = _add_server(relay.endpoint.encode())
                self.check()
                if reg == ffi.NULL:
                    raise RpcError(f"RPC server {endpoint} offers no devices")
                devices += [lib.ggml_backend_reg_dev_get(reg, i) for i in range(lib.ggml_backend_reg_dev_count(reg))]
        except BaseException:
            self.close()
            raise
        self.devices = devices + _local_gpus()
        self.array = ffi.new("ggml_backend_dev_t[]", self.devices + [ffi.NULL])  # NULL-terminated

    def names(self) -> list[str]:
        return [ffi.string(lib.ggml_backend_dev_name(d)).decode() for d in self.devices]

    def check(self) -> None:
        """Raise :class:`RpcWorkerLost` if any worker has gone away."""
        for relay in self.relays:
            if relay.lost is not None:
                raise RpcWorkerLost(
                    f"RPC worker {relay.upstream} was lost ({relay.lost}); this model can no "
                    "longer compute: close it and load it again once the worker is back"
                )

    def close(self) -> None:
        """After the model is freed (its buffers talk to the workers until then)."""
        for relay in self.relays:
            relay.close()
        self.relays = []


def _local_gpus() -> list:
    gpus, igpus = [], []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = lib.ggml_backend_dev_type(dev)
        if kind == lib.GGML_BACKEND_DEVICE_TYPE_GPU:
            gpus.append(dev)
        elif kind == lib.GGML_BACKEND_DEVICE_TYPE_IGPU:
            igpus.append(dev)
    return gpus or igpus  # an iGPU only when there is no discrete GPU, as llama.cpp chooses


# ---- the worker --------------------------------------------------------------------------------
def default_threads() -> int:
    return max(1, (os.cpu_count() or 2) // 2)  # rpc-server's default


def default_cache_dir() -> Path:
    """rpc-server's: $LLAMA_CACHE/rpc, else $XDG_CACHE_HOME (or ~/.cache)/llama.cpp/rpc."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"]) / "rpc"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llama.cpp" / "rpc"


def worker_devices(names: Sequence[str] | None = None) -> list:
    """Named devices, else every local accelerator, else the CPU (rpc-server's choice)."""
    if names:
        return [device_by_name(name) for name in names]
    accelerators = [
        lib.ggml_backend_dev_get(i)
        for i in range(lib.ggml_backend_dev_count())
        if lib.ggml_backend_dev_type(lib.ggml_backend_dev_get(i))
        not in (lib.GGML_BACKEND_DEVICE_TYPE_CPU, lib.GGML_BACKEND_DEVICE_TYPE_ACCEL)
    ]
    return accelerators or [lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)]


UNSAFE_HOST_WARNING = (
    "WARNING: the RPC protocol has no authentication or encryption: anyone who can reach "
    "{host}:{port} can run computations and read memory here. Bind 127.0.0.1 unless "
    "this network is trusted."
)


def serve(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    threads: int | None = None,
    devices: Sequence[str] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> None:
    """Serve this machine's devices to RPC clients until Ctrl-C or SIGTERM (both return)."""
    check_protocol()
    split_endpoint(f"{host}:{port}")
    threads = default_threads() if threads is None else threads
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    devs = worker_devices(devices)
    _check_port_free(host, port)
    if host != DEFAULT_HOST:
        print(UNSAFE_HOST_WARNING.format(host=host, port=port), file=sys.stderr, flush=True)
    cache = None
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        cache = os.fsencode(cache_dir)
    arr = ffi.new("ggml_backend_dev_t[]", devs)
    endpoint = f"{host}:{port}".encode()
    start_server = backends.function(
        "RPC",
        "ggml_backend_rpc_start_server",
        "void (*)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *)",
    )
    server = threading.Thread(
        target=start_server,
        daemon=True,
        name="rpc-server",
        args=(endpoint, cache if cache is not None else ffi.NULL, threads, len(devs), arr),
    )
    server.start()
    names = ", ".join(ffi.string(lib.ggml_backend_dev_name(d)).decode() for d in devs)
    print(
        f"llama-ffi rpc-server: serving {names} on {host}:{port} with {threads} threads"
        f"{', cache ' + os.fsdecode(cache) if cache else ''}; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    with _stop_on_sigterm() as stopped:
        try:
            while server.is_alive() and not stopped.is_set():
                server.join(0.5)
        except KeyboardInterrupt:
            return
    if not stopped.is_set():
        raise RpcError(f"the RPC server on {host}:{port} stopped (see its message above)")


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[threading.Event]:
    """An event set by SIGTERM, as a service manager (or a test) stops a worker: a worker started
    from a shell that ignores SIGINT (a background job, nohup, a CI runner) must still stop cleanly."""
    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopped  # signal handlers live in the main thread; an embedding program stops it its way
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check_port_free(host: str, port: int) -> None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"cannot bind to host {host!r}: {exc}") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            raise RpcError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
