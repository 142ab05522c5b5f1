"""What llama.cpp would abort on (GGML_ASSERT), checked from the GGUF header before loading.

llama.cpp reports most damage in a file as a load error, but a few values pass its loader and
then kill the process with an assertion, at load or at the first decode. The header is read with
ggml's own ``gguf_*`` API (no tensor data is read) and those values raise ``ValueError`` naming the
file and the problem. A file ggml's reader cannot parse is left to llama.cpp, which reports why.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors
from llama_ffi.high.errors import RequestValueError

# src/llama-hparams.h: llama_model_base::load_hparams asserts 0 < n_layer <= LLAMA_MAX_LAYERS.
LLAMA_MAX_LAYERS = 512
# Hyper-parameters ggml asserts to be >= 0 (the norm epsilons, at the first decode).
EPSILON_KEYS = ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon")
TOKENS_KEY = "tokenizer.ggml.tokens"
INTEGER_TYPES = {
    lib.GGUF_TYPE_UINT8: lib.gguf_get_val_u8,
    lib.GGUF_TYPE_INT8: lib.gguf_get_val_i8,
    lib.GGUF_TYPE_UINT16: lib.gguf_get_val_u16,
    lib.GGUF_TYPE_INT16: lib.gguf_get_val_i16,
    lib.GGUF_TYPE_UINT32: lib.gguf_get_val_u32,
    lib.GGUF_TYPE_INT32: lib.gguf_get_val_i32,
    lib.GGUF_TYPE_UINT64: lib.gguf_get_val_u64,
    lib.GGUF_TYPE_INT64: lib.gguf_get_val_i64,
}
FLOAT_TYPES = {lib.GGUF_TYPE_FLOAT32: lib.gguf_get_val_f32, lib.GGUF_TYPE_FLOAT64: lib.gguf_get_val_f64}
GGML_MAX_DIMS = 4


class Header:
    """Typed reads of one open ``gguf_context`` (each read checks the type ggml would assert on)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def find(self, key: str) -> int:
        return lib.gguf_find_key(self.ctx, key.encode())

    def string(self, key: str) -> str | None:
        i = self.find(key)
        if i < 0 or lib.gguf_get_kv_type(self.ctx, i) != lib.GGUF_TYPE_STRING:
            return None
        return ffi.string(lib.gguf_get_val_str(self.ctx, i)).decode("utf-8", "replace")

    def integer(self, key: str) -> int | None:
        i = self.find(key)
        read = INTEGER_TYPES.get(lib.gguf_get_kv_type(self.ctx, i)) if i >= 0 else None
        return read(self.ctx, i) if read else None

    def number(self, key: str) -> float | None:
        i = self.find(key)
        read = FLOAT_TYPES.get(lib.gguf_get_kv_type(self.ctx, i)) if i >= 0 else None
        return read(self.ctx, i) if read else None

    def strings(self, key: str) -> list[bytes] | None:
        i = self.find(key)
        if (
            i < 0
            or lib.gguf_get_kv_type(self.ctx, i) != lib.GGUF_TYPE_ARRAY
            or lib.gguf_get_arr_type(self.ctx, i) != lib.GGUF_TYPE_STRING
        ):
            return None
        get = lib.gguf_get_arr_str
        return [ffi.string(get(self.ctx, i, k)) for k in range(lib.gguf_get_arr_n(self.ctx, i))]

    def tensors(self) -> Iterator[tuple[str, int, list[int]]]:
        """(name, ggml type, shape) of every tensor."""
        for t in range(lib.gguf_get_n_tensors(self.ctx)):
            ne = lib.gguf_get_tensor_ne(self.ctx, t)
            yield (
                ffi.string(lib.gguf_get_tensor_name(self.ctx, t)).decode("utf-8", "replace"),
                lib.gguf_get_tensor_type(self.ctx, t),
                [ne[d] for d in range(GGML_MAX_DIMS)],
            )


@contextmanager
def open_header(path: Path) -> Iterator[Header | None]:
    """The header of ``path``, or None where ggml's reader refuses the file."""
    params = ffi.new("struct gguf_init_params *")
    params.no_alloc = True
    params.ctx = ffi.NULL
    with capture_errors():  # its complaints are llama.cpp's to report, at the real load
        ctx = lib.gguf_init_from_file(os.fsencode(path), params[0])
    if ctx == ffi.NULL:
        yield None
        return
    try:
        yield Header(ctx)
    finally:
        lib.gguf_free(ctx)


# ---- the checks: each returns a problem or None -------------------------------------------------


def layer_count(h: Header, arch: str) -> str | None:
    n = h.integer(f"{arch}.block_count")
    if n is not None and not 0 < n <= LLAMA_MAX_LAYERS:
        return f"{arch}.block_count is {n}; llama.cpp needs 1 to {LLAMA_MAX_LAYERS} layers"
    return None


def hyper_parameter_numbers(h: Header, arch: str) -> str | None:
    for k in range(lib.gguf_get_n_kv(h.ctx)):
        key = ffi.string(lib.gguf_get_key(h.ctx, k)).decode("utf-8", "replace")
        if not key.startswith(arch + "."):
            continue
        value = h.number(key)
        if value is None:
            continue
        if not math.isfinite(value):
            return f"{key} is {value}, not a finite number"
        if key[len(arch) + 1 :] in EPSILON_KEYS and value < 0:
            return f"{key} is {value}; a norm epsilon must not be negative"
    return None


def vector_tensor_types(h: Header, arch: str) -> str | None:
    # Norm weights and biases are added to / multiplied with f32 activations; ggml's CPU binary
    # ops take only f32 there, so llama.cpp's converters and quantizer always keep them f32.
    for name, ggml_type, shape in h.tensors():
        if all(d == 1 for d in shape[1:]) and ggml_type != lib.GGML_TYPE_F32:
            type_name = ffi.string(lib.ggml_type_name(ggml_type)).decode()
            return f"1-D tensor {name!r} has type {type_name}; norms and biases must be f32"
    return None


def unique_tokens(h: Header, arch: str) -> str | None:
    tokens = h.strings(TOKENS_KEY)
    if tokens is None or len(set(tokens)) == len(tokens):
        return None
    first: dict[bytes, int] = {}
    for i, t in enumerate(tokens):
        if t in first:
            return f"{TOKENS_KEY}: token {i} ({t!r}) repeats token {first[t]}; every token text must be unique"
        first[t] = i
    return None


CHECKS = (layer_count, hyper_parameter_numbers, vector_tensor_types, unique_tokens)


def check_model_file(path: Path) -> None:
    """Raise ``ValueError`` for a file llama.cpp would abort on."""
    with open_header(path) as header:
        if header is None:
            return
        arch = header.string("general.architecture")
        if arch is None:
            return  # llama.cpp refuses it cleanly
        for check in CHECKS:
            problem = check(header, arch)
            if problem:
                raise RequestValueError(f"{path} is damaged or unsupported: {problem}")
