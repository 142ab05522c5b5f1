"""``/tools`` and ``/cors-proxy`` on a real ``llama-ffi serve``: tools listed and called (built-in and
MCP), a command's output streamed as events, the request's faults in the API's shape (fuzzed),
CORS kept to localhost while tools are on, the proxy forwarding only the headers the client names,
a SIGTERM during a slow MCP call ending the server at once, and bad agent flags refused at start."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from conftest import TREE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import ServerProcess
from waiting import process_running, wait_until

FIXTURES = TREE.path / "tools" / "server" / "tests" / "fixtures"
KEY = "sk-agent-test"
AUTH = {"Authorization": f"Bearer {KEY}"}


def mcp_json(**servers: tuple[str, ...]) -> str:
    return json.dumps(
        {
            "mcpServers": {
                n: {"command": sys.executable, "args": [str(FIXTURES / f), *a]} for n, (f, *a) in servers.items()
            }
        }
    )


@pytest.fixture(scope="module")
def server(smollm2_path):
    flags = ["-c", "512", "--api-key", KEY, "--ui-mcp-proxy"]
    flags += ["--tools", "read_file,file_glob_search,grep_search,exec_shell_command,get_info"]
    flags += ["--mcp-servers-json", mcp_json(echo=("mcp_echo_server.py",))]
    with ServerProcess(smollm2_path, *flags) as running:
        yield running


def call(server, body, headers=None, **kw):
    return httpx.post(server.url + "/tools", json=body, headers={**AUTH, **(headers or {})}, timeout=30, **kw)


def test_tools_are_listed_and_called(server, tmp_path):
    listed = httpx.get(server.url + "/tools", headers=AUTH, timeout=10).json()
    names = [t["tool"] for t in listed]
    assert names == ["read_file", "file_glob_search", "grep_search", "exec_shell_command", "get_info"] + [
        "echo_echo",
        "echo_add",
        "echo_fail_once",
    ]
    by_name = {t["tool"]: t for t in listed}
    assert by_name["exec_shell_command"]["permissions"] == {"write": True}
    assert by_name["read_file"]["permissions"] == {"write": False}
    assert by_name["echo_add"]["definition"]["function"]["parameters"]["required"] == ["a", "b"]
    (tmp_path / "notes.txt").write_text("hello tools\n")
    answer = call(server, {"tool": "read_file", "params": {"path": "notes.txt"}}, {"x-tool-cwd": str(tmp_path)})
    assert answer.status_code == 200 and answer.json() == {"plain_text_response": "hello tools\n"}
    assert call(server, {"tool": "echo_add", "params": {"a": 1, "b": 2}}).json() == {"plain_text_response": "3"}
    missing = call(server, {"tool": "read_file", "params": {"path": str(tmp_path / "none")}})
    assert missing.status_code == 200 and "not found" in missing.json()["error"]
    assert httpx.get(server.url + "/tools", timeout=10).status_code == 401  # behind the API key


def test_a_command_streams_its_output_as_events(server):
    body = {"tool": "exec_shell_command", "params": {"command": "echo one; sleep 0.5; echo two"}, "stream": True}
    arrivals = []
    with httpx.stream("POST", server.url + "/tools", json=body, headers=AUTH, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), json.loads(line[6:])))
    events = [e for _, e in arrivals]
    assert events[0] == {"chunk": "one\n"} and events[-1] == {"done": True}
    assert "".join(e.get("chunk", "") for e in events) == "one\ntwo\n\n[exit code: 0]"
    assert arrivals[-1][0] - arrivals[0][0] > 0.3  # the first came before the command ended
    not_streamable = call(server, {"tool": "read_file", "params": {"path": "x"}, "stream": True})
    assert not_streamable.status_code == 404


def test_the_requests_faults_get_the_apis_shape(server):
    cases = [
        ({"tool": "rm_everything", "params": {}}, None, 404, "unknown tool"),
        ({"params": {}}, None, 400, "'tool'"),
        ({"tool": "read_file", "params": [1]}, None, 400, "'params'"),
        ({"tool": "exec_shell_command", "params": {"command": "id"}}, {"x-tool-runtime": "fake:x"}, 500, "unknown"),
        ({"tool": "get_info", "params": {}}, {"x-tool-runtime": "ssh:-oProxyCommand=x"}, 500, "invalid ssh target"),
    ]
    for body, headers, status, message in cases:
        answer = call(server, body, headers)
        assert answer.status_code == status, (body, answer.text)
        assert message in answer.json()["error"]["message"]
    raw = httpx.post(server.url + "/tools", content=b"{not json", headers=AUTH, timeout=10)
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"


PARAM_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 200), st.text(max_size=8), st.lists(st.integers(), max_size=3)
)
RELATIVE = st.text(alphabet="ab./_*?[]", max_size=8).filter(lambda p: not p.startswith("/") and ".." not in p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tool=st.sampled_from(["read_file", "file_glob_search", "grep_search", "get_info", "echo_echo", "nope", 5]),
    params=st.dictionaries(
        st.sampled_from(["path", "pattern", "include", "type", "max_depth", "limit", "start_line", "message"]),
        PARAM_VALUES,
        max_size=4,
    ),
    path=RELATIVE,
)
def test_fuzzed_calls_never_fail_the_server(server, tmp_path, tool, params, path):
    params = {**params, "path": path}  # read-only tools, under a scratch directory
    answer = call(server, {"tool": tool, "params": params}, {"x-tool-cwd": str(tmp_path)})
    assert answer.status_code in (200, 400, 404), answer.text
    body = answer.json()
    if answer.status_code == 200:
        assert isinstance(body, dict) and body and (set(body) == {"error"} or "error" not in body)
    else:
        assert set(body["error"]) >= {"message", "type"}


def test_cors_allows_only_localhost_pages_while_tools_are_on(server):
    def preflight(origin):
        headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        return httpx.options(server.url + "/tools", headers=headers, timeout=10)

    assert preflight("http://localhost:5173").headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "access-control-allow-origin" not in preflight("https://evil.example").headers


def test_the_proxy_forwards_only_the_headers_the_client_names(server):
    seen = {}

    class Target(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            if self.path == "/events":  # an event stream, sent in two parts half a second apart
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for part in (b"data: one\n\n", b"data: two\n\n"):
                    self.wfile.write(part)
                    self.wfile.flush()
                    time.sleep(0.5)
                return
            seen.update({k.lower(): v for k, v in self.headers.items()})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b'{"ok": true}')

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    try:
        url = f"{server.url}/cors-proxy?url=http://127.0.0.1:{target.server_port}/x"
        headers = {**AUTH, "Cookie": "s=secret", "x-llama-server-proxy-header-authorization": "Bearer theirs"}
        answer = httpx.get(url, headers=headers, timeout=10)
        assert answer.status_code == 200 and answer.json() == {"ok": True}
        assert seen["authorization"] == "Bearer theirs" and "cookie" not in seen
        assert httpx.post(url, headers=AUTH, json={}, timeout=10).status_code == 204
        bad = httpx.get(f"{server.url}/cors-proxy?url=file:///etc/passwd", headers=AUTH, timeout=10)
        assert bad.status_code == 400
        arrivals = []
        events = f"{server.url}/cors-proxy?url=http://127.0.0.1:{target.server_port}/events"
        with httpx.stream("GET", events, headers=AUTH, timeout=10) as response:
            for line in response.iter_lines():
                if line:
                    arrivals.append((time.monotonic(), line))
        assert [line for _, line in arrivals] == ["data: one", "data: two"]
        assert arrivals[1][0] - arrivals[0][0] > 0.3  # relayed as it came, not when it ended
    finally:
        target.shutdown()
        target.server_close()


def test_without_agent_flags_the_routes_answer_403(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "512") as plain:
        assert httpx.get(plain.url + "/tools", timeout=10).status_code == 403
        assert httpx.post(plain.url + "/tools", json={"tool": "read_file"}, timeout=10).status_code == 403
        assert httpx.get(plain.url + "/cors-proxy?url=http://127.0.0.1:1/", timeout=10).status_code == 403


def test_sigterm_during_a_slow_mcp_call_stops_the_server_at_once(smollm2_path):
    flags = ["-c", "512", "--mcp-servers-json", mcp_json(slow=("mcp_slow_server.py", "--delay", "60"))]
    running = ServerProcess(smollm2_path, *flags).start()
    result = {}

    def slow():
        try:
            result["answer"] = httpx.post(
                running.url + "/tools", json={"tool": "slow_sleep", "params": {"seconds": 60}}, timeout=60
            )
        except httpx.TransportError as error:
            result["answer"] = error

    caller = threading.Thread(target=slow)
    caller.start()
    wait_until(lambda: process_running("mcp_slow_server.py"), "the slow MCP server to start for the call")
    began = time.monotonic()
    assert running.stop() == 0
    assert time.monotonic() - began < 5
    caller.join(10)
    answer = result["answer"]
    assert not isinstance(answer, httpx.Response) or "error" in answer.json()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tools", "read_file,format_disk"], "unknown tool format_disk"),
        (["--mcp-servers-json", "not valid json"], "--mcp-servers-json: not JSON"),
        (["--mcp-servers-config", "/nonexistent/mcp.json"], "/nonexistent/mcp.json"),
        (["--tools", "all", "--tools-runtime", "docker-container:--privileged"], "invalid container id"),
    ],
)
def test_bad_agent_flags_stop_the_start_with_their_reason(smollm2_path, flags, message):
    done = subprocess.run(
        [sys.executable, "-m", "llama_ffi.server", "-m", str(smollm2_path), "--port", "1", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr
