"""Completion: prompt → tokens → decode/sample loop → OpenAI-shaped result or stream of chunks.

``generate_events`` is the loop of a Llama whose requests run alone (speculative decoding,
``logits_all``; every other request goes through ``llama_ffi.high.engine``, whose per-token step is
``engine.choices``); ``create_completion`` shapes what it yields. ``prepare`` checks and tokenizes a
request for either. Stop strings are
matched on decoded text, and text that could still become a stop string is held back, so a stop
string never leaks into the output, also when it spans several tokens.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from llama_ffi import lib
from llama_ffi.high.compat import completion_options as compat_options
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.infill import prompt_tokens as infill_tokens
from llama_ffi.high.interrupt import sigint_stops_compute
from llama_ffi.high.multimodal import MediaPrompt
from llama_ffi.high.sampling import SamplerChain, SamplingParams
from llama_ffi.high.speculative import SpeculativeStats, SpeculativeStepper, log_stats
from llama_ffi.high.tokenizer import TextStream

LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
StoppingCriterion = Callable[[np.ndarray, np.ndarray], bool]


@dataclasses.dataclass(slots=True)
class Event:
    """One generated token: its id, the text it releases (may be ""), and its logprob data."""

    token: int
    text: str
    logprob: float | None = None
    top_logprobs: dict[str, float] | None = None


@dataclasses.dataclass
class Outcome:
    finish_reason: str = "length"
    completion_tokens: int = 0


def normalize_stop(stop: str | Sequence[str] | None) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    out = []
    for s in stop:
        if not isinstance(s, str):
            raise TypeError(f"stop must be str or a list of str, got {type(s).__name__}")
        if s:
            out.append(s)
    return out


class StopMatcher:
    """Finds stop strings in streamed text; releases only text that cannot start one."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """(text safe to emit now, whether a stop string was found)."""
        if not self.stops:
            return text, False
        self.pending += text
        cut = min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out, self.pending = self.pending[:cut], ""
            return out, True
        hold = 0
        for s in self.stops:  # longest suffix of pending that is a prefix of a stop string
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[:len(self.pending) - hold] if hold else self.pending
        self.pending = self.pending[len(out):]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def _top(logprobs: np.ndarray, n: int, piece: Callable[[int], str]) -> dict[str, float]:
    if n <= 0:
        return {}
    idx = np.argpartition(-logprobs, n - 1)[:n]
    idx = idx[np.argsort(-logprobs[idx])]
    return {piece(int(i)): float(logprobs[i]) for i in idx}


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


def generate_events(engine, prompt: list[int], settings: GenerationSettings,
                    outcome: Outcome, lease=None) -> Iterator[Event]:
    """The loop: evaluate the prompt (reusing the cached prefix), then sample/decode until EOG,
    a stop string, a stopping criterion, ``max_tokens`` or a full context. With a drafter on the
    engine, a ``SpeculativeStepper`` stands in for ``eval_token``; the loop is otherwise the same.
    ``lease`` (a stream's): when it no longer holds the context, the clean-up leaves it alone."""
    started = time.perf_counter()
    ctx = engine.context
    tokenizer = engine.tokenizer
    n_ctx = ctx.n_ctx
    budget = n_ctx - len(prompt)
    if settings.max_tokens is not None and settings.max_tokens > 0:
        budget = min(budget, settings.max_tokens)
    chain = SamplerChain(settings.sampling, ctx.model.vocab_ptr, ctx.n_vocab, n_ctx, settings.grammar)
    chain.accept_prompt(prompt)
    stream, matcher = TextStream(), StopMatcher(settings.stop)
    vocab = ctx.model.vocab_ptr
    want_logprobs = settings.logprobs is not None
    processors, criteria = settings.logits_processor, settings.stopping_criteria
    piece = tokenizer.piece
    stepper = stats = None
    if engine.drafter is not None:
        stats = SpeculativeStats(type=engine.speculative.kind.name)
        stepper = SpeculativeStepper(engine, engine.drafter, engine.speculative.max_draft, budget, stats)
        if lease is not None:
            lease.settle = stepper.settle
    # Hot loop: names bound to locals once; per token only C calls and a few Python ops.
    sample, is_eog, interrupted = chain.sample, lib.llama_vocab_is_eog, lib.llama_ffi_sigint_pending
    push, feed, ctx_ptr = stream.push, matcher.feed, ctx.ptr
    advance = stepper.advance if stepper else engine.eval_token  # -> output index of the next logits
    history = stepper.visible if stepper else (lambda: engine.tokens)
    has_stops = bool(settings.stop)
    produced = 0
    try:
        engine.use_adapters(settings.adapters)
        engine.eval_prompt(prompt)
        if stepper:
            stepper.begin(list(prompt))
        idx = -1
        while True:
            if produced >= budget:
                outcome.finish_reason = "length"
                break
            if interrupted():
                lib.llama_ffi_sigint_clear()
                raise KeyboardInterrupt
            logits = lp = None
            if processors or criteria or want_logprobs:
                logits = ctx.logits(idx)
                if processors:
                    ids = np.asarray(history(), dtype=np.intc)
                    for proc in processors:
                        result = proc(ids, logits)
                        if result is not logits:
                            np.copyto(logits, result)
                lp = log_softmax(logits) if want_logprobs else None
            token = sample(ctx_ptr, idx)
            if stats is not None and not produced:
                stats.ttft_s = time.perf_counter() - started
            if is_eog(vocab, token):
                outcome.finish_reason = "stop"
                break
            produced += 1
            outcome.completion_tokens = produced
            if has_stops:
                text, stopped = feed(push(piece(token)))
            else:
                text, stopped = push(piece(token)), False
            event = Event(token, text)
            if want_logprobs:
                event.logprob = float(lp[token])
                event.top_logprobs = _top(lp, settings.logprobs,
                                          lambda t: piece(t).decode("utf-8", "replace"))
            if stopped:
                outcome.finish_reason = "stop"
                yield event
                return
            if criteria and any(c(np.asarray(history() + [token], dtype=np.intc), logits)
                                for c in criteria):
                outcome.finish_reason = "stop"
                yield event
                break
            yield event
            if produced < budget:
                idx = advance(token)
        tail, stopped = matcher.feed(stream.finish())
        if stopped:
            outcome.finish_reason = "stop"
        else:
            tail += matcher.flush()
        if tail:
            yield Event(-1, tail)
    finally:
        chain.close()
        owns_context = lease is None or lease.holds_context
        if stepper:
            if owns_context:
                stepper.finish()
            stats.generated_tokens = produced
            stats.generation_s = time.perf_counter() - started - stats.ttft_s
            engine.last_speculative_stats = stats
            if engine.verbose:
                log_stats(stats)


def _logprobs_block(events: list[Event], offset: int, tokenizer) -> dict:
    tokens, offsets, lps, tops = [], [], [], []
    pos = offset
    for e in events:
        if e.token < 0:
            continue
        text = tokenizer.piece(e.token).decode("utf-8", "replace")
        tokens.append(text)
        offsets.append(pos)
        pos += len(text)
        lps.append(e.logprob)
        tops.append(e.top_logprobs)
    return {"tokens": tokens, "text_offset": offsets, "token_logprobs": lps, "top_logprobs": tops}


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4()}"


