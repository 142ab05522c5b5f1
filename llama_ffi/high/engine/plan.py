"""A step's plan: which rows one ``llama_decode`` carries — the next token of each generating
sequence with its draft to verify, then as many prompt tokens as the batch has room for — as a
plain value, built from plain facts by ``plan_step`` (tests call it without a model; the stepper
fills the batch from it and reads the rows back by it).

Rules: every generating sequence gets its next token (a row with logits); a drafting sequence's
draft follows it while the step's drafted tokens stay under ``draft_budget`` and room is left for
the sequences after it; prompts fill what is left in arrival order, a prompt's last token (or, with
``logits_all``, each of its tokens) asking for logits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Row:
    token: int
    pos: int
    seq: int
    logits: bool


@dataclasses.dataclass(frozen=True)
class Generating:
    """A sequence that generates: its next token goes at ``pos``; ``drafts``: it may verify a draft."""

    seq: int
    pos: int
    next_token: int
    drafts: bool = False


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A prompt being evaluated into ``seq``: ``evaluated`` of its ``tokens`` are in the cache."""

    seq: int
    tokens: Sequence[int]
    evaluated: int
    logits_all: bool = False


@dataclasses.dataclass(frozen=True)
class ChoiceRows:
    first: int  # the row of the next token; the draft's rows follow it
    draft: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PromptPart:
    index: int  # which of the prompts
    start: int  # its first position in this step
    take: int  # how many of its tokens
    first: int  # their first row


@dataclasses.dataclass(frozen=True)
class StepPlan:
    rows: tuple[Row, ...]
    choices: tuple[ChoiceRows, ...]  # one per generating sequence, in order
    prompts: tuple[PromptPart, ...]  # the prompts that got rows, in order


def plan_step(
    generating: Sequence[Generating],
    prompts: Sequence[Prompt],
    capacity: int,
    propose: Callable[[int, int], Sequence[int]] | None = None,
    draft_budget: int = 0,
) -> StepPlan:
    """The rows of one decode of at most ``capacity`` tokens. ``propose(k, room)``: the draft of
    generating sequence ``k`` (at most ``room`` tokens), asked only of those that draft."""
    if len(generating) > capacity:
        raise ValueError(f"{len(generating)} generating sequences do not fit a batch of {capacity}")
    rows: list[Row] = []
    choices: list[ChoiceRows] = []
    drafted = 0
    for k, g in enumerate(generating):
        first = len(rows)
        rows.append(Row(g.next_token, g.pos, g.seq, True))
        draft: tuple[int, ...] = ()
        if g.drafts and propose is not None:
            room = min(draft_budget - drafted, capacity - len(rows) - (len(generating) - k - 1))
            draft = tuple(propose(k, max(room, 0)))[: max(room, 0)]
            rows += [Row(t, g.pos + 1 + j, g.seq, True) for j, t in enumerate(draft)]
            drafted += len(draft)
        choices.append(ChoiceRows(first, draft))
    parts: list[PromptPart] = []
    for i, p in enumerate(prompts):
        room = capacity - len(rows)
        if room <= 0:
            break
        take = min(room, len(p.tokens) - p.evaluated)
        last = len(p.tokens) - 1
        first = len(rows)
        rows += [Row(p.tokens[j], j, p.seq, p.logits_all or j == last) for j in range(p.evaluated, p.evaluated + take)]
        parts.append(PromptPart(i, p.evaluated, take, first))
    return StepPlan(tuple(rows), tuple(choices), tuple(parts))
