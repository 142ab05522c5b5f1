"""The server-side tools (``llama_ffi.server.agent``) called as the ``/tools`` route calls them: the
file tools, the searches, commands (output, exit code, timeouts that kill what the command left
running, output as it comes), the runtime specs refused before anything runs, and the same tools
through a container or SSH: stand-in ``docker`` and ``ssh`` commands on PATH run what they are
given with ``sh`` here, so the scripts, their quoting and their arguments are the real ones."""

from __future__ import annotations

import os
import stat
import time

import pytest

from llama_ffi.server.agent import runtime
from llama_ffi.server.agent.toolbox import BUILTIN, Toolbox, builtin_names


@pytest.fixture
def box():
    toolbox = Toolbox(list(BUILTIN))
    yield toolbox
    toolbox.close()


@pytest.fixture
def tree(tmp_path):
    """A small project (a name with a space and a quote, a junk directory, nesting)."""
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "build" / "out").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# demo\nTODO: write it\n")
    (tmp_path / "src" / "main.py").write_text("import os\n\ndef main():\n    return 'TODO later'\n")
    (tmp_path / "src" / "deep" / "it's here.txt").write_text("needle\n")
    (tmp_path / "build" / "artifact.py").write_text("TODO in a build\n")
    return tmp_path


def test_write_read_and_edit_a_file_relative_to_the_working_directory(box, tmp_path):
    cwd = str(tmp_path)
    written = box.invoke("write_file", {"path": "a/b.txt", "content": "one\ntwo\nthree\n"}, cwd=cwd)
    assert written == {"result": "file written successfully", "path": f"{cwd}/a/b.txt", "bytes": 14}
    assert (tmp_path / "a" / "b.txt").read_text() == "one\ntwo\nthree\n"
    assert box.invoke("read_file", {"path": "a/b.txt"}, cwd=cwd) == {"plain_text_response": "one\ntwo\nthree\n"}
    ranged = box.invoke("read_file", {"path": "a/b.txt", "start_line": 2, "end_line": 3, "append_loc": True}, cwd=cwd)
    assert ranged == {"plain_text_response": "2: two\n3: three\n"}
    edits = [{"old_text": "two", "new_text": "2"}, {"old_text": "one\n", "new_text": ""}]
    assert box.invoke("edit_file", {"path": "a/b.txt", "edits": edits}, cwd=cwd)["edits_applied"] == 2
    assert (tmp_path / "a" / "b.txt").read_text() == "2\nthree\n"
    # a model's own "cwd" argument counts only when the client set none
    assert box.invoke("read_file", {"path": "b.txt", "cwd": f"{cwd}/a"})["plain_text_response"] == "2\nthree\n"
    assert "2\n" in box.invoke("read_file", {"path": "a/b.txt", "cwd": "/nowhere"}, cwd=cwd)["plain_text_response"]


def test_file_tools_refuse_with_an_error_the_model_can_read(box, tmp_path):
    (tmp_path / "f.txt").write_text("dup dup\nx\n")
    (tmp_path / "bin").write_bytes(b"\x7fELF\0\0\1")
    cwd = str(tmp_path)

    def error(tool, params):
        answer = box.invoke(tool, params, cwd=cwd)
        assert set(answer) == {"error"}, answer
        return answer["error"]

    assert "unique" in error("edit_file", {"path": "f.txt", "edits": [{"old_text": "dup", "new_text": "d"}]})
    overlapping = [{"old_text": "dup dup", "new_text": "a"}, {"old_text": "p d", "new_text": "b"}]
    assert "overlap" in error("edit_file", {"path": "f.txt", "edits": overlapping})
    assert "not found" in error("edit_file", {"path": "f.txt", "edits": [{"old_text": "zzz", "new_text": ""}]})
    assert (tmp_path / "f.txt").read_text() == "dup dup\nx\n"  # a refused edit changes nothing
    assert "not found" in error("read_file", {"path": "missing.txt"})
    assert "binary" in error("read_file", {"path": "bin"})
    assert "non-empty string" in error("read_file", {"path": 3})
    assert "integer" in error("read_file", {"path": "f.txt", "start_line": "2"})
    assert "invalid type" in error("file_glob_search", {"type": "bogus"})
    assert "invalid limit" in error("file_glob_search", {"limit": 0})
    assert "invalid pattern" in error("grep_search", {"pattern": "("})


