"""Comparing greedy outputs honestly, for tests of code that runs on llama-ffi (as
``numpy.testing`` is for numpy's users): the one near-tie rule of llama-ffi's own test suite and of
its soak (``bench/soak.py``), here so that neither depends on the other.

llama.cpp's CPU kernels give logits computed in a batch that can differ from a single decode's
(measured here: 0 for SmolLM2 Q4_1, up to 1.15 for gemma-3 Q4_K_M, whose repacked batched kernel
rounds activations differently; other CPUs differ again), so a near tie in greedy decoding can
flip. A divergence is accepted only where it is explained: at the first differing token the
reference's (plain single-token greedy) top-2 margin is below ``2 * gap + FLOOR``, where ``gap`` is
the largest batch-vs-single logit difference this machine shows for this model, measured on a
fixed text, and the token taken instead is the runner-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llama_ffi.high import Llama

FLOOR = 0.05  # logits: below any margin that a wrong cache position or a lost token would leave
# Long enough to reach the kernels llama.cpp uses for large batches: measured on SmolLM2 Q4_1, a
# batch of 34 tokens gives the single-token logits exactly and one of 67 differs by 1.4-1.6 (on
# AVX-512 and AVX2 alike); the difference grows with the batch (top candidates: 0.9-1.0 at 133
# tokens, 1.2-1.6 at 265).
GAP_TEXT = (
    "The history of the city begins in the early middle ages, when a small settlement grew "
    "around the river crossing. Merchants came from the north and the south. "
) * 4
TOP = 16  # candidates per step whose logits decide a near tie
# The contexts the two measurements run in, whatever the compared Llama's size: a decode attends over
# the cells in use (rounded up to llama.cpp's padding), not the whole cache, so one measurement per
# model serves every context (one per size used to cost 10-30 s each in the suite).
GAP_N_CTX = 512  # GAP_TEXT once
PARALLEL_N_CTX = 2048  # n_seq suffixes of GAP_TEXT side by side


def stepwise_logits(llm: Llama, text: str | list[int] = GAP_TEXT) -> np.ndarray:
    """The logits after each token of ``text`` (or of these tokens), decoded one token at a time
    from a fresh cache."""
    tokens = llm.tokenize(text) if isinstance(text, str) else list(text)
    llm.reset()
    llm.eval(tokens[:1])
    rows = [llm.logits().copy()]
    for t in tokens[1:]:
        llm.eval([t])
        rows.append(llm.logits().copy())
    llm.reset()
    return np.stack(rows)


@cache
def _gaps(model_path: str) -> tuple[float, float]:
    """The largest batch-vs-single logit difference over the whole vocabulary, and over each
    step's ``TOP`` candidates (what can flip a greedy choice)."""
    from llama_ffi.high import Llama

    with Llama(model_path, n_ctx=GAP_N_CTX, logits_all=True, progress=False) as llm:
        tokens = llm.tokenize(GAP_TEXT)
        single = stepwise_logits(llm)
        llm.eval(tokens)  # one batch (n_batch 512), every row's logits kept
        batched = llm.scores
        whole = top = 0.0
        for i, row in enumerate(single):
            diff = np.abs(row - batched[i])
            whole = max(whole, float(diff.max()))
            top = max(top, float(diff[np.argpartition(-row, TOP)[:TOP]].max()))
        return whole, top


