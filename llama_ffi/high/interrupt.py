"""Ctrl-C during a generation: llama.cpp's compute is stopped through its abort callback and the
call raises ``KeyboardInterrupt``, leaving the ``Llama`` usable.

The C handler (``llama_ffi_sigint_install``) replaces Python's only while work runs, and only where
Python's default handler is in place on the main thread: a SIGINT that the process ignores (a
background job started with it ignored) stays ignored, and a handler of the user's is left alone.
A stream checks this for every chunk (the user's code may change the handler in between), so the
check is kept to two C calls (``_signal.getsignal`` skips ``signal``'s enum conversion).
"""

from __future__ import annotations

import _signal
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from llama_ffi import lib

_MAIN_THREAD = threading.main_thread().ident


def install() -> bool:
    """Install the C handler if it may be; True when it was (then call ``lib.llama_ffi_sigint_restore``)."""
    if threading.get_ident() != _MAIN_THREAD or _signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    lib.llama_ffi_sigint_install()
    return True


@contextmanager
def sigint_stops_compute() -> Iterator[None]:
    installed = install()
    try:
        yield
    finally:
        if installed:
            lib.llama_ffi_sigint_restore()
