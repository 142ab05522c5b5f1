"""Chat templates from model files, rendered in Jinja2's sandbox with the helpers
Hugging Face templates rely on: ``raise_exception``, ``strftime_now``, ``tojson`` with its
options, loop controls, and a tolerated ``{% generation %}`` block. A template is compiled only
when it is first used."""

from __future__ import annotations

import datetime
import functools
import json
import threading

import jinja2
import jinja2.ext
from jinja2.sandbox import SandboxedEnvironment, SecurityError

from llama_ffi.high.errors import RequestValueError

MAX_RANGE = 100_000  # one range() or repetition: more is hostile, not chatty
MAX_ITERATIONS = 1_000_000  # all range() loops of one render together


class TemplateError(RequestValueError, jinja2.TemplateError):
    """The template is broken (syntax) or refused to render (raise_exception). Also a
    ``jinja2.TemplateError``, as code rendering templates with Jinja2 itself expects."""


class TemplateSecurityError(TemplateError):
    """The template tried to reach outside the sandbox."""


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (assistant-mask markers): render the body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str):
    raise TemplateError(f"the chat template refused the conversation: {message}")


def _jsonable(value):
    if isinstance(value, (str, bytes, dict)):
        raise TypeError(f"not JSON serializable: {type(value).__name__}")
    try:
        return list(value)  # generators from filters such as selectattr/map
    except TypeError:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable") from None


def _tojson(value, indent=None, separators=None, sort_keys=False, ensure_ascii=False):
    return json.dumps(
        value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii, default=_jsonable
    )


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _today() -> dict:
    """The dates llama.cpp gives every template (common/chat.cpp's extra context): Llama 3.x
    reads ``date_string``, FireFunction ``datetime``; a request's template kwargs override them."""
    now = datetime.datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}


def _absent(value) -> bool:
    return value is None or isinstance(value, jinja2.Undefined)


class _Sandbox(SandboxedEnvironment):
    # Not the immutable sandbox: real templates (Kimi K2) build lists with append. They only
    # ever see copies of the messages; Python internals stay out of reach either way.
    intercepted_binops = frozenset(["*", "**", "+"])

    def unsafe_undefined(self, obj, attribute):
        # Jinja's default renders an unsafe attribute as undefined; a chat template that reaches
        # for one is hostile, so stop it.
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} is unsafe")

    def call_binop(self, context, operator, left, right):
        if operator == "+" and _absent(left) != _absent(right) and isinstance(left if _absent(right) else right, str):
            # llama.cpp's engine joins a string with an undefined or null value as with "": templates
            # such as FireFunction's add an undefined ``functions`` when no tools are given
            return "" + (right if _absent(left) else left)
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
            raise SecurityError(f"exponent {right} is too large")
        if operator == "*":
            sized = isinstance(left, (str, list, tuple)) or isinstance(right, (str, list, tuple))
            count = right if isinstance(right, int) else left if isinstance(left, int) else 0
            if sized and count > MAX_RANGE:
                raise SecurityError(f"repetition by {count} is too large")
        return super().call_binop(context, operator, left, right)


_budget = threading.local()


def _bounded_range(*args):
    """range() with a budget for the whole render, so nested loops cannot run for hours."""
    r = range(*args)
    _budget.left = getattr(_budget, "left", MAX_ITERATIONS) - len(r)
    if len(r) > MAX_RANGE or _budget.left < 0:
        raise SecurityError(f"the template loops more than {MAX_ITERATIONS} times in range()")
    return r


def _environment() -> jinja2.Environment:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _GenerationBlock])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, range=_bounded_range)
    return env


_ENV = _environment()


@functools.lru_cache(maxsize=32)
def _compile(source: str) -> jinja2.Template:
    """A model's template, compiled once per process: a ChatTemplate is made per request, and a
    request with media renders several times (compiling Gemma 4's takes about 50 ms)."""
    return _ENV.from_string(source)


class ChatTemplate:
    def __init__(self, source: str, name: str = "chat_template", bos_token: str = "", eos_token: str = "") -> None:
        self.source, self.name = source, name
        self.bos_token, self.eos_token = bos_token, eos_token
        self._compiled = None

    def _template(self):
        if self._compiled is None:
            try:
                self._compiled = _compile(self.source)
            except jinja2.TemplateSyntaxError as exc:
                raise TemplateError(f"template {self.name!r}, line {exc.lineno}: {exc.message}") from None
        return self._compiled

    def render(self, messages: list[dict], add_generation_prompt: bool = True, tools=None, **extra) -> str:
        template = self._template()
        _budget.left = MAX_ITERATIONS
        try:
            return template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **{**_today(), **extra},
            )
        except (SecurityError, OverflowError) as exc:
            raise TemplateSecurityError(f"template {self.name!r} tried an unsafe operation: {exc}") from None
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"template {self.name!r} failed: {exc}") from None
