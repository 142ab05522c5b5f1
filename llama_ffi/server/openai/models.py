"""OpenAI's model object, as ``/v1/models`` lists it in both modes (one model, or the router's):
made here once, with llama-server's ``owned_by``."""

from __future__ import annotations


def model_object(model_id: str, created: int, **fields) -> dict:
    """The model ``model_id``; ``fields``: what the mode adds (``meta``, ``status``, ``aliases``...)."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": "llamacpp", **fields}
