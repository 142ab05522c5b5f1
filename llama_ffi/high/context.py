"""The owner of one ``llama_context``: parameters (validated), decode, KV memory, state, logits."""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors, reason
from llama_ffi.high._checks import flag, integer, number
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.model import Model
from llama_ffi.high.threads import capped, default_threads

DECODE_NO_KV_SLOT = 1
DECODE_ABORTED = 2
MAX_SEQUENCES = 256  # src/llama-cparams.h LLAMA_MAX_SEQ: not in the public headers
CHECK_POSITIONS = os.environ.get("LLAMA_FFI_CHECK_CACHE", "") == "1"  # see Context.check_positions

_GGML_TYPES = {
    name[len("GGML_TYPE_") :].lower(): getattr(lib, name)
    for name in dir(lib)
    if name.startswith("GGML_TYPE_") and name != "GGML_TYPE_COUNT"
}


def ggml_type(name: str, value) -> int:
    """A KV cache type given as a ggml enum value or its name ("f16", "q8_0", ...)."""
    if isinstance(value, str):
        if value.lower() not in _GGML_TYPES:
            raise RequestValueError(f"{name}: unknown ggml type {value!r}")
        return _GGML_TYPES[value.lower()]
    integer(name, value, 0, lib.GGML_TYPE_COUNT - 1)
    return value


