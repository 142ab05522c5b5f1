"""The saved state of a ``Llama``: the tokens its KV cache holds, then llama.cpp's context state.

Layout: magic ``LFFISTA1``, the token count (u32 little-endian), the tokens (i32 each), the bytes
of ``llama_state_get_data``. Read back, it is checked before anything reaches llama.cpp.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from llama_ffi.high import compat

MAGIC = b"LFFISTA1"
_COUNT = struct.Struct("<I")


def encode(tokens: list[int], context_state: bytes) -> bytes:
    return MAGIC + _COUNT.pack(len(tokens)) + np.asarray(tokens, dtype="<i4").tobytes() + context_state


def decode(data: bytes) -> tuple[list[int], bytes]:
    """(tokens, llama.cpp's context state) of a saved state; ValueError when it is not one."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _COUNT.size:
        raise ValueError("not a llama_ffi state (bad magic)")
    (n,) = _COUNT.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _COUNT.size
    if len(data) < start + 4 * n:
        raise ValueError("truncated llama_ffi state")
    tokens = np.frombuffer(data, dtype="<i4", count=n, offset=start).tolist()
    return tokens, bytes(data[start + 4 * n:])


def write(path: str | os.PathLike, data: bytes) -> None:
    """Write atomically: a crash leaves the old file or the new one, never half of one."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read(state: bytes | bytearray | str | os.PathLike) -> bytes:
    if isinstance(state, (bytes, bytearray)):
        return bytes(state)
    path = os.fspath(state)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"state file not found: {path}")
    with open(path, "rb") as f:
        return f.read()


def save(llm, path: str | os.PathLike | None = None) -> compat.LlamaState | None:
    """The context's state (KV cache) with the tokens it holds: returned as bytes (with
    llama-cpp-python's LlamaState attributes), or written to ``path``. ``load`` takes either."""
    with llm.lock:
        tokens = list(llm.tokens)
        data = encode(tokens, llm.context.state_bytes())
    if path is None:
        return compat.LlamaState(data, tokens, llm.seed)
    write(path, data)
    return None


def load(llm, saved: bytes | str | os.PathLike) -> None:
    tokens, context_state = decode(read(saved))
    with llm.lock:
        llm.tokenizer.check_tokens(tokens)
        llm.context.set_state_bytes(context_state)
        llm.tokens = tokens
        # llama.cpp's state holds the KV cache but not the logits: recompute the last
        # token's, as llama.cpp's server does after restoring a slot.
        if tokens:
            last_pos = len(tokens) - 1
            llm.context.seq_rm(0, last_pos, -1)
            last = llm.tokens.pop()
            llm._resync_drafter(llm.tokens)
            llm._decode([last], last_pos)
        else:
            llm._resync_drafter([])
