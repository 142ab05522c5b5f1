"""The JamePeng fork's module name: ``from llama_cpp.llama_speculative import SpecConfig,
SpeculativeType`` becomes ``from llama_ffi.llama_speculative import ...``."""

from llama_ffi.high.speculative import SpecConfig, SpeculativeStats, SpeculativeType

__all__ = ["LlamaPromptLookupDecoding", "SpecConfig", "SpeculativeStats", "SpeculativeType"]


class LlamaPromptLookupDecoding:
    """llama-cpp-python's prompt-lookup drafter, as ``Llama(draft_model=...)`` takes it: the last
    ``max_ngram_size`` tokens are looked up in the history and the ``num_pred_tokens`` that
    followed are drafted. Here it is the NGRAM_MAP_K engine with those sizes."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    def spec_config(self) -> SpecConfig:
        return SpecConfig(
            type=SpeculativeType.NGRAM_MAP_K, ngram_size_n=self.max_ngram_size, ngram_size_m=self.num_pred_tokens
        )
