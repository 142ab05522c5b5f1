"""llama-server's own routes: ``/health``, ``/props``, ``/completion``, ``/infill``, ``/embeddings``,
``/rerank``, ``/tokenize``, ``/detokenize``, ``/apply-template``, ``/metrics``, ``/slots`` (with slot
files), ``/lora-adapters``, with llama-server's request fields and response shapes."""

from llama_ffi.server.native.routes import router

__all__ = ["router"]
