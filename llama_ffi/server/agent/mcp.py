"""MCP servers over stdio (``--mcp-servers-config FILE`` / ``--mcp-servers-json TEXT``, Cursor's
``{"mcpServers": {name: {command, args, env, cwd, timeout_ms}}}``): each is a child process that
reads one JSON-RPC message per line on stdin and answers on stdout.

Each server is started once at start-up to list its tools, then stopped; the first call of one of
its tools starts it again and later calls share that process (answers matched to calls by id,
notifications and lines that are not JSON skipped). A process that exited is started again on the
next call; one that does not answer in ``timeout_ms`` is killed. A process runs in its own process
group, killed whole, so a grandchild holding its pipes cannot keep a reader waiting."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import logging
import os
import select
import signal
import subprocess
import threading
from pathlib import Path

from llama_ffi.server.agent.tool import Call, Tool, ToolError

log = logging.getLogger("llama_ffi.server")
PROTOCOL_VERSION = "2024-11-05"
DEFAULT_TIMEOUT_MS = 30000
WARM_UP_SECONDS = 10.0
MAX_PAGES = 100  # of tools/list: a server that always names a next page is cut off


class McpError(Exception):
    pass


class McpTimeout(McpError):
    pass


@dataclasses.dataclass(frozen=True)
class ServerSpec:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_MS / 1000


def parse_config(text: str, origin: str) -> list[ServerSpec]:
    """The servers a config declares; a config that is not one is a ``ValueError`` naming ``origin``.
    An entry without a ``command`` is skipped (llama-server's rule)."""
    try:
        config = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{origin}: not JSON ({error})") from None
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict):
        raise ValueError(f'{origin}: expected {{"mcpServers": {{name: {{"command": ...}}}}}}')
    specs = []
    for name, entry in servers.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("command"), str) or not entry["command"]:
            log.warning("MCP server %r has no command: skipped", name)
            continue
        args, env = entry.get("args", []), entry.get("env", {})
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{origin}: mcpServers.{name}.args must be a list of strings")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{origin}: mcpServers.{name}.env must map names to strings")
        timeout = entry.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"{origin}: mcpServers.{name}.timeout_ms must be a positive number")
        cwd = entry.get("cwd")
        specs.append(
            ServerSpec(
                name,
                entry["command"],
                tuple(args),
                tuple(env.items()),
                cwd if isinstance(cwd, str) else None,
                timeout / 1000,
            )
        )
    return specs


def load_config(path: str | None, inline: str | None) -> list[ServerSpec]:
    specs = []
    if path:
        try:
            specs += parse_config(Path(path).read_text(encoding="utf-8"), path)
        except OSError as error:
            raise ValueError(f"--mcp-servers-config {path}: {error.strerror or error}") from None
    if inline:
        specs += parse_config(inline, "--mcp-servers-json")
    return specs


class Connection:
    """One running server: a reader thread hands each answer to the call waiting for its id."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        try:
            self.proc = subprocess.Popen(
                [spec.command, *spec.args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=spec.cwd,
                env={**os.environ, **dict(spec.env)},
                start_new_session=True,
            )
        except OSError as error:
            raise McpError(f"cannot start MCP server {spec.name!r}: {error.strerror or error}") from None
        self.ids = itertools.count(1)
        self.pending: dict[int, concurrent.futures.Future] = {}
        self.lock = threading.Lock()  # the ids and the calls waiting
        self.writing = threading.Lock()  # one message at a time on stdin (never held by the reader)
        self.closed = threading.Event()
        self.reader = threading.Thread(target=self._read, name=f"mcp-{spec.name}", daemon=True)
        self.reader.start()

    @property
    def alive(self) -> bool:
        return not self.closed.is_set() and self.proc.poll() is None

    def request(self, method: str, params: dict, timeout: float) -> dict:
        answer: concurrent.futures.Future = concurrent.futures.Future()
        with self.lock:
            if self.closed.is_set():
                raise McpError(f"MCP server {self.spec.name!r} is not running")
            rid = next(self.ids)
            self.pending[rid] = answer
        try:
            self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        except OSError:
            with self.lock:
                self.pending.pop(rid, None)
            raise McpError(f"MCP server {self.spec.name!r} is not running") from None
        try:
            message = answer.result(timeout)
        except concurrent.futures.TimeoutError:
            raise McpTimeout(f"MCP server {self.spec.name!r} did not answer {method} in {timeout:g} s") from None
        finally:
            with self.lock:
                self.pending.pop(rid, None)
        if "error" in message:
            error = message["error"]
            raise McpError(error.get("message", str(error)) if isinstance(error, dict) else str(error))
        result = message.get("result")
        return result if isinstance(result, dict) else {}

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def _send(self, message: dict) -> None:
        # a server that stops reading blocks this write, not the reader that takes its answers
        with self.writing:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()

    def _read(self) -> None:
        fd, buffer = self.proc.stdout.fileno(), b""
        while not self.closed.is_set():
            if not select.select([fd], [], [], 0.1)[0]:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self._dispatch(line)
        self._fail_all("exited")

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return  # a stray line (a log) on stdout
        if not isinstance(message, dict) or not isinstance(message.get("id"), int):
            return  # a notification or a request from the server: nothing waits for it
        with self.lock:
            answer = self.pending.get(message["id"])
        if answer is not None and not answer.done():
            answer.set_result(message)

    def _fail_all(self, why: str) -> None:
        self.closed.set()
        with self.lock:
            waiting = list(self.pending.values())
        for answer in waiting:
            if not answer.done():
                answer.set_exception(McpError(f"MCP server {self.spec.name!r} {why}"))

    def close(self) -> None:
        self._fail_all("was stopped")
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.reader.join()  # it sees ``closed`` within a select's wait; then its pipe may close
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def connect(spec: ServerSpec, timeout: float) -> Connection:
    """A started server past MCP's handshake."""
    conn = Connection(spec)
    try:
        conn.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "llama-ffi", "version": "1"},
            },
            timeout,
        )
        conn.notify("notifications/initialized")
    except (McpError, OSError):
        conn.close()
        raise
    return conn


