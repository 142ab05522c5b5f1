"""The soak: one ``Llama`` under long mixed load, checked answer by answer. A reliability check
of the library (the benchmark's ``--soak`` prints its report; tests/test_soak.py runs a minute):

    python -m bench --soak MINUTES [-m MODEL] [-t THREADS]

One ``Llama`` (4 slots, each with its own pool of cells: llama.cpp's default when ``n_seq_max`` is
given) with a ``LlamaDiskCache`` small enough to evict, driven by worker threads that each pick, at
random, a plain, streamed or abandoned completion, ``n=2``, a list of prompts, a sampled request, a
chat, a bad request (too long, a broken grammar), a ``save_state``/``load_state`` round trip, an
asyncio task cancelled as its event loop closes, under no control vector or one of two (adapters
switching between requests); prompts include shared preambles with two questions each; an asyncio
thread whose streams are cancelled part-way or read to the end; and a corrupter that damages cache
files on disk (cut short, bytes flipped or appended). The run ends after ``minutes`` or, when
given, after ``requests`` requests.
Every greedy answer is compared with the same request run alone before the soak: identical, or
first different where the token taken is within the near-tie bound measured on this machine of
the one taken alone (``near_tie``, the test suite's rule). At the end, ``close()`` is called with
requests in flight. Reported: requests, tokens/s,
wrong answers (must be 0), unexpected errors (must be 0), near ties, RSS (after the first fifth
and at the end), latency p50/p99.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import random
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from llama_ffi import testing

N_TOKENS = 24
# Prompts whose greedy continuations are confident (lists, counting, code, a quote to finish):
# near ties are rare, so a wrong cache shows as a wrong answer rather than passing as a near tie.
PROMPTS = [
    "Count from one to forty in digits, separated by commas: 1, 2, 3, 4, 5, 6,",
    "The days of the week are Monday, Tuesday, Wednesday,",
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    "The months of the year, in order: January, February, March, April,",
    "Repeat the sentence three times. The quick brown fox jumps over the lazy dog. The quick brown fox",
    "The letters of the English alphabet, in order: A, B, C, D, E, F,",
]
# Shared preambles with two questions each: siblings (n=2) and the prompt cache must give every
# choice the cells of its own question (issue 41: with separate pools of cells they answered the
# other question's).
PREAMBLES = [
    "The museum opens at nine and closes at five. Tickets are sold at the entrance hall.",
    "The train leaves platform four every hour. Passengers must validate tickets before boarding.",
]
QUESTIONS = ["what should a visitor do first?", "what is the most common mistake?"]
PROMPTS += [f"{p}\nQuestion: {q}\nAnswer:" for p in PREAMBLES for q in QUESTIONS]
CHATS = ["Name three colours of the rainbow.", "What is the capital of Italy? Answer briefly."]
BAD_GRAMMAR = 'root ::= ( "a" '


def prompt_of(i: int) -> str:
    return PROMPTS[i]


@dataclasses.dataclass
class Reference:
    """A greedy answer alone: its text and its steps (``testing.Step``: the candidates of each token)."""

    text: str
    steps: list


@dataclasses.dataclass
class Report:
    minutes: float
    requests: int = 0
    by_kind: dict = dataclasses.field(default_factory=dict)
    tokens: int = 0
    wrong: list = dataclasses.field(default_factory=list)
    near_ties: int = 0
    near_tie_margins: list = dataclasses.field(default_factory=list)
    unexpected: list = dataclasses.field(default_factory=list)
    expected_errors: int = 0
    corruptions: int = 0
    latencies: list = dataclasses.field(default_factory=list)
    rss_mb: list = dataclasses.field(default_factory=list)  # (seconds, MB)
    bound: float = 0.0
    close_s: float = 0.0
    close_outcomes: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0  # how long the load ran (less than the minutes when a request count ended it)

    def summary(self) -> dict:
        lat = sorted(self.latencies) or [0.0]
        seconds = self.seconds or self.minutes * 60
        warm = [mb for t, mb in self.rss_mb if t >= seconds / 5] or [0.0]
        return {
            "minutes": self.minutes,
            "requests": self.requests,
            "by_kind": dict(sorted(self.by_kind.items())),
            "seconds": seconds,
            "tokens_per_s": self.tokens / seconds,
            "wrong": len(self.wrong),
            "near_ties": self.near_ties,
            "near_tie_gap_max": max(self.near_tie_margins, default=0.0),
            "unexpected_errors": len(self.unexpected),
            "expected_errors": self.expected_errors,
            "corruptions": self.corruptions,
            "latency_p50_s": lat[len(lat) // 2],
            "latency_p99_s": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "rss_mb_after_first_fifth": warm[0],
            "rss_mb_end": warm[-1],
            "rss_growth_mb": warm[-1] - warm[0],
            "near_tie_bound": self.bound,
            "close_s": self.close_s,
            "close_outcomes": self.close_outcomes,
        }


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def control_vectors(llm) -> list:
    """No control vector, and two seeded random ones (adapters switching between requests)."""
    from llama_ffi.high.adapters import ControlVector

    n_embd, n_layer = llm.n_embd(), llm.context.model.n_layer
    out: list = [None]
    for seed in (1, 2):
        rows = np.random.default_rng(seed).normal(0.0, 0.08, n_embd * n_layer).astype(np.float32)
        out.append(ControlVector(rows, n_embd, 1, n_layer))
    return out


class Soak:
    def __init__(
        self,
        model: str,
        minutes: float,
        threads: int = 2,
        workers: int = 3,
        seed: int = 0,
        cache_dir: str | None = None,
        requests: int | None = None,
    ) -> None:
        from llama_ffi.high import Llama, LlamaDiskCache

        self.minutes, self.seed, self.workers, self.requests = minutes, seed, workers, requests
        self._tmp = tempfile.TemporaryDirectory(prefix="llama-ffi-soak-") if cache_dir is None else None
        self.cache_dir = Path(cache_dir or self._tmp.name)
        self.llm = Llama(model, n_ctx=4096, n_seq_max=4, n_threads=threads, progress=False)
        self.llm.set_cache(LlamaDiskCache(self.cache_dir, capacity_bytes=24 << 20))
        self.cvecs = control_vectors(self.llm)
        self.report = Report(minutes)
        self._lock = threading.Lock()
        self._deadline = 0.0

    # ---- references ------------------------------------------------------------------------------
    def _alone(self, call) -> Reference:
        record = testing.StepRecorder()
        self.llm.reset()
        return Reference(call(record), record.steps)

    def references(self) -> None:
        llm = self.llm

        def completion(i, cv):
            def call(record):
                out = llm(
                    prompt_of(i),
                    max_tokens=N_TOKENS,
                    temperature=0.0,
                    control_vector=self.cvecs[cv],
                    logits_processor=[record],
                )
                return out["choices"][0]["text"]

            return call

        def chat(i):
            def call(record):
                out = llm.create_chat_completion(
                    [{"role": "user", "content": CHATS[i]}],
                    max_tokens=N_TOKENS,
                    temperature=0.0,
                    logits_processor=[record],
                )
                return out["choices"][0]["message"]["content"] or ""

            return call

        self.completions = {
            (i, cv): self._alone(completion(i, cv)) for i in range(len(PROMPTS)) for cv in range(len(self.cvecs))
        }
        self.chats = {i: self._alone(chat(i)) for i in range(len(CHATS))}

    # ---- checking --------------------------------------------------------------------------------
    def check(self, what: str, got: str, want: Reference) -> None:
        """Identical, or first different at a near tie (``near_tie``: the token taken instead is
        within the bound measured on this machine of the one taken alone)."""
        if got == want.text:
            return
        joined = b"".join(self.llm.tokenizer.piece(step[0]) for step in want.steps)
        lead = joined[: len(joined) - len(joined.lstrip())]  # a chat's content may drop it
        text = got.encode() if want.text.encode().startswith(lead) else lead + got.encode()
        i, gap = testing.text_divergence(self.llm, want.steps, text)
        if gap < self.report.bound:
            with self._lock:
                self.report.near_ties += 1
                self.report.near_tie_margins.append(round(gap, 3))
            return
        with self._lock:
            self.report.wrong.append(f"{what}: {got!r} vs alone {want.text!r} (token {i}, taken {gap:.3f} below)")

    def going(self) -> bool:
        """Before the deadline, and short of the number of requests when one was given."""
        return time.perf_counter() < self._deadline and (self.requests is None or self.report.requests < self.requests)

    def _count(self, kind: str, started: float, tokens: int) -> None:
        with self._lock:
            self.report.requests += 1
            self.report.by_kind[kind] = self.report.by_kind.get(kind, 0) + 1
            self.report.tokens += tokens
            self.report.latencies.append(time.perf_counter() - started)

    # ---- the actions -----------------------------------------------------------------------------
    def one_request(self, rng: random.Random) -> None:
        from llama_ffi.high import ContextLengthError, LlamaGrammar

        llm, started = self.llm, time.perf_counter()
        i, cv = rng.randrange(len(PROMPTS)), rng.randrange(len(self.cvecs))
        prompt, want = prompt_of(i), self.completions[(i, cv)]
        common = {"max_tokens": N_TOKENS, "temperature": 0.0, "control_vector": self.cvecs[cv]}
        kind = rng.choices(
            ["plain", "stream", "abandoned", "n2", "list", "sampled", "chat", "bad", "state", "closed-loop"],
            [20, 15, 10, 12, 8, 10, 10, 6, 4, 5],
        )[0]
        if kind == "plain":
            out = llm(prompt, **common)
            self.check(kind, out["choices"][0]["text"], want)
            self._count(kind, started, out["usage"]["completion_tokens"])
        elif kind == "stream":
            chunks = list(llm(prompt, stream=True, **common))
            self.check(kind, "".join(c["choices"][0]["text"] for c in chunks), want)
            self._count(kind, started, len(chunks))
        elif kind == "abandoned":
            stream = llm(prompt, stream=True, **common)
            taken = list(itertools.islice(stream, rng.randrange(1, 6)))
            stream.close()
            self._count(kind, started, len(taken))
        elif kind == "n2":
            out = llm(prompt, n=2, max_tokens=N_TOKENS, temperature=0.0)
            for choice in out["choices"]:
                self.check(kind, choice["text"], self.completions[(i, 0)])
            self._count(kind, started, out["usage"]["completion_tokens"])
        elif kind == "list":
            j = (i + 1) % len(PROMPTS)
            out = llm([prompt, prompt_of(j)], max_tokens=N_TOKENS, temperature=0.0)
            for choice, k in zip(out["choices"], (i, j)):
                self.check(kind, choice["text"], self.completions[(k, 0)])
            self._count(kind, started, out["usage"]["completion_tokens"])
        elif kind == "sampled":
            out = llm(prompt, max_tokens=N_TOKENS, temperature=0.8, seed=rng.randrange(1 << 30))
            self._count(kind, started, out["usage"]["completion_tokens"])
        elif kind == "chat":
            c = rng.randrange(len(CHATS))
            out = llm.create_chat_completion(
                [{"role": "user", "content": CHATS[c]}], max_tokens=N_TOKENS, temperature=0.0
            )
            self.check(kind, out["choices"][0]["message"]["content"] or "", self.chats[c])
            self._count(kind, started, out["usage"]["completion_tokens"])
        elif kind == "bad":
            try:
                if rng.random() < 0.5:
                    llm("word " * (llm.n_ctx() + 10), max_tokens=4)
                else:
                    llm(prompt, max_tokens=4, grammar=LlamaGrammar.from_string(BAD_GRAMMAR))
            except (ContextLengthError, ValueError):
                with self._lock:
                    self.report.expected_errors += 1
            else:
                raise AssertionError("a bad request was answered")
            self._count(kind, started, 0)
        elif kind == "state":  # a state round trip of the latest request's slot
            saved = llm.save_state()
            llm.load_state(saved)
            self._count(kind, started, 0)
        else:  # an asyncio task cancelled as its event loop closes: the engine ends it later

            async def abandon() -> None:
                task = asyncio.ensure_future(llm.acreate_completion(prompt, **common))
                await asyncio.sleep(rng.uniform(0.0, 0.2))
                task.cancel()

            asyncio.run(abandon())
            self._count(kind, started, 0)

    def worker(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        while self.going():
            try:
                self.one_request(rng)
            except Exception as error:  # noqa: BLE001 - every unexpected error is reported
                with self._lock:
                    self.report.unexpected.append(repr(error))

    def asyncio_worker(self) -> None:
        rng = random.Random(self.seed * 1000 + 99)

        async def stream(i: int, cancel_after: int | None) -> None:
            started = time.perf_counter()
            chunks = []
            async for chunk in await self.llm.acreate_completion(
                prompt_of(i), max_tokens=N_TOKENS, temperature=0.0, stream=True
            ):
                chunks.append(chunk)
                if cancel_after is not None and len(chunks) >= cancel_after:
                    raise asyncio.CancelledError
            self.check("async", "".join(c["choices"][0]["text"] for c in chunks), self.completions[(i, 0)])
            self._count("async", started, len(chunks))

        async def main() -> None:
            while self.going():
                tasks = [asyncio.create_task(stream(rng.randrange(len(PROMPTS)), None)) for _ in range(2)]
                doomed = asyncio.create_task(stream(rng.randrange(len(PROMPTS)), None))
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                doomed.cancel()  # part-way, wherever it is
                for task in [*tasks, doomed]:
                    try:
                        await task
                    except asyncio.CancelledError:
                        self._count("async-cancelled", time.perf_counter(), 0)
                    except Exception as error:  # noqa: BLE001 - reported
                        with self._lock:
                            self.report.unexpected.append(repr(error))

        asyncio.run(main())

    def corrupter(self) -> None:
        rng = random.Random(self.seed * 1000 + 7)
        while self.going():
            time.sleep(rng.uniform(0.5, 2.0))
            files = sorted(self.cache_dir.glob("*.llama-ffi-state"))
            if not files:
                continue
            path = rng.choice(files)
            try:
                data = bytearray(path.read_bytes())
                how = rng.randrange(3)
                if how == 0:
                    data = data[: rng.randrange(len(data))]
                elif how == 1:
                    at = rng.randrange(len(data))
                    data[at : at + 64] = bytes(b ^ 0x5A for b in data[at : at + 64])
                else:
                    data += os.urandom(rng.randrange(1, 256))
                path.write_bytes(bytes(data))
            except OSError:
                continue  # evicted meanwhile
            with self._lock:
                self.report.corruptions += 1

    def sampler(self, started: float) -> None:
        while self.going():
            self.report.rss_mb.append((time.perf_counter() - started, rss_mb()))
            time.sleep(1.0)

    # ---- the run ---------------------------------------------------------------------------------
    def run(self) -> Report:
        self.report.bound = testing.parallel_bound(self.llm)
        self.references()
        started = time.perf_counter()
        self._deadline = started + self.minutes * 60
        threads = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(self.workers)]
        threads += [threading.Thread(target=t, daemon=True) for t in (self.asyncio_worker, self.corrupter)]
        threads.append(threading.Thread(target=self.sampler, args=(started,), daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.minutes * 60 + 300)
        self.report.seconds = time.perf_counter() - started
        if any(t.is_alive() for t in threads):
            self.report.unexpected.append("a soak thread never finished")
        self.close_in_flight()
        return self.report

    def close_in_flight(self) -> None:
        """``close()`` while two streams and a plain request run: it waits for the plain one, which
        gets its whole answer; the streams end with the closed Llama's RuntimeError; none hangs."""
        outcomes: dict = {}
        begun = threading.Barrier(3)

        def streamed(i: int) -> None:
            try:
                stream = self.llm(prompt_of(i), max_tokens=64, temperature=0.0, stream=True)
                next(stream)
            finally:
                begun.wait(60)
            try:
                rest = list(stream)
                reason = rest[-1]["choices"][0]["finish_reason"] if rest else "-"
                outcomes[f"stream {i}"] = f"{len(rest) + 1} chunks, {reason}"
            except RuntimeError as error:
                outcomes[f"stream {i}"] = "closed" if "closed" in str(error) else repr(error)

        def plain() -> None:
            out = self.llm(prompt_of(2), max_tokens=64, temperature=0.0)
            outcomes["plain"] = f"{out['usage']['completion_tokens']} tokens, {out['choices'][0]['finish_reason']}"

        callers = [threading.Thread(target=streamed, args=(i,), daemon=True) for i in range(2)]
        callers.append(threading.Thread(target=plain, daemon=True))
        for t in callers:
            t.start()
        begun.wait(60)
        time.sleep(0.2)  # the plain request is admitted and decoding
        t0 = time.perf_counter()
        self.llm.close()
        self.report.close_s = time.perf_counter() - t0
        for t in callers:
            t.join(120)
        if any(t.is_alive() for t in callers):
            self.report.unexpected.append("a caller hung in close()")
        self.report.close_outcomes = [f"{k}: {v}" for k, v in sorted(outcomes.items())]
        if self._tmp is not None:
            self._tmp.cleanup()


def soak(model: str, minutes: float, threads: int = 2, seed: int = 0) -> dict:
    logging.getLogger("llama_ffi").setLevel(logging.ERROR)  # the corrupter makes misses: each is logged
    report = Soak(model, minutes, threads, seed=seed).run()
    out = report.summary()
    out["wrong_examples"], out["unexpected_examples"] = report.wrong[:5], report.unexpected[:5]
    return out


def soak_table(result: dict) -> str:
    lines = ["| measure | value |", "|---|---:|"]
    for key, value in result.items():
        if key.endswith("examples") or key == "by_kind":
            continue
        lines.append(f"| {key} | {value:.3f} |" if isinstance(value, float) else f"| {key} | {value} |")
    lines.append(f"| by kind | {', '.join(f'{k} {v}' for k, v in result['by_kind'].items())} |")
    for example in result["wrong_examples"] + result["unexpected_examples"]:
        lines.append(f"| ! | {example} |")
    return "\n".join(lines)
