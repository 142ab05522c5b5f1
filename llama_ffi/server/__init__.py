"""The OpenAI-compatible HTTP face of the engine: ``llama-ffi serve -m MODEL`` (or
``python -m llama_ffi.server``), and ``app(llm)`` for a ``Llama`` a program already holds.

Every request goes to the ``Llama``'s engine, which decodes all clients' sequences together; this
package only turns HTTP bodies into engine calls and the shapes the engine already makes into JSON
and server-sent events. It needs the ``server`` extra: ``pip install 'llama-ffi[server]'``.
"""

from __future__ import annotations

from llama_ffi.server.options import ServerOptions

__all__ = ["ServerOptions", "app"]


def app(llm, options: ServerOptions | None = None, **kwargs):
    """The ASGI (FastAPI) application serving ``llm``; mount it or add routes to it.
    ``kwargs``: the fields of ``ServerOptions`` (``alias``, ``api_keys``, ``metrics``, ...)."""
    from llama_ffi.server.api import create_app

    if options is None:
        options = ServerOptions(**kwargs)
    elif kwargs:
        raise TypeError("pass either options or keyword arguments, not both")
    return create_app(lambda: llm, options, load_now=True)
