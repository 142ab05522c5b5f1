"""Context tasks: work on the context that is not a generation request — ``eval``, state and slot
files, embeddings, LoRA loads, the warm-up, a status snapshot — queued for the engine's loop, which
runs each in its turn between two steps, in its own thread (llama-server's task queue). The caller
waits for the outcome; no thread but the loop's ever touches the context.

A task says what it needs before it can run: ``main`` (the main slot made idle: llama-cpp-python's
single-sequence work is about it), ``idle`` (no request in flight: the whole context's state) or
``spare`` (some slot idle: embeddings decode in sequences of their own).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(eq=False)
class ContextTask:
    work: Callable[[], Any]
    main: bool = True
    idle: bool = False
    spare: bool = False
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None

    def run(self) -> None:
        """In the loop's thread: run the work and keep its outcome for the caller."""
        try:
            self.result = self.work()
        except BaseException as error:  # the caller's to handle: the loop goes on
            self.error = error
        finally:
            self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def outcome(self) -> Any:
        """In the caller's thread, once done: the work's result, or its exception raised here."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


def runnable(task: ContextTask, busy: bool, slots) -> bool:
    """Whether ``task`` can run now, given whether requests are in flight and the slot table (whose
    main slot moves to an idle one when ``task.main`` needs it: ``SlotTable.idle_main``)."""
    if task.idle and busy:
        return False
    if task.spare and not slots.idle():
        return False
    return not task.main or slots.idle_main()
