"""The engine: one loop on its own thread owns a ``Llama``'s context and decodes every request's
sequences together, step by step (llama-server's continuous batching). Callers of every kind —
threads, streams, asyncio tasks — only submit a request and wait on its channel; none runs a step.

The loop starts with the first request and stops at ``close()``, once the requests in flight have
ended. Each turn it reaps cancelled requests, admits waiting ones (``engine.admission``) and runs one
step (``engine.step``). A request whose delivery fails (its caller's event loop closed) is
cancelled alone; a step that fails in a way no request explains ends the requests in flight with
the error, and the loop goes on serving.

Every other piece of work on the context — ``Llama.eval``, ``save_state``, slot files, embeddings
(in idle slots), LoRA loads, status snapshots — is a context task (``engine.tasks``) that the loop
runs in its turn, between reaping and admission: no thread but the loop's touches the context.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable

from llama_ffi import lib
from llama_ffi._logging import logger
from llama_ffi.high.context import ClosedError
from llama_ffi.high.engine import progress
from llama_ffi.high.engine.admission import Admission, copy_of
from llama_ffi.high.engine.request import Request, RequestCancelled
from llama_ffi.high.engine.slots import SlotTable
from llama_ffi.high.engine.speculation import Speculation
from llama_ffi.high.engine.stats import Counters, EngineStats, EngineStatus, SlotStatus
from llama_ffi.high.engine.step import Stepper
from llama_ffi.high.engine.tasks import ContextTask, runnable
from llama_ffi.high.engine.work import Work
from llama_ffi.high.multimodal.prompt import MediaPrompt

CLOSED = "its Llama was closed: this stream can produce nothing more"

# An idle loop hands its thread's OpenMP workers back after this long (``llama_ffi_release_threads``
# in the glue): while any thread holds a team, libgomp counts its workers, and with more of them
# than CPUs every other Llama's decodes slow down (halved on 2 cores by one idle Llama). Starting
# a new team costs a thread start per worker, once per burst of work.
RELEASE_THREADS_AFTER_S = 0.02


class Engine:
    def __init__(
        self, context, batch, tokenizer, adapters, counters: Counters, speculation: Speculation | None = None
    ) -> None:
        self.context = context
        self.speculation = speculation
        self.adapters = adapters
        self.counters = counters
        self.slots = SlotTable(context, context.n_seq_max)
        self.work = Work(self.slots)
        self.admission = Admission(context, self.slots, self.work)
        self.stepper = Stepper(context, batch, tokenizer.piece, adapters, self.slots, self.work, counters, speculation)
        # Called by the loop before each step, in its thread (tests inject faults with it).
        self.before_step: Callable[[], None] | None = None
        self._cond = threading.Condition()
        self._incoming: list[Request] = []
        self._tasks: list[ContextTask] = []  # context tasks waiting for their turn
        self._running: ContextTask | None = None  # the task the loop runs now
        self._thread: threading.Thread | None = None
        self._closed = False
        self._threads_held = False  # whether the loop's thread may hold OpenMP workers

    @property
    def stats(self) -> EngineStats:
        return self.stepper.stats

    # ---- the callers' side -----------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue ``request`` for the loop (started here with the first request)."""
        with self._cond:
            self._queue(self._incoming, request)

    def _queue(self, queue: list, item) -> None:
        """Under ``_cond``: ``item`` joins ``queue``; the loop starts with the first item."""
        if self._closed:
            raise ClosedError("this Llama has been closed")
        queue.append(item)
        if self._thread is None or not self._thread.is_alive():  # first request, or a forked child
            self._thread = threading.Thread(target=self._loop, name="llama-ffi-engine", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def run(self, work: Callable[[], object], main: bool = True, idle: bool = False, spare: bool = False):
        """Run ``work()`` in the loop's turn, between two steps, and return what it returns (or raise
        what it raised). ``main``: the main slot is made an idle one first (see
        ``SlotTable.idle_main``) and the adapters its cache was computed under are applied;
        ``idle``: once no request runs; ``spare``: once some slot is idle (work in sequences of its
        own, such as embeddings)."""
        task = ContextTask(self._on_main(work) if main else work, main, idle, spare)
        if threading.current_thread() is self._thread:
            if self._running is None:
                raise RuntimeError(
                    "work on the context cannot start from inside a step (a request's callback): "
                    "it would wait for the turn it is running in"
                )
            return task.work()  # a task's own part (``scores`` reads the logits): already in its turn
        with self._cond:
            self._queue(self._tasks, task)
        return task.outcome()

    def _on_main(self, work: Callable[[], object]) -> Callable[[], object]:
        def on_main():  # compute under what the main sequence's cache was computed under
            slot = self.slots.main
            selection = slot.selection if slot.tokens and slot.selection is not None else self.adapters.default
            self.adapters.apply(self.context, selection)
            slot.selection = copy_of(selection)
            return work()

        return on_main

    def next_item(self, request: Request):
        """The next item of ``request``'s channel, waiting for it."""
        return request.channel.get()

    def cancel(self, request: Request, wait: bool = True) -> None:
        """The caller gave up (stream closed, task cancelled, Ctrl-C): the request is marked, and the
        loop's next turn reaps it and frees its slots, which ``wait`` waits for, so the caches are
        settled when this returns. A decode evaluating its prompt is told to stop: the abort flag
        that llama.cpp's abort callback reads is the one thing set from this thread (the loop is
        inside ``llama_decode`` then); the others in that decode are decoded again at the next step."""
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

    @property
    def n_slots(self) -> int:
        """How many slots (sequences) the context has: fixed at its creation."""
        return len(self.slots.slots)

    def status(self) -> EngineStatus:
        """Slots, waiting requests and running totals: a snapshot the loop makes in its next turn."""
        return self.run(self._snapshot, main=False)

    def _snapshot(self) -> EngineStatus:
        slots = tuple(SlotStatus(s.seq, s.owner is not None, len(s.tokens)) for s in self.slots.slots)
        with self._cond:
            waiting = len(self._incoming) + len({id(g.request) for g in self.work.waiting})
        return EngineStatus(slots, waiting, dataclasses.replace(self.stats), self.counters.evaluated)

    def close(self) -> None:
        """Refuse new requests, end the streams, and wait for the requests in flight."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is None or thread is threading.current_thread() or sys.is_finalizing():
            return  # at exit other threads may be frozen already: do not wait on them
        thread.join()
        for slot in self.slots.slots:  # the loop has ended: what the slots hold outlives the context
            self.slots.keep_in_cache(slot)

    # ---- the loop --------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while self._next_turn():
                self._threads_held = True
                try:
                    self._turn()
                except Exception as error:  # a defect: fail the requests in flight, keep serving
                    logger.error("engine step failed; the requests in flight end with it: %r", error)
                    self.work.fail_all(error)
        finally:
            with self._cond:
                self._thread = None
                for task in self._tasks:  # only when the loop itself failed: tell its callers
                    task.fail(ClosedError("the engine's loop ended before this work ran"))
                self._tasks.clear()
                self._cond.notify_all()

    def _next_turn(self) -> bool:
        """Wait until a turn has something to do; False when closed with nothing left."""
        with self._cond:
            while True:
                self.work.waiting.extend(g for r in self._incoming for g in r.groups)
                self._incoming.clear()
                if self._closed and not self.work.busy() and not self._tasks:
                    return False
                if self._ready() or self._runnable_task() is not None:
                    return True
                if not self._threads_held:
                    self._cond.wait()
                elif not self._cond.wait(RELEASE_THREADS_AFTER_S):  # idle a while: see below
                    lib.llama_ffi_release_threads()
                    self._threads_held = False

    def _runnable_task(self) -> ContextTask | None:
        """The first waiting task that can run now (the loop's thread, under ``_cond``)."""
        return next((t for t in self._tasks if runnable(t, self.busy(), self.slots)), None)

    def _run_tasks(self) -> None:
        """Every waiting task that can run, in order of arrival (one may make the next runnable)."""
        while True:
            with self._cond:
                task = self._runnable_task()
                if task is None:
                    return
                self._tasks.remove(task)
            self._running = task
            try:
                task.run()
            finally:
                self._running = None

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
        self._run_tasks()
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
