"""Choices: one sequence of a request each (its sampler chain, stop strings, budget, processors),
grouped by prompt, and the one per-token step that samples a choice's next token.

Choice ``i`` of a request with seed ``s`` samples with seed ``s + i`` (mod 2**32); a random seed
stays random for every choice. The ``n`` choices of one prompt form groups that evaluate it once.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np

from llama_ffi import lib
from llama_ffi.high.completion import GenerationSettings
from llama_ffi.high.sampling import SamplerChain
from llama_ffi.high.text_output import Event, StopMatcher, log_softmax, top_tokens
from llama_ffi.high.tokenizer import TextStream

logger = logging.getLogger("llama_ffi")

SEED_MODULUS = 1 << 32
NO_OUTPUT = -2  # a choice with no logits in this step
DEFAULT_SLOTS = 8  # llama-batched-bench's aggregate speed grows little beyond this on a CPU


def default_slots(n_batch: int | None) -> int:
    """Llama's n_seq_max when none is given: DEFAULT_SLOTS, never above n_batch (llama.cpp's rule)."""
    if isinstance(n_batch, int) and not isinstance(n_batch, bool) and n_batch > 0:
        return min(DEFAULT_SLOTS, n_batch)
    return DEFAULT_SLOTS


def choice_seed(seed: int, i: int) -> int:
    """The seed of choice ``i``: the request's plus ``i``; llama.cpp's random seed stays random."""
    return seed if seed == lib.LLAMA_DEFAULT_SEED else (seed + i) % SEED_MODULUS


def fresh_processors(processors) -> list:
    """A choice's logits processors: one with state (a reasoning budget) is copied for each choice,
    the others are shared."""
    return [p.for_choice() if hasattr(p, "for_choice") else p for p in processors]


@dataclasses.dataclass(eq=False)
class Choice:
    """One sequence of a request: its prompt, its sampler chain, where it stands."""

    index: int
    prompt: list[int]
    chain: SamplerChain
    budget: int
    matcher: StopMatcher
    processors: list
    stream: TextStream = dataclasses.field(default_factory=TextStream)
    history: list[int] = dataclasses.field(default_factory=list)  # prompt + generated
    slot: object | None = None
    produced: int = 0
    first_token_at: float | None = None  # perf_counter() when its first token came (timings)
    finish_reason: str | None = None
    output: int = NO_OUTPUT  # batch index of its logits after the step (-1: the last), or NO_OUTPUT
    next_token: int = -1  # sampled, to be decoded at the next step
    group: Group | None = None
    events: list[Event] = dataclasses.field(default_factory=list)  # kept for a non-streamed result
    context_bound: bool = False  # its budget is what a sequence's cells allow, below max_tokens
    drafting: object | None = None  # a speculating choice's engine.speculation.Drafting


@dataclasses.dataclass(eq=False)
class Group:
    """The choices of one prompt that evaluate it together (at most one per free slot)."""

    prompt: list[int]
    choices: list[Choice]
    request: object = None
    evaluated: int = 0  # prompt positions the leader's slot holds
    cached: int = 0  # of them, those its slot (or the prompt cache) held at admission
    live: int = 0  # choices not finished yet
    admitted_at: float | None = None  # when its prompt got a slot (prompt progress)

    def __post_init__(self) -> None:
        self.live = len(self.choices)
        for c in self.choices:
            c.group = self

    @property
    def leader(self) -> Choice:
        return self.choices[0]

    def cells(self, keep: int) -> int:
        """KV cells the group can add to what its slot holds: its prompt past ``keep`` once, and
        every choice's budget."""
        return kv_cells(self.prompt) - keep + sum(c.budget for c in self.choices)


def kv_cells(prompt) -> int:
    """The KV cells a prompt fills: its length, but more where media take more cells than
    positions (M-RoPE; multimodal.MediaPrompt.n_cells)."""
    return getattr(prompt, "n_cells", len(prompt))


