"""Function calling and reasoning in create_chat_completion, with SmolLM2."""

from __future__ import annotations

import json

import jsonschema
import pytest

from llama_ffi.high import Llama, LlamaGrammar
from llama_ffi.high.chat.reasoning import split_reasoning
from llama_ffi.high.chat.tools import parse_tool_calls

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 16}},
            "required": ["zone"],
        },
    },
}
FUNCTIONS = {t["function"]["name"]: t["function"] for t in (WEATHER, TIME)}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=2048, n_threads=2) as model:
        yield model


def _args(call) -> dict:
    return json.loads(call["function"]["arguments"])


def test_named_tool_choice_forces_a_valid_call(llm):
    out = llm.create_chat_completion(
        ASK,
        tools=[WEATHER, TIME],
        temperature=0,
        max_tokens=128,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(_args(call), WEATHER["function"]["parameters"])


def test_required_tool_choice_calls_some_declared_function(llm):
    out = llm.create_chat_completion(
        [{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=[WEATHER, TIME],
        tool_choice="required",
        temperature=0,
        max_tokens=200,
    )
    calls = out["choices"][0]["message"]["tool_calls"]
    assert 1 <= len(calls) <= 4
    for call in calls:
        fn = FUNCTIONS[call["function"]["name"]]
        jsonschema.validate(_args(call), fn["parameters"])
    assert len({c["id"] for c in calls}) == len(calls)


def test_parallel_tool_calls_false_makes_one_call(llm):
    """OpenAI's parallel_tool_calls (llama-server's default is false): "required" then makes exactly
    one call, where SmolLM2 left free repeats it."""
    ask = [
        {"role": "system", "content": "You are a coding assistant."},
        {"role": "user", "content": "Write an example"},
    ]
    test = {
        "type": "function",
        "function": {
            "name": "test",
            "parameters": {
                "type": "object",
                "properties": {"success": {"type": "boolean", "const": True}},
                "required": ["success"],
            },
        },
    }
    kwargs = dict(tools=[test], tool_choice="required", temperature=0, max_tokens=200)
    several = llm.create_chat_completion(ask, **kwargs)["choices"][0]["message"]["tool_calls"]
    one = llm.create_chat_completion(ask, parallel_tool_calls=False, **kwargs)["choices"][0]["message"]["tool_calls"]
    assert len(several) > 1 and len(one) == 1 and one[0]["function"] == several[0]["function"]


CODE = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Runs code",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}


@pytest.mark.parametrize("max_tokens", [14, 17, 19, 40])
def test_a_forced_call_cut_by_max_tokens_keeps_completed_arguments(llm, max_tokens):
    """llama-server's healing: a forced call that max_tokens cuts is still a call, its arguments
    closed where the generation stopped (a string ended, brackets closed), and the reply's finish
    says "length" as llama-server's does (the closing was not the model's); the stream says the same."""
    kwargs = dict(tools=[CODE], tool_choice="required", temperature=0, max_tokens=max_tokens)
    ask = [{"role": "user", "content": "Write an example program"}]
    out = llm.create_chat_completion(ask, **kwargs)
    assert out["usage"]["completion_tokens"] == max_tokens  # the budget, not the call, ended the reply
    whole = out["choices"][0]
    call = whole["message"]["tool_calls"][-1]
    assert whole["finish_reason"] == "length" and call["function"]["name"] == "python"
    assert whole["message"]["content"] is None
    arguments = json.loads(call["function"]["arguments"])
    assert set(arguments) <= {"code"} and all(isinstance(v, (str, type(None))) for v in arguments.values())
    chunks = [c["choices"][0] for c in llm.create_chat_completion(ask, stream=True, **kwargs) if c["choices"]]
    streamed = "".join(
        call.get("function", {}).get("arguments", "") for c in chunks for call in c["delta"].get("tool_calls", [])
    )
    assert streamed == "".join(c["function"]["arguments"] for c in whole["message"]["tool_calls"])
    assert [c["finish_reason"] for c in chunks if c["finish_reason"]] == ["length"]


def test_tool_result_turn_is_fed_back(llm):
    first = llm.create_chat_completion(ASK, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=128)[
        "choices"
    ][0]["message"]
    call = first["tool_calls"][0]
    history = ASK + [
        first,
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": "get_weather",
            "content": '{"temperature": 21, "sky": "clear"}',
        },
    ]
    out = llm.create_chat_completion(history, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=48)
    message = out["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"]


def test_streaming_tool_calls(llm):
    chunks = list(
        llm.create_chat_completion(
            ASK,
            tools=[WEATHER],
            stream=True,
            temperature=0,
            max_tokens=128,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
    )
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    calls = [c for ch in chunks for c in ch["choices"][0]["delta"].get("tool_calls", [])]
    # the call's name and id first, then its arguments in fragments, as OpenAI streams them
    assert [c["function"]["name"] for c in calls if "name" in c["function"]] == ["get_weather"]
    assert calls[0]["id"] and all(c["index"] == 0 for c in calls) and len(calls) >= 3
    whole = llm.create_chat_completion(
        ASK,
        tools=[WEATHER],
        temperature=0,
        max_tokens=128,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )["choices"][0]["message"]["tool_calls"][0]
    assert "".join(c["function"]["arguments"] for c in calls) == whole["function"]["arguments"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    "reply",
    [
        'Checking.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}</tool_call>',
        'One moment. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome", "days": 1}}]',
        "No tool is needed for that.",
    ],
)
def test_auto_replies_stream_and_join_to_the_whole_reply(llm, reply):
    """tool_choice "auto": text streams as it comes, a Hermes call in fragments, another family's
    form at the end; joined, the stream says what the whole reply says."""
    kwargs = dict(tools=[WEATHER], tool_choice="auto", temperature=0, max_tokens=96, grammar=_written(reply))
    whole = llm.create_chat_completion(ASK, **kwargs)["choices"][0]
    chunks = list(llm.create_chat_completion(ASK, stream=True, **kwargs))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert ("".join(d.get("content") or "" for d in deltas) or None) == whole["message"]["content"]
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    names = [c["function"]["name"] for c in calls if "name" in c["function"]]
    assert names == [c["function"]["name"] for c in whole["message"].get("tool_calls", [])]
    if names:
        arguments = "".join(c["function"]["arguments"] for c in calls)
        assert json.loads(arguments) == json.loads(whole["message"]["tool_calls"][0]["function"]["arguments"])
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]
    if reply.startswith("Checking"):  # the text came before the call, and the call in pieces
        first_call = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
        assert any(d.get("content") for d in deltas[:first_call]) and len(calls) >= 3


def _written(text: str):
    """A grammar that makes the model write exactly ``text`` (what it says is then known)."""
    return LlamaGrammar.from_string("root ::= " + json.dumps(text))


def test_auto_without_a_call_is_plain_content(llm):
    out = llm.create_chat_completion(
        [{"role": "user", "content": "Say hello."}],
        tools=[WEATHER],
        tool_choice="auto",
        grammar=_written("Hello there."),
        temperature=0,
        max_tokens=24,
    )
    message = out["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Hello there."}
    assert out["choices"][0]["finish_reason"] == "stop"


def test_auto_with_a_call_in_the_reply_returns_it(llm):
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>'
    out = llm.create_chat_completion(
        ASK, tools=[WEATHER], tool_choice="auto", grammar=_written(call), temperature=0, max_tokens=64
    )
    message = out["choices"][0]["message"]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert _args(message["tool_calls"][0]) == {"city": "Oslo", "unit": "celsius"}
    assert not message.get("content")


@pytest.mark.parametrize(
    "text, content",
    [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>', None),
        (
            'Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
            "</tool_call>",
            "Let me check.",
        ),
        ('{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}', None),
        ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}', None),
        ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]', None),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}', None),
        ('<function=get_weather>{"city": "Paris", "unit": "celsius"}</function>', None),
        ('>>>get_weather\n{"city": "Paris", "unit": "celsius"}', None),
    ],
)
def test_parsing_each_family(text, content):
    got_content, calls = parse_tool_calls(text, FUNCTIONS)
    assert got_content == content
    (call,) = calls
    assert call["function"]["name"] == "get_weather"
    assert _args(call) == {"city": "Paris", "unit": "celsius"}


