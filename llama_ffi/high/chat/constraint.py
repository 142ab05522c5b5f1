"""The one constraint a chat reply gets, from the request's ``response_format`` and tools: a JSON
reply (``json_object`` / ``json_schema``), forced tool calls (``tool_choice`` ``required`` or
named), or, with ``auto``, calls constrained lazily from the model's opener (``<tool_call>``,
Mistral's ``[TOOL_CALLS]``) on; behind the
reasoning block where the model reasons. Every one runs on llguidance (``high.constraints``)."""

from __future__ import annotations

from llama_ffi.high.chat.tools import MAX_PARALLEL_CALLS, ToolPlan
from llama_ffi.high.constraints import ConstraintError, composed, enforceable
from llama_ffi.high.constraints.composed import HERMES, MISTRAL_ARGS, MISTRAL_ARRAY, CallForm, Reasoning
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.grammar import LlamaGrammar

ANY_OBJECT = {"type": "object"}


def response_schema(response_format: dict | None) -> dict | None:
    """The schema a ``response_format`` asks for (``None``: free text); OpenAI's ``json_object``
    is any JSON object."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or response_format.get("type") not in (
        "text",
        "json_object",
        "json_schema",
    ):
        raise RequestValueError(
            f"response_format must be {{'type': 'text'|'json_object'|'json_schema'}}, got {response_format!r}"
        )
    if response_format["type"] == "text":
        return None
    schema = response_format.get("schema")  # llama-cpp-python: {"type": "json_object", "schema": ...}
    if response_format["type"] == "json_schema":  # OpenAI: {"type": "json_schema", "json_schema": {"schema": ...}}
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise RequestValueError("response_format of type json_schema needs {'json_schema': {'schema': {...}}}")
        schema = spec["schema"]
    return ANY_OBJECT if schema is None else schema


def response_grammar(response_format: dict | None, vocab=None, reasoning: Reasoning | None = None):
    """The ``LlamaGrammar`` for a ``response_format`` (after the reasoning block when ``reasoning``
    is given, which needs the model's ``vocab``), or ``None``."""
    schema = response_schema(response_format)
    if schema is None:
        return None
    if reasoning is None:
        return LlamaGrammar.from_json_schema(schema, verbose=False)
    return LlamaGrammar(composed.json_reply(schema, vocab, reasoning), engine="llguidance")


def call_form(template_source: str) -> CallForm | None:
    """The form a model writes its calls in, read off its chat template: Hermes where the template
    writes ``<tool_call>`` or knows no tools (the instructions given then ask for that form),
    Mistral's two forms; None for the others (Llama 3 JSON, functionary), parsed whole."""
    if "<tool_call>" in template_source or "tools" not in template_source:
        return HERMES
    if "[TOOL_CALLS]" in template_source:
        return MISTRAL_ARGS if "[ARGS]" in template_source else MISTRAL_ARRAY
    return None


def reply_constraint(
    vocab, tool_plan: ToolPlan, response_format: dict | None, reasoning: Reasoning | None, form: CallForm | None
) -> LlamaGrammar | None:
    """The reply's constraint. ``form``: how the model writes calls (``call_form``), so calls under
    ``auto`` can be checked as they are written; None: they are parsed whole, unconstrained."""
    grammar = response_grammar(response_format, vocab, reasoning)
    forced = tool_plan.mode in ("required", "named")
    if forced and grammar is not None:
        raise RequestValueError("a forced tool call and a response_format constrain the same output: give one")
    if forced:
        names = [tool_plan.forced] if tool_plan.mode == "named" else list(tool_plan.functions)
        several = tool_plan.mode != "named" and tool_plan.parallel
        text = composed.tool_calls(
            {name: parameters(tool_plan, name, required=True) for name in names},
            vocab,
            lazy=False,
            max_calls=MAX_PARALLEL_CALLS if several else 1,
            reasoning=reasoning,
        )
        return LlamaGrammar(text, engine="llguidance")
    if tool_plan.mode == "auto" and grammar is None and form is not None:
        text = composed.tool_calls(
            {name: parameters(tool_plan, name, required=False) for name in tool_plan.functions},
            vocab,
            lazy=True,
            max_calls=MAX_PARALLEL_CALLS if tool_plan.parallel else 1,
            form=form,
        )
        return LlamaGrammar(text, engine="llguidance")
    return grammar


def parameters(tool_plan: ToolPlan, name: str, *, required: bool) -> dict:
    """The schema a call's arguments follow. A forced call, or a function declared ``strict``,
    follows its own or the request fails naming it; a call the model chose to make of a
    non-strict function follows it where it can be enforced, else is any JSON object."""
    function = tool_plan.functions[name]
    try:
        return enforceable(function["parameters"])
    except ConstraintError as refused:
        if required or function.get("strict"):
            raise ConstraintError(f"function {name!r}: {refused}") from None
        return ANY_OBJECT
