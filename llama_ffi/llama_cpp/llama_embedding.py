"""The JamePeng fork's ``llama_embedding``: ``LlamaEmbedding`` and its pooling and normalisation names."""

from llama_ffi import lib
from llama_ffi.high.llama import Llama
from llama_ffi.high.llama_embedding import LlamaEmbedding
from llama_ffi.llama_cpp import not_provided

LLAMA_POOLING_TYPE_UNSPECIFIED = lib.LLAMA_POOLING_TYPE_UNSPECIFIED
LLAMA_POOLING_TYPE_NONE = lib.LLAMA_POOLING_TYPE_NONE
LLAMA_POOLING_TYPE_MEAN = lib.LLAMA_POOLING_TYPE_MEAN
LLAMA_POOLING_TYPE_CLS = lib.LLAMA_POOLING_TYPE_CLS
LLAMA_POOLING_TYPE_LAST = lib.LLAMA_POOLING_TYPE_LAST
LLAMA_POOLING_TYPE_RANK = lib.LLAMA_POOLING_TYPE_RANK

# normalize= values (llama.cpp's common_embd_normalize): -1 none, 0 max int16, 1 taxicab, 2 euclidean, >2 p-norm
NORM_MODE_NONE = -1
NORM_MODE_MAX_INT16 = 0
NORM_MODE_TAXICAB = 1
NORM_MODE_EUCLIDEAN = 2
NORM_MODE_PNORM = 6  # any p > 2 is a p-norm; the fork names 6

__all__ = ["Llama", "LlamaEmbedding", *(name for name in dir() if name.isupper())]


def __getattr__(name: str):
    return not_provided.missing("llama_embedding", name)