class McpServer:
    """A declared server: its tools (listed at start-up) and the process its calls share."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.tools: list[dict] = []
        self.conn: Connection | None = None
        self.lock = threading.Lock()
        self.stopping = False

    def warm_up(self) -> None:
        timeout = min(self.spec.timeout_s, WARM_UP_SECONDS)
        try:
            conn = connect(self.spec, timeout)
        except McpError as error:
            log.warning("%s: no tools listed", error)
            return
        try:
            listed, cursor = [], None
            for _ in range(MAX_PAGES):  # a long list comes in pages, each naming the next
                page = conn.request("tools/list", {"cursor": cursor} if cursor else {}, timeout)
                listed += page.get("tools", []) if isinstance(page.get("tools"), list) else []
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
            self.tools = [t for t in listed if isinstance(t, dict) and isinstance(t.get("name"), str)]
        except McpError as error:
            log.warning("MCP server %r: tools/list failed: %s", self.spec.name, error)
        finally:
            conn.close()

    def call(self, tool: str, arguments: dict) -> dict:
        for attempt in (1, 2):
            conn = self._live()
            try:
                result = conn.request("tools/call", {"name": tool, "arguments": arguments}, self.spec.timeout_s)
                break
            except McpError as error:
                exited = not conn.alive and not isinstance(error, McpTimeout) and not self.stopping
                if not conn.alive or isinstance(error, McpTimeout):
                    self._drop(conn)  # a hung or dead process is not reused
                # a process that exits between two calls takes the second one with it: that one is
                # sent once more, to a new process
                if not (exited and attempt == 1):
                    raise ToolError(str(error)) from None
        content = result.get("content", [])
        parts = [
            c.get("text", "") if isinstance(c, dict) and c.get("type") == "text" else json.dumps(c)
            for c in (content if isinstance(content, list) else [])
        ]
        if result.get("isError"):
            raise ToolError("\n".join(parts) or f"{self.spec.name}_{tool} failed")
        return {"plain_text_response": "\n".join(parts)}

    def _live(self) -> Connection:
        with self.lock:
            if self.stopping:
                raise ToolError("the server is stopping")
            if self.conn is None or not self.conn.alive:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                try:
                    self.conn = connect(self.spec, self.spec.timeout_s)
                except McpError as error:
                    raise ToolError(str(error)) from None
            return self.conn

    def _drop(self, conn: Connection) -> None:
        with self.lock:
            if self.conn is conn:
                self.conn = None
        conn.close()

    def close(self) -> None:
        with self.lock:
            self.stopping = True
            conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def as_tools(self, taken: set[str]) -> list[Tool]:
        """Its tools as ``<server>_<tool>``; a name already taken is skipped."""
        out = []
        for listed in self.tools:
            name = f"{self.spec.name}_{listed['name']}"
            if name in taken:
                log.warning("MCP tool %s: the name is taken, skipped", name)
                continue
            taken.add(name)
            schema = listed.get("inputSchema")
            out.append(
                Tool(
                    name,
                    listed.get("title") or listed["name"],
                    listed.get("description") or "",
                    schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
                    self._runner(listed["name"]),
                    writes=True,  # nothing says what an MCP tool changes
                    kind="mcp",
                )
            )
        return out

    def _runner(self, tool: str):
        def run(params: dict, call: Call) -> dict:
            return self.call(tool, params)

        return run
