"""llama-cpp-python's ``llama_cpp`` package, as llama-ffi: ``llama_ffi.install_as_llama_cpp()``
lends it that name, so that code and libraries written for llama-cpp-python import it unchanged.

Its top level is llama-cpp-python's: ``llama_cpp.llama`` (``Llama``, processor and criteria
lists, caches, ``llama_types``) and the C constants of ``llama_cpp.llama_cpp``. Submodules carry
llama-cpp-python's names. A name llama-ffi does not provide raises ``NotProvidedError`` (an
AttributeError) naming what to use instead (``not_provided``).
"""

from llama_ffi import __version__ as llama_ffi_version  # noqa: F401 - llama-ffi's own, beside __version__
from llama_ffi.llama_cpp import not_provided
from llama_ffi.llama_cpp.llama import *  # noqa: F403
from llama_ffi.llama_cpp.llama_cpp import *  # noqa: F403
from llama_ffi.llama_cpp.llama_speculative import (  # noqa: F401 - the fork's top-level names
    LlamaNGramMapDecoding,
    LlamaPromptLookupDecoding,
    LlamaSpecEngine,
    SpecConfig,
    SpeculativeType,
)
from llama_ffi.llama_cpp.not_provided import NotProvidedError  # noqa: F401

# The llama-cpp-python release whose API this package follows (libraries compare against it);
# llama-ffi's own version is llama_ffi_version.
__version__ = "0.3.48"


def __getattr__(name: str):
    return not_provided.missing("", name)
