"""``llama-ffi serve``: llama-server's flags, a server that listens while the model loads (/health
answers 503 until it is ready), and stops on SIGTERM or Ctrl-C after the requests in flight end."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import signal
import socket
import sys
import threading
from collections.abc import Callable

from llama_ffi.server.launch import api_keys, create


def run(args: argparse.Namespace, serving: Callable[[argparse.Namespace], tuple[Callable, Callable]]) -> int:
    """Serve until SIGTERM / Ctrl-C. ``serving(args)`` gives ``open_llama(**options)``, which loads
    the model (in a thread, while /health says 503), and ``lora_names(llm)``, which loads the --lora
    adapters and names them in order. Without -m, --models-dir or --models-preset: router mode."""
    try:
        import uvicorn

        import llama_ffi.server.api  # noqa: F401 - FastAPI and pydantic, the extra's other two
    except ImportError as error:
        print(
            f"llama-ffi: error: the server needs its extra: pip install 'llama-ffi[server]' ({error})", file=sys.stderr
        )
        return 2
    if not api_keys(args) and not all(_loopback(h.strip()) for h in args.host.split(",")):
        print(
            f"llama-ffi: warning: serving on {args.host} without an API key: anyone who can reach it can "
            "use the model (--api-key)",
            file=sys.stderr,
        )
    if args.ray:
        from llama_ffi.server import replicas

        return replicas.run(args)

    def failed():  # llama-server exits when its model does not load
        server.should_exit = True

    try:
        app = create(args, serving, failed)
    except ValueError as error:  # the agent's flags: a tool, a runtime or an MCP config
        print(f"llama-ffi: error: {error}", file=sys.stderr)
        return 2
    served = getattr(app.state, "served", None)  # router mode has none of its own
    from llama_ffi.server import vertex  # FastAPI's: imported with the app above

    args.port = vertex.port(args.port)  # Vertex AI may name it
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=args.timeout_graceful_shutdown,
        lifespan="on",
        # h11 sends header names as the app spells them, as llama-server does (clients that compare
        # them by case exist); uvicorn would pick httptools, which lowercases them, where installed
        http="h11",
    )
    server = _server_class()(config, on_exit=lambda: [stop() for stop in app.state.on_exit])
    server.run(sockets=_sockets(args.host, args.port) if "," in args.host else None)
    if served is not None and served.load_error is not None:
        print(f"llama-ffi: error: {served.load_error}", file=sys.stderr)
        return 1
    return 0 if server.started else 1


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, except that a SIGTERM or Ctrl-C that stopped it cleanly (the requests in
        flight answered) ends the process with 0 instead of being raised again after shutdown.
        ``on_exit()`` runs at the signal, before the wait for requests in flight (tool calls end)."""

        def __init__(self, config, on_exit: Callable[[], None] = lambda: None) -> None:
            super().__init__(config)
            self.on_exit = on_exit

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            threading.Thread(target=self.on_exit, name="llama-ffi-exit", daemon=True).start()

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {}
            for sig in (signal.SIGTERM, signal.SIGINT):
                if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored Ctrl-C (a background job) stays so
                    previous[sig] = signal.signal(sig, self.handle_exit)
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _sockets(hosts: str, port: int) -> list[socket.socket]:
    """Listening sockets for llama-server's ``--host a,b`` (several addresses, one port)."""
    out = []
    for host in (h.strip() for h in hosts.split(",")):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        out.append(sock)
    return out
