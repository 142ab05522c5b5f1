"""Many sequences in one decode: a list of prompts and ``n`` choices per prompt, decoded together.

Every choice gets a slot (a sequence id of the context, whose KV cache is unified so slots share
its cells). One ``llama_decode`` per step carries the next token of every generating choice plus
as many prompt tokens of newly admitted choices as the batch has room for. A finished choice
frees its slot and a waiting one takes it (continuous batching). The ``n`` choices of one prompt
evaluate it once: the other slots copy its cache (``llama_memory_seq_cp``, which shares cells) and
sample their first token from the same logits.

Each choice has its own sampler chain, grammar, stop strings, budget and stopping criteria. Choice
``i`` of a request with seed ``s`` samples with seed ``s + i`` (mod 2**32); a random seed stays
random for every choice.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence

import numpy as np

from llama_ffi import lib
from llama_ffi.high.completion import (Event, GenerationSettings, StopMatcher, _logprobs_block, _top,
                                       completion_id, log_softmax)
from llama_ffi.high.interrupt import sigint_stops_compute
from llama_ffi.high.sampling import SamplerChain
from llama_ffi.high.tokenizer import TextStream

SEED_MODULUS = 1 << 32
DEFAULT_SLOTS = 8  # llama-batched-bench's aggregate speed grows little beyond this on a CPU


def default_slots(n_batch: int | None) -> int:
    """Llama's n_seq_max when none is given: DEFAULT_SLOTS, never above n_batch (llama.cpp's rule)."""
    if isinstance(n_batch, int) and not isinstance(n_batch, bool) and n_batch > 0:
        return min(DEFAULT_SLOTS, n_batch)
    return DEFAULT_SLOTS


def prompt_list(prompt) -> list | None:
    """The prompts of a list-of-prompts request (strings, or token lists); None for one prompt."""
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
        return None
    items = list(prompt)
    if items and all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        return None  # one prompt as tokens
    if not items:
        raise ValueError("prompt is an empty list: give a string, a token list, or a list of either")
    if all(isinstance(p, (str, bytes)) for p in items):
        return items
    if all(isinstance(p, Sequence) and not isinstance(p, (str, bytes)) for p in items):
        for i, p in enumerate(items):
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
                raise TypeError(f"prompt[{i}] must be a list of token ids (ints)")
        return [list(p) for p in items]
    raise TypeError("a list of prompts must be all strings or all token lists, not a mix")


def check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (choices per prompt), got {n!r}")
    return n


def choice_seed(seed: int, i: int) -> int:
    """The seed of choice ``i``: the request's plus ``i``; llama.cpp's random seed stays random."""
    return seed if seed == lib.LLAMA_DEFAULT_SEED else (seed + i) % SEED_MODULUS


@dataclasses.dataclass
class ParallelStats:
    """The last parallel request's timing (wall time of each step: batch, decode, sampling):
    steps that carried prompt tokens, and steps of generated tokens only."""

    prompt_steps: int = 0
    prompt_tokens: int = 0    # prompt tokens decoded (a prompt shared by n choices counts once)
    generation_steps: int = 0
    generated_tokens: int = 0
    prompt_s: float = 0.0
    generation_s: float = 0.0

    @property
    def generation_tps(self) -> float:
        """Aggregate tokens/s of the steps that carried only generated tokens."""
        return self.generated_tokens / self.generation_s if self.generation_s else float("nan")


@dataclasses.dataclass(eq=False)
class Choice:
    """One sequence of a request: its prompt, its sampler chain, where it stands."""

    index: int
    prompt: list[int]
    chain: SamplerChain
    budget: int
    matcher: StopMatcher
    stream: TextStream = dataclasses.field(default_factory=TextStream)
    history: list[int] = dataclasses.field(default_factory=list)  # prompt + generated
    seq: int = -1
    produced: int = 0
    finish_reason: str | None = None
    output: int = -1          # batch index of this choice's logits after the step, or -1
    next_token: int = -1      # sampled, to be decoded at the next step
    group: "Group | None" = None


@dataclasses.dataclass(eq=False)
class Group:
    """The choices of one prompt that evaluate it together (at most one per free slot)."""

    prompt: list[int]
    choices: list[Choice]
    evaluated: int = 0        # prompt tokens decoded so far (by the leader's slot)
    live: int = 0             # choices not finished yet

    def __post_init__(self) -> None:
        self.live = len(self.choices)
        for c in self.choices:
            c.group = self

    @property
    def reserve(self) -> int:
        """KV cells the group can use: its prompt once, and every choice's budget."""
        return len(self.prompt) + sum(c.budget for c in self.choices)


