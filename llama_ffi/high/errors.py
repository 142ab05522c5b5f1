"""The library's own exception types for bad requests, so the server (and any caller) can tell a
client's mistake from a defect: ``RequestTypeError`` is a ``TypeError`` (what llama-cpp-python's
users catch) raised only by the library's checks of a request's values. Bad values are
``ValueError`` (``ContextLengthError`` among them)."""

from __future__ import annotations


class RequestTypeError(TypeError):
    """A request's value has the wrong type (raised by the library's checks, never by a defect)."""