def test_a_long_file_is_cut_with_a_note_saying_where_to_read_on(box, tmp_path):
    (tmp_path / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 5001)))
    text = box.invoke("read_file", {"path": str(tmp_path / "long.txt")})["plain_text_response"]
    assert text.startswith("line 1\n") and len(text) < 17000
    last = int(text.split("[truncated at line ")[1].split()[0])
    assert f"start_line={last + 1}]" in text
    more = box.invoke("read_file", {"path": str(tmp_path / "long.txt"), "start_line": last + 1})
    assert more["plain_text_response"].startswith(f"line {last + 1}\n")


def test_glob_search_lists_junk_directories_without_walking_them(box, tree):
    listed = box.invoke("file_glob_search", {"type": "all"}, cwd=str(tree))
    paths = [e["path"] for e in listed["entries"]]
    assert paths == sorted(paths) and "build" in paths and "src/deep/it's here.txt" in paths
    assert not [p for p in paths if p.startswith("build/")]
    dirs = box.invoke("file_glob_search", {"path": str(tree), "type": "dir"})
    assert "src/deep/" in dirs["plain_text_response"] and all(e["type"] == "dir" for e in dirs["entries"])
    python = box.invoke("file_glob_search", {"path": str(tree), "include": "src/**/*.py"})
    assert [e["path"] for e in python["entries"]] == ["src/main.py"]
    shallow = box.invoke("file_glob_search", {"path": str(tree), "max_depth": 1, "exclude": "*.md"})
    assert shallow["entries"] == []  # README.md is the only file at depth 1
    one = box.invoke("file_glob_search", {"path": str(tree), "limit": 1})
    assert len(one["entries"]) == 1 and "Total matches: 3" in one["plain_text_response"]


def test_grep_search_finds_lines_with_numbers_and_context(box, tree):
    found = box.invoke("grep_search", {"path": str(tree), "pattern": "todo", "ignore_case": True})
    text = found["plain_text_response"]
    assert "README.md:TODO: write it" in text and "src/main.py:    return 'TODO later'" in text
    assert "artifact" not in text and "Total matches: 2" in text  # build/ is junk
    numbered = box.invoke(
        "grep_search",
        {"path": str(tree / "src"), "pattern": "def main", "return_line_numbers": True, "context_lines": 1},
    )["plain_text_response"]
    assert "main.py-2-\nmain.py:3:def main():\nmain.py-4-    return 'TODO later'" in numbered
    literal = box.invoke("grep_search", {"path": str(tree), "pattern": "it(", "literal": True})
    assert "Total matches: 0" in literal["plain_text_response"]
    only_md = box.invoke("grep_search", {"path": str(tree), "pattern": "TODO", "include": "*.md"})
    assert "Total matches: 1" in only_md["plain_text_response"]


def test_a_command_gives_its_output_and_exit_code_and_streams_it(box, tmp_path):
    answer = box.invoke("exec_shell_command", {"command": "echo out; echo err >&2; exit 3"}, cwd=str(tmp_path))
    assert answer == {"plain_text_response": "out\nerr\n\n[exit code: 3]"}
    assert box.invoke("exec_shell_command", {"command": "pwd"}, cwd=str(tmp_path))["plain_text_response"].startswith(
        str(tmp_path)
    )
    chunks: list[str] = []
    streamed = box.invoke("exec_shell_command", {"command": "echo one; sleep 0.3; echo two"}, on_chunk=chunks.append)
    assert len(chunks) >= 3 and "".join(chunks) == streamed["plain_text_response"]
    assert chunks[0] == "one\n" and chunks[-1] == "\n[exit code: 0]"
    cut = box.invoke("exec_shell_command", {"command": "seq 1 2000", "max_output_size": 100})
    kept, tail = cut["plain_text_response"].split("\n[exit code")
    assert len(kept) == 100 and kept.startswith("1\n2\n3\n") and tail == ": 0]"