def result_dict(cid: str, model: str, text: str, finish: str | None, usage: dict | None,
                logprobs: dict | None, created: int, obj: str = "text_completion") -> dict:
    out = {
        "id": cid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def create_completion(engine, prompt_tokens: list[int], settings: GenerationSettings,
                      stream: bool, echo_text: str, model_name: str):
    """Run the loop; return the OpenAI-shaped dict, or an iterator of chunks when streaming."""
    cid, created = completion_id(), int(time.time())
    outcome = Outcome()

    def usage() -> dict:
        return {"prompt_tokens": len(prompt_tokens), "completion_tokens": outcome.completion_tokens,
                "total_tokens": len(prompt_tokens) + outcome.completion_tokens}

    def chunks(lease) -> Iterator[dict]:
        if echo_text:
            yield result_dict(cid, model_name, echo_text, None, None, None, created)
        for e in generate_events(engine, prompt_tokens, settings, outcome, lease):
            lp = _logprobs_block([e], 0, engine.tokenizer) if settings.logprobs is not None else None
            if e.text or lp:
                yield result_dict(cid, model_name, e.text, None, None, lp, created)
        yield result_dict(cid, model_name, "", outcome.finish_reason, usage(), None, created)

    if stream:  # the lock is held per chunk, not while the caller holds a suspended stream
        return engine.lock.stream(chunks)
    with engine.lock, sigint_stops_compute():
        events = list(generate_events(engine, prompt_tokens, settings, outcome))
    text = echo_text + "".join(e.text for e in events)
    lp = _logprobs_block(events, len(echo_text), engine.tokenizer) if settings.logprobs is not None else None
    return result_dict(cid, model_name, text, outcome.finish_reason, usage(), lp, created)


def create_alone(engine, prompts: list, n: int, settings: GenerationSettings, echo_texts: Sequence[str],
                 model_name: str, stream: bool):
    """A request of a Llama whose sequences run alone (speculative decoding, ``logits_all``): each
    choice through ``create_completion`` in turn, shaped as the engine shapes a list request."""
    from llama_ffi.high.engine.choices import choice_seed, fresh_processors  # the engine imports this module

    if len(prompts) == 1 and n == 1:
        return create_completion(engine, prompts[0], settings, stream, echo_texts[0], model_name)
    runs = []
    for p, prompt in enumerate(prompts):
        for k in range(n):
            i = p * n + k
            sampling = dataclasses.replace(settings.sampling, seed=choice_seed(settings.sampling.seed, i))
            runs.append((i, prompt, echo_texts[p], dataclasses.replace(
                settings, sampling=sampling, logits_processor=fresh_processors(settings.logits_processor))))
    n_prompt = sum(len(p) for p in prompts)

    def usage(produced: int) -> dict:
        return {"prompt_tokens": n_prompt, "completion_tokens": produced, "total_tokens": n_prompt + produced}

    if not stream:
        outs = [(i, create_completion(engine, prompt, s, False, echo, model_name)) for i, prompt, echo, s in runs]
        first = outs[0][1]
        choices = [{**out["choices"][0], "index": i} for i, out in outs]
        return {**first, "choices": choices, "usage": usage(sum(o["usage"]["completion_tokens"] for _, o in outs))}

    def chunks() -> Iterator[dict]:
        produced = 0
        for j, (i, prompt, echo, s) in enumerate(runs):
            for chunk in create_completion(engine, prompt, s, True, echo, model_name):
                usage_of_run = chunk.pop("usage", None)
                if usage_of_run is not None:
                    produced += usage_of_run["completion_tokens"]
                    if j == len(runs) - 1:
                        chunk["usage"] = usage(produced)
                yield {**chunk, "choices": [{**chunk["choices"][0], "index": i}]}

    return chunks()


@dataclasses.dataclass
class Prepared:
    """A completion request, validated and tokenized: what the engine (or the alone path) runs."""

    prompts: list
    n: int
    settings: GenerationSettings
    echo_texts: list[str]
    model_name: str

    def __iter__(self):
        return iter((self.prompts, self.n, self.settings, self.echo_texts, self.model_name))


def prepare(llm, prompt, *, max_tokens: int | None = 16, stop=None, echo: bool = False, logprobs: int | None = None,
            grammar=None, logits_processor=(), stopping_criteria=(), model: str | None = None, active_loras=None,
            control_vector=None, n: int = 1, suffix: str | None = None, sampling: dict | None = None) -> Prepared:
    """Check everything before any decoding (a stream fails here, not at its first chunk)."""
    from llama_ffi.high.engine.choices import check_n, prompt_list  # the engine imports this module

    sampling = dict(sampling or {})
    compat_options(sampling)
    if suffix is not None:  # fill in the middle: the prompt is the prefix
        prompt = infill_tokens(lambda t: llm.tokenize(t, add_bos=False), llm._model.vocab_ptr, prompt, suffix,
                               llm.context.n_batch, llm.context.n_ctx_seq, llm.spm_infill)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise TypeError("max_tokens must be an int or None")
    if logprobs is not None and (not isinstance(logprobs, int) or not 0 <= logprobs <= llm.n_vocab):
        raise ValueError(f"logprobs must be an int in 0..n_vocab, got {logprobs!r}")
    if grammar is not None and not isinstance(grammar, LlamaGrammar):
        raise TypeError("grammar must be a LlamaGrammar")
    prompts = prompt_list(prompt)  # None: one prompt
    n = check_n(n)
    pairs = [prompt_tokens(llm, p, echo) for p in (prompts or [prompt])]
    for tokens, _ in pairs:
        llm._check_fits(tokens)
        if hasattr(tokens, "check_cells"):  # a prompt with media
            tokens.check_cells(llm.context.n_ctx_seq)
    settings = GenerationSettings(
        max_tokens=max_tokens, stop=normalize_stop(stop), sampling=llm._sampling_params(**sampling),
        grammar=grammar, logprobs=logprobs, logits_processor=list(logits_processor),
        stopping_criteria=list(stopping_criteria), adapters=llm.adapters.select(active_loras, control_vector))
    settings.sampling.validate(llm.n_vocab)
    if grammar is not None:
        grammar.check(llm._model)
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
