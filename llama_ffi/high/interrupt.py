"""Ctrl-C during a generation: llama.cpp's compute is stopped through its abort callback and the
call raises ``KeyboardInterrupt``, leaving the ``Llama`` usable.

The C handler (``llama_ffi_sigint_install``) replaces Python's only while work runs, and only where
Python's default handler is in place on the main thread: a SIGINT that the process ignores (a
background job started with it ignored) stays ignored, and a handler of the user's is left alone.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from collections.abc import Iterator

from llama_ffi import lib


@contextmanager
def sigint_stops_compute() -> Iterator[None]:
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    lib.llama_ffi_sigint_install()
    try:
        yield
    finally:
        lib.llama_ffi_sigint_restore()
