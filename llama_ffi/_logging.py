"""Route llama.cpp / ggml / mtmd log output to the Python logger ``llama_ffi``.

Silent by default (a NullHandler, level WARNING): a user sees native logs only after configuring
``logging``. Messages below the logger's level are dropped before any string is decoded.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from llama_ffi._lib import ffi, lib

logger = logging.getLogger("llama_ffi")
logger.addHandler(logging.NullHandler())
if logger.level == logging.NOTSET:
    logger.setLevel(logging.WARNING)

_LEVELS = {
    lib.GGML_LOG_LEVEL_NONE: logging.INFO,
    lib.GGML_LOG_LEVEL_DEBUG: logging.DEBUG,
    lib.GGML_LOG_LEVEL_INFO: logging.INFO,
    lib.GGML_LOG_LEVEL_WARN: logging.WARNING,
    lib.GGML_LOG_LEVEL_ERROR: logging.ERROR,
}


class _LineAssembler:
    """llama.cpp logs in pieces (GGML_LOG_LEVEL_CONT continues the previous one): emit whole lines."""

    def __init__(self) -> None:
        self.level = logging.INFO
        self.parts: list[str] = []

    def feed(self, native_level: int, text: str) -> None:
        if native_level != lib.GGML_LOG_LEVEL_CONT:
            self.flush()
            self.level = _LEVELS.get(native_level, logging.INFO)
        self.parts.append(text)
        if text.endswith("\n"):
            self.flush()

    def flush(self) -> None:
        if self.parts:
            message = "".join(self.parts).rstrip("\n")
            self.parts = []
            if message:
                logger.log(self.level, message)


_assembler = _LineAssembler()
_last_level = [logging.INFO]
_captures = threading.local()  # per thread: a list collecting WARN/ERROR text, while capturing


@contextlib.contextmanager
def capture_errors():
    """Collect the warnings and errors llama.cpp logs on this thread (to name a failure's reason)."""
    previous = getattr(_captures, "lines", None)
    lines: list[str] = []
    _captures.lines = lines
    try:
        yield lines
    finally:
        _captures.lines = previous


def reason(lines: list[str], default: str) -> str:
    text = " ".join("".join(lines).split())
    return text or default


@ffi.def_extern()
def llama_ffi_on_log(level, text, user_data):  # called by C, possibly from a worker thread
    if level == lib.GGML_LOG_LEVEL_CONT:
        py_level = _last_level[0]
    else:
        py_level = _LEVELS.get(level, logging.INFO)
        _last_level[0] = py_level
    captured = getattr(_captures, "lines", None)
    if captured is not None and py_level >= logging.WARNING:
        captured.append(ffi.string(text).decode("utf-8", "replace"))
    if not logger.isEnabledFor(py_level):
        return
    _assembler.feed(level, ffi.string(text).decode("utf-8", "replace"))


def install() -> None:
    lib.llama_log_set(lib.llama_ffi_on_log, ffi.NULL)
    lib.mtmd_helper_log_set(lib.llama_ffi_on_log, ffi.NULL)


def enable_verbose_logging() -> None:
    """``Llama(verbose=True)``: llama.cpp's INFO messages on stderr (a handler added once)."""
    if not any(
        isinstance(h, logging.StreamHandler) and not isinstance(h, logging.NullHandler) for h in logger.handlers
    ):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
