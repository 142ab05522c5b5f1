"""One engine for every generation request of a ``Llama``: slots that keep their prompt cache, one
loop on its own thread that decodes all requests together step by step, and the callers' side
(threads, streams, asyncio), which only submits and waits."""

from llama_ffi.high.engine.choices import choice_seed, default_slots
from llama_ffi.high.engine.core import Engine
from llama_ffi.high.engine.request import RequestCancelled
from llama_ffi.high.engine.stats import Counters, EngineStats, EngineStatus

__all__ = ["Counters", "Engine", "EngineStats", "EngineStatus", "RequestCancelled", "choice_seed", "default_slots"]
