"""The library's own exception types for bad requests, so the server (and any caller) can tell a
client's mistake from a defect. Both are raised only by the library's checks of a request's (or a
parameter's) values, never by a defect: ``RequestTypeError`` is a ``TypeError`` and
``RequestValueError`` a ``ValueError`` (what llama-cpp-python's users catch). A built-in
``ValueError`` from anywhere else is a defect: the server answers it with a 500, not a 400."""

from __future__ import annotations


class RequestTypeError(TypeError):
    """A request's value has the wrong type (raised by the library's checks, never by a defect)."""


class RequestValueError(ValueError):
    """A request's value is out of range, malformed or unusable here (``ContextLengthError``,
    template and schema errors among them); raised by the library's checks, never by a defect."""
