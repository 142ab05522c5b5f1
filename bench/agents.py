"""The benchmark's agents table: the real Claude Code and Codex CLI (those installed: ``pip install
'llama-ffi[agents]'``) run their loops on ``llama-ffi serve`` through ``tools.agent_requests``'
recording proxy, their first two turns made to call their tool (a tiny model seldom calls one by
itself); per request, its prompt, the share read from the cache and the time to its first token
against the first request's."""

from __future__ import annotations

from tools import agent_requests

CTX = 32768
FORCED = 2


def bench(model: str, all_tools: bool = True) -> list[dict]:
    rows = []
    for agent in ("claude", "codex"):
        if agent_requests.agent_binary(agent) is None:
            continue
        tools = None if all_tools else "Write"
        _, turns, _ = agent_requests.record(agent, model, CTX, 3600.0, forced=FORCED, tools=tools)
        for i, turn in enumerate(turns):
            rows.append({"agent": agent, "request": i + 1, "turn": turn, "first": turns[0]})
    return rows


def agents_table(rows: list[dict]) -> str:
    lines = [
        "## Agents on llama-ffi serve (each request: prompt tokens, read from the cache, first token)",
        "",
        "| agent | request | status | prompt tokens | from the cache | first token s | of the first's | whole s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        turn, first = r["turn"], r["first"]
        prompt, cached = turn.usage or (0, 0)
        lines.append(
            f"| {r['agent']} | {r['request']} | {turn.status} | {prompt} | {cached} | {turn.first_token:.1f} "
            f"| {turn.first_token / first.first_token:.1%} | {turn.seconds:.1f} |"
        )
    return "\n".join(lines)
