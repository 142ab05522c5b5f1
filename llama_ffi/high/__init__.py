"""High-level API: ``Llama`` (completion), ``LlamaGrammar``, sampling parameters, tokenizer."""

from llama_ffi.high.compat import LlamaState
from llama_ffi.high.context import ClosedError, Context, ContextLengthError, ContextParams, DecodeError
from llama_ffi.high.engine.prompt_cache import LlamaCache, LlamaDiskCache, LlamaRAMCache
from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.llama import Llama
from llama_ffi.high.llama_embedding import LlamaEmbedding
from llama_ffi.high.model import Model, ModelParams
from llama_ffi.high.multimodal import MTMDChatHandler
from llama_ffi.high.sampling import SamplingParams
from llama_ffi.high.tokenizer import Tokenizer

__all__ = [
    "RequestTypeError",
    "RequestValueError",
    "ClosedError",
    "Context",
    "ContextLengthError",
    "ContextParams",
    "DecodeError",
    "Llama",
    "LlamaEmbedding",
    "LlamaCache",
    "LlamaDiskCache",
    "LlamaGrammar",
    "LlamaRAMCache",
    "LlamaState",
    "MTMDChatHandler",
    "Model",
    "ModelParams",
    "SamplingParams",
    "Tokenizer",
]
