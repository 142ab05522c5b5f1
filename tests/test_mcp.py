"""MCP servers over stdio (``llama_ffi.server.agent.mcp``), driven by the MCP test servers of the
pinned llama.cpp tree (``tools/server/tests/fixtures``): tools listed at start-up under
``<server>_<tool>``, calls answered in order and at once, a tool's own error, a server too slow
(killed, and the next call served by a new process), one that crashed (started again), one whose
grandchild holds its pipes (closed at once), and configs refused with their reason."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import TREE
from waiting import wait_until

from llama_ffi.server.agent import mcp
from llama_ffi.server.agent.toolbox import Toolbox

FIXTURES = TREE.path / "tools" / "server" / "tests" / "fixtures"


def spec(name: str, fixture: str, *args: str, timeout_ms: int = 30000) -> mcp.ServerSpec:
    config = {"mcpServers": {name: {"command": sys.executable, "args": [str(FIXTURES / fixture), *args]}}}
    config["mcpServers"][name]["timeout_ms"] = timeout_ms
    return mcp.parse_config(json.dumps(config), "test")[0]


@pytest.fixture
def started():
    boxes = []

    def start(*specs: mcp.ServerSpec, builtin=()) -> Toolbox:
        box = Toolbox(builtin, mcp_servers=specs)
        boxes.append(box)
        box.start()
        return box

    yield start
    for box in boxes:
        box.close()


def test_tools_are_listed_under_the_server_name_and_called(started):
    box = started(spec("echo", "mcp_echo_server.py"), builtin=["read_file"])
    listed = {t["tool"]: t for t in box.listing()}
    assert {"read_file", "echo_echo", "echo_add", "echo_fail_once"} == set(listed)
    echo = listed["echo_echo"]
    assert echo["type"] == "mcp" and echo["definition"]["function"]["parameters"]["required"] == ["message"]
    assert box.servers[0].conn is None  # listed at start-up, then stopped
    assert box.invoke("echo_echo", {"message": "hi"}) == {"plain_text_response": "echo: hi"}
    assert box.invoke("echo_add", {"a": 2, "b": 40}) == {"plain_text_response": "42"}
    assert box.invoke("echo_fail_once", {}) == {"error": "transient error"}
    assert box.invoke("echo_fail_once", {}) == {"plain_text_response": "ok"}  # the same process: its state kept
    with ThreadPoolExecutor(8) as pool:  # calls share the process; each gets its own answer
        answers = list(pool.map(lambda i: box.invoke("echo_echo", {"message": f"m{i}"}), range(40)))
    assert answers == [{"plain_text_response": f"echo: m{i}"} for i in range(40)]


def test_notifications_and_stray_lines_are_not_taken_for_answers(started):
    box = started(spec("noisy", "mcp_malformed_server.py"), spec("burst", "mcp_burst_server.py"))
    assert box.invoke("noisy_echo", {"message": "a"}) == {"plain_text_response": "echo: a"}
    assert box.invoke("burst_echo", {"message": "b"})["plain_text_response"].endswith("b")


def test_a_slow_server_is_killed_at_its_timeout_and_the_next_call_gets_a_new_one(started):
    box = started(spec("slow", "mcp_slow_server.py", "--delay", "30", timeout_ms=500))
    first = box.servers[0]
    began = time.monotonic()
    answer = box.invoke("slow_sleep", {"seconds": 30})
    assert time.monotonic() - began < 3 and "did not answer tools/call in 0.5 s" in answer["error"]
    assert first.conn is None  # the hung process was dropped
    assert box.invoke("slow_sleep", {"seconds": 0}) == {"plain_text_response": "slept 0s"}


def test_a_crashed_server_is_started_again(started):
    box = started(spec("crash", "mcp_crash_server.py"))
    assert box.invoke("crash_crash", {})["plain_text_response"] == "crashing..."
    pid = box.servers[0].conn.proc.pid
    assert box.invoke("crash_echo", {"message": "again"}) == {"plain_text_response": "echo: again"}
    assert box.servers[0].conn.proc.pid != pid


def test_a_grandchild_holding_the_pipes_does_not_hold_up_the_close(started):
    box = started(spec("gc", "mcp_grandchild_server.py"))
    assert box.invoke("gc_echo", {"message": "x"}) == {"plain_text_response": "echo: x"}
    began = time.monotonic()
    box.close()
    assert time.monotonic() - began < 2


def test_abort_answers_a_call_in_flight_at_once(started):
    box = started(spec("slow", "mcp_slow_server.py", "--delay", "30"))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(box.invoke, "slow_sleep", {"seconds": 30})
        wait_until(lambda: any(s.conn is not None and s.conn.pending for s in box.servers), "the call in flight")
        began = time.monotonic()
        box.abort()
        answer = pending.result(timeout=5)
    assert time.monotonic() - began < 2 and "was stopped" in answer["error"]
    assert "stopping" in box.invoke("slow_sleep", {"seconds": 0})["error"]


def test_a_server_that_does_not_start_lists_nothing_and_the_rest_serve(started):
    missing = mcp.ServerSpec("bad", "this-command-does-not-exist-42")
    box = started(missing, spec("good", "mcp_echo_server.py"))
    names = [t["tool"] for t in box.listing()]
    assert names == ["good_echo", "good_add", "good_fail_once"]


def test_configs_are_checked(tmp_path):
    with pytest.raises(ValueError, match="not JSON"):
        mcp.parse_config("not valid json", "--mcp-servers-json")
    with pytest.raises(ValueError, match="mcpServers"):
        mcp.parse_config('{"servers": {}}', "x")
    with pytest.raises(ValueError, match="args must be a list of strings"):
        mcp.parse_config('{"mcpServers": {"a": {"command": "x", "args": "y"}}}', "x")
    with pytest.raises(ValueError, match="timeout_ms"):
        mcp.parse_config('{"mcpServers": {"a": {"command": "x", "timeout_ms": -1}}}', "x")
    with pytest.raises(ValueError, match="/nonexistent/mcp.json"):
        mcp.load_config("/nonexistent/mcp.json", None)
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"a": {"command": "x", "env": {"K": "v"}}, "no_command": {}}}')
    (only,) = mcp.load_config(str(path), None)
    assert only == mcp.ServerSpec("a", "x", env=(("K", "v"),))


PAGED_SERVER = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}}, "serverInfo": {"name": "p"}}
    elif msg["method"] == "tools/list":
        page = int(msg.get("params", {}).get("cursor") or 0)
        result = {"tools": [{"name": f"t{page}", "inputSchema": {"type": "object"}}]}
        if page < LAST:
            result["nextCursor"] = str(page + 1)
    else:
        result = {"content": [{"type": "text", "text": "ran"}]}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


@pytest.mark.parametrize("last, listed", [(2, 3), (10**6, mcp.MAX_PAGES)])
def test_a_tool_list_in_pages_is_read_to_its_end_and_an_endless_one_is_cut(started, tmp_path, last, listed):
    script = tmp_path / "paged.py"
    script.write_text(PAGED_SERVER.replace("LAST", str(last)))
    box = started(mcp.ServerSpec("paged", sys.executable, (str(script),)))
    names = [t["tool"] for t in box.listing()]
    assert len(names) == listed and names[:3] == ["paged_t0", "paged_t1", "paged_t2"]
    assert box.invoke("paged_t1", {}) == {"plain_text_response": "ran"}
