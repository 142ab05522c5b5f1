"""llama.cpp's native sampler chain, built from ``SamplingParams`` (llama.cpp's defaults).

The chain follows llama.cpp's own order: grammar, logit bias, penalties, DRY, top-n-sigma,
top-k, typical-p, top-p, min-p, XTC, temperature (with dynamic range), then the selecting
sampler: dist (or adaptive-p when a target is set), mirostat 1/2, or greedy at temperature 0.
Each sampler is one small function below; a new sampler is one more function and one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from llama_ffi import ffi, lib
from llama_ffi.high._checks import integer, number
from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.sampling_fields import FIELDS

DEFAULT_DRY_BREAKERS = ("\n", ":", '"', "*")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    min_keep: int = 0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_n_sigma: float = -1.0
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: Sequence[str] = DEFAULT_DRY_BREAKERS
    seed: int = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: a random seed
    logit_bias: Mapping[int, float] | None = None

    def validate(self, n_vocab: int) -> None:
        for field in FIELDS:
            field.check(getattr(self, field.name))
        if isinstance(self.dry_sequence_breakers, str) or not all(
            isinstance(b, str) and b for b in self.dry_sequence_breakers
        ):
            raise RequestTypeError("dry_sequence_breakers must be a sequence of non-empty strings")
        integer("seed", self.seed, 0, 0xFFFFFFFF)
        for tok, bias in (self.logit_bias or {}).items():
            integer("logit_bias token", tok, 0, n_vocab - 1)
            number(f"logit_bias[{tok}]", bias)


# ---- one function per sampler: (params, vocab, n_vocab, keep) -> llama_sampler* or None -----


def biases(p: SamplingParams, vocab) -> list[tuple[int, float]]:
    """The user's logit biases, then the tokens the model suppresses (-inf), as llama.cpp's
    common sampler merges them."""
    out = list((p.logit_bias or {}).items())
    if vocab is not None:
        n = ffi.new("int32_t *")
        suppressed = lib.llama_vocab_get_suppress_tokens(vocab, n)
        out += [(suppressed[i], -float("inf")) for i in range(n[0])]
    return out


def logit_bias(p: SamplingParams, vocab, n_vocab: int, keep: list):
    pairs = biases(p, vocab)
    if not pairs:
        return None
    arr = ffi.new("llama_logit_bias[]", len(pairs))
    for i, (tok, bias) in enumerate(pairs):
        arr[i].token, arr[i].bias = tok, bias
    return lib.llama_sampler_init_logit_bias(n_vocab, len(pairs), arr)


def penalties(p: SamplingParams, vocab, n_vocab: int, keep: list):
    if p.repeat_penalty == 1.0 and p.frequency_penalty == 0.0 and p.presence_penalty == 0.0:
        return None
    return lib.llama_sampler_init_penalties(
        n_vocab, p.penalty_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
    )


def dry(p: SamplingParams, vocab, n_vocab: int, keep: list):
    if p.dry_multiplier == 0.0:
        return None
    breakers = [ffi.new("char[]", b.encode()) for b in p.dry_sequence_breakers]
    arr = ffi.new("const char *[]", breakers)
    keep += [breakers, arr]
    return lib.llama_sampler_init_dry(
        vocab, p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, arr, len(breakers)
    )


def top_n_sigma(p: SamplingParams, vocab, n_vocab: int, keep: list):
    return lib.llama_sampler_init_top_n_sigma(p.top_n_sigma) if p.top_n_sigma > 0 else None


def top_k(p: SamplingParams, vocab, n_vocab: int, keep: list):
    return lib.llama_sampler_init_top_k(p.top_k) if p.top_k > 0 else None


def typical_p(p: SamplingParams, vocab, n_vocab: int, keep: list):
    return lib.llama_sampler_init_typical(p.typical_p, p.min_keep) if p.typical_p < 1.0 else None


def top_p(p: SamplingParams, vocab, n_vocab: int, keep: list):
    return lib.llama_sampler_init_top_p(p.top_p, p.min_keep) if p.top_p < 1.0 else None


def min_p(p: SamplingParams, vocab, n_vocab: int, keep: list):
    return lib.llama_sampler_init_min_p(p.min_p, p.min_keep) if p.min_p > 0.0 else None


def xtc(p: SamplingParams, vocab, n_vocab: int, keep: list):
    if p.xtc_probability <= 0.0:
        return None
    return lib.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed)


def temperature(p: SamplingParams, vocab, n_vocab: int, keep: list):
    return lib.llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent)


def select(p: SamplingParams, vocab, n_vocab: int, keep: list):
    if p.adaptive_target >= 0.0:
        return lib.llama_sampler_init_adaptive_p(p.adaptive_target, p.adaptive_decay, p.seed)
    return lib.llama_sampler_init_dist(p.seed)


TRUNCATION_CHAIN = (penalties, dry, top_n_sigma, top_k, typical_p, top_p, min_p, xtc, temperature, select)


def chain_for(p: SamplingParams) -> tuple:
    """The sampler functions for these parameters, in order (after grammar and logit bias)."""
    if p.temperature <= 0.0:
        return (penalties, dry, lambda *a: lib.llama_sampler_init_greedy())
    if p.mirostat_mode == 1:
        return (
            penalties,
            dry,
            lambda p, v, n, k: lib.llama_sampler_init_temp(p.temperature),
            lambda p, v, n, k: lib.llama_sampler_init_mirostat(n, p.seed, p.mirostat_tau, p.mirostat_eta, 100),
        )
    if p.mirostat_mode == 2:
        return (
            penalties,
            dry,
            lambda p, v, n, k: lib.llama_sampler_init_temp(p.temperature),
            lambda p, v, n, k: lib.llama_sampler_init_mirostat_v2(p.seed, p.mirostat_tau, p.mirostat_eta),
        )
    return TRUNCATION_CHAIN


# Samplers whose state the prompt changes (the others ignore accepted tokens, or only note that
# their own pick was taken).
PROMPT_AWARE = ("penalties", "dry")
NOTHING_ALLOWED = "the grammar allows no token here (is the end of generation barred by a logit bias?)"


class SamplerChain:
    """One owned ``llama_sampler`` chain. ``sample`` also accepts the token (updates state)."""

    def __init__(self, params: SamplingParams, vocab, n_vocab: int, n_ctx: int, grammar=None) -> None:
        params.validate(n_vocab)
        self._greedy_bias = self._fast_greedy(params, vocab)
        # -1 means "the whole context" for both penalty windows (llama.cpp itself reads -1 as 0).
        params = dataclasses.replace(
            params,
            penalty_last_n=n_ctx if params.penalty_last_n == -1 else params.penalty_last_n,
            dry_penalty_last_n=n_ctx if params.dry_penalty_last_n == -1 else params.dry_penalty_last_n,
        )
        self._ptr = ffi.NULL
        self._n_vocab = n_vocab
        self._keep: list = []
        cp = lib.llama_sampler_chain_default_params()
        cp.no_perf = True
        self._ptr = lib.llama_sampler_chain_init(cp)
        self.names: list[str] = []
        # The constraint stays out of the chain: it checks the chain's choice first, and masks the
        # vocabulary only when that choice is refused (llama.cpp's order; sample()).
        self._constraint = ffi.NULL
        self._candidates = ffi.NULL
        if grammar is not None:
            self._constraint = grammar.sampler(vocab)
            if self._constraint == ffi.NULL:
                raise RequestValueError("llama.cpp refused the grammar sampler")
            self._candidates = ffi.new("llama_token_data[]", n_vocab)
        self._add(logit_bias(params, vocab, n_vocab, self._keep), "logit_bias")
        for fn in chain_for(params):
            self._add(fn(params, vocab, n_vocab, self._keep), getattr(fn, "__name__", "select"))

    @staticmethod
    def _fast_greedy(params: SamplingParams, vocab):
        """For greedy decoding (optionally with a logit bias) the chain is an argmax: done in one C
        pass over the logits, it skips building llama.cpp's n_vocab candidate array for every token
        (under a constraint too, where the argmax is refused). Returns (token ids, biases, count) or
        None when the chain is needed."""
        if params.temperature > 0.0 or penalties(params, None, 0, []) is not None:
            return None
        if params.dry_multiplier != 0.0:
            return None
        pairs = biases(params, vocab)
        return (ffi.new("int32_t[]", [t for t, _ in pairs]), ffi.new("float[]", [b for _, b in pairs]), len(pairs))

    def _add(self, smpl, name: str) -> None:
        if smpl is None:
            return
        if smpl == ffi.NULL:
            raise RequestValueError(f"llama.cpp refused the {name} sampler parameters")
        lib.llama_sampler_chain_add(self._ptr, smpl)  # the chain owns it from here
        self.names.append(lib.llama_sampler_name(smpl) and ffi.string(lib.llama_sampler_name(smpl)).decode())

    @property
    def ptr(self):
        if self._ptr == ffi.NULL:
            raise RuntimeError("sampler chain has been closed")
        return self._ptr

    @property
    def greedy_bias(self):
        """(token ids, biases, count) when the chain is a plain argmax with a logit bias, else None."""
        return self._greedy_bias

    @property
    def constraint(self) -> tuple:
        """(the constraint's sampler, its n_vocab candidates), both NULL when there is none."""
        return self._constraint, self._candidates

    def sample(self, ctx, idx: int = -1) -> int:
        """Sample (and accept) a token from output ``idx``."""
        if self._greedy_bias is not None:
            ids, biases, n = self._greedy_bias
            if self._constraint == ffi.NULL:
                return lib.llama_ffi_argmax(ctx, idx, self._n_vocab, ids, biases, n)
            token = lib.llama_ffi_argmax_constrained(
                ctx, idx, self._n_vocab, ids, biases, n, self._constraint, self._candidates
            )
            if token < 0:
                raise RequestValueError(NOTHING_ALLOWED)
            return token
        if self._constraint != ffi.NULL:
            token = lib.llama_ffi_sample_constrained(
                self.ptr, self._constraint, ctx, idx, self._candidates, self._n_vocab
            )
            if token == -2:
                raise RequestValueError(NOTHING_ALLOWED)
            if token < 0:
                raise RuntimeError(f"no token could be sampled from output {idx}")
            return token
        return lib.llama_sampler_sample(self.ptr, ctx, idx)

    def accept(self, token: int) -> None:
        if self._constraint != ffi.NULL:
            lib.llama_sampler_accept(self._constraint, token)
        lib.llama_sampler_accept(self.ptr, token)

    def accept_prompt(self, tokens) -> None:
        """Feed the prompt to every sampler but the grammar, as llama.cpp's completion does: the
        penalties and DRY then cover the prompt too (the grammar constrains the output only)."""
        stateful = [i for i, name in enumerate(self.names) if name in PROMPT_AWARE]
        if not stateful:
            return
        chain, accept = self.ptr, lib.llama_sampler_accept
        samplers = [lib.llama_sampler_chain_get(chain, i) for i in stateful]
        for token in tokens:
            for smpl in samplers:
                accept(smpl, token)

    def reset(self) -> None:
        if self._constraint != ffi.NULL:
            lib.llama_sampler_reset(self._constraint)
        lib.llama_sampler_reset(self.ptr)

    def close(self) -> None:
        ptr, self._ptr = self._ptr, ffi.NULL
        constraint, self._constraint = getattr(self, "_constraint", ffi.NULL), ffi.NULL
        if ptr != ffi.NULL:
            lib.llama_sampler_free(ptr)
        if constraint != ffi.NULL:
            lib.llama_sampler_free(constraint)

    def __del__(self) -> None:
        if getattr(self, "_ptr", ffi.NULL) != ffi.NULL or getattr(self, "_constraint", ffi.NULL) != ffi.NULL:
            self.close()
