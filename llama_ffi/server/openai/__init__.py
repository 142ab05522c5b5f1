"""OpenAI's API: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``.
Each route validates its body (``server.schemas``), converts it once into the ``Llama``'s keyword
arguments (``server.params``), calls the async API (the engine decodes every client together) and
returns the shapes the library made, or its stream as server-sent events."""

from llama_ffi.server.openai.routes import router

__all__ = ["router"]