@cache
def _parallel_gap(model_path: str, n_seq: int) -> float:
    """The same for choices decoded together by the engine, on a fixed text: sequence s reads
    GAP_TEXT from its token s (prompts of different lengths), its continuation forced token by
    token; every odd sequence stops early and its slot is forgotten at once, so later tokens land in
    the holes among the others' cells (out of position order, which changes the order of the
    attention sums: measured up to 0.8 logits on SmolLM2 with flash attention). Each step's logits
    are compared with a single-sequence decode of the same tokens."""
    from llama_ffi.high import Llama

    with Llama(model_path, n_ctx=PARALLEL_N_CTX, n_seq_max=n_seq + 2, progress=False) as llm:
        tokens = llm.tokenize(GAP_TEXT, add_bos=False)
        bos = [llm.token_bos()] if llm.token_bos() >= 0 else []
        bases = [bos + tokens[s:] for s in range(n_seq)]  # a model may need its BOS (gemma's sink)
        prompts = [base[: 5 + 2 * s] for s, base in enumerate(bases)]
        budget = min(len(b) for b in bases) - max(len(p) for p in prompts) - 1
        # each sequence's references as far as its forced run reads them (the odd ones stop early)
        ends = [min(len(b), len(p) + (2 + s if s % 2 else budget) + 1) for s, (b, p) in enumerate(zip(bases, prompts))]
        single = [stepwise_logits(llm, base[:end]) for base, end in zip(bases, ends)]
        which = {tuple(base[:5]): s for s, base in enumerate(bases)}
        end, worst, holes = llm.token_eos(), [0.0], []

        def force(ids, logits):
            s, n = which[tuple(ids[:5].tolist())], len(ids)
            worst[0] = max(worst[0], float(np.abs(single[s][n - 1] - logits).max()))
            for slot in llm.engine.slots.idle():  # a stopped sequence's cells are freed at once:
                if slot.tokens:  # the others' next tokens land in its holes
                    holes.append(slot.seq)  # (between two decodes, in the engine's thread)
                    llm.engine.slots.forget(slot)
            stop = s % 2 == 1 and n - len(prompts[s]) == 2 + s
            nxt = end if stop else bases[s][n]
            logits[:] = -np.inf
            logits[nxt] = 0.0
            return logits

        llm(prompts, max_tokens=budget, temperature=0.0, logits_processor=[force])
        assert holes, "the measurement made no holes"
        llm.reset()
        return worst[0]


def gap(llm: Llama) -> float:
    """The largest batch-vs-single logit difference among the top candidates of ``llm``'s model on
    this machine."""
    return _gaps(llm.model_path)[1]


def logits_gap(llm: Llama) -> float:
    """The largest batch-vs-single logit difference over the whole vocabulary (for comparing
    logit rows)."""
    return _gaps(llm.model_path)[0]


def parallel_bound(llm: Llama, n_seq: int = 6) -> float:
    """The near-tie bound for sequences decoded by the engine next to others: twice the larger of
    the two differences measured on this machine (batch vs single, and sequences among others'
    cells), plus FLOOR."""
    return 2.0 * max(gap(llm), _parallel_gap(llm.model_path, n_seq)) + FLOOR


def bound(llm: Llama) -> float:
    """The near-tie bound for one sequence decoded alone: twice ``gap``, plus FLOOR."""
    return 2.0 * gap(llm) + FLOOR


def bound_across(llm: Llama, other: np.ndarray) -> float:
    """The near-tie bound between ``llm`` and another build or device of the same model, whose
    ``stepwise_logits`` are ``other``: twice the larger of their measured difference and ``llm``'s
    batch gap, plus FLOOR."""
    return 2.0 * max(float(np.abs(stepwise_logits(llm) - other).max()), gap(llm)) + FLOOR


class Step(tuple):
    """One step of plain greedy decoding: (token, runner-up, top-2 margin), and ``candidates``: the
    ``TOP`` best tokens with their logits, best first."""

    candidates: list[tuple[int, float]]

    def gap_to(self, token: int) -> float:
        """How far below the chosen token's logit ``token``'s is (inf outside the candidates)."""
        best = self.candidates[0][1]
        return next((best - v for t, v in self.candidates if t == token), float("inf"))


