"""Every error in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with
llama-server's error types; never a framework 422 and never a traceback."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from llama_ffi.high.context import ClosedError, ContextLengthError
from llama_ffi.high.errors import RequestTypeError, RequestValueError

log = logging.getLogger("llama_ffi.server")

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


# Anthropic's error types (its Messages API answers errors in its own shape)
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
ANTHROPIC_PATHS = ("/v1/messages",)


def anthropic_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}


class ApiError(Exception):
    """An error the client gets as it is (status, message, param, code)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        error_type: str | None = None,
        extra: dict | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}
        self.error_type = error_type or TYPES.get(status, "invalid_request_error")
        self.extra = extra or {}  # llama-server's additions to an error (n_prompt_tokens, n_ctx)

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
                **self.extra,
            }
        }

    def response(self, path: str = "") -> JSONResponse:
        """The error in the shape of the API ``path`` belongs to (OpenAI's, or Anthropic's)."""
        body = anthropic_body(self.status, self.message) if path.startswith(ANTHROPIC_PATHS) else self.body()
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def from_library(error: BaseException) -> ApiError:
    """An exception raised by the Llama for a request, by its type: what is wrong with the request
    (the library's checks raise ``RequestValueError`` or ``RequestTypeError``: 400), the Llama
    closing (503), or anything else, a defect (500, logged with its traceback, not shown: a
    built-in ``ValueError``, ``TypeError`` or ``KeyError`` of a bug is not the client's fault)."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, ContextLengthError):  # llama-server's type, OpenAI's code
        extra = {"n_prompt_tokens": error.n_prompt_tokens, "n_ctx": error.n_ctx}
        return ApiError(
            400, str(error), code="context_length_exceeded", error_type="exceed_context_size_error", extra=extra
        )
    if isinstance(error, (RequestValueError, RequestTypeError)):
        return ApiError(400, str(error))
    if isinstance(error, ClosedError):
        return ApiError(503, "the server is shutting down", headers={"Retry-After": "1"})
    log.error("request failed", exc_info=error)
    return ApiError(500, f"internal server error ({type(error).__name__})")


def invalid_body(error) -> ApiError:
    """A 400 naming the first problem pydantic found (a field, a type, a bound, bad JSON)."""
    return ApiError(400, *_validation_message(error))


def _validation_message(error) -> tuple[str, str | None]:
    first = error.errors()[0] if error.errors() else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON ({first.get('msg', '')})", None
    if first.get("type") == "model_type":
        return "the request body must be a JSON object", None
    if first.get("type") == "missing":
        return f"missing required field {param!r}", param
    message = first.get("msg", "invalid request")
    return (f"{param}: {message}" if param else message), param


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return invalid_body(error).response(request.url.path)

    @app.exception_handler(HTTPException)
    async def http(request: Request, error: HTTPException) -> JSONResponse:
        if error.status_code == 404:
            return ApiError(404, f"no route {request.method} {request.url.path}").response()
        return ApiError(error.status_code, str(error.detail)).response()

    @app.exception_handler(ClientGone)
    async def gone(_: Request, __: ClientGone) -> JSONResponse:
        return JSONResponse({}, status_code=499)  # nginx's "client closed request": nobody reads it

    @app.exception_handler(ApiError)
    async def api(request: Request, error: ApiError) -> JSONResponse:
        return error.response(request.url.path)

    @app.exception_handler(Exception)
    async def other(request: Request, error: Exception) -> JSONResponse:
        return from_library(error).response(request.url.path)


class ClientGone(Exception):
    """The client disconnected before its (non-streamed) answer was ready."""


def sse_error(error: BaseException) -> bytes:
    """An error after a stream began: one ``data:`` event holding it."""
    return b"data: " + json.dumps(from_library(error).body()).encode() + b"\n\n"
