"""OpenAI's Responses API (``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``), which
Codex and the Agents SDK speak. ``input`` (a text or a list of items: messages, ``function_call`` and
``function_call_output``) and ``instructions`` become a chat request; the answer is a ``response``
whose ``output`` holds a message and the function calls, or the event stream ``response.created``
… ``response.completed``. Beyond llama-server, ``previous_response_id`` works: responses are kept
(bounded, in memory; ``store: false`` keeps none) and a follow-up continues the stored conversation,
whose prefix the slots still hold.

One module a job: ``protocol`` (the body, the store), ``convert`` (to a chat request), ``output``
(items, the response), ``stream`` (events), ``routes``."""

from llama_ffi.server.responses.routes import router

__all__ = ["router"]
