"""Where the server-side tools run: on this machine (the default), in a container (``docker:IMAGE`` /
``podman:IMAGE``, started on first use and removed when the server stops; ``docker-container:ID`` /
``podman-container:ID``, one already running), or on a POSIX host over SSH (``ssh:TARGET``).

A place offers what the tools need and nothing more: read and write a file's bytes, list a tree
(junk directories listed but never walked), run a shell command. Away from this machine each of
these is one ``sh`` script run through ``docker exec`` or ``ssh``, its paths passed as arguments,
never pasted into the script. Every spec is checked before anything runs: a name that would reach
``docker``'s or ``ssh``'s own command line as an option is refused."""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

# directories a search lists but never descends into: they can be enormous and rarely hold answers
JUNK_DIRS = frozenset(
    {".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist", "build", "target", ".cache"}
    | {".idea", ".vscode"}
)
CONTAINER_ENGINES = ("docker", "podman")
_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./:@-]*")
_SSH_TARGET = re.compile(r"[A-Za-z0-9_.@:\[\]-]+")
HELPER_TIMEOUT = 15.0  # seconds for a listing, a read or a write away from this machine
LISTING_SECONDS = 15.0  # a walk of this machine's files stops here (a search of "/" must not run on)
LISTING_ENTRIES = 200_000


class RuntimeSpecError(ValueError):
    """A runtime spec that names no runtime, or one that would inject options."""


