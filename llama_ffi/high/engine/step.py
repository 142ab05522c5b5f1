"""One step of the engine: pack, decode, sample, emit.

A step packs the next token of every generating choice (and, for a speculating one, its draft) and
as many prompt tokens of admitted groups as ``n_batch`` allows into one ``llama_decode``, records
what each sequence now holds (``decoded``), then samples every choice that got logits before
delivering anything. LoRA adapters and control vectors apply to the whole context: one step never
mixes two selections; steps alternate between the selections that have work. A lone greedy
sequence takes several tokens in one C call instead (``engine.greedy``); media prompts are
evaluated by mtmd at admission. Every path records its decodes through ``decoded`` and hands its
tokens to ``deliver``.
"""

from __future__ import annotations

import time

from llama_ffi.high.adapters import Selection
from llama_ffi.high.context import DecodeAborted, DecodeError
from llama_ffi.high.engine import progress
from llama_ffi.high.engine.choices import NO_OUTPUT, Choice, Group, closing_events, kv_cells, runs_greedily, sample
from llama_ffi.high.engine.greedy import RUN, GreedyRun
from llama_ffi.high.engine.plan import Generating, Prompt, plan_step
from llama_ffi.high.engine.slots import Slot, SlotTable
from llama_ffi.high.engine.speculation import DRAFTING_SEQUENCES, STEP_DRAFT_TOKENS, Speculation
from llama_ffi.high.engine.stats import Counters, EngineStats
from llama_ffi.high.engine.work import Work
from llama_ffi.high.multimodal.prompt import MediaPrompt
from llama_ffi.high.multimodal.prompt import evaluate as evaluate_media


