"""Waiting for a state, not for a time: poll ``condition`` until it holds, failing with ``what``
at the deadline (a fixed sleep is either too short on a busy machine or wasted on a fast one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60.0, every: float = 0.02):
    """``condition()``'s first true value; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)


def steady(read: Callable[[], object], what: str, quiet: float = 0.3, timeout: float = 60.0):
    """``read()``'s value once it has not changed for ``quiet`` seconds (a stream that stopped
    because its reader stopped reading)."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what} to settle"
        time.sleep(0.02)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
    return last


def process_running(fragment: str) -> bool:
    """Whether a process of this machine has ``fragment`` in its command line."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if fragment.encode() in cmdline.read_bytes():
                return True
        except OSError:  # it ended meanwhile
            continue
    return False
