"""The JamePeng fork's module name: ``from llama_cpp.llama_speculative import SpecConfig,
SpeculativeType`` becomes ``from llama_ffi.llama_speculative import ...``."""

from llama_ffi.high.speculative import SpecConfig, SpeculativeStats, SpeculativeType

__all__ = ["SpecConfig", "SpeculativeStats", "SpeculativeType"]