def test_a_command_past_its_timeout_is_killed_with_what_it_started(box, tmp_path):
    marker = tmp_path / "pid"
    started = time.monotonic()
    answer = box.invoke("exec_shell_command", {"command": f"sleep 60 & echo $! > {marker}; wait", "timeout": 1})
    assert time.monotonic() - started < 10
    assert answer["plain_text_response"].endswith("[timed out after 1 s]\n[exit code: -9]")
    pid = int(marker.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "the command's background child outlived it"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_tool_names_and_runtime_specs_are_checked_before_anything_runs():
    assert builtin_names("all") == list(BUILTIN) and builtin_names("read_file, grep_search") == [
        "read_file",
        "grep_search",
    ]
    with pytest.raises(ValueError, match="unknown tool rm_rf"):
        builtin_names("read_file,rm_rf")
    refused = {
        "fake:x": "unknown tool runtime",
        "nothing": "unknown tool runtime",
        "ssh:-oProxyCommand=touch /tmp/x": "invalid ssh target",
        "ssh:host; rm -rf /": "invalid ssh target",
        "docker-container:--privileged": "invalid container id",
        "podman-container:a b": "invalid container id",
        "docker:--privileged": "invalid container image",
    }
    for spec, message in refused.items():
        with pytest.raises(runtime.RuntimeSpecError, match=message):
            runtime.parse(spec)
    with pytest.raises(runtime.RuntimeSpecError, match="unknown tool runtime"):
        runtime.parse("docker:busybox", from_header=True)  # a request may not start containers
    assert isinstance(runtime.parse("ssh:user@build-host"), runtime.Remote)


STANDIN = {
    # docker exec -i ID sh -c SCRIPT sh ARGS...: run what follows the id here
    "docker": '#!/bin/sh\necho "$*" >> "$STANDIN_LOG"\n[ "$1" = exec ] || exit 125\nshift 3\nexec "$@"\n',
    # ssh -T -o BatchMode=yes -- HOST COMMAND: the remote shell reads COMMAND (one quoted string)
    "ssh": '#!/bin/sh\necho "$*" >> "$STANDIN_LOG"\nshift 5\nexec sh -c "$1"\n',
}


@pytest.mark.parametrize("spec", ["docker-container:c0ffee", "ssh:builder@host"])
def test_the_tools_run_through_a_container_or_ssh_as_on_this_machine(spec, tree, tmp_path_factory, monkeypatch):
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, script in STANDIN.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(stat.S_IRWXU)
    log = bin_dir / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_LOG", str(log))
    here, away = Toolbox(list(BUILTIN)), Toolbox(list(BUILTIN), runtime_spec=spec)
    cwd = str(tree)
    calls = [
        ("read_file", {"path": "src/deep/it's here.txt"}),
        ("file_glob_search", {"type": "all"}),
        ("file_glob_search", {"type": "dir", "max_depth": 1}),
        ("grep_search", {"pattern": "TODO", "return_line_numbers": True}),
        ("exec_shell_command", {"command": 'ls src; echo "$HOME" | wc -c; exit 4'}),
    ]
    for tool, params in calls:
        assert away.invoke(tool, params, cwd=cwd) == here.invoke(tool, params, cwd=cwd), tool
    written = away.invoke("write_file", {"path": "new dir/a'b.txt", "content": "x$(echo no)\n"}, cwd=cwd)
    assert written["result"] == "file written successfully"
    assert (tree / "new dir" / "a'b.txt").read_text() == "x$(echo no)\n"
    away.invoke("edit_file", {"path": "new dir/a'b.txt", "edits": [{"old_text": "x", "new_text": "y"}]}, cwd=cwd)
    assert (tree / "new dir" / "a'b.txt").read_text() == "y$(echo no)\n"
    assert "not found" in away.invoke("read_file", {"path": "nope"}, cwd=cwd)["error"]
    # the header's runtime wins over the server's; each call went through the stand-in
    header = "ssh:h" if spec.startswith("docker") else "docker-container:c1"
    assert away.invoke("read_file", {"path": "README.md"}, cwd=cwd, runtime_spec=header)["plain_text_response"]
    lines = log.read_text().splitlines()
    assert len(lines) >= 10 and lines[-1].startswith("exec -i c1" if header.startswith("docker") else "-T -o")


def test_a_search_of_too_large_a_tree_stops_with_an_error(box, tree, monkeypatch):
    monkeypatch.setattr(runtime, "LISTING_ENTRIES", 3)
    for tool, params in (("file_glob_search", {}), ("grep_search", {"pattern": "x"})):
        answer = box.invoke(tool, {**params, "path": str(tree)})
        assert "holds too much to search" in answer["error"], answer
