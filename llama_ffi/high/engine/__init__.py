"""One engine for every generation request of a ``Llama``: slots that keep their prompt cache, a
scheduler thread that decodes all requests together step by step, and the callers' side (threads,
streams, asyncio)."""

from llama_ffi.high.engine.choices import choice_seed, default_slots
from llama_ffi.high.engine.request import RequestCancelled
from llama_ffi.high.engine.scheduler import Counters, Engine, EngineStats

__all__ = ["Counters", "Engine", "EngineStats", "RequestCancelled", "choice_seed", "default_slots"]
