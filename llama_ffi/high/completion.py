"""A completion request as a caller gives it, checked and tokenized before any decoding: its
prompts (one, or a list), ``n``, stop strings, sampling and the rest (``GenerationSettings``). The
sync and async calls of ``Llama`` and the chat path all go through ``prepare``; the engine runs
what it returns."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

import numpy as np

from llama_ffi.high.compat import completion_options as compat_options
from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.infill import prompt_tokens as infill_tokens
from llama_ffi.high.multimodal import MediaPrompt
from llama_ffi.high.request_fields import LOGPROBS, MAX_TOKENS, N
from llama_ffi.high.sampling import SamplingParams

LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
StoppingCriterion = Callable[[np.ndarray, np.ndarray], bool]


@dataclasses.dataclass
class GenerationSettings:
    max_tokens: int | None
    stop: list[str]
    sampling: SamplingParams
    grammar: object | None = None
    logprobs: int | None = None
    logits_processor: Sequence[LogitsProcessor] = ()
    stopping_criteria: Sequence[StoppingCriterion] = ()
    adapters: object | None = None  # an adapters.Selection (None: the Llama's default set)
    logits_all: bool = False  # keep the logits of every position (llama-cpp-python's scores)


def normalize_stop(stop: str | Sequence[str] | None) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    out = []
    for s in stop:
        if not isinstance(s, str):
            raise RequestTypeError(f"stop must be str or a list of str, got {type(s).__name__}")
        if s:
            out.append(s)
    return out


def prompt_list(prompt) -> list | None:
    """The prompts of a list-of-prompts request (strings, or token lists); None for one prompt."""
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
        return None
    items = list(prompt)
    if items and all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        return None  # one prompt as tokens
    if not items:
        raise RequestValueError("prompt is an empty list: give a string, a token list, or a list of either")
    if all(isinstance(p, (str, bytes)) for p in items):
        return items
    if all(isinstance(p, Sequence) and not isinstance(p, (str, bytes)) for p in items):
        for i, p in enumerate(items):
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
                raise RequestTypeError(f"prompt[{i}] must be a list of token ids (ints)")
        return [list(p) for p in items]
    raise RequestTypeError("a list of prompts must be all strings or all token lists, not a mix")


@dataclasses.dataclass
class Prepared:
    """A completion request, validated and tokenized: what the engine runs."""

    prompts: list
    n: int
    settings: GenerationSettings
    echo_texts: list[str]
    model_name: str

    def __iter__(self):
        return iter((self.prompts, self.n, self.settings, self.echo_texts, self.model_name))


def as_list(x) -> list:
    """A processor or criterion, a list or tuple of them, or None, as a list (llama-cpp-python
    takes a ``LogitsProcessorList``, a list, or one callable)."""
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def prepare_keywords(llm, prompt, keywords: dict) -> Prepared:
    """``prepare`` from one dict of keywords (``acreate_completion``'s): this function's own, the
    rest sampling parameters."""
    own = {k: v for k, v in keywords.items() if k in REQUEST_KEYWORDS}
    return prepare(llm, prompt, **own, sampling={k: v for k, v in keywords.items() if k not in own})


def check_generates(llm) -> None:
    if not llm.loaded_model.generates_text:
        raise RequestValueError(
            f"{os.path.basename(llm.model_path)} cannot generate text: its attention is not causal "
            "(an embedding model); use embed, create_embedding or rank"
        )


def token_settings(llm, max_tokens, grammar, logits_processor, stopping_criteria, adapters, sampling: dict):
    """The settings of ``Llama.generate``'s request: no stop strings, the caller's sampling."""
    check_generates(llm)
    return GenerationSettings(
        max_tokens,
        [],
        llm.sampling_params(**sampling),
        grammar,
        logits_processor=as_list(logits_processor),
        stopping_criteria=as_list(stopping_criteria),
        adapters=adapters,
        logits_all=llm.logits_all,
    )


def prepare(
    llm,
    prompt,
    *,
    max_tokens: int | None = 16,
    stop=None,
    echo: bool = False,
    logprobs: int | None = None,
    grammar=None,
    logits_processor=(),
    stopping_criteria=(),
    model: str | None = None,
    active_loras=None,
    control_vector=None,
    n: int = 1,
    suffix: str | None = None,
    sampling: dict | None = None,
) -> Prepared:
    """Check everything before any decoding (a stream fails here, not at its first chunk)."""
    context = llm.context  # a clear error for a closed or vocab_only Llama, before anything else
    check_generates(llm)
    sampling = dict(sampling or {})
    compat_options(sampling)
    if suffix is not None:  # fill in the middle: the prompt is the prefix
        prompt = infill_tokens(
            lambda t: llm.tokenize(t, add_bos=False),
            llm.loaded_model.vocab_ptr,
            prompt,
            suffix,
            context.n_batch,
            context.n_ctx_seq,
            llm.spm_infill,
        )
    if max_tokens is not None:
        MAX_TOKENS.check(max_tokens)
    if logprobs is not None:
        LOGPROBS.check(logprobs, high=llm.n_vocab)
    if grammar is not None and not isinstance(grammar, LlamaGrammar):
        raise RequestTypeError("grammar must be a LlamaGrammar")
    prompts = prompt_list(prompt)  # None: one prompt
    n = N.check(n)
    pairs = [prompt_tokens(llm, p, echo) for p in (prompts or [prompt])]
    for tokens, _ in pairs:
        llm.main_sequence.check_fits(tokens)
        if hasattr(tokens, "check_cells"):  # a prompt with media
            tokens.check_cells(context.n_ctx_seq)
    settings = GenerationSettings(
        max_tokens=max_tokens,
        stop=normalize_stop(stop),
        sampling=llm.sampling_params(**sampling),
        grammar=grammar,
        logprobs=logprobs,
        logits_processor=as_list(logits_processor),
        stopping_criteria=as_list(stopping_criteria),
        adapters=llm.adapters.select(active_loras, control_vector),
        logits_all=llm.logits_all,
    )
    settings.sampling.validate(llm.n_vocab)
    if grammar is not None:
        grammar.check(llm.loaded_model)
    return Prepared([t for t, _ in pairs], n, settings, [e for _, e in pairs], model or llm.model_path)


def prompt_tokens(llm, prompt, echo: bool) -> tuple[list[int], str]:
    """A prompt's tokens (BOS alone for an empty one) and, with ``echo``, its text."""
    if isinstance(prompt, MediaPrompt):
        return prompt, ""
    if isinstance(prompt, (str, bytes)):
        tokens = llm.tokenize(prompt, add_bos=True, special=True)
        echo_text = (prompt.decode("utf-8", "replace") if isinstance(prompt, bytes) else prompt) if echo else ""
    else:
        tokens = list(prompt)
        echo_text = llm.detokenize(tokens).decode("utf-8", "replace") if echo else ""
    return tokens or [llm.token_bos()], echo_text


REQUEST_KEYWORDS = frozenset(prepare.__kwdefaults__) - {"sampling"}  # prepare's own keywords
