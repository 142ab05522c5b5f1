"""The scheduler: it owns a ``Llama``'s context while there is work, and decodes every request's
sequences together, step by step (llama-server's continuous batching).

Steps run in the thread of a caller that waits for its request (the *driver*: one at a time, the
others wait for their results), so a lone request or stream decodes in its own thread with no
hand-over per token. When the driver has what it waits for it stops, and another waiting caller
takes over. asyncio callers cannot drive (the event loop must not block): while they have work, a
thread of the engine's drives.

Each step packs the next token of every generating choice and as many prompt tokens of newly
admitted requests as ``n_batch`` allows into one ``llama_decode``, then samples every choice that
got logits. A request is admitted as soon as its choices find idle slots and KV cells (strictly in
arrival order), so a short request that arrives while a long one runs starts at the next step.
LoRA adapters and control vectors apply to the whole context: one step never mixes two
selections; steps alternate between the selections that have work.

A speculating choice (``Llama(speculative=...)``) puts its next token and a draft into the same
batch and verifies the draft with its own sampler (``engine.speculation``); a request of a Llama
with ``logits_all`` keeps every row's logits for ``scores``.

Single-sequence work (``Llama.eval``, ``save_state``, embeddings...) takes the same lock between
steps through ``exclusive()``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import sys
import threading
import time

from llama_ffi import ffi, lib
from llama_ffi._logging import logger
from llama_ffi.high.adapters import Selection
from llama_ffi.high.context import ClosedError, DecodeError, raise_for_decode_status
from llama_ffi.high.engine.choices import (
    NO_OUTPUT,
    Choice,
    Group,
    accept,
    closing_events,
    kv_cells,
    runs_greedily,
    sample,
)
from llama_ffi.high.engine.request import AHEAD, DONE, Request, RequestCancelled
from llama_ffi.high.engine.slots import Slot, SlotTable
from llama_ffi.high.engine.speculation import DRAFTING_SEQUENCES, STEP_DRAFT_TOKENS, Speculation
from llama_ffi.high.multimodal.prompt import MediaPrompt
from llama_ffi.high.multimodal.prompt import evaluate as evaluate_media

RUN = 8  # tokens per greedy run of a lone sequence: a request arriving meanwhile waits at most this


@dataclasses.dataclass
class Counters:
    evaluated: int = 0  # tokens decoded so far (prefix reuse shows here)


@dataclasses.dataclass
class EngineStats:
    """Running totals of the steps (wall time of batch, decode and sampling): steps that carried
    prompt tokens, and steps of generated tokens only."""

    prompt_steps: int = 0
    prompt_tokens: int = 0
    generation_steps: int = 0
    generated_tokens: int = 0
    prompt_s: float = 0.0
    generation_s: float = 0.0

    @property
    def generation_tps(self) -> float:
        """Aggregate tokens/s of the steps that carried only generated tokens."""
        return self.generated_tokens / self.generation_s if self.generation_s else float("nan")


def copy_of(selection: Selection) -> Selection:
    """A slot's record of a selection, not the request's own (which marks its adapters in use)."""
    return Selection(selection.loras, selection.cvec)


class Engine:
    def __init__(
        self, context, batch, tokenizer, adapters, lock, counters: Counters, speculation: Speculation | None = None
    ) -> None:
        self.context = context
        self.speculation = speculation
        self.batch = batch
        self.piece = tokenizer.piece
        self.adapters = adapters
        self.lock = lock  # steps and single-sequence work take turns
        self.counters = counters
        self.slots = SlotTable(context, context.n_seq_max)
        self.stats = EngineStats()
        self._cond = threading.Condition()
        self._waiting: collections.deque[Group] = collections.deque()
        self._evaluating: list[Group] = []
        self._generating: list[Choice] = []
        self._thread: threading.Thread | None = None  # the engine's own driver (asyncio callers)
        self._driver: threading.Thread | None = None  # whoever runs steps now
        self._async_requests = 0
        self._closed = False
        self._exclusive = 0  # single-sequence callers waiting for the context
        self._stalled = False  # the next group waits for KV cells that running ones hold
        self._last_key = None
        self._run_out = ffi.new("llama_token[]", RUN)  # a greedy run's tokens
        self._run_status = ffi.new("int32_t[1]")

    # ---- the callers' side -----------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue ``request``; its caller then drives (``drive``), or for an asyncio caller the
        engine's thread does."""
        with self._cond:
            if self._closed:
                raise ClosedError("this Llama has been closed")
            self._waiting.extend(request.groups)
            if request.in_asyncio:
                self._async_requests += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="llama-ffi-engine", daemon=True)
                    self._thread.start()
            self._cond.notify_all()

    def next_item(self, request: Request):
        """The next item of ``request``'s channel, running steps meanwhile when no one else does."""
        channel = request.channel
        while True:
            item = channel.get_nowait()
            if item is not None:
                return item
            if not self.drive(lambda: len(channel) > 0 or request.finished):
                channel.wait_for_change()

    def drive(self, done) -> bool:
        """Run steps in this thread until ``done()`` (or no work is left); False when another
        thread is driving."""
        me = threading.current_thread()
        with self._cond:
            if self._driver is not None:
                return False
            self._driver = me
        try:
            while not done():
                with self._cond:
                    if not self.busy():
                        break
                    if self._exclusive or not self._ready():
                        self._cond.wait(0.05)  # a reader, a cancel or single-sequence work wakes it
                        continue
                self._step()
        except BaseException as error:  # a defect: fail every caller rather than leave one waiting
            if not isinstance(error, KeyboardInterrupt):
                self._fail_all(error)
            raise
        finally:
            with self._cond:
                self._driver = None
                self._cond.notify_all()
            self._poke_waiters()
        return True

    def _poke_waiters(self) -> None:
        """The driver stopped: every waiting caller looks again whether it should take over."""
        for request in self._requests():
            request.channel.poke()

    def _fail_all(self, error: BaseException) -> None:
        """A step failed in a way no one request explains: every request in flight ends with the
        error, and the slots they held are freed and forgotten (their cells may be half written),
        so the next request finds the engine as after ``close`` of them all."""
        with self._cond:
            for request in self._requests():
                for c in request.choices:
                    if c.slot is not None and c.slot.owner is c:
                        self._release(c)
                        self.slots.forget(c.slot)
                self._end_request(request, error)
            self._waiting.clear()
            self._evaluating, self._generating = [], []

    def cancel(self, request: Request, wait: bool = True) -> None:
        """The caller gave up (stream closed, task cancelled): its slots are freed at the next step,
        which ``wait`` waits for, so the caches are settled when this returns."""
        with self._cond:
            if request.finished:
                return
            request.cancelled = True
            self._stalled = False
            self._cond.notify_all()
        while wait and not request.reaped.is_set():
            if self._driver is threading.current_thread():
                return  # called from the driver's own steps: reaped at its next one
            if not self.drive(request.reaped.is_set):
                request.reaped.wait(0.05)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def busy(self) -> bool:
        return bool(self._waiting or self._evaluating or self._generating)

    @contextlib.contextmanager
    def exclusive(self, main: bool = True, idle: bool = False):
        """The context between two steps, for single-sequence work: ``main`` makes the main slot an
        idle one (see ``SlotTable.idle_main``), ``idle`` waits until no request runs."""
        while True:
            with self._cond:
                self._exclusive += 1
            try:
                self.lock.acquire()
            finally:
                with self._cond:
                    self._exclusive -= 1
            if not (idle and (self._evaluating or self._generating)) and (not main or self.slots.idle_main()):
                break
            self.lock.release()
            with self._cond:
                self._cond.notify_all()
                self._cond.wait(0.05)
        if main:  # compute under what the main sequence's cache was computed under
            slot = self.slots.main
            selection = slot.selection if slot.tokens and slot.selection is not None else self.adapters.default
            self.adapters.apply(self.context, selection)
            slot.selection = copy_of(selection)
        try:
            yield self.slots.main
        finally:
            self.lock.release()
            self.wake()

    def close(self) -> None:
        """Refuse new requests, end the streams, and wait for the requests in flight."""
        with self._cond:
            self._closed = True
            for request in self._requests():
                if request.streamed:
                    request.cancelled = True
                    request.cancel_reason = "its Llama was closed: this stream can produce nothing more"
                    request.channel.replace_all(RequestCancelled(request.cancel_reason))
            self._cond.notify_all()
        me = threading.current_thread()
        while self.busy() and self._driver is not me:  # requests in flight end; streams are reaped
            if sys.is_finalizing():  # at exit other threads may be frozen already: do not wait on them
                return
            if not self.drive(lambda: False):
                with self._cond:
                    self._cond.wait(0.1)
        with self._cond:
            while self._thread is not None and self._thread is not me and not sys.is_finalizing():
                self._cond.wait(0.1)

    # ---- steps ---------------------------------------------------------------------
    def _requests(self) -> list[Request]:
        seen: dict[int, Request] = {}
        for g in list(self._waiting) + self._evaluating:
            seen.setdefault(id(g.request), g.request)
        for c in self._generating:
            seen.setdefault(id(c.group.request), c.group.request)
        return list(seen.values())

    def _ready(self) -> bool:
        if any(r.cancelled for r in self._requests()) or self._evaluating:
            return True
        if any(not c.group.request.blocked for c in self._generating):
            return True
        return bool(self._waiting) and not self._stalled and len(self.slots.idle()) >= len(self._waiting[0].choices)

    def _run(self) -> None:
        """The engine's thread: drives while asyncio callers have work (and no caller drives)."""
        try:
            while True:
                with self._cond:
                    if not self._async_requests or self._closed and not self.busy():
                        return
                    if self._driver is not None or not self.busy():
                        self._cond.wait(0.05)
                        continue
                self.drive(lambda: not self._async_requests)
        finally:
            with self._cond:
                self._thread = None
                self._cond.notify_all()

    def _step(self) -> None:
        with self.lock:
            with self._cond:
                self._reap()
                admitted = self._admit()
            if lib.llama_ffi_sigint_pending():  # Ctrl-C in a caller's thread: stop its requests
                lib.llama_ffi_sigint_clear()
                self._fail_where(lambda r: r.interruptible, KeyboardInterrupt())
                return
            for group in admitted:
                if isinstance(group.prompt, MediaPrompt):
                    self._evaluate_media(group)
            self._decode_step()

    # ---- admission ---------------------------------------------------------------------------------------
    def _reap(self) -> None:
        """Drop the work of cancelled requests (their slots keep what they decoded)."""
        for g in [g for g in self._waiting if g.request.cancelled]:
            self._waiting.remove(g)
            self._end_request(g.request, RequestCancelled(g.request.cancel_reason))
        for g in [g for g in self._evaluating if g.request.cancelled]:
            self._evaluating.remove(g)
            for c in g.choices:
                self._release(c)
            self._end_request(g.request, RequestCancelled(g.request.cancel_reason))
        unread: dict[int, dict[int, int]] = {}
        for c in [c for c in self._generating if c.group.request.cancelled]:
            request = c.group.request
            if request.streamed:  # the slot keeps what the caller saw: prompt and tokens read
                counts = unread.setdefault(id(request), request.channel.unread_tokens())
                seen = c.produced - counts.get(c.index, 0)
                self.slots.cut(c.slot, min(len(c.slot.tokens), len(c.prompt) + max(seen - 1, 0)))
            self._generating.remove(c)
            self._release(c)
            self._end_request(request, RequestCancelled(request.cancel_reason))

    def _active_cells(self) -> int:
        """KV cells the running requests hold or may still fill (their budgets)."""
        cells = sum(g.cells(0) for g in self._evaluating)
        for c in self._generating:
            prompt_cells = kv_cells(c.prompt)  # media may take more cells than positions (M-RoPE)
            shared = prompt_cells if c is not c.group.leader else 0  # siblings share the prompt's cells
            cells += len(c.slot.tokens) + prompt_cells - len(c.prompt) - shared + c.budget - c.produced
        return cells

    def _admit(self) -> list[Group]:
        admitted = []
        while self._waiting:
            group = self._waiting[0]
            idle = self.slots.idle()
            if len(group.choices) > len(idle):
                break
            selection = group.request.settings.adapters
            slot, keep = self.slots.choose(group.prompt, selection.key)
            if self.slots.shared_cells:
                limit = self.context.n_ctx - self._active_cells()
                fits = self.slots.evict_for(group.cells(keep) + keep, limit, keep=(slot,))
                if not fits and (self._evaluating or self._generating):
                    self._stalled = True  # until a running choice ends
                    break
            self._waiting.popleft()
            try:
                keep = self._restore_longer_prefix(group.prompt, selection, slot, keep)
            except Exception as error:  # noqa: BLE001 - this request's fault: it alone ends with it
                self._fail_request(group.request, error)
                continue
            keep = self.slots.cut(slot, keep)
            group.evaluated = group.cached = keep
            others = sorted((s for s in idle if s is not slot), key=lambda s: s.last_used)
            for choice, s in zip(group.choices, [slot] + others):
                if s is not slot:
                    self.slots.forget(s)
                choice.slot, s.owner = s, choice
                s.selection = copy_of(selection)
                s.prompt_cells = len(group.prompt)  # decoded as a prompt: see slots.Slot.prompt_cells
                self.slots.touch(s)
            self.slots.main = slot
            self._evaluating.append(group)
            admitted.append(group)
        return admitted

    def _restore_longer_prefix(self, prompt, selection: Selection, slot: Slot, keep: int) -> int:
        """With a prompt cache: a stored state sharing more of the prompt than the slot replaces
        what the slot holds (which is stored first)."""
        cache = self.slots.cache
        if cache is None:
            return keep
        entry, length = cache.best(self.context, prompt, selection.stable_key)
        if entry is None or length <= keep:
            return keep
        if slot.tokens:
            cache.remember(self.context, slot)
        try:
            cache.restore(self.context, slot, entry, copy_of(selection))
        except (OSError, ValueError) as error:  # damaged, cut short, another context's: a miss
            logger.warning(
                "prompt cache: an entry of %d tokens could not be restored (%s); dropped", len(entry.tokens), error
            )
            cache.discard(entry)
            self.slots.forget(slot)  # whatever part of the state llama.cpp took is not trusted
            return 0
        return length

    # ---- prompts ------------------------------------------------------------------------------------------
    def _evaluate_media(self, group: Group) -> None:
        """Media prompts are evaluated at admission (mtmd encodes and decodes them), then sampled."""
        self._evaluating.remove(group)
        slot, ctx, batch = group.leader.slot, self.context, self.batch
        self.adapters.apply(ctx, group.request.settings.adapters)

        def decode_text(tokens, start):
            for i in range(0, len(tokens), batch.capacity):
                part = tokens[i : i + batch.capacity]
                ctx.decode(batch.fill(part, start + i, seq_id=slot.seq).c)
                slot.tokens.extend(part)
                self.counters.evaluated += len(part)

        try:
            evaluate_media(ctx, slot, group.prompt, decode_text, self.counters)
        except BaseException as error:
            self.resync(slot)
            for c in group.choices:
                self._release(c)
            self._end_request(group.request, error)
            return
        self._prompt_done(group, -1)
        self._sample([c for c in group.choices])

    def _prompt_done(self, group: Group, output: int) -> None:
        """The prompt is in the leader's slot: the siblings share its cells and its logits."""
        leader = group.leader
        for c in group.choices[1:]:
            self.context.copy_sequence(leader.slot.seq, c.slot.seq)
            c.slot.tokens = list(leader.slot.tokens)
            c.slot.media_spans = list(leader.slot.media_spans)
        for c in group.choices:
            c.output = output
            if self.speculation is not None:
                self.speculation.start(c)
        self._generating.extend(group.choices)

    # ---- one step ---------------------------------------------------------------------------------------
    def _pick_selection(self, choices: list[Choice], groups: list[Group]) -> Selection | None:
        """The adapter selection of this step: the only one with work, or the next after the last."""
        by_key: dict[tuple, Selection] = {}
        for request in [c.group.request for c in choices] + [g.request for g in groups]:
            by_key.setdefault(request.settings.adapters.key, request.settings.adapters)
        if not by_key:
            return None
        keys = list(by_key)
        key = keys[0]
        if len(keys) > 1 and self._last_key in by_key:
            key = keys[(keys.index(self._last_key) + 1) % len(keys)]
        self._last_key = key
        return by_key[key]

    def _decode_step(self) -> None:
        ctx, batch = self.context, self.batch
        ready = [c for c in self._generating if not c.group.request.blocked]
        if len(ready) == 1 and not self._evaluating and not self._waiting and runs_greedily(ready[0]):
            c = ready[0]
            if c.drafting is None:
                self._greedy_run(c, RUN)
                return
            if self.speculation.observe is None and c.drafting.window.wait >= 2:  # a pause in drafting
                c.drafting.window.decoded_plainly(self._greedy_run(c, min(RUN, c.drafting.window.wait)))
                return
        selection = self._pick_selection(ready, self._evaluating)
        if selection is None:
            return
        key = selection.key
        ready = [c for c in ready if c.group.request.settings.adapters.key == key]
        started = time.perf_counter()
        self.adapters.apply(ctx, selection)
        batch.clear()
        b = batch.c
        drafted = 0
        drafting = len(ready) <= DRAFTING_SEQUENCES  # see engine.speculation
        for k, c in enumerate(ready):
            c.output, pos, seq = b.n_tokens, len(c.slot.tokens), c.slot.seq
            batch.add(c.next_token, pos, (seq,), True)
            if c.drafting is not None:
                room = min(STEP_DRAFT_TOKENS - drafted, batch.capacity - b.n_tokens - (len(ready) - k - 1))
                room = room if drafting else 0
                draft = self.speculation.propose(c, room)
                c.drafting.base = pos
                if draft and self.speculation.recurrent:  # a recurrent state cannot be cut: keep a copy
                    c.drafting.snapshot = ctx.seq_state_bytes(seq)
                for j, token in enumerate(draft):
                    batch.add(token, pos + 1 + j, (seq,), True)
                drafted += len(draft)
        parts = []
        for group in self._evaluating:
            room = batch.capacity - b.n_tokens
            if room <= 0:
                break
            if group.request.settings.adapters.key != key:
                continue
            seq, start = group.leader.slot.seq, group.evaluated
            take = min(room, len(group.prompt) - start)
            last, every = len(group.prompt) - 1, group.request.settings.logits_all
            first = b.n_tokens
            for j in range(start, start + take):
                batch.add(group.prompt[j], j, (seq,), every or j == last)
            parts.append((group, start, take, first))
        n_tokens = b.n_tokens
        try:
            ctx.decode(b)
        except BaseException as error:
            for c in ready:
                c.output = NO_OUTPUT
            self._decode_failed(error, [c.slot for c in ready] + [g.leader.slot for g, *_ in parts])
            return
        self.counters.evaluated += n_tokens
        runs = []  # (slot, tokens, first position, first row, keep its rows' logits) of each sequence
        for c in ready:
            runs.append(
                (
                    c.slot,
                    [c.next_token] + (c.drafting.draft if c.drafting else []),
                    len(c.slot.tokens),
                    c.output,
                    c.group.request.settings.logits_all,
                )
            )
        for group, start, take, first in parts:
            runs.append(
                (group.leader.slot, group.prompt[start : start + take], start, first, group.request.settings.logits_all)
            )
        self.decoded(runs)
        for c in ready:
            self.slots.check(c.slot)
        for group, _, take, first in parts:
            group.evaluated += take
            self.stats.prompt_tokens += take
            if group.evaluated == len(group.prompt):
                self._evaluating.remove(group)
                self._prompt_done(group, first + take - 1)
        sampled = ready + [c for group, *_ in parts for c in group.choices if c.output != NO_OUTPUT]
        self._sample(sampled)
        elapsed = time.perf_counter() - started
        if parts:
            self.stats.prompt_steps += 1
            self.stats.prompt_s += elapsed
        else:
            self.stats.generation_steps += 1
            self.stats.generation_s += elapsed
            self.stats.generated_tokens += len(ready)

    def decoded(self, runs) -> None:
        """After a decode (a step's, or single-sequence work's: ``MainSequence``): each run's tokens
        join its slot, and a run that asked for every row (logits_all) keeps their logits for
        ``scores``; an MTP drafter takes the hidden states. ``runs``: (slot, tokens, first position,
        first batch row, keep the rows' logits) of each sequence in the batch."""
        ctx = self.context
        for slot, tokens, start, first, keep in runs:
            slot.tokens.extend(tokens)
            if keep:
                slot.keep_scores(start, [ctx.logits(r) for r in range(first, first + len(tokens))])
        if self.speculation is not None and self.speculation.observe is not None:
            self.speculation.observe([(slot.seq, tokens, start, first) for slot, tokens, start, first, _ in runs])

    def _sample(self, choices: list[Choice]) -> None:
        """Sample every choice of this step before delivering anything."""
        ctx = self.context
        ctx_ptr, vocab, pristine = ctx.ptr, ctx.model.vocab_ptr, {}
        finished, drafted = [], []
        for c in choices:
            if c.group is None or c.group.request.finished:  # ended by an earlier choice's error
                continue
            request = c.group.request
            settings = request.settings
            try:
                if c.drafting is not None:
                    drafted.append(
                        (
                            c,
                            self.speculation.walk(
                                c, ctx, ctx_ptr, vocab, self.piece, settings, pristine, self._deliver
                            ),
                        )
                    )
                else:
                    self._deliver(c, sample(c, ctx, ctx_ptr, vocab, self.piece, settings, pristine))
            except BaseException as error:  # a logits processor or stopping criterion of the caller's
                self._fail_request(request, error)
                continue
            if c.finish_reason is not None:
                finished.append(c)
        for c, kept in drafted:  # every row is sampled: the rejected cells can go
            self._drop_rejected(c, kept)
        self._finish(finished)

    def _deliver(self, c: Choice, event) -> None:
        request = c.group.request
        if event is not None and (event.text or request.settings.logprobs is not None or request.streamed):
            self._emit(c, event)

    def _drop_rejected(self, c: Choice, kept: int) -> None:
        """The cells after ``c``'s next token and its ``kept`` drafted tokens leave its sequence."""
        d, slot = c.drafting, c.slot
        draft, snapshot = d.draft, d.snapshot
        d.draft, d.snapshot = [], None
        keep = d.base + 1 + kept
        if not draft or slot is None or keep >= len(slot.tokens):
            return
        if snapshot is None:
            if not self.context.seq_rm(slot.seq, keep, -1):
                raise RuntimeError(f"llama.cpp could not cut sequence {slot.seq} at {keep}")
            del slot.tokens[keep:]
            return
        # recurrent: back to the state before the step, then the kept tokens again
        again = slot.tokens[d.base : keep]
        self.context.set_seq_state_bytes(slot.seq, snapshot)
        del slot.tokens[d.base :]
        self.context.decode(self.batch.fill(again, d.base, slot.seq).c)
        self.counters.evaluated += len(again)
        self.decoded([(slot, again, d.base, 0, False)])

    def _finish(self, finished: list[Choice]) -> None:
        for c in finished:
            if c.group is None or c.group.request.finished:
                continue
            for event in closing_events(c):
                self._emit(c, event)
            if c.drafting is not None:
                self.speculation.finished(c)
            self._generating.remove(c)
            self._release(c)
            if c.group.request.streamed:
                c.group.request.channel.put((c.index, None))
            c.group.request.live -= 1
            if c.group.request.live == 0:
                self._end_request(c.group.request, None)

    def _greedy_run(self, c: Choice, limit: int) -> int:
        """One sequence alone, greedy: up to RUN tokens decoded and picked in one C call (Python
        between two decodes runs with cold caches: measured 0.2-0.3 ms a token on this machine),
        then taken one by one as the step would; tokens decoded past the choice's end are cut."""
        request, slot, ctx = c.group.request, c.slot, self.context
        started = time.perf_counter()
        self.adapters.apply(ctx, request.settings.adapters)
        n = min(limit, c.budget - c.produced)
        if request.streamed:
            n = max(1, min(n, AHEAD - len(request.channel)))
        ids, biases, n_bias = c.chain.greedy_bias
        base = len(slot.tokens)
        got = lib.llama_ffi_greedy_run(
            ctx.ptr,
            ctx.model.vocab_ptr,
            c.next_token,
            base,
            slot.seq,
            n,
            self._run_out,
            self._run_status,
            ctx.n_vocab,
            ids,
            biases,
            n_bias,
        )
        if ctx.remote is not None:
            ctx.remote.check()  # before the run's tokens count: they are garbage then
        if got:
            slot.tokens.append(c.next_token)
            slot.tokens.extend(self._run_out[0 : got - 1])
            self.counters.evaluated += got
        if self._run_status[0] != 0:
            try:
                raise_for_decode_status(self._run_status[0])
            except BaseException as error:
                self._decode_failed(error, [slot])
                if got == 0 or c.group is None:  # nothing to take, or its request ended (Ctrl-C)
                    return got
        vocab, settings = ctx.model.vocab_ptr, request.settings
        for i in range(got):
            event = accept(c, self._run_out[i], vocab, self.piece, settings)
            if event is not None and (event.text or request.streamed):
                self._emit(c, event)
            if c.finish_reason is not None:
                if base + 1 + i < len(slot.tokens):
                    self.slots.cut(slot, base + 1 + i)  # decoded ahead of the end: not part of it
                self._finish([c])
                break
        self.stats.generation_steps += got
        self.stats.generated_tokens += got
        self.stats.generation_s += time.perf_counter() - started
        return got

    def _emit(self, c: Choice, event) -> None:
        if c.group.request.streamed:
            c.group.request.channel.put((c.index, event))
        else:
            c.events.append(event)

    # ---- endings ------------------------------------------------------------------------------------------
    def _release(self, c: Choice) -> None:
        slot: Slot | None = c.slot
        if slot is not None and slot.owner is c:
            slot.owner = None
            self.slots.touch(slot)
            self._stalled = False

    def _end_request(self, request: Request, error: BaseException | None) -> None:
        if error is None:
            if not request.finished:
                request.finished = True
                request.channel.put(DONE)
        else:
            request.fail(error)
        if request.in_asyncio:
            with self._cond:
                self._async_requests -= 1
        request.close()
        for group in request.groups:  # no cycles left: the request is freed as soon as its caller lets go
            for c in group.choices:
                c.group = None
            group.request = None
        request.reaped.set()

    def _fail_request(self, request: Request, error: BaseException) -> None:
        """End a running request with ``error``: its choices leave their slots."""
        with self._cond:
            for g in [g for g in self._waiting if g.request is request]:
                self._waiting.remove(g)
        self._evaluating = [g for g in self._evaluating if g.request is not request]
        for c in request.choices:
            if c in self._generating:
                self._generating.remove(c)
            self._release(c)
        self._end_request(request, error)

    def _fail_where(self, which, error: BaseException) -> None:
        with self._cond:
            for request in self._requests():
                if which(request):
                    self._fail_request(request, error)

    def resync(self, slot: Slot) -> None:
        """After a failed decode: the slot's list keeps what its sequence still holds."""
        kept = max(self.context.seq_pos_max(slot.seq) + 1, 0)
        del slot.tokens[kept:]
        slot.media_spans = [s for s in slot.media_spans if s[0] + s[1] <= kept]

    def _decode_failed(self, error: BaseException, slots: list[Slot]) -> None:
        for slot in slots:
            self.resync(slot)
        for group in self._evaluating:
            group.evaluated = len(group.leader.slot.tokens)
        if isinstance(error, KeyboardInterrupt):
            self._fail_where(lambda r: r.interruptible, error)
            return
        if isinstance(error, DecodeError) and any(s.tokens for s in self.slots.idle()):
            for slot in self.slots.idle():  # cells held by idle caches: free them and try again
                self.slots.forget(slot)
            return
        involved = {id(s) for s in slots}
        self._fail_where(lambda r: any(id(c.slot) in involved for c in r.choices), error)
