"""The real agent CLIs end to end on ``llama-ffi serve`` (``-m agents``; ``pip install
'llama-ffi[agents]'``): Claude Code and Codex CLI in print mode, on the tiny model, through the
recording proxy of ``tools.agent_requests``: the first turn calls the agent's file or command tool
(forced there: a 135 M model seldom calls one by itself), the agent runs it and sends its result;
every request is answered 2xx, and the turn after the tool reuses the first turn's cached prompt."""

from __future__ import annotations

import pytest

from tools import agent_requests

pytestmark = pytest.mark.agents


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_the_agent_completes_its_loop_and_reuses_the_prompt(smollm2_path, agent):
    if agent_requests.agent_binary(agent) is None:
        pytest.fail(f"{agent} is not installed: pip install 'llama-ffi[agents]'")
    bodies, statuses, output = agent_requests.record(agent, str(smollm2_path), 16384, 1800.0)
    assert len(bodies) >= 2, output  # the first turn, and the one carrying the tool's result
    assert all(200 <= status < 300 for _, status, _, _ in statuses), (statuses, output)
    first, second = statuses[0][3], statuses[1][3]
    assert second[1] >= 0.9 * first[0], (first, second)  # tokens read from the cache
