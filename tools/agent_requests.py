"""Record what a real coding agent sends: run Claude Code (``claude``, from the ``claude-agent-sdk``
wheel) or Codex CLI (``codex``, from ``openai-codex-cli-bin``) against ``llama-ffi serve`` through a
recording proxy on 127.0.0.1, and write each ``/v1/messages`` or ``/v1/responses`` body it posted
as a JSON fixture (``tests/data/agents``: the suite replays them). The agent's first turns
(``--forced``, 1 by default) are made to call its file or command tool (``tool_choice`` set on the
way to the server, which generates the call under the tool's schema; the body is recorded as the
agent sent it), so the agent runs the tool and sends the turn that carries its result: a tiny model
seldom calls a tool by itself. Each request's time to its first generated token is measured at the
proxy, as the agent sees it.

The agents' own prose (system prompts, tool descriptions, their text in a conversation) is not
ours to commit: each description, and each string longer than ``KEEP`` characters but the user's
prompt and Claude Code's billing header, is replaced by a stand-in naming its kind and length
("<text of 6602 characters, not recorded>"); so are machine ids. A fixture keeps
every field, block, tool and schema exactly as sent and stays small.

    python -m tools.agent_requests claude -m MODEL --out tests/data/agents
    python -m tools.agent_requests codex -m MODEL --out tests/data/agents
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from llama_ffi.rpc import free_port

KEEP = 80  # characters: longer prose is replaced by a stand-in (descriptions always are)
PROMPT = "Create a file named hello.txt that contains the word hello, using your file writing tool."
ROUTES = ("/v1/messages", "/v1/responses")
ANSWER_TOKENS = 256
MACHINE_IDS = ("user_id", "x-codex-installation-id")  # Claude Code's device id, Codex's installation id


class Turn(NamedTuple):
    """One request of the agent's: its route, status, seconds to the end and to the first generated
    token, and (prompt tokens, of them from the cache)."""

    route: str
    status: int
    seconds: float
    usage: tuple[int, int] | None
    first_token: float


class Recorder(http.server.ThreadingHTTPServer):
    """Forwards every request to ``upstream`` and keeps the JSON bodies posted to the agent routes."""

    def __init__(self, upstream: int, first_choice: dict | None = None, forced: int = 1) -> None:
        self.upstream, self.bodies, self.statuses = upstream, [], []
        self.first_choice, self.forced = first_choice, forced
        super().__init__(("127.0.0.1", free_port()), _Forward)


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        route = self.path.split("?")[0]
        if body and self.command == "POST" and route in ROUTES:
            sent = json.loads(body)
            self.server.bodies.append({"route": self.path, "body": sent})
            # What was sent is recorded as sent; on the way to the server, a tiny model's answer is
            # capped (it may ramble to the end of a long context), and the first turn's tool call
            # is forced: it seldom calls a tool by itself (the server still generates the call,
            # under the tool's schema), and the agent then runs its tool and sends the result.
            bound = {"max_tokens": ANSWER_TOKENS} if route == "/v1/messages" else {"max_output_tokens": ANSWER_TOKENS}
            if self.server.first_choice and len(self.server.bodies) <= self.server.forced:
                bound["tool_choice"] = self.server.first_choice
            body = json.dumps({**sent, **bound}).encode()
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=1800)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        started = time.perf_counter()
        upstream.request(self.command, self.path, body=body, headers=headers)
        reply = upstream.getresponse()
        data, first_token = b"", None
        while line := reply.readline():  # whole (SSE too): the agents read a finished stream as well
            data += line
            if first_token is None and b"delta" in line and line.startswith(b"data: "):
                first_token = time.perf_counter() - started  # the first generated text, thinking or call
        if route in ROUTES:
            seconds = time.perf_counter() - started
            usage = prompt_usage(data)
            self.server.statuses.append(Turn(self.path, reply.status, seconds, usage, first_token or seconds))
        self.send_response(reply.status)
        for k, v in reply.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_HEAD = _relay

    def log_message(self, *args) -> None:
        pass


def prompt_usage(data: bytes) -> tuple[int, int] | None:
    """(prompt tokens, of them read from the cache) from an answer of either API, streamed or not."""
    found = None
    for line in data.decode("utf-8", "replace").splitlines() or [""]:
        try:
            event = json.loads(line[6:] if line.startswith("data: ") else line)
        except ValueError:
            continue
        usage = (
            (event.get("message") or event.get("response") or event).get("usage") if isinstance(event, dict) else None
        )
        if isinstance(usage, dict) and "input_tokens" in usage:
            cached = usage.get(
                "cache_read_input_tokens", (usage.get("input_tokens_details") or {}).get("cached_tokens")
            )
            found = (usage["input_tokens"], cached or 0)
    return found


def stand_ins(value, kind: str = "text", prompt: str = PROMPT):
    """``value`` with each long string (not the prompt) replaced by a stand-in naming its kind."""
    if isinstance(value, dict):
        return {
            k: stand_ins(v, k if k in ("system", "description", "text", "instructions") else kind)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [stand_ins(v, kind) for v in value]
    kept = prompt in value or value.startswith("x-anthropic-billing-header:") if isinstance(value, str) else True
    if isinstance(value, str) and not kept and (len(value) > KEEP or kind == "description"):
        return f"<{kind} of {len(value)} characters, not recorded>"
    if kind in MACHINE_IDS and isinstance(value, str):
        return "<id, not recorded>"
    return value


def agent_binary(agent: str) -> Path | None:
    """Where the wheel put the CLI (found without importing the package: the SDK's imports are
    not needed to run the CLI it carries); None when it is not installed."""
    package, inner = ("claude_agent_sdk", "_bundled/claude") if agent == "claude" else ("codex_cli_bin", "bin/codex")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / inner
    return path if path.is_file() else None


def agent_command(
    agent: str, url: str, home: Path, workdir: Path, turns: int = 3, tools: str | None = "Write"
) -> tuple[list[str], dict]:
    """The CLI's command line and environment: print mode, one prompt, its file tool allowed (Claude
    Code: only ``tools``, or all its default tools for None; at most ``turns`` turns)."""
    env = {**os.environ, "HOME": str(home)}
    if agent == "claude":
        env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="local", DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1")
        command = [str(agent_binary(agent)), "-p", PROMPT, "--model", "local", "--max-turns", str(turns)]
        command += ["--permission-mode", "acceptEdits"] + (["--tools", tools] if tools else [])
        return command, env
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "local"\nmodel_provider = "local"\n\n[model_providers.local]\nname = "llama-ffi"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\n'
    )
    env.update(CODEX_HOME=str(codex_home), OPENAI_API_KEY="local")
    command = [str(agent_binary(agent)), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write", PROMPT]
    return command, env


def healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def wait_healthy(port: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not healthy(port):
        if time.monotonic() > deadline:
            raise TimeoutError("llama-ffi serve did not become healthy")
        time.sleep(0.3)


# The tool each agent's first turn is made to call: Claude Code's Write, Codex's exec_command.
FIRST_CALL = {"claude": {"type": "tool", "name": "Write"}, "codex": {"type": "function", "name": "exec_command"}}


def record(
    agent: str,
    model: str,
    ctx: int,
    timeout: float,
    server_command: list[str] | None = None,
    forced: int = 1,
    tools: str | None = "Write",
) -> tuple[list[dict], list[Turn], str]:
    """(the bodies the agent posted, each one's ``Turn``, its output): one run of it, start to end,
    on ``llama-ffi serve`` (or ``server_command``: llama-server, to compare); its first ``forced``
    turns call its tool. ``tools``: Claude Code's tool list (None: all of its default tools)."""
    port = free_port()
    command = server_command or [sys.executable, "-m", "llama_ffi.server"]
    server = subprocess.Popen(
        [*command, "-m", model, "-c", str(ctx), "-np", "1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    recorder = Recorder(port, FIRST_CALL[agent], forced)
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    try:
        wait_healthy(port)
        with tempfile.TemporaryDirectory() as scratch:
            home, workdir = Path(scratch) / "home", Path(scratch) / "work"
            home.mkdir()
            workdir.mkdir()
            url = f"http://127.0.0.1:{recorder.server_address[1]}"
            command, env = agent_command(agent, url, home, workdir, forced + 2, tools)
            run = subprocess.run(
                command, env=env, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
            )
            wrote = (workdir / "hello.txt").read_text() if (workdir / "hello.txt").exists() else None
        output = f"exit {run.returncode}; hello.txt: {wrote!r}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        return recorder.bodies, recorder.statuses, output
    finally:
        recorder.shutdown()
        server.terminate()
        server.wait(60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("agent", choices=("claude", "codex"))
    ap.add_argument("-m", "--model", required=True, help="a GGUF with a tool-calling chat template")
    ap.add_argument("-c", "--ctx-size", type=int, default=32768)
    ap.add_argument("--out", type=Path, help="write the fixtures here (default: only print what was sent)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--llama-server", metavar="PATH", help="run the agent against llama-server instead, to compare")
    ap.add_argument("--forced", type=int, default=1, help="the first N turns call the agent's tool (default 1)")
    ap.add_argument("--all-tools", action="store_true", help="Claude Code with its default tools (~12 k tokens)")
    args = ap.parse_args(argv)
    if agent_binary(args.agent) is None:
        print(f"{args.agent} is not installed: pip install 'llama-ffi[agents]'", file=sys.stderr)
        return 2
    server = [args.llama_server, "--no-webui", "--jinja"] if args.llama_server else None
    tools = None if args.all_tools else "Write"
    bodies, statuses, output = record(args.agent, args.model, args.ctx_size, args.timeout, server, args.forced, tools)
    print(output)
    for turn, sent in zip(statuses, bodies):
        tokens = f"{turn.usage[0]} prompt tokens, {turn.usage[1]} from the cache" if turn.usage else "no usage"
        size = f"{len(json.dumps(sent['body']))} bytes"
        print(turn.status, turn.route, f"{size}, first token {turn.first_token:.1f} s, {turn.seconds:.1f} s, {tokens}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for i, sent in enumerate(bodies):
            path = args.out / f"{args.agent}-{i + 1}.json"
            path.write_text(json.dumps(stand_ins(sent), indent=1, ensure_ascii=False) + "\n")
            print("wrote", path)
    return 0 if statuses and all(200 <= turn.status < 300 for turn in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