class Stepper:
    def __init__(
        self,
        context,
        batch,
        piece,
        adapters,
        slots: SlotTable,
        work: Work,
        counters: Counters,
        speculation: Speculation | None,
    ) -> None:
        self.context, self.batch, self.piece, self.adapters = context, batch, piece, adapters
        self.slots, self.work, self.counters, self.speculation = slots, work, counters, speculation
        self.stats = EngineStats()
        self.greedy = GreedyRun(self)
        self.decoding: frozenset[int] = frozenset()  # ids of the requests whose prompt is in the decode
        self._last_key = None

    def ready(self) -> bool:
        """Whether a step has anything to do (a prompt to evaluate, a choice whose reader keeps up)."""
        return bool(self.work.evaluating) or any(not c.group.request.blocked for c in self.work.generating)

    # ---- one step ----------------------------------------------------------------------------------
    def step(self) -> None:
        work = self.work
        ready = [c for c in work.generating if not c.group.request.blocked]
        if len(ready) == 1 and not work.evaluating and not work.waiting and runs_greedily(ready[0]):
            c = ready[0]
            if c.drafting is None:
                self.greedy.run(c, RUN)
                return
            if self.speculation.observe is None and c.drafting.window.wait >= 2:  # a pause in drafting
                c.drafting.window.decoded_plainly(self.greedy.run(c, min(RUN, c.drafting.window.wait)))
                return
        selection = self._pick_selection(ready, work.evaluating)
        if selection is None:
            return
        ready = [c for c in ready if c.group.request.settings.adapters.key == selection.key]
        started = time.perf_counter()
        self.adapters.apply(self.context, selection)
        self.batch.clear()
        parts = self._pack(ready, selection.key)
        n_tokens = self.batch.c.n_tokens
        self.decoding = frozenset(id(g.request) for g, *_ in parts)  # what a cancel may abort
        try:
            self.context.decode(self.batch.c)
        except BaseException as error:
            for c in ready:
                c.output = NO_OUTPUT
            self.decode_failed(error, [c.slot for c in ready] + [g.leader.slot for g, *_ in parts])
            return
        finally:
            self.decoding = frozenset()
        self.counters.evaluated += n_tokens
        self._record(ready, parts)
        produced = sum(c.produced for c in ready)
        sampled = ready + [c for group, *_ in parts for c in group.choices if c.output != NO_OUTPUT]
        finished = self.sample(sampled)
        elapsed = time.perf_counter() - started
        if parts:
            self.stats.prompt_steps += 1
            self.stats.prompt_s += elapsed
        else:
            self.stats.generation_steps += 1
            self.stats.generation_s += elapsed
            self.stats.generated_tokens += sum(c.produced for c in ready) - produced
        self.finish(finished)  # after the figures: a caller told its request ended reads them whole

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

    def _pack(self, ready: list[Choice], key) -> list[tuple[Group, int, int, int]]:
        """Fill the batch by this step's plan (``engine.plan``): the choices' next tokens and drafts,
        then the prompts under selection ``key``. Returns (group, first position, tokens, first
        batch row) of each prompt part."""
        groups = [g for g in self.work.evaluating if g.request.settings.adapters.key == key]
        speculation = self.speculation
        plan = plan_step(
            [Generating(c.slot.seq, len(c.slot.tokens), c.next_token, c.drafting is not None) for c in ready],
            [Prompt(g.leader.slot.seq, g.prompt, g.evaluated, g.request.settings.logits_all) for g in groups],
            self.batch.capacity,
            propose=None if speculation is None else (lambda k, room: speculation.propose(ready[k], room)),
            draft_budget=STEP_DRAFT_TOKENS if len(ready) <= DRAFTING_SEQUENCES else 0,  # see engine.speculation
        )
        for row in plan.rows:
            self.batch.add(row.token, row.pos, (row.seq,), row.logits)
        for c, rows in zip(ready, plan.choices):
            c.output = rows.first
            if c.drafting is not None:
                speculation.verify(c, len(c.slot.tokens), self.context)
        return [(groups[part.index], part.start, part.take, part.first) for part in plan.prompts]

    def _record(self, ready: list[Choice], parts) -> None:
        """After the decode: what each sequence holds now, and the prompts that are done."""
        runs = []
        for c in ready:
            tokens = [c.next_token] + (c.drafting.draft if c.drafting else [])
            runs.append((c.slot, tokens, len(c.slot.tokens), c.output, c.group.request.settings.logits_all))
        for group, start, take, first in parts:
            keep = group.request.settings.logits_all
            runs.append((group.leader.slot, group.prompt[start : start + take], start, first, keep))
        self.decoded(runs)
        for c in ready:
            self.slots.check(c.slot)
        for group, _, take, first in parts:
            group.evaluated += take
            self.stats.prompt_tokens += take
            progress.report(group)
            if group.evaluated == len(group.prompt):
                self.work.evaluating.remove(group)
                self.prompt_done(group, first + take - 1)

    def decoded(self, runs) -> None:
        """After a decode (a step's, a greedy run's, media text's, or single-sequence work's:
        ``MainSequence``): each run's tokens join its slot, and a run that asked for every row
        (logits_all) keeps their logits for ``scores``; an MTP drafter takes the hidden states.
        ``runs``: (slot, tokens, first position, first batch row, keep the rows' logits) of each
        sequence in the batch (first batch row None: no rows to read)."""
        ctx = self.context
        for slot, tokens, start, first, keep in runs:
            slot.tokens.extend(tokens)
            if keep and first is not None:
                slot.keep_scores(start, [ctx.logits(r) for r in range(first, first + len(tokens))])
        if self.speculation is not None and self.speculation.observe is not None:
            seen = [(slot.seq, tokens, start, first) for slot, tokens, start, first, _ in runs if first is not None]
            self.speculation.observe(seen)

    # ---- sampling and delivery ----------------------------------------------------------------------
    def sample(self, choices: list[Choice]) -> list[Choice]:
        """Sample every choice of this step before delivering anything; returns those that are
        done, for ``finish``."""
        ctx = self.context
        ctx_ptr, vocab, pristine = ctx.ptr, ctx.model.vocab_ptr, {}
        finished, drafted = [], []
        for c in choices:
            if c.group is None or c.group.request.finished:  # ended by an earlier choice's error
                continue
            settings = c.group.request.settings
            try:
                if c.drafting is not None:
                    walk = self.speculation.walk(c, ctx, ctx_ptr, vocab, self.piece, settings, pristine, self.deliver)
                    drafted.append((c, walk))
                    self.stats.count_draft(len(c.drafting.draft), walk)
                else:
                    self.deliver(c, sample(c, ctx, ctx_ptr, vocab, self.piece, settings, pristine))
            except BaseException as error:  # a logits processor or stopping criterion of the caller's
                self.work.fail_request(c.group.request, error)
                continue
            if c.finish_reason is not None:
                finished.append(c)
        for c, kept in drafted:  # every row is sampled: the rejected cells can go
            self.speculation.drop_rejected(c, kept, self.context, self.batch, self)
        return finished

    def deliver(self, c: Choice, event) -> None:
        """The one emit rule: a token reaches its caller when it has text, logprobs, or a stream
        (which carries every token, so a closed one knows what its caller saw)."""
        request = c.group.request
        if event is None or not (event.text or request.settings.logprobs is not None or request.streamed):
            return
        if request.streamed:
            request.channel.put((c.index, event))
        else:
            c.events.append(event)

    def finish(self, finished: list[Choice]) -> None:
        work = self.work
        for c in finished:
            if c.group is None or c.group.request.finished:
                continue
            for event in closing_events(c):
                self.deliver(c, event)
            if c.drafting is not None:
                self.speculation.finished(c)
            work.generating.remove(c)
            work.release(c)
            request = c.group.request
            if request.streamed:
                request.channel.put((c.index, None))
            request.live -= 1
            if request.live == 0:
                work.end_request(request, None)

    # ---- prompts ----------------------------------------------------------------------------------
    def evaluate_media(self, group: Group) -> None:
        """Media prompts are evaluated at admission (mtmd encodes and decodes them), then sampled."""
        self.work.evaluating.remove(group)
        slot, ctx, batch = group.leader.slot, self.context, self.batch
        self.adapters.apply(ctx, group.request.settings.adapters)

        def decode_text(tokens, start):
            for i in range(0, len(tokens), batch.capacity):
                part = tokens[i : i + batch.capacity]
                ctx.decode(batch.fill(part, start + i, seq_id=slot.seq).c)
                self.counters.evaluated += len(part)
                self.decoded([(slot, part, start + i, None, False)])

        ctx.abort_flag[0] = 0  # an abort meant for an earlier decode
        try:
            evaluate_media(ctx, slot, group.prompt, decode_text, self.counters)
        except BaseException as error:
            self.resync(slot)
            for c in group.choices:
                self.work.release(c)
            self.work.end_request(group.request, error)
            return
        progress.report(group, kv_cells(group.prompt))
        self.prompt_done(group, -1)
        self.finish(self.sample(list(group.choices)))

    def prompt_done(self, group: Group, output: int) -> None:
        """The prompt is in the leader's slot: the siblings get its cells and share its logits."""
        leader = group.leader
        for c in group.choices[1:]:
            self.context.copy_sequence(leader.slot.seq, c.slot.seq)
            c.slot.tokens = list(leader.slot.tokens)
            c.slot.media_spans = list(leader.slot.media_spans)
        # drafters draft text: a prompt with media decodes plainly (a draft model cannot see the
        # media, an n-gram index would draft the media's placeholders), text prompts draft
        drafts = self.speculation is not None and not isinstance(group.prompt, MediaPrompt)
        for c in group.choices:
            c.output = output
            if drafts:
                self.speculation.start(c)
        self.work.generating.extend(group.choices)

    # ---- failures ---------------------------------------------------------------------------------
    def resync(self, slot: Slot) -> None:
        """After a failed decode: the slot's list keeps what its sequence still holds (llama.cpp
        rolls back the ubatches it did not finish), and the sequence drops cells the list never
        got (a finished ubatch held this step's token of a generating choice)."""
        kept = max(self.context.seq_pos_max(slot.seq) + 1, 0)
        del slot.tokens[kept:]
        slot.media_spans = [s for s in slot.media_spans if s[0] + s[1] <= kept]
        if kept > len(slot.tokens) and not self.context.seq_rm(slot.seq, len(slot.tokens), -1):
            self.slots.forget(slot)  # a recurrent state cannot be cut: start that sequence afresh

    def decode_failed(self, error: BaseException, slots: list[Slot]) -> None:
        """After a failed decode the slots keep what their sequences hold; an aborted one (a
        cancelled request's prompt was in it) fails nobody: the rest is decoded at the next step."""
        for slot in slots:
            self.resync(slot)
        for group in self.work.evaluating:
            group.evaluated = len(group.leader.slot.tokens)
        if isinstance(error, DecodeAborted):
            return
        if isinstance(error, DecodeError) and any(s.tokens for s in self.slots.idle()):
            for slot in self.slots.idle():  # cells held by idle caches: free them and try again
                self.slots.forget(slot)
            return
        involved = {id(s) for s in slots}
        self.work.fail_where(lambda r: any(id(c.slot) in involved for c in r.choices), error)
