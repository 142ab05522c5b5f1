"""The constraint a chat reply gets (``high.chat.constraint`` over ``constraints.composed``): calls
under ``auto`` checked from the model's ``<tool_call>`` on while the text before stays free; forced
calls whose schemas use what the old converter refused; ``strict`` functions refused by name when
their schema cannot be enforced; JSON after a reasoning block. A logits processor writes a fixed
opening (the model's own choice is not known in advance); what follows is the model's, under the
constraint, and ``jsonschema`` judges it."""

from __future__ import annotations

import json

import jsonschema
import llguidance
import numpy as np
import pytest

from llama_ffi.high import Llama, LlamaGrammar
from llama_ffi.high.constraints import ConstraintError, composed
from llama_ffi.high.constraints import tokenizer as vocab_tokenizer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "city": {"type": "string", "pattern": "^[A-Z][a-z]{1,11}$"},
                "days": {"type": "integer", "exclusiveMinimum": 0, "maximum": 7, "default": 1},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]},
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
ASK = [{"role": "user", "content": "What is the weather in Paris for the next days?"}]


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False) as model:
        yield model


class Opening:
    """A logits processor that writes ``text`` first (one token a step), then lets the model go."""

    def __init__(self, llm, text: str) -> None:
        self.tokens = llm.tokenize(text, add_bos=False, special=True)
        self.prompt = None

    def __call__(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        self.prompt = len(ids) if self.prompt is None else self.prompt
        step = len(ids) - self.prompt
        if step < len(self.tokens):
            logits[:] = -np.inf
            logits[self.tokens[step]] = 0.0
        return logits


def valid_call(call) -> dict:
    name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
    jsonschema.validate(args, SCHEMAS[name])
    return args


def auto_calls(model, opening: str, seed: int) -> dict:
    """A reply under ``auto`` that ``opening`` opens a call in; its calls validate."""
    out = model.create_chat_completion(
        ASK,
        tools=[WEATHER, TIME],
        tool_choice="auto",
        logits_processor=Opening(model, opening),
        temperature=1.0,
        seed=seed,
        max_tokens=96,
    )
    choice = out["choices"][0]  # "length" where the budget ended a run of calls (as llama-server says)
    assert choice["finish_reason"] in ("tool_calls", "length") and choice["message"]["tool_calls"], choice
    calls = choice["message"]["tool_calls"]
    if choice["finish_reason"] == "length":  # the last call may be the one cut, healed as llama-server heals it
        calls = calls[:-1]
    for call in calls:
        valid_call(call)
    return choice["message"]


@pytest.mark.parametrize("seed", range(3))
def test_a_call_under_auto_follows_its_schema_from_the_opener_on(llm, seed):
    assert auto_calls(llm, "Let me check.\n<tool_call>", seed)["content"].startswith("Let me check.")


def test_text_under_auto_is_free_until_a_call_opens(llm):
    """Greedy text under the lazy call constraint is the text under a grammar that allows
    anything (a caller's grammar turns the call check off): free text is not bent."""
    messages = [{"role": "user", "content": "Say hello."}]
    kwargs = dict(tools=[TIME], tool_choice="auto", temperature=0, max_tokens=24)
    checked = llm.create_chat_completion(messages, **kwargs)
    anything = LlamaGrammar.from_lark("start: /(.|\\n)*/\n")
    unchecked = llm.create_chat_completion(messages, grammar=anything, **kwargs)
    assert checked["choices"][0]["message"] == unchecked["choices"][0]["message"]
    assert checked["choices"][0]["message"]["content"]


@pytest.mark.parametrize("seed", range(3))
def test_a_forced_call_follows_pattern_and_bounds(llm, seed):
    out = llm.create_chat_completion(
        ASK,
        tools=[WEATHER, TIME],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=1.0,
        seed=seed,
        max_tokens=96,
    )
    (call,) = out["choices"][0]["message"]["tool_calls"]
    valid_call(call)


def test_a_strict_function_whose_schema_cannot_be_enforced_is_refused_by_name(llm):
    unenforceable = {"type": "object", "properties": {"tags": {"type": "array", "contains": {"const": "urgent"}}}}
    tool = {"type": "function", "function": {"name": "open_link", "parameters": unenforceable, "strict": True}}
    with pytest.raises(ConstraintError, match="open_link.*contains"):
        llm.create_chat_completion(ASK, tools=[tool], tool_choice="auto", max_tokens=4)
    loose = {"type": "function", "function": {"name": "open_link", "parameters": unenforceable}}
    out = llm.create_chat_completion(
        ASK, tools=[loose], tool_choice="auto", max_tokens=48, logits_processor=Opening(llm, "<tool_call>")
    )
    (call,) = out["choices"][0]["message"]["tool_calls"]  # a JSON object, as far as it can be checked
    assert isinstance(json.loads(call["function"]["arguments"]), dict)


@pytest.mark.parametrize("seed", range(2))
def test_json_follows_the_reasoning_block(llm, seed):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "rainy": {"type": "boolean"}},
        "required": ["city", "rainy"],
    }
    out = llm.create_chat_completion(
        ASK,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
        reasoning_budget=-1,
        logits_processor=Opening(llm, "<think>\nParis is often grey.\n</think>\n"),
        temperature=1.0,
        seed=seed,
        max_tokens=96,
    )
    message = out["choices"][0]["message"]
    assert message["reasoning_content"] == "Paris is often grey."
    jsonschema.validate(json.loads(message["content"]), schema)


def test_a_tag_the_vocabulary_holds_as_one_special_token_is_that_token(llm):
    vocab = llm.loaded_model.vocab_ptr
    end = llm.tokenize("<|im_end|>", add_bos=False, special=True)
    assert len(end) == 1 and composed.literal("<|im_end|>", vocab) == f"<[{end[0]}]>"
    assert composed.literal("<tool_call>", vocab) == '"<tool_call>"'  # several tokens in SmolLM2
    form = composed.CallForm("<|im_start|>", "<|im_end|>")
    grammar = composed.tool_calls(SCHEMAS, vocab, lazy=False, max_calls=1, form=form)
    matcher = llguidance.LLMatcher(vocab_tokenizer.for_vocab(vocab), grammar, log_level=0)
    call = '<|im_start|>{"name": "get_time", "arguments": {"zone": "UTC"}}<|im_end|>'
    assert all(matcher.consume_token(t) for t in llm.tokenize(call, add_bos=False, special=True))
    assert matcher.is_accepting()


@pytest.fixture(scope="module", params=["mistralai-Mistral-Nemo-Instruct-2407", "unsloth-mistral-Devstral-Small-2507"])
def mistral(request, smollm2_path, tree):
    """SmolLM2's weights under a Mistral template: Nemo writes ``[TOOL_CALLS][{...}]``, Devstral
    ``[TOOL_CALLS]name[ARGS]{...}``."""
    template = (tree.path / "models" / "templates" / f"{request.param}.jinja").read_text()
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False, chat_template=template) as model:
        yield model


@pytest.mark.parametrize("seed", range(2))
def test_mistral_calls_under_auto_follow_their_schema_from_the_opener_on(mistral, seed):
    assert auto_calls(mistral, "Let me check.[TOOL_CALLS]", seed)["content"] == "Let me check."
