"""``llama_cpp.llama_cache``: the prompt caches ``Llama.set_cache`` takes."""

from llama_ffi.high.engine.prompt_cache import LlamaCache, LlamaDiskCache, LlamaRAMCache
from llama_ffi.llama_cpp import not_provided

BaseLlamaCache = LlamaCache
__all__ = ["BaseLlamaCache", "LlamaCache", "LlamaDiskCache", "LlamaRAMCache"]


def __getattr__(name: str):
    return not_provided.missing("llama_cache", name)