@pytest.mark.parametrize(
    "text, zone",
    [
        # Mistral Nemo: the list cut inside a third call's first key, then inside the second's arguments
        (
            'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, '
            '{"name": "get_time", "arguments": {"zone": "CET"}}, {"',
            "CET",
        ),
        (
            'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, '
            '{"name": "get_time", "arguments": {"zone": "CE',
            "CE",
        ),
        # Devstral: the second call's arguments cut
        (
            'Let me check.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}[TOOL_CALLS]get_time'
            '[ARGS]{"zone": "CE',
            "CE",
        ),
    ],
)
def test_mistral_calls_cut_by_max_tokens_keep_what_was_written(text, zone):
    """As llama-server heals a cut call: whole calls kept, a cut one's arguments closed where the
    generation stopped, a call cut before its name left out; never the raw call text as content."""
    content, calls = parse_tool_calls(text, FUNCTIONS)
    assert content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert _args(calls[0]) == {"city": "Paris", "unit": "celsius"} and _args(calls[1]) == {"zone": zone}


def test_parallel_calls_and_non_calls():
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>'
    )
    _, calls = parse_tool_calls(text, FUNCTIONS)
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    for plain in ["The weather is nice.", '{"name": "unknown_fn", "arguments": {}}', '{"a": 1}']:
        assert parse_tool_calls(plain, FUNCTIONS) == (plain, [])


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (
            dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}),
            "unknown function 'nope'",
        ),
        (dict(tools=[{"type": "function"}]), "tools[0]"),
        (dict(tools=[WEATHER, WEATHER]), "declared twice"),
        (dict(tools=[WEATHER], tool_choice="sometimes"), "tool_choice must be"),
        (dict(tool_choice="required"), "tool_choice needs tools"),
    ],
)
def test_bad_tools_are_refused(llm, kwargs, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        llm.create_chat_completion(ASK, max_tokens=4, **kwargs)


# ---- reasoning ---------------------------------------------------------------------------------------
def test_split_reasoning():
    assert split_reasoning("<think>plan it</think>The answer.") == ("plan it", "The answer.")
    assert split_reasoning("plan it</think>\nThe answer.", started=True) == ("plan it", "The answer.")
    assert split_reasoning("No thinking here.") == (None, "No thinking here.")
    assert split_reasoning("<think>unfinished") == ("unfinished", "")


@pytest.mark.parametrize("budget", [0, 3, 10])
def test_reasoning_budget_forces_the_end_of_thinking(llm, budget):
    # the prompt opens the block (as thinking templates do); the budget closes it
    from llama_ffi.high.chat.completion import render_prompt

    messages = [{"role": "user", "content": "Why is the sky blue? Think step by step."}]
    out = llm.create_chat_completion(
        messages,
        temperature=0,
        max_tokens=60,
        reasoning_budget=budget,
        reasoning_budget_message=" Time is up.",
        reasoning_start_in_prompt=True,
        chat_handler=lambda messages, **kw: render_prompt(llm, messages) + "<think>\n",
    )
    message = out["choices"][0]["message"]
    reasoning = message["reasoning_content"] or ""
    assert reasoning.endswith("Time is up.")
    free = reasoning[: -len("Time is up.")]
    assert len(llm.tokenize(free, add_bos=False)) <= budget + 1  # the budget, up to a merged space
    assert not message["content"].startswith("</think>")  # closed once, by the forced end tag


def test_no_budget_leaves_the_output_alone(llm):
    kw = dict(temperature=0, max_tokens=30)
    a = llm.create_chat_completion(ASK, **kw)["choices"][0]["message"]["content"]
    b = llm.create_chat_completion(ASK, reasoning_budget=-1, **kw)["choices"][0]["message"]["content"]
    assert a == b
