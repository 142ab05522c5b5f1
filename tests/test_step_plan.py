"""A step's plan (``engine.plan``) as a plain value, without a model: next tokens first, drafts
under the step's budget with room kept for the sequences after, prompts in order in what is left."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_ffi.high.engine.plan import Generating, Prompt, Row, plan_step


def test_next_tokens_then_a_draft_then_prompts_in_order():
    plan = plan_step(
        [Generating(seq=0, pos=5, next_token=11, drafts=True), Generating(seq=1, pos=2, next_token=12)],
        [Prompt(seq=2, tokens=[1, 2, 3], evaluated=1), Prompt(seq=3, tokens=[4, 5, 6, 7], evaluated=0)],
        capacity=8,
        propose=lambda k, room: [21, 22, 23],
        draft_budget=48,
    )
    assert plan.rows == (
        Row(11, 5, 0, True),
        Row(21, 6, 0, True),
        Row(22, 7, 0, True),
        Row(23, 8, 0, True),
        Row(12, 2, 1, True),
        Row(2, 1, 2, False),
        Row(3, 2, 2, True),  # the prompt's last token asks for logits
        Row(4, 0, 3, False),  # the second prompt gets what is left: one token
    )
    assert [(c.first, c.draft) for c in plan.choices] == [(0, (21, 22, 23)), (4, ())]
    assert [(p.index, p.start, p.take, p.first) for p in plan.prompts] == [(0, 1, 2, 5), (1, 0, 1, 7)]


def test_a_draft_leaves_room_for_every_later_sequence_and_keeps_to_the_budget():
    asked = []

    def propose(k, room):
        asked.append((k, room))
        return list(range(100, 100 + room))

    generating = [Generating(seq=s, pos=0, next_token=s, drafts=True) for s in range(3)]
    plan = plan_step(generating, [], capacity=6, propose=propose, draft_budget=48)
    assert asked == [(0, 3), (1, 0), (2, 0)]  # 6 rows: 3 next tokens, 3 drafted by the first
    assert len(plan.rows) == 6
    plan = plan_step(generating, [], capacity=64, propose=propose, draft_budget=5)
    assert [len(c.draft) for c in plan.choices] == [5, 0, 0]
    # with no budget (many sequences), drafting choices are still asked, with no room
    asked.clear()
    plan_step(generating, [], capacity=64, propose=propose, draft_budget=0)
    assert asked == [(0, 0), (1, 0), (2, 0)]


def test_logits_all_prompts_ask_for_every_row_and_too_many_sequences_are_refused():
    plan = plan_step([], [Prompt(seq=0, tokens=[7, 8, 9], evaluated=0, logits_all=True)], capacity=4)
    assert [r.logits for r in plan.rows] == [True, True, True]
    with pytest.raises(ValueError, match="do not fit"):
        plan_step([Generating(s, 0, 1) for s in range(5)], [], capacity=4)


@settings(max_examples=200, deadline=None)
@given(
    n_gen=st.integers(0, 6),
    prompt_lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 39)), max_size=4),
    capacity=st.integers(6, 64),
    budget=st.integers(0, 48),
    draft_len=st.integers(0, 10),
)
def test_every_plan_fits_the_batch_and_continues_each_prompt(n_gen, prompt_lengths, capacity, budget, draft_len):
    generating = [Generating(seq=s, pos=3 * s, next_token=s, drafts=s % 2 == 0) for s in range(n_gen)]
    prompts = [
        Prompt(seq=10 + i, tokens=list(range(n)), evaluated=min(e, n - 1)) for i, (n, e) in enumerate(prompt_lengths)
    ]
    plan = plan_step(generating, prompts, capacity, propose=lambda k, room: [7] * draft_len, draft_budget=budget)
    assert len(plan.rows) <= capacity
    assert sum(len(c.draft) for c in plan.choices) <= budget
    for g, c in zip(generating, plan.choices):
        assert plan.rows[c.first] == Row(g.next_token, g.pos, g.seq, True)
        assert [r.pos for r in plan.rows[c.first + 1 : c.first + 1 + len(c.draft)]] == [
            g.pos + 1 + j for j in range(len(c.draft))
        ]
    for part in plan.prompts:
        p = prompts[part.index]
        rows = plan.rows[part.first : part.first + part.take]
        assert part.start == p.evaluated and [r.pos for r in rows] == list(range(p.evaluated, p.evaluated + part.take))
        assert all(r.seq == p.seq for r in rows)
    if plan.prompts and len(plan.rows) < capacity:  # room left over: every prompt was taken whole
        assert all(part.start + part.take == len(prompts[part.index].tokens) for part in plan.prompts)
