"""The engine: one loop on its own thread owns a ``Llama``'s context and decodes every request's
sequences together, step by step (llama-server's continuous batching). Callers of every kind —
threads, streams, asyncio tasks — only submit a request and wait on its channel; none runs a step.

The loop starts with the first request and stops at ``close()``, once the requests in flight have
ended. Each turn it reaps cancelled requests, admits waiting ones (``engine.admission``) and runs one
step (``engine.step``). A request whose delivery fails (its caller's event loop closed) is
cancelled alone; a step that fails in a way no request explains ends the requests in flight with
the error, and the loop goes on serving.

Single-sequence work (``Llama.eval``, ``save_state``) and embeddings (in idle slots) run in their
caller's thread between two steps (``exclusive()``): the loop waits while such a caller holds the
context.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Callable

from llama_ffi._logging import logger
from llama_ffi.high.context import ClosedError
from llama_ffi.high.engine import progress
from llama_ffi.high.engine.admission import Admission, copy_of
from llama_ffi.high.engine.request import Request, RequestCancelled
from llama_ffi.high.engine.slots import SlotTable
from llama_ffi.high.engine.speculation import Speculation
from llama_ffi.high.engine.stats import Counters, EngineStats, EngineStatus, SlotStatus
from llama_ffi.high.engine.step import Stepper
from llama_ffi.high.engine.work import Work
from llama_ffi.high.multimodal.prompt import MediaPrompt

CLOSED = "its Llama was closed: this stream can produce nothing more"


class Engine:
    def __init__(
        self, context, batch, tokenizer, adapters, lock, counters: Counters, speculation: Speculation | None = None
    ) -> None:
        self.context = context
        self.speculation = speculation
        self.adapters = adapters
        self.lock = lock  # steps and single-sequence work take turns
        self.counters = counters
        self.slots = SlotTable(context, context.n_seq_max)
        self.work = Work(self.slots)
        self.admission = Admission(context, self.slots, self.work)
        self.stepper = Stepper(context, batch, tokenizer.piece, adapters, self.slots, self.work, counters, speculation)
        # Called by the loop before each step, in its thread (tests inject faults with it).
        self.before_step: Callable[[], None] | None = None
        self._cond = threading.Condition()
        self._incoming: list[Request] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._exclusive = 0  # single-sequence callers waiting for the context
        self._turns = 0  # loop passes so far: a single-sequence caller waits for the next one

    @property
    def stats(self) -> EngineStats:
        return self.stepper.stats

    # ---- the callers' side -----------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue ``request`` for the loop (started here with the first request)."""
        with self._cond:
            if self._closed:
                raise ClosedError("this Llama has been closed")
            self._incoming.append(request)
            if self._thread is None or not self._thread.is_alive():  # first request, or a forked child
                self._thread = threading.Thread(target=self._loop, name="llama-ffi-engine", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def next_item(self, request: Request):
        """The next item of ``request``'s channel, waiting for it."""
        return request.channel.get()

    def cancel(self, request: Request, wait: bool = True) -> None:
        """The caller gave up (stream closed, task cancelled, Ctrl-C): a decode evaluating its prompt
        stops (the others in it are decoded again at the next step), and its slots are freed at the
        loop's next turn, which ``wait`` waits for, so the caches are settled when this returns."""
        with self._cond:
            if request.finished:
                return
            request.cancelled = True
            self._cond.notify_all()
        if id(request) in self.stepper.decoding:  # its prompt is being decoded: stop that decode
            self.context.abort()
        if wait and threading.current_thread() is not self._thread:
            request.reaped.wait()

    def _loop_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def busy(self) -> bool:
        return bool(self._incoming) or self.work.busy()

    def status(self) -> EngineStatus:
        """Slots, waiting requests and running totals, as of now (read without stopping the loop)."""
        slots = tuple(SlotStatus(s.seq, s.owner is not None, len(s.tokens)) for s in self.slots.slots)
        with self._cond:
            waiting = len(self._incoming) + len({id(g.request) for g in list(self.work.waiting)})
        return EngineStatus(slots, waiting, dataclasses.replace(self.stats), self.counters.evaluated)

    @contextlib.contextmanager
    def exclusive(self, main: bool = True, idle: bool = False, spare: bool = False):
        """The context between two steps, for single-sequence work: ``main`` makes the main slot an
        idle one (see ``SlotTable.idle_main``), ``idle`` waits until no request runs, ``spare``
        until some slot is idle (work in sequences of its own, such as embeddings)."""
        settled = False  # no loop runs: nothing will change, take the context as it is
        while True:
            with self._cond:
                self._exclusive += 1
            try:
                self.lock.acquire()
            finally:
                with self._cond:
                    self._exclusive -= 1
                    seen = self._turns
            if settled or (
                not (idle and self.busy()) and (not main or self.slots.idle_main()) and (not spare or self.slots.idle())
            ):
                break
            self.lock.release()
            with self._cond:  # only a turn of the loop ends requests: wait for the next one
                self._cond.notify_all()
                while self._turns == seen and self._loop_alive():
                    self._cond.wait()
                settled = not self._loop_alive()
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
            thread = self._thread
            self._cond.notify_all()
        if thread is None or thread is threading.current_thread() or sys.is_finalizing():
            return  # at exit other threads may be frozen already: do not wait on them
        thread.join()

    # ---- the loop --------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while self._next_turn():
                with self.lock:
                    try:
                        self._turn()
                    except Exception as error:  # a defect: fail the requests in flight, keep serving
                        logger.error("engine step failed; the requests in flight end with it: %r", error)
                        self.work.fail_all(error)
        finally:
            with self._cond:
                self._thread = None
                self._cond.notify_all()

    def _next_turn(self) -> bool:
        """Wait until a turn has something to do; False when closed with nothing left."""
        with self._cond:
            self._turns += 1
            self._cond.notify_all()  # single-sequence callers waiting for the end of a turn
            while True:
                self.work.waiting.extend(g for r in self._incoming for g in r.groups)
                self._incoming.clear()
                if self._closed and not self.work.busy():
                    return False
                if not self._exclusive and self._ready():
                    return True
                self._cond.notify_all()  # single-sequence callers waiting for an idle engine
                self._cond.wait()

    def _ready(self) -> bool:
        if self._closed and any(r.streamed and not r.cancelled for r in self.work.requests()):
            return True
        if any(r.abandoned for r in self.work.requests()):
            return True
        return self.stepper.ready() or self.admission.ready()

    def _turn(self) -> None:
        if self._closed:
            self._end_streams()
        self.admission.reap()
        admitted = self.admission.admit()
        if self.before_step is not None:
            self.before_step()
        for group in admitted:
            progress.report(group)  # nothing evaluated yet: what the cache held
            if isinstance(group.prompt, MediaPrompt):
                self.stepper.evaluate_media(group)
        self.stepper.step()

    def _end_streams(self) -> None:
        """``close()``: streams end now (their callers see why); plain requests run to their end."""
        for request in self.work.requests():
            if request.streamed and not request.cancelled:
                request.cancelled = True
                request.cancel_reason = CLOSED
                request.channel.replace_all(RequestCancelled(CLOSED))

    # ---- what single-sequence work shares with the steps ------------------------------------------
    def decoded(self, runs) -> None:
        self.stepper.decoded(runs)

    def resync(self, slot) -> None:
        self.stepper.resync(slot)