def build_groups(engine, prompts: list[list[int]], n: int, settings: GenerationSettings,
                 slots: int) -> list[Group]:
    ctx = engine.context
    groups = []
    for p, prompt in enumerate(prompts):
        budget = ctx.n_ctx - len(prompt)
        if settings.max_tokens is not None and settings.max_tokens > 0:
            budget = min(budget, settings.max_tokens)
        choices = []
        for k in range(n):
            i = p * n + k
            params = dataclasses.replace(settings.sampling, seed=choice_seed(settings.sampling.seed, i))
            chain = SamplerChain(params, ctx.model.vocab_ptr, ctx.n_vocab, ctx.n_ctx, settings.grammar)
            chain.accept_prompt(prompt)
            choices.append(Choice(i, prompt, chain, budget, StopMatcher(settings.stop), history=list(prompt)))
        # A group's choices run at once: no more than the slots, nor than the cells their budgets
        # can fill (the rest evaluate the prompt again in a later group).
        size = max(1, min(slots, (ctx.n_ctx - len(prompt)) // max(budget, 1)))
        for start in range(0, n, size):
            groups.append(Group(prompt, choices[start:start + size]))
    return groups


def parallel_events(engine, groups: list[Group], settings: GenerationSettings,
                    lease=None) -> Iterator[tuple[Choice, Event | None]]:
    """The loop: (choice, event) for every released piece of text, (choice, None) when a choice
    finishes. Leaves the context empty."""
    ctx, batch = engine.context, engine._batch
    n_ctx, capacity, slots = ctx.n_ctx, batch.capacity, ctx.n_seq_max
    vocab, piece, ctx_ptr = ctx.model.vocab_ptr, engine.tokenizer.piece, ctx.ptr
    want_logprobs = settings.logprobs is not None
    waiting = list(groups)
    evaluating: list[Group] = []
    generating: list[Choice] = []
    free = list(range(slots))
    reserved = 0
    engine.use_adapters(settings.adapters)
    ctx.clear()
    engine.tokens = []
    stats = engine.last_parallel_stats = ParallelStats()
    try:
        while waiting or evaluating or generating:
            step_started = time.perf_counter()
            if lib.llama_ffi_sigint_pending():
                lib.llama_ffi_sigint_clear()
                raise KeyboardInterrupt
            # admit whole groups while slots and KV cells allow (always one when nothing runs)
            while waiting and len(waiting[0].choices) <= len(free) and (
                    reserved + waiting[0].reserve <= n_ctx or not (evaluating or generating)):
                group = waiting.pop(0)
                # Finished choices keep their cells until a group is admitted: freeing them at
                # once leaves holes that the running sequences' next tokens fill out of position
                # order, which changes llama.cpp's attention sums (measured: up to 0.8 logits).
                for s in free:
                    lib.llama_memory_seq_rm(ctx.memory, s, -1, -1)
                for c in group.choices:
                    c.seq = free.pop(0)
                reserved += group.reserve
                evaluating.append(group)
            batch.clear()
            for c in generating:
                c.output = batch._batch.n_tokens
                batch.add(c.next_token, len(c.history) - 1, (c.seq,), True)
            finished_prompts = []
            for group in evaluating:
                room = capacity - batch._batch.n_tokens
                if room <= 0:
                    break
                leader, take = group.choices[0], min(room, len(group.prompt) - group.evaluated)
                for j in range(group.evaluated, group.evaluated + take):
                    batch.add(group.prompt[j], j, (leader.seq,), j == len(group.prompt) - 1)
                group.evaluated += take
                stats.prompt_tokens += take
                if group.evaluated == len(group.prompt):
                    leader.output = batch._batch.n_tokens - 1
                    finished_prompts.append(group)
            prompt_step = bool(evaluating or finished_prompts)
            n_generating = len(generating)
            ctx.decode(batch.c)
            for group in finished_prompts:
                evaluating.remove(group)
                leader = group.choices[0]
                for c in group.choices[1:]:  # the siblings share the prompt's cells and logits
                    lib.llama_memory_seq_cp(ctx.memory, leader.seq, c.seq, -1, -1)
                    c.output = leader.output
                generating.extend(group.choices)
            # Sample every choice of this step before yielding anything: a stream parked at a
            # yield gets its KV cache back on resume, but not this step's logits.
            still, pristine, released = [], {}, []
            for c in generating:
                event = _step(c, ctx, ctx_ptr, vocab, piece, settings, pristine)
                if event is not None and (event.text or want_logprobs):
                    released.append((c, event))
                if c.finish_reason is None:
                    still.append(c)
                    continue
                tail, stopped = c.matcher.feed(c.stream.finish())
                if not stopped and c.finish_reason != "stop-string":
                    tail += c.matcher.flush()
                if c.finish_reason == "stop-string" or stopped:
                    c.finish_reason = "stop"
                if tail:
                    released.append((c, Event(-1, tail)))
                free.append(c.seq)
                free.sort()
                c.group.live -= 1
                reserved -= c.budget + (len(c.prompt) if c.group.live == 0 else 0)
                released.append((c, None))
            generating = still
            elapsed = time.perf_counter() - step_started  # batch, decode and sampling, not the consumer
            if prompt_step:
                stats.prompt_steps += 1
                stats.prompt_s += elapsed
            else:
                stats.generation_steps += 1
                stats.generation_s += elapsed
                stats.generated_tokens += n_generating
            yield from released
    finally:
        for g in groups:
            for c in g.choices:
                c.chain.close()
        if lease is None or lease.holds_context:
            ctx.clear()
            engine.tokens = []


def _step(c: Choice, ctx, ctx_ptr, vocab, piece, settings: GenerationSettings,
          pristine: dict[int, np.ndarray]) -> Event | None:
    """Sample the choice's next token from its logits of this step; set finish_reason when done.
    ``pristine``: rows as decoded, for siblings that read one row after another's processors."""
    if c.output < 0:
        return None
    idx, c.output = c.output, -1
    if c.produced >= c.budget:  # a prompt that fills the context: nothing to generate
        c.finish_reason = "length"
        return None
    processors, criteria, want_logprobs = settings.logits_processor, settings.stopping_criteria, \
        settings.logprobs is not None
    logits = lp = None
    if processors or criteria or want_logprobs:
        logits = ctx.logits(idx)
        if processors:
            if idx in pristine:
                np.copyto(logits, pristine[idx])
            else:
                pristine[idx] = logits.copy()
            ids = np.asarray(c.history, dtype=np.intc)
            for proc in processors:
                result = proc(ids, logits)
                if result is not logits:
                    np.copyto(logits, result)
        lp = log_softmax(logits) if want_logprobs else None
    token = c.chain.sample(ctx_ptr, idx)
    if token < 0:
        raise RuntimeError(f"llama.cpp returned no token for choice {c.index} (no logits at batch row {idx})")
    if lib.llama_vocab_is_eog(vocab, token):
        c.finish_reason = "stop"
        return None
    c.produced += 1
    text, stopped = c.matcher.feed(c.stream.push(piece(token)))
    event = Event(token, text)
    if want_logprobs:
        event.logprob = float(lp[token])
        event.top_logprobs = _top(lp, settings.logprobs, lambda t: piece(t).decode("utf-8", "replace"))
    c.history.append(token)
    if stopped:
        c.finish_reason = "stop-string"
    elif criteria and any(crit(np.asarray(c.history, dtype=np.intc), logits) for crit in criteria):
        c.finish_reason = "stop"
    elif c.produced >= c.budget:
        c.finish_reason = "length"
    else:
        c.next_token = token
    return event


# ---- the OpenAI shape ---------------------------------------------------------------------------
def _choice_dict(index: int, text: str, logprobs: dict | None, finish: str | None) -> dict:
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}


def create_completion(engine, prompts: list[list[int]], n: int, settings: GenerationSettings,
                      stream: bool, echo_texts: Sequence[str], model_name: str):
    """``choices[p * n + k]`` answers prompt ``p`` (its k-th sample)."""
    cid, created = completion_id(), int(time.time())
    groups = build_groups(engine, prompts, n, settings, engine.context.n_seq_max)
    choices = [c for g in groups for c in g.choices]
    n_prompt = sum(len(p) for p in prompts)

    def usage() -> dict:
        produced = sum(c.produced for c in choices)
        return {"prompt_tokens": n_prompt, "completion_tokens": produced, "total_tokens": n_prompt + produced}

    def shell(items: list[dict], with_usage: bool) -> dict:
        out = {"id": cid, "object": "text_completion", "created": created, "model": model_name, "choices": items}
        if with_usage:
            out["usage"] = usage()
        return out

    def chunks(lease) -> Iterator[dict]:
        for c in choices:
            if echo_texts[c.index // n]:
                yield shell([_choice_dict(c.index, echo_texts[c.index // n], None, None)], False)
        left = len(choices)
        for c, e in parallel_events(engine, groups, settings, lease):
            if e is None:
                left -= 1
                yield shell([_choice_dict(c.index, "", None, c.finish_reason)], left == 0)
            else:
                lp = _logprobs_block([e], 0, engine.tokenizer) if settings.logprobs is not None else None
                yield shell([_choice_dict(c.index, e.text, lp, None)], False)

    if stream:
        return engine.lock.stream(chunks)
    events: dict[int, list[Event]] = {c.index: [] for c in choices}
    with engine.lock, sigint_stops_compute():
        for c, e in parallel_events(engine, groups, settings):
            if e is not None:
                events[c.index].append(e)
    items = []
    for c in choices:
        echo = echo_texts[c.index // n]
        lp = (_logprobs_block(events[c.index], len(echo), engine.tokenizer)
              if settings.logprobs is not None else None)
        items.append(_choice_dict(c.index, echo + "".join(e.text for e in events[c.index]), lp, c.finish_reason))
    return shell(items, True)