class _Exit(OSError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ListingTooLarge(OSError):
    pass


class Ran:
    def __init__(self, output: bytes, exit_code: int, timed_out: bool = False) -> None:
        self.output, self.exit_code, self.timed_out = output, exit_code, timed_out


def run_process(
    argv: list[str],
    *,
    cwd: str | None = None,
    stdin: bytes | None = None,
    timeout: float,
    max_output: int,
    on_chunk: Callable[[bytes], None] | None = None,
    merge_stderr: bool = True,
    cancelled: threading.Event | None = None,
) -> Ran:
    """Run ``argv`` in its own process group (a timeout or a cancel kills the group: the shell's
    children too), keeping at most ``max_output`` bytes; ``on_chunk`` sees them as they come."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as error:
        raise RuntimeError(f"cannot run {argv[0]}: {error.strerror or error}") from None
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
    output = bytearray()
    deadline = time.monotonic() + timeout
    timed_out = False
    fd = proc.stdout.fileno()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (cancelled is not None and cancelled.is_set()):
                timed_out = left <= 0
                break
            if not select.select([fd], [], [], min(left, 0.1))[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # the output closed: the command ends (or is killed at the deadline)
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                break
            chunk = chunk[: max(0, max_output - len(output))]
            if chunk:
                output += chunk
                if on_chunk is not None:
                    on_chunk(chunk)
    finally:
        _kill_group(proc)  # what the command left running goes with it
        proc.stdout.close()
        code = proc.wait()
    return Ran(bytes(output), code, timed_out)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:  # the command ended without reading it all
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Place:
    """What every place shares: a command runs as ``command()`` spells it for the place."""

    def command(self, command: str, cwd: str | None) -> tuple[list[str], str | None]:
        """The argv that runs ``command`` in ``cwd`` there, and the local directory to start it in."""
        raise NotImplementedError

    def run(self, command: str, cwd: str | None, timeout: float, max_output: int, on_chunk=None, cancelled=None) -> Ran:
        argv, local_cwd = self.command(command, cwd)
        return run_process(
            argv, cwd=local_cwd, timeout=timeout, max_output=max_output, on_chunk=on_chunk, cancelled=cancelled
        )

    def close(self) -> None:
        pass


class Host(_Place):
    """This machine: files through Python, commands through ``sh -c``."""

    name = "host"

    def read(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write(self, path: str, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def entries(self, base: str, max_depth: int) -> list[tuple[str, bool]]:
        """(path relative to ``base``, is a directory) below ``base``, ``max_depth`` levels (0: all);
        a walk past ``LISTING_SECONDS`` or ``LISTING_ENTRIES`` is a ``ListingTooLarge``."""
        out: list[tuple[str, bool]] = []
        stack = [("", 1)]
        deadline = time.monotonic() + LISTING_SECONDS
        while stack:
            if len(out) > LISTING_ENTRIES or time.monotonic() > deadline:
                raise ListingTooLarge(f"{base} holds too much to search (over {len(out)} entries): narrow the path")
            rel, depth = stack.pop()
            try:
                with os.scandir(os.path.join(base, rel) if rel else base) as it:
                    found = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            for entry in found:
                path = f"{rel}/{entry.name}" if rel else entry.name
                is_dir = entry.is_dir(follow_symlinks=False)
                out.append((path, is_dir))
                if is_dir and entry.name not in JUNK_DIRS and (max_depth == 0 or depth < max_depth):
                    stack.append((path, depth + 1))
        return out

    def command(self, command: str, cwd: str | None) -> tuple[list[str], str | None]:
        return ["sh", "-c", command], cwd


class Remote(_Place):
    """A container or an SSH host: each operation one ``sh`` script, run through ``prefix``."""

    def __init__(self, name: str, prefix: list[str], quote_remote: bool) -> None:
        # ssh hands its command to the remote shell as one string: the script and its arguments quoted
        self.name, self.prefix, self.quote_remote = name, prefix, quote_remote

    def argv(self, script: str, *args: str) -> list[str]:
        words = ["sh", "-c", script, "sh", *args]
        return [*self.prefix, shlex.join(words)] if self.quote_remote else [*self.prefix, *words]

    def _helper(self, script: str, *args: str, stdin: bytes | None = None, limit: int = 64 << 20) -> bytes:
        ran = run_process(
            self.argv(script, *args), stdin=stdin, timeout=HELPER_TIMEOUT, max_output=limit, merge_stderr=False
        )
        if ran.timed_out:
            raise OSError(f"{self.name}: no answer in {HELPER_TIMEOUT:.0f} s")
        if ran.exit_code != 0:
            raise _Exit(ran.exit_code, f"{self.name}: exit code {ran.exit_code} ({args[0] if args else script})")
        return ran.output

    def read(self, path: str) -> bytes:
        try:
            return self._helper('test -d "$1" && exit 21; test -f "$1" || exit 2; cat -- "$1"', path)
        except _Exit as failed:  # the codes say what the host's open() would have raised
            if failed.code == 21:
                raise IsADirectoryError(21, "Is a directory", path) from None
            if failed.code == 2:
                raise FileNotFoundError(2, "No such file", path) from None
            raise

    def write(self, path: str, data: bytes) -> None:
        self._helper('mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', path, stdin=data)

    def is_dir(self, path: str) -> bool:
        try:
            self._helper('test -d "$1"', path)
            return True
        except OSError:
            return False

    def entries(self, base: str, max_depth: int) -> list[tuple[str, bool]]:
        junk = " -o ".join(f"-name {shlex.quote(n)}" for n in sorted(JUNK_DIRS))
        depth = f"-maxdepth {int(max_depth)} " if max_depth > 0 else ""
        # directories first (a junk one printed, then pruned), then everything else, one per line
        script = (
            f'cd -- "$1" && find . -mindepth 1 {depth}-type d \\( {junk} \\) -print -prune -o -type d -print'
            f" && echo // && find . -mindepth 1 {depth}-type d \\( {junk} \\) -prune -o ! -type d -print"
        )
        text = self._helper(script, base).decode("utf-8", "replace")
        dirs, _, files = text.partition("//\n")
        out = [(line[2:], True) for line in dirs.splitlines() if line.startswith("./")]
        out += [(line[2:], False) for line in files.splitlines() if line.startswith("./")]
        return sorted(out)

    def command(self, command: str, cwd: str | None) -> tuple[list[str], str | None]:
        script = 'cd -- "$1" && exec sh -c "$2"' if cwd else 'exec sh -c "$2"'
        return self.argv(script, cwd or ".", command), None  # the directory is the runtime's


class StartedContainer(Remote):
    """``docker:IMAGE``: a container started on first use, reused, and removed with the server."""

    def __init__(self, engine: str, image: str) -> None:
        super().__init__(f"{engine}:{image}", [], quote_remote=False)
        self.engine, self.image = engine, image
        self.container: str | None = None
        self.lock = threading.Lock()

    def argv(self, script: str, *args: str) -> list[str]:
        with self.lock:
            if self.container is None:
                ran = run_process(
                    [self.engine, "run", "-d", "--rm", "--init", "--", self.image, "sleep", "infinity"],
                    timeout=120,
                    max_output=4096,
                    merge_stderr=False,
                )
                if ran.exit_code != 0:
                    raise OSError(f"{self.engine} could not start a container of {self.image}")
                self.container = ran.output.decode().strip()
                self.prefix = [self.engine, "exec", "-i", self.container]
        return super().argv(script, *args)

    def close(self) -> None:
        with self.lock:
            if self.container is not None:
                subprocess.run([self.engine, "rm", "-f", self.container], capture_output=True, timeout=30)
                self.container = None


def parse(spec: str | None, *, from_header: bool = False) -> Host | Remote:
    """The place a spec names (``None`` or empty: this machine). A header may name a running
    container or an SSH host; ``--tools-runtime`` may also name an image to start."""
    if not spec:
        return Host()
    scheme, sep, arg = spec.partition(":")
    if not sep or not arg:
        raise RuntimeSpecError(
            f"unknown tool runtime: {spec!r} (expected ENGINE-container:ID, ENGINE:IMAGE or ssh:HOST)"
        )
    engine = scheme.removesuffix("-container")
    if scheme.endswith("-container") and engine in CONTAINER_ENGINES:
        if not _CONTAINER_ID.fullmatch(arg):
            raise RuntimeSpecError(f"invalid container id: {arg!r}")
        return Remote(spec, [engine, "exec", "-i", arg], quote_remote=False)
    if scheme == "ssh":
        if arg.startswith("-") or not _SSH_TARGET.fullmatch(arg):
            raise RuntimeSpecError(f"invalid ssh target: {arg!r}")
        return Remote(spec, ["ssh", "-T", "-o", "BatchMode=yes", "--", arg], quote_remote=True)
    if scheme in CONTAINER_ENGINES and not from_header:
        if not _IMAGE.fullmatch(arg):
            raise RuntimeSpecError(f"invalid container image: {arg!r}")
        return StartedContainer(scheme, arg)
    raise RuntimeSpecError(f"unknown tool runtime: {scheme!r}")