class StepRecorder:
    """A logits processor that records a ``Step`` for each token of a greedy run (any call:
    completion, chat, with adapters), leaving the logits as they are."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        top = np.argpartition(-logits, TOP)[:TOP]
        top = sorted(top, key=lambda t: -logits[t])
        step = Step((int(top[0]), int(top[1]), float(logits[top[0]] - logits[top[1]])))
        step.candidates = [(int(t), float(logits[t])) for t in top]
        self.steps.append(step)
        return logits


def greedy_trace(llm: Llama, prompt_tokens: Sequence[int], n: int, processors: Sequence = (), **sampling) -> list[Step]:
    """Plain greedy decoding, one token at a time: a ``Step`` per token, its logits taken after
    ``processors`` (a logits processor of the run being compared)."""
    record = StepRecorder()
    steps = record.steps
    llm.reset()
    tokens = list(
        llm.generate(prompt_tokens, max_tokens=n, temperature=0.0, logits_processor=[*processors, record], **sampling)
    )
    assert tokens == [s[0] for s in steps[: len(tokens)]]
    return steps[: len(tokens)]


def assert_same_or_near_tie(
    llm: Llama,
    prompt: str | list[int],
    got: str | list[int],
    n: int,
    processors: Sequence = (),
    limit: float | None = None,
    steps: list[Step] | None = None,
    **sampling,
) -> None:
    """``got`` (text or tokens of a greedy run of ``n`` tokens of ``prompt``) equals plain greedy
    decoding with ``llm``, or first differs at an explained near tie: where the token taken
    instead is within ``limit`` of the reference's choice (usually its runner-up, but where the
    top three are close, another can come out on top). ``steps``: that decoding's
    ``greedy_trace``, when several outputs are compared with one reference."""
    tokens = llm.tokenize(prompt, special=True) if isinstance(prompt, str) else list(prompt)
    if steps is None:
        steps = greedy_trace(llm, tokens, n, processors, **sampling)
    want = [s[0] for s in steps]
    if isinstance(got, str):
        if got == b"".join(llm.tokenizer.piece(t) for t in want).decode("utf-8", "replace"):
            return
        i, gap_taken = text_divergence(llm, steps, got.encode("utf-8"))
    else:
        if list(got) == want:
            return
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        gap_taken = steps[i].gap_to(got[i]) if i < len(steps) and i < len(got) else float("inf")
    assert i < len(steps), f"outputs differ in length only: {got!r} vs {want!r}"
    limit = bound(llm) if limit is None else limit
    assert gap_taken < limit, (
        f"diverged at token {i} where the reference's top-2 margin is {steps[i][2]:.4f} and the token "
        f"taken is {gap_taken:.4f} below its choice (bound {limit:.4f})"
    )


def text_divergence(llm: Llama, steps: list[Step], got: bytes, back: int = 3) -> tuple[int, float]:
    """Where ``got`` (a run's text) leaves the reference's tokens, and how far below the reference's
    choice the run's token there was. The run's tokens may be cut differently from the reference's:
    a reference token can be a prefix of the run's (" a" of " and"), so the divergence is
    looked for at the first step whose piece ``got`` does not continue and at the ``back`` steps
    before it; the closest candidate whose text lines up with ``got`` there names the token taken."""
    pieces = [llm.tokenizer.piece(s[0]) for s in steps]
    starts, done = [0], b""
    while len(starts) <= len(pieces) and got.startswith(done + pieces[len(starts) - 1]):
        done += pieces[len(starts) - 1]
        starts.append(len(done))
    first = len(starts) - 1
    at, gap_taken = first, float("inf")
    for j in range(first, max(first - back, 0) - 1, -1):
        if j >= len(steps):
            continue
        rest = got[starts[j] :]
        for t, _ in steps[j].candidates[1:]:
            piece = llm.tokenizer.piece(t)
            if (
                rest
                and piece
                and piece != pieces[j]
                and (rest.startswith(piece) or piece.startswith(rest))
                and steps[j].gap_to(t) < gap_taken
            ):
                at, gap_taken = j, steps[j].gap_to(t)
    return at, gap_taken


def assert_same_or_sampling_flip(
    llm: Llama, prompt: list[int], got: list[int], want: list[int], temperature: float, batched: bool = False
) -> None:
    """Two seeded sampled runs (``want`` plain, ``got`` another batch shape) draw the same random
    numbers, so they agree unless different logits move a draw across a boundary between two
    candidates. Accepted only where this machine's batched and single logits differ at all, and
    where both tokens at the first difference are real candidates of the plain distribution. With
    ``batched`` (other sequences shared the steps and the KV cache) the first condition is not
    asked: where cells land among other sequences' changes the logits (measured on SmolLM2 Q4_1:
    0.5 to 1.0 at identical histories after a request was cut and refilled beside a stream, with
    flash attention; up to 1.35 with it off when a prompt joins the batch), in layouts
    _parallel_gap does not always reproduce."""
    if got == want:
        return
    if not batched:
        assert gap(llm) > 0, "sampled outputs differ although batched and single logits are identical here"
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    assert i < min(len(got), len(want)), f"outputs differ in length only: {got!r} vs {want!r}"
    llm.reset()
    llm.eval_prompt(list(prompt) + list(want[:i]))  # the distribution token i was drawn from
    logits = llm.context.logits(-1).astype(np.float64)
    p = np.exp((logits - logits.max()) / temperature)
    p /= p.sum()
    assert min(p[want[i]], p[got[i]]) > 1e-3, (
        f"diverged at token {i}: p(plain's {want[i]}) = {p[want[i]]:.2e}, p(other's {got[i]}) = {p[got[i]]:.2e}"
    )
