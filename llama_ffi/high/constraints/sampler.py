"""llguidance inside llama.cpp's sampler chain: a ``llama_sampler`` whose interface (``name``,
``apply``, ``accept``, ``reset``, ``clone``, ``free``) is implemented by cffi callbacks
(``extern "Python"``, compiled into the module). ``apply`` computes the matcher's token bitmask
(llguidance drops the GIL meanwhile) and sets every refused candidate's logit to -inf (in C:
``llama_ffi_mask_candidates``); ``accept``
advances the matcher; a matcher that fails (a token the mask did not allow, forced by the caller)
allows only the end of generation from then on. Each sampler keeps its state behind a cffi handle,
held until llama.cpp frees the sampler (its chain's owner frees the chain)."""

from __future__ import annotations

import llguidance
import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high.constraints import tokenizer as vocab_tokenizer
from llama_ffi.high.constraints.grammars import ConstraintError

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
_NAME = ffi.new("char[]", b"llguidance")
_IFACE = ffi.new("struct llama_sampler_i *")
_IFACE.name = lib.llama_ffi_llg_name
_IFACE.accept = lib.llama_ffi_llg_accept
_IFACE.apply = lib.llama_ffi_llg_apply
_IFACE.reset = lib.llama_ffi_llg_reset
_IFACE.clone = lib.llama_ffi_llg_clone
_IFACE.free = lib.llama_ffi_llg_free
_live: dict[int, object] = {}  # handle address -> (state, handle): alive until the sampler is freed


class MatcherState:
    """One sampler's matcher, its bitmask buffer and the model's end-of-generation tokens."""

    def __init__(
        self, matcher: llguidance.LLMatcher, n_vocab: int, eog: list[int], start: llguidance.LLMatcher | None = None
    ) -> None:
        self.matcher = matcher
        # the matcher before any token: llguidance's reset() leaves a failed matcher failed
        self.start = start if start is not None else matcher.deep_copy()
        self.mask = np.zeros((n_vocab + 31) // 32, dtype=np.uint32)
        self.eog = np.asarray(eog, dtype=np.int64)
        self._address = self.mask.ctypes.data
        self._words = ffi.cast("const uint32_t *", self._address)

    def apply(self, cur_p) -> None:
        """Refuse (logit -inf) every candidate the grammar does not allow next. One candidate (the
        token a chain chose, put to the constraint first) is checked without building the mask."""
        if cur_p.size == 1:
            token = cur_p.data[0].id
            allowed = token in self.eog if self.matcher.is_error() else self.matcher.validate_tokens([token]) == 1
            if not allowed:
                cur_p.data[0].logit = -np.inf
            return
        if self.matcher.is_error():  # only the end of generation
            n = cur_p.size
            candidates = np.frombuffer(ffi.buffer(cur_p.data, n * TOKEN_DATA.itemsize), dtype=TOKEN_DATA)
            candidates["logit"][~np.isin(candidates["id"], self.eog)] = -np.inf
            return
        self.matcher.unsafe_compute_mask_ptr(self._address, self.mask.nbytes)
        lib.llama_ffi_mask_candidates(cur_p, self._words, self.mask.size)

    def copy(self) -> MatcherState:
        return MatcherState(self.matcher.deep_copy(), self.mask.size * 32, list(self.eog), self.start)

    def reset(self) -> None:
        if self.matcher.is_error():
            self.matcher = self.start.deep_copy()
        else:
            self.matcher.reset()


def compiled(grammar: str, vocab) -> llguidance.LLMatcher:
    """A matcher of the llguidance ``grammar`` over ``vocab``, before any token; ConstraintError
    if it cannot be enforced there."""
    matcher = llguidance.LLMatcher(vocab_tokenizer.for_vocab(vocab), grammar, log_level=0)
    if matcher.is_error():
        raise ConstraintError(f"the constraint cannot be enforced on this vocabulary: {matcher.get_error()}")
    return matcher


def new_sampler(grammar: str | llguidance.LLMatcher, vocab):
    """A new llama.cpp sampler enforcing the llguidance ``grammar`` (its text, or a matcher from
    ``compiled``, copied: compiling again for every request costs milliseconds) over ``vocab``
    (owned by whoever adds it to a chain)."""
    start = compiled(grammar, vocab) if isinstance(grammar, str) else grammar
    eog = vocab_tokenizer.end_of_generation(vocab)
    return _make(MatcherState(start.deep_copy(), lib.llama_vocab_n_tokens(vocab), eog, start))


def _make(state: MatcherState):
    handle = ffi.new_handle(state)
    _live[int(ffi.cast("uintptr_t", handle))] = (state, handle)
    return lib.llama_sampler_init(_IFACE, handle)


def _state(smpl) -> MatcherState:
    return ffi.from_handle(smpl.ctx)


@ffi.def_extern()
def llama_ffi_llg_name(smpl):
    return _NAME


@ffi.def_extern()
def llama_ffi_llg_apply(smpl, cur_p):
    _state(smpl).apply(cur_p)


@ffi.def_extern()
def llama_ffi_llg_accept(smpl, token):
    state = _state(smpl)
    if not state.matcher.is_error():
        state.matcher.consume_token(token)  # False: the error state, which allows only the end


@ffi.def_extern()
def llama_ffi_llg_reset(smpl):
    _state(smpl).reset()


@ffi.def_extern()
def llama_ffi_llg_clone(smpl):
    return _make(_state(smpl).copy())


@ffi.def_extern()
def llama_ffi_llg_free(smpl):
    _live.pop(int(ffi.cast("uintptr_t", smpl.ctx)), None)
