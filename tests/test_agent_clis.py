"""The real agent CLIs end to end on ``llama-ffi serve`` (``-m agents``; ``pip install
'llama-ffi[agents]'``): Claude Code and Codex CLI in print mode, on the tiny model, through the
recording proxy of ``tools.agent_requests``: the first two turns call the agent's file or command
tool (forced there: a 135 M model seldom calls one by itself), the agent runs it and sends its
result, and a third turn answers; every request is answered 2xx, and each turn after the first
reads the previous turn's prompt from the cache, its first token coming in a fraction of the first
turn's time."""

from __future__ import annotations

import pytest

from tools import agent_requests

pytestmark = pytest.mark.agents


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_the_agent_completes_its_loop_and_reuses_the_prompt(smollm2_path, agent):
    if agent_requests.agent_binary(agent) is None:
        pytest.fail(f"{agent} is not installed: pip install 'llama-ffi[agents]'")
    bodies, turns, output = agent_requests.record(agent, str(smollm2_path), 16384, 1800.0, forced=2)
    assert len(bodies) >= 3, output  # two tool turns, and the one after the second tool's result
    assert all(200 <= turn.status < 300 for turn in turns), (turns, output)
    for before, after in zip(turns, turns[1:3]):
        assert after.usage[1] >= 0.9 * before.usage[0], (before, after)  # tokens read from the cache
        # the tokens the cache did not hold (the call as the template writes it, the tool's
        # result) are a small share of the first prompt: so is the time to the first token
        new = (after.usage[0] - after.usage[1]) / turns[0].usage[0]
        assert after.first_token <= max(0.25, 2 * new) * turns[0].first_token, (turns[0], after)