def build_groups(context, prompts: list, n: int, settings: GenerationSettings, slots: int, n_ctx: int) -> list[Group]:
    """The groups of a request: ``n`` choices per prompt, as many at once as slots and cells allow
    (the rest evaluate the prompt again in a later group). ``n_ctx``: cells one sequence can hold."""
    groups = []
    for p, prompt in enumerate(prompts):
        budget = n_ctx - kv_cells(prompt)
        wanted = settings.max_tokens if settings.max_tokens is not None and settings.max_tokens > 0 else None
        context_bound = wanted is None or wanted > budget
        if wanted is not None:
            budget = min(budget, wanted)
        choices = []
        for k in range(n):
            i = p * n + k
            params = dataclasses.replace(settings.sampling, seed=choice_seed(settings.sampling.seed, i))
            chain = SamplerChain(params, context.model.vocab_ptr, context.n_vocab, n_ctx, settings.grammar)
            chain.accept_prompt(prompt)
            choices.append(
                Choice(
                    i,
                    prompt,
                    chain,
                    budget,
                    StopMatcher(settings.stop),
                    fresh_processors(settings.logits_processor),
                    history=list(prompt),
                    context_bound=context_bound,
                )
            )
        size = max(1, min(slots, (n_ctx - kv_cells(prompt)) // max(budget, 1)))
        for start in range(0, n, size):
            groups.append(Group(prompt, choices[start : start + size]))
    return groups


def sample(
    c: Choice, ctx, ctx_ptr, vocab, piece, settings: GenerationSettings, pristine: dict[int, np.ndarray]
) -> Event | None:
    """The per-token step: sample the choice's next token from its logits of this step, and set
    ``finish_reason`` when it is done. ``pristine``: rows as decoded, for siblings that read one
    row after another's processors changed it."""
    if c.output == NO_OUTPUT:
        return None
    idx, c.output = c.output, NO_OUTPUT
    if c.produced >= c.budget:  # a prompt that fills the context: nothing to generate
        out_of_budget(c)
        return None
    processors, criteria, want_logprobs = c.processors, settings.stopping_criteria, settings.logprobs is not None
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
    return accept(c, token, vocab, piece, settings, logits, lp)


def accept(
    c: Choice, token: int, vocab, piece, settings: GenerationSettings, logits=None, lp: np.ndarray | None = None
) -> Event | None:
    """The choice takes ``token`` (sampled, or picked by a greedy run): its text, stop strings,
    budget and stopping criteria."""
    criteria = settings.stopping_criteria
    if lib.llama_vocab_is_eog(vocab, token):
        c.finish_reason = "stop"
        return None
    c.produced += 1
    if c.produced == 1:
        c.first_token_at = time.perf_counter()
    text, stopped = c.matcher.feed(c.stream.push(piece(token)))
    event = Event(token, text)
    if lp is not None:
        event.logprob = float(lp[token])
        event.top = top_tokens(lp, settings.logprobs)
        event.top_logprobs = {piece(t).decode("utf-8", "replace"): v for t, v in event.top}
    c.history.append(token)
    if stopped:
        c.finish_reason = "stop-string"
    elif criteria and any(crit(np.asarray(c.history, dtype=np.intc), logits) for crit in criteria):
        c.finish_reason = "stop"
    elif c.produced >= c.budget:
        out_of_budget(c)
    else:
        c.next_token = token
    return event


def out_of_budget(c: Choice) -> None:
    c.finish_reason = "length"
    if c.context_bound:  # not what the caller asked for: the sequence has no cell left
        logger.warning(
            "choice %d ended with finish_reason 'length' at the end of its context: %d prompt cells "
            "and %d generated tokens fill the %d cells a sequence holds",
            c.index,
            kv_cells(c.prompt),
            c.produced,
            kv_cells(c.prompt) + c.budget,
        )


def runs_greedily(c: Choice) -> bool:
    """Whether the choice can take a greedy run of several tokens (no per-token Python hooks)."""
    settings = c.group.request.settings
    return (
        c.chain.greedy_bias is not None
        and not c.processors
        and not settings.stopping_criteria
        and settings.logprobs is None
        and not settings.logits_all
        and c.budget - c.produced >= 2
    )


def closing_events(c: Choice) -> list[Event]:
    """What a finished choice still releases: text held back for a stop string that never came."""
    tail, stopped = c.matcher.feed(c.stream.finish())
    if not stopped and c.finish_reason != "stop-string":
        tail += c.matcher.flush()
    if c.finish_reason == "stop-string" or stopped:
        c.finish_reason = "stop"
    return [Event(-1, tail)] if tail else []