@dataclasses.dataclass(frozen=True)
class ContextParams:
    """Context parameters with llama-cpp-python's names; ``None`` keeps llama.cpp's default."""

    n_ctx: int | None = 512  # llama-cpp-python's and llama.cpp's default; 0 = the model's training context
    n_batch: int | None = None
    n_ubatch: int | None = None
    n_threads: int | None = None
    n_threads_batch: int | None = None
    n_seq_max: int | None = None
    rope_scaling_type: int | None = None
    rope_freq_base: float | None = None
    rope_freq_scale: float | None = None
    yarn_ext_factor: float | None = None
    yarn_attn_factor: float | None = None
    yarn_beta_fast: float | None = None
    yarn_beta_slow: float | None = None
    yarn_orig_ctx: int | None = None
    type_k: int | str | None = None
    type_v: int | str | None = None
    flash_attn: bool | None = None  # None = llama.cpp's "auto"
    embeddings: bool = False
    pooling_type: int | None = None
    offload_kqv: bool | None = None
    op_offload: bool | None = None
    swa_full: bool | None = None
    attention_type: int | None = None
    kv_unified: bool | None = None
    no_perf: bool | None = None  # False: llama.cpp keeps timings (llama_perf_context)
    n_outputs_max_per_seq: int | None = None  # backend sampling: outputs per sequence and decode
    moe_cache_size: int | None = None  # bytes of device cache for experts kept in host memory; 0 = off
    mtp: bool = False  # a context that runs the model's NextN/MTP block (DRAFT_MTP)

    def to_c(self):
        """Validated ``struct llama_context_params``."""
        cp = lib.llama_context_default_params()
        ints = {
            "n_ctx": 0,
            "n_batch": 1,
            "n_ubatch": 1,
            "n_threads": 1,
            "n_threads_batch": 1,
            "n_seq_max": 1,
            "yarn_orig_ctx": 0,
            "n_outputs_max_per_seq": 0,
        }
        for name, minimum in ints.items():
            value = getattr(self, name)
            if value is not None:
                setattr(cp, name, integer(name, value, minimum, 2**31 - 1))
        if self.moe_cache_size is not None:  # size_t: llama.cpp's --moe-cache-mib, in bytes
            cp.moe_cache_size = integer("moe_cache_size", self.moe_cache_size, 0, 2**63 - 1)
        if self.n_threads is None:
            cp.n_threads = default_threads()
        else:
            cp.n_threads = capped("n_threads", cp.n_threads)
        if self.n_threads_batch is None:
            # llama.cpp's tools (common's -tb) batch with the -t threads unless told; the bare
            # struct's default (GGML_DEFAULT_N_THREADS) would oversubscribe a small machine.
            cp.n_threads_batch = cp.n_threads
        else:
            cp.n_threads_batch = capped("n_threads_batch", cp.n_threads_batch)
        if self.n_seq_max is not None:  # llama.cpp aborts above its internal LLAMA_MAX_SEQ (256)
            integer("n_seq_max", self.n_seq_max, 1, MAX_SEQUENCES)
        for name in ("rope_freq_base", "rope_freq_scale", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow"):
            value = getattr(self, name)
            if value is not None:
                setattr(cp, name, number(name, value, minimum=0.0))
        if self.yarn_ext_factor is not None:
            cp.yarn_ext_factor = number("yarn_ext_factor", self.yarn_ext_factor)  # -1 = from model
        if self.rope_scaling_type is not None:
            cp.rope_scaling_type = integer(
                "rope_scaling_type",
                self.rope_scaling_type,
                lib.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
                lib.LLAMA_ROPE_SCALING_TYPE_MAX_VALUE,
            )
        if self.pooling_type is not None:
            cp.pooling_type = integer(
                "pooling_type", self.pooling_type, lib.LLAMA_POOLING_TYPE_UNSPECIFIED, lib.LLAMA_POOLING_TYPE_RANK
            )
        if self.type_k is not None:
            cp.type_k = ggml_type("type_k", self.type_k)
        if self.type_v is not None:
            cp.type_v = ggml_type("type_v", self.type_v)
        if self.flash_attn is not None:
            cp.flash_attn_type = (
                lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
                if flag("flash_attn", self.flash_attn)
                else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        if self.attention_type is not None:
            cp.attention_type = integer(
                "attention_type",
                self.attention_type,
                lib.LLAMA_ATTENTION_TYPE_UNSPECIFIED,
                lib.LLAMA_ATTENTION_TYPE_NON_CAUSAL,
            )
        for name in ("embeddings", "offload_kqv", "op_offload", "swa_full", "kv_unified", "no_perf"):
            value = getattr(self, name)
            if value is not None:
                setattr(cp, name, flag(name, value))
        if flag("mtp", self.mtp):
            cp.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        if cp.n_seq_max > cp.n_batch:  # llama.cpp asserts on this (one output per sequence)
            raise RequestValueError(f"n_seq_max ({cp.n_seq_max}) must not exceed n_batch ({cp.n_batch})")
        if self.n_batch is not None and self.n_ubatch is not None and self.n_ubatch > self.n_batch:
            raise RequestValueError(f"n_ubatch ({self.n_ubatch}) must not exceed n_batch ({self.n_batch})")
        return cp


class DecodeError(RuntimeError):
    pass


class DecodeAborted(DecodeError):
    """A decode stopped by ``Context.abort`` (its request was cancelled): nothing is wrong."""


class ContextLengthError(RequestValueError):
    """A prompt (or what it adds to a cache) needs more cells than a sequence holds: ``n_prompt_tokens``
    of them, where a sequence holds ``n_ctx``."""

    def __init__(self, message: str, n_prompt_tokens: int = 0, n_ctx: int = 0) -> None:
        super().__init__(message)
        self.n_prompt_tokens, self.n_ctx = n_prompt_tokens, n_ctx


class ClosedError(RuntimeError):
    """The Llama (or what it owns) was closed: no new work is taken."""


class CacheBookkeepingError(AssertionError):
    """What the KV cache holds is not what the token list says (a defect of llama_ffi's)."""


class Context:
    """One inference context over a ``Model``. Freed by ``close()``, ``with``, or GC."""

    def __init__(self, model: Model, params: ContextParams = ContextParams()) -> None:
        self._ptr = ffi.NULL
        cp = params.to_c()
        cp.abort_callback = lib.llama_ffi_abort_requested
        self.abort_flag = ffi.new("int32_t *")  # raised by abort(): the decode in progress stops
        cp.abort_callback_data = self.abort_flag
        with capture_errors() as errors:
            ptr = lib.llama_init_from_model(model.ptr, cp)
        model.check_remote()
        if ptr == ffi.NULL:
            raise RequestValueError(f"llama.cpp could not create a context: {reason(errors, 'unknown error')}")
        self._ptr = ptr
        self.model = model
        self.type_k, self.type_v = cp.type_k, cp.type_v  # the KV cache's element types, for saved states
        self.remote = model.remote  # RPC workers: a lost one is raised after the decode it spoiled
        self.n_vocab = model.n_vocab
        self.memory = lib.llama_get_memory(ptr)
        # A context made for embeddings generates between them with embeddings off (while they are
        # on, llama.cpp outputs every token of a decode); ``embedding_mode`` turns them on a while.
        self.makes_embeddings = bool(cp.embeddings)
        if self.makes_embeddings and model.generates_text:
            lib.llama_set_embeddings(ptr, False)

    @contextlib.contextmanager
    def embedding_mode(self):
        """Decodes in this block compute embeddings (every token is output)."""
        lib.llama_set_embeddings(self.ptr, True)
        try:
            yield
        finally:
            if self.model.generates_text:
                lib.llama_set_embeddings(self.ptr, False)

    @property
    def ptr(self):
        if self._ptr == ffi.NULL:
            raise ClosedError("this context has been closed")
        return self._ptr

    def close(self) -> None:
        ptr, self._ptr = self._ptr, ffi.NULL
        if ptr != ffi.NULL:
            lib.llama_free(ptr)

    def __del__(self) -> None:
        if getattr(self, "_ptr", ffi.NULL) != ffi.NULL:
            self.close()

    @property
    def n_ctx(self) -> int:
        return lib.llama_n_ctx(self.ptr)

    @property
    def n_ctx_seq(self) -> int:
        """Cells one sequence can hold: n_ctx with a unified KV cache, else n_ctx / n_seq_max."""
        return lib.llama_n_ctx_seq(self.ptr)

    @property
    def n_batch(self) -> int:
        return lib.llama_n_batch(self.ptr)

    @property
    def n_seq_max(self) -> int:
        return lib.llama_n_seq_max(self.ptr)

    def abort(self) -> None:
        """Stop the decode in progress (from another thread): it raises ``DecodeAborted``, with the
        cells of its ubatches that finished kept (the caller resyncs). The next decode clears it."""
        self.abort_flag[0] = 1

    def decode(self, batch) -> None:
        """``llama_decode``; ``abort()`` from another thread meanwhile raises ``DecodeAborted``."""
        self.abort_flag[0] = 0
        rc = lib.llama_ffi_decode(self.ptr, batch)  # llama_decode, timed
        if self.remote is not None:
            self.remote.check()
        if rc != 0:
            raise_for_decode_status(rc)

    def logits(self, i: int = -1) -> np.ndarray:
        """Logits of output ``i`` as a writable zero-copy view (valid until the next decode)."""
        ptr = lib.llama_get_logits_ith(self.ptr, i)
        if ptr == ffi.NULL:
            raise DecodeError(f"no logits for output {i}")
        return np.frombuffer(ffi.buffer(ptr, 4 * self.n_vocab), dtype=np.float32)

    # ---- KV memory -----------------------------------------------------------------------------
    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> bool:
        return bool(lib.llama_memory_seq_rm(self.memory, seq, p0, p1))

    def copy_sequence(self, src: int, dst: int) -> None:
        """Sequence ``dst`` (empty) becomes a copy of ``src``, at once. In one pool of cells
        (``kv_unified``) the cells are shared. Between separate pools llama.cpp's ``seq_cp`` only
        queues a copy of the whole pool for the next decode: a state saved or restored before then
        would read the pool's old cells, or be overwritten by the copy (a prompt cache then
        answered with another prompt's cells). There the state goes through the host instead."""
        if self.n_ctx_seq == self.n_ctx:
            lib.llama_memory_seq_cp(self.memory, src, dst, -1, -1)
        else:
            self.set_seq_state_bytes(dst, self.seq_state_bytes(src))

    def keep_prefix(self, cached: list[int], wanted, seq: int = 0) -> int:
        """Cut sequence ``seq``, which holds ``cached``, back to its common prefix with ``wanted``, but
        always short of wanted's last token (it is decoded again: its logits). Truncates
        ``cached`` to match and returns its length (see :meth:`cut_to`)."""
        keep = 0
        for a, b in zip(cached, wanted):
            if a != b:
                break
            keep += 1
        return self.cut_to(cached, min(keep, len(wanted) - 1), seq)

    def cut_to(self, cached: list[int], keep: int, seq: int = 0) -> int:
        """Cut sequence ``seq``, which holds ``cached`` (one entry a position), back to its first ``keep``
        positions and truncate ``cached`` to match; returns how many are kept. That is ``keep``, or
        0 (everything cleared) where the memory can no longer serve the prefix: a recurrent state
        cannot be cut, and a sliding-window cache (``swa_full=False``) has already dropped cells
        inside the window of the next position (llama-server's rule): reusing it would attend to
        nothing there, silently."""
        if keep < len(cached):
            if not self.holds_window(seq, keep):
                keep = 0
            if not self.seq_rm(seq, keep, -1):
                self.seq_rm(seq, -1, -1)
                keep = 0
        del cached[keep:]
        return keep

    def holds_window(self, seq: int, keep: int) -> bool:
        """Whether sequence ``seq`` still holds the cells that a position after its first ``keep``
        attends to: a sliding-window cache (``swa_full=False``) drops those outside the window."""
        window = max(1, self.model.n_swa)
        return keep == 0 or self.seq_pos_min(seq) <= max(0, keep - window)

    def check_positions(self, cached: list[int], seq: int = 0) -> None:
        """With ``LLAMA_FFI_CHECK_CACHE=1`` (the test suite sets it): sequence ``seq``'s highest position
        must be the last one ``cached`` accounts for, so a bookkeeping error fails loudly instead
        of answering from a wrong cache. (After a media chunk, M-RoPE models place its cells below
        the positions it occupies, so only "not above" holds there.)"""
        if not CHECK_POSITIONS:
            return
        if self.remote is not None:
            self.remote.check()  # after a lost RPC worker the cache means nothing: say that instead
        highest, expected = self.seq_pos_max(seq), len(cached) - 1
        if highest != expected and not (cached and cached[-1] < 0 and highest < expected):
            raise CacheBookkeepingError(
                f"the KV cache's highest position for sequence {seq} is {highest}, "
                f"but the token list accounts for positions 0..{expected}"
            )

    def seq_pos_min(self, seq: int = 0) -> int:
        return lib.llama_memory_seq_pos_min(self.memory, seq)

    def seq_pos_max(self, seq: int = 0) -> int:
        return lib.llama_memory_seq_pos_max(self.memory, seq)

    def clear(self) -> None:
        lib.llama_memory_clear(self.memory, True)

    # ---- state ---------------------------------------------------------------------------------
    def state_bytes(self) -> bytes:
        size = lib.llama_state_get_size(self.ptr)
        buf = ffi.new("uint8_t[]", size)
        n = lib.llama_state_get_data(self.ptr, buf, size)
        return ffi.buffer(buf, n)[:]

    def seq_state_bytes(self, seq: int) -> bytes:
        size = lib.llama_state_seq_get_size(self.ptr, seq)
        buf = ffi.new("uint8_t[]", size)
        n = lib.llama_state_seq_get_data(self.ptr, buf, size, seq)
        return ffi.buffer(buf, n)[:]

    def set_seq_state_bytes(self, seq: int, data: bytes) -> None:
        lib.llama_memory_seq_rm(self.memory, seq, -1, -1)
        if lib.llama_state_seq_set_data(self.ptr, ffi.from_buffer(data), len(data), seq) != len(data):
            raise RequestValueError("sequence state does not fit this context")

    def set_state_bytes(self, data: bytes) -> None:
        n = lib.llama_state_set_data(self.ptr, ffi.from_buffer(data), len(data))
        if n != len(data):
            raise RequestValueError(f"state does not fit this context (read {n} of {len(data)} bytes)")


def raise_for_decode_status(rc: int) -> None:
    if rc == DECODE_ABORTED:
        raise DecodeAborted("the decode was stopped (Context.abort)")
    if rc == DECODE_NO_KV_SLOT:
        raise DecodeError("no room left in the KV cache for this batch (context full)")
    if rc == lib.LLAMA_FFI_NO_ALLOWED_TOKEN:  # a greedy run's constraint, not llama_decode
        raise DecodeError("the grammar allows no token here (is the end of generation barred by a logit bias?)")
    raise DecodeError(f"llama_decode failed with code {rc}")
