"""A completion request as a caller gives it, checked and tokenized before any decoding: its
prompts (one, or a list), ``n``, stop strings, sampling and the rest (``GenerationSettings``). The
sync and async calls of ``Llama`` and the chat path all go through ``prepare``; the engine runs
what it returns."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.infill import prompt_tokens as infill_tokens
from llama_ffi.high.multimodal import MediaPrompt
from llama_ffi.high.request import GenerationRequest, LogitsProcessor, StoppingCriterion, as_tuple
from llama_ffi.high.request_fields import LOGPROBS, MAX_TOKENS, N
from llama_ffi.high.sampling import SamplingParams


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
        logits_processor=list(as_tuple(logits_processor)),
        stopping_criteria=list(as_tuple(stopping_criteria)),
        adapters=adapters,
        logits_all=llm.logits_all,
    )


def prepare(llm, prompt, request: GenerationRequest) -> Prepared:
    """Check everything before any decoding (a stream fails here, not at its first chunk)."""
    context = llm.context  # a clear error for a closed or vocab_only Llama, before anything else
    check_generates(llm)
    if request.suffix is not None:  # fill in the middle: the prompt is the prefix
        prompt = infill_tokens(
            lambda t: llm.tokenize(t, add_bos=False),
            llm.loaded_model.vocab_ptr,
            prompt,
            request.suffix,
            context.n_batch,
            context.n_ctx_seq,
            llm.spm_infill,
        )
    if request.max_tokens is not None:
        MAX_TOKENS.check(request.max_tokens)
    if request.logprobs is not None:
        LOGPROBS.check(request.logprobs, high=llm.n_vocab)
    grammar = request.grammar
    if grammar is not None and not isinstance(grammar, LlamaGrammar):
        raise RequestTypeError("grammar must be a LlamaGrammar")
    prompts = prompt_list(prompt)  # None: one prompt
    n = N.check(request.n)
    pairs = [prompt_tokens(llm, p, request.echo) for p in (prompts or [prompt])]
    for tokens, _ in pairs:
        llm.main_sequence.check_fits(tokens)
        if hasattr(tokens, "check_cells"):  # a prompt with media
            tokens.check_cells(context.n_ctx_seq)
    settings = GenerationSettings(
        max_tokens=request.max_tokens,
        stop=list(request.stop),
        sampling=request.sampling,
        grammar=grammar,
        logprobs=request.logprobs,
        logits_processor=list(request.logits_processor),
        stopping_criteria=list(request.stopping_criteria),
        adapters=llm.adapters.select(request.active_loras, request.control_vector),
        logits_all=llm.logits_all,
    )
    settings.sampling.validate(llm.n_vocab)
    if grammar is not None:
        grammar.check(llm.loaded_model)
    return Prepared([t for t, _ in pairs], n, settings, [e for _, e in pairs], request.model or llm.model_path)


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
