"""The worker (``llama-ffi rpc-server``): ggml's RPC server on this machine's devices."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from llama_ffi import backends, ffi, lib
from llama_ffi.devices import device_by_name
from llama_ffi.rpc.protocol import DEFAULT_HOST, DEFAULT_PORT, RpcError, check_protocol, split_endpoint


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
