"""The command tools: ``exec_shell_command`` (output and exit code; streamed as it comes when asked)
and ``get_info`` (the system and the working directory)."""

from __future__ import annotations

import codecs
import os

from llama_ffi.server.agent.tool import Call, Tool, ToolError, integer, schema, text

MAX_TIMEOUT = 60  # seconds
MAX_OUTPUT = 16 * 1024  # bytes kept of a command's output


def exec_shell_command(params: dict, call: Call) -> dict:
    command = text(params, "command")
    if not command:
        raise ToolError("'command' must be a non-empty string")
    timeout = integer(params, "timeout", 10, 1, MAX_TIMEOUT)
    max_output = integer(params, "max_output_size", MAX_OUTPUT, 1, MAX_OUTPUT)
    on_chunk = None
    if call.on_chunk is not None:
        decoder = _Utf8()
        on_chunk = lambda chunk: call.on_chunk(decoder.feed(chunk))  # noqa: E731
    try:
        ran = call.place.run(command, call.cwd, timeout, max_output, on_chunk, call.cancelled)
    except RuntimeError as error:
        raise ToolError(str(error)) from None
    tail = f"\n[timed out after {timeout} s]" if ran.timed_out else ""
    tail += f"\n[exit code: {ran.exit_code}]"
    if call.on_chunk is not None:
        call.on_chunk(tail)
    return {"plain_text_response": ran.output.decode("utf-8", errors="replace") + tail}


def get_info(params: dict, call: Call) -> dict:
    ran = call.place.run("uname -a", call.cwd, 5, 4096)
    system = ran.output.decode("utf-8", errors="replace").strip()
    cwd = call.cwd or (os.getcwd() if call.place.name == "host" else "(the runtime's own)")
    return {"plain_text_response": f"runtime: {call.place.name}\nsystem: {system}\ncwd: {cwd}\n"}


class _Utf8:
    """Bytes to text across chunks that split a character."""

    def __init__(self) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> str:
        return self.decoder.decode(chunk)


TOOLS = (
    Tool(
        "exec_shell_command",
        "Execute shell command",
        "Run a shell command and return its output (stdout and stderr together) and exit code.",
        schema(
            ("command",),
            command=("string", "the command, run by sh"),
            timeout=("integer", f"seconds before it is killed (default 10, at most {MAX_TIMEOUT})"),
            max_output_size=("integer", f"bytes of output kept (default and at most {MAX_OUTPUT})"),
        ),
        exec_shell_command,
        writes=True,
        streams=True,
    ),
    Tool(
        "get_info",
        "Get info",
        "The operating system and the working directory the tools run in.",
        schema(),
        get_info,
    ),
)
