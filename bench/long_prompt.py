"""The benchmark's long-prompt table, as coding agents send them: a prompt of ``prompt_length``
tokens prefilled, ``N_DECODE`` greedy tokens decoded at that depth, and a second request that extends
the first by ``N_EXTEND`` tokens (the first's tokens from the cache), on ``llama-ffi serve`` and on
llama-server from the pinned tree with the same model, context, threads and requests
(``/completion`` with token ids; both report llama-server's ``timings``). Every configuration's
server is up at once and each repeat's prompt goes to each in turn, so all see the same machine
speed; each repeat takes a prompt of its own (nothing cached from the repeat before). ``configs``:
the rows, each a server and its flags (flash attention, KV types)."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from bench.common import median
from bench.concurrent import start_server

# Agents' first prompts are 7-12 k tokens: 12 k where the model's training length holds it with
# the extension and the decoded tokens (llama-server caps a slot there), else the most that fits
# (SmolLM2, 8 k: 7,680).
MAX_LONG, N_DECODE, N_EXTEND = 12288, 32, 256
SLACK = 64  # cells beyond the prompt, its extension and the decoded tokens
START_S = 300.0
# Rows: (server, flags). llama-server's defaults against ours, then ours with other attention and
# KV settings, to set the defaults by the numbers.
CONFIGS = (
    ("llama-ffi", ()),
    ("llama-server", ()),
    ("llama-ffi", ("-fa", "off")),
    ("llama-server", ("-fa", "off")),
    ("llama-ffi", ("-ctk", "q8_0", "-ctv", "q8_0")),
)


class Server:
    def __init__(self, command: list[str], model: str, threads: int, ctx: int) -> None:
        from llama_ffi.rpc import free_port

        self.port, self.command = free_port(), command
        args = ["-m", model, "-t", str(threads), "-c", str(ctx), "-np", "1", "--host", "127.0.0.1"]
        self.proc = start_server([*command, *args, "--port", str(self.port)], self.port, START_S)

    def timings(self, prompt: list[int], n_predict: int) -> dict:
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True, "cache_prompt": True}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=3600) as r:
                return json.loads(r.read())["timings"]
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{self.command[0]}: {error.code} {error.read()[:300]!r}") from None

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def long_prompt(n_vocab: int, seed: int, n: int) -> list[int]:
    """``n`` pseudo-random token ids (no two repeats alike: nothing cached across them)."""
    return [(i * 7919 + 104729 * seed + 17) % (n_vocab - 1000) + 500 for i in range(n)]


def prompt_length(n_ctx_train: int) -> int:
    """The long prompt's tokens for a model trained on ``n_ctx_train``: whole 256-token blocks."""
    return min(MAX_LONG, (n_ctx_train - context_size(0)) // 256 * 256)


def context_size(n_long: int) -> int:
    """The servers' context for a long prompt of ``n_long`` tokens."""
    return n_long + N_EXTEND + N_DECODE + SLACK


def one_round(server: Server, prompt: list[int]) -> dict:
    first = server.timings(prompt[:-N_EXTEND], N_DECODE)
    second = server.timings(prompt, 1)
    return {
        "prefill_tps": first["prompt_per_second"],
        "decode_tps": first["predicted_per_second"],
        "extend_ms": second["prompt_ms"],
        "extend_n": second["prompt_n"],
        "share": second["prompt_ms"] / first["prompt_ms"],
    }


def bench(model: str, threads: int, repeats: int, tools: Path | None, configs=CONFIGS) -> list[dict]:
    from llama_ffi.high import Llama

    with Llama(model, vocab_only=True, progress=False, verbose=False) as vocab:
        meta = vocab.metadata  # (a vocab-only model has no hyperparameters: n_ctx_train is 0)
        n_vocab, n_long = vocab.n_vocab(), prompt_length(int(meta[f"{meta['general.architecture']}.context_length"]))
    native = tools / "llama-server" if tools and (tools / "llama-server").is_file() else None
    commands = {"llama-ffi": [sys.executable, "-m", "llama_ffi.server"]}
    if native:
        commands["llama-server"] = [str(native), "--no-webui"]
    ctx = context_size(n_long)
    wanted = [(name, flags) for name, flags in configs if name in commands]
    servers: list[Server] = []
    try:
        for name, flags in wanted:  # all up at once (an idle server takes no CPU): rounds alternate
            servers.append(Server([*commands[name], *flags], model, threads, ctx))
        runs: list[list[dict]] = [[] for _ in wanted]
        for seed in range(repeats):
            prompt = long_prompt(n_vocab, seed, n_long + N_EXTEND)
            for i, server in enumerate(servers):
                runs[i].append(one_round(server, prompt))
    finally:
        for server in servers:
            server.close()
    rows = []
    for (name, flags), results in zip(wanted, runs):
        row = {"server": name, "flags": " ".join(flags) or "(defaults)", "load": os.getloadavg()[0], "n_long": n_long}
        row.update({key: [r[key] for r in results] for key in ("prefill_tps", "decode_tps", "extend_ms", "share")})
        row["extend_n"] = results[0]["extend_n"]
        rows.append(row)
    return rows


def long_prompt_table(rows: list[dict]) -> str:
    def spread(values: list[float], spec: str) -> str:
        return f"{median(values):{spec}} ({min(values):{spec}}–{max(values):{spec}})"

    lines = [
        f"## Long prompts: {rows[0]['n_long']} tokens prefilled, {N_DECODE} decoded at that depth, "
        f"then {N_EXTEND} more (median, min–max)",
        "",
        "| server | flags | prefill t/s | decode t/s at depth | extension: prompt ms (tokens) | of the first's time |"
        " load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['server']} | {r['flags']} | {spread(r['prefill_tps'], '.0f')} | {spread(r['decode_tps'], '.1f')} "
            f"| {spread(r['extend_ms'], '.0f')} ({r['extend_n']}) | {spread(r['share'], '.1%')} | {r['load']:.2f} |"
        )
    return "\n".join(lines)
