"""``CallStream`` parses a reply as it streams: whatever pieces the text comes in, the reasoning,
content and call arguments it emits join to what the whole reply's parse gives (``split_reasoning``,
``parse_tool_calls``), and a call's name comes before its arguments, which come in fragments."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llama_ffi.high.chat.json_stream import JsonCanon, healed
from llama_ffi.high.chat.reasoning import split_reasoning
from llama_ffi.high.chat.tool_stream import CallStream
from llama_ffi.high.chat.tools import cut_call, parse_tool_calls

FUNCTIONS = {"get_weather": {}, "f": {}}
WITH_CALLS = [
    'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\\u00eds", "days": 3}}\n</tool_call>\n'
    '<tool_call>{"name":"f","arguments":{}}</tool_call> tail ',
    '<tool_call>{"name": "get_weather", "arguments": {"city": "X", "days": 1}}</tool_call>\n'
    '<tool_call>{"name": "f", "arguments": {"a": [1, 2.50, true, null]}}</tool_call>',
    '\n <tool_call>{"name": "get_weather", "arguments": {"city": "X \\"y\\" \\ud83d\\ude00\\n", "days": -1.5e2}}'
    "</tool_call>\n",
    " no call at all  ",
]
REASONING = [
    ("<think>\n I think  \n</think>\n\nAnswer here \n", False),
    ("hmm a\n</think> ok", True),
    ("plain text ", False),
    ("  lead <think>x</think>", False),
    ("\n<think>a</think>b", False),
    ("a <b> c\n\n", False),
    ("<think> unfinished ", False),
]


def pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])]


def run(stream: CallStream, parts: list[str]) -> list[dict]:
    out = [d for part in parts for d in stream.feed(part)]
    return out + stream.finish()


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, len(WITH_CALLS) - 1), cuts=st.lists(st.integers(0, 400), max_size=40))
def test_calls_join_to_the_whole_parse(index, cuts):
    text = WITH_CALLS[index]
    want_content, want_calls = parse_tool_calls(text, FUNCTIONS)
    deltas = run(CallStream(("<think>", "</think>", False), calls=True), pieces(text, cuts))
    assert ("".join(d.get("content", "") for d in deltas) or None) == want_content
    arguments: dict[int, str] = {}
    names: dict[int, str] = {}
    for d in deltas:
        for call in d.get("tool_calls", []):
            if "name" in call["function"]:
                assert call["index"] not in arguments or not arguments[call["index"]]  # the name comes first
                names[call["index"]] = call["function"]["name"]
            arguments[call["index"]] = arguments.get(call["index"], "") + call["function"]["arguments"]
    assert [names[i] for i in sorted(names)] == [c["function"]["name"] for c in want_calls]
    assert [arguments[i] for i in sorted(arguments)] == [c["function"]["arguments"] for c in want_calls]


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, len(REASONING) - 1), cuts=st.lists(st.integers(0, 100), max_size=30))
def test_reasoning_joins_to_the_whole_split(index, cuts):
    text, started = REASONING[index]
    deltas = run(CallStream(("<think>", "</think>", started), calls=False), pieces(text, cuts))
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas) or None
    assert (reasoning, "".join(d.get("content", "") for d in deltas)) == split_reasoning(
        text, "<think>", "</think>", started
    )


def test_arguments_arrive_in_fragments_as_they_are_generated():
    text = WITH_CALLS[0]
    stream = CallStream(None, calls=True)
    fragments = [
        d
        for ch in text
        for d in stream.feed(ch)
        if "tool_calls" in d and d["tool_calls"][0]["function"].get("arguments")
    ]
    assert len(fragments) >= 6  # every token of the arguments as soon as it is complete


# tool_choice "auto": the model answers in text, or calls in any family's form
AUTO = [
    *WITH_CALLS,
    'Let me check.\n<tool_call>{"name": "nope", "arguments": {}}</tool_call>',  # a function not offered
    '<tool_call>{"name": "get_weather", "arguments": {"city": "A", "days": 1}}</tool_call>'
    '<tool_call>{"name": "nope", "arguments": {}}</tool_call> after',
    'Checking [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "B", "days": 2}}]',
    '[TOOL_CALLS]get_weather[ARGS]{"city": "C", "days": 3}',
    'Sure <function=get_weather>{"city": "D", "days": 4}</function> done',
    '>>>get_weather\n{"city": "E", "days": 5}',
    '  {"name": "get_weather", "parameters": {"city": "F", "days": 6}}',
    '<|python_tag|>{"name": "f", "arguments": {}}',
    '{"name": "unknown_fn", "arguments": {}}',  # JSON that is no call: text
    "The set {1, 2} and a >>> b are text here.",
    '<think>\nweigh it\n</think>\n\n<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>',
    "<think>hmm</think> {not json at all",
]


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, len(AUTO) - 1), cuts=st.lists(st.integers(0, 200), max_size=40))
def test_auto_replies_join_to_the_whole_parse_whatever_their_form(index, cuts):
    text = AUTO[index]
    reasoning, body = split_reasoning(text, "<think>", "</think>", False)
    want_content, want_calls = parse_tool_calls(body, FUNCTIONS)
    stream = CallStream(("<think>", "</think>", False), calls=True, functions=FUNCTIONS)
    deltas = run(stream, pieces(text, cuts))
    assert ("".join(d.get("reasoning_content", "") for d in deltas) or None) == reasoning
    assert ("".join(d.get("content", "") for d in deltas) or None) == (want_content or None)
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for d in deltas:
        for call in d.get("tool_calls", []):
            if "name" in call["function"]:
                names[call["index"]] = call["function"]["name"]
            arguments[call["index"]] = arguments.get(call["index"], "") + call["function"]["arguments"]
    assert [names[i] for i in sorted(names)] == [c["function"]["name"] for c in want_calls]
    assert [json.loads(arguments[i]) for i in sorted(arguments)] == [
        json.loads(c["function"]["arguments"]) for c in want_calls
    ]
    assert stream.n_calls == len(want_calls)


def test_an_auto_hermes_call_streams_its_arguments_and_text_before_it_streams_at_once():
    text = AUTO[0]
    stream = CallStream(None, calls=True, functions=FUNCTIONS)
    deltas = [(i, d) for i, ch in enumerate(text) for d in stream.feed(ch)]
    first_text = next(i for i, d in deltas if d.get("content"))
    assert first_text < text.index("<tool_call>")  # text is not held back until the end
    fragments = [d for _, d in deltas if "tool_calls" in d and d["tool_calls"][0]["function"].get("arguments")]
    assert len(fragments) >= 6


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 1, "\t"]), ascii_only=st.booleans(), cut=st.integers(0))
def test_any_cut_of_a_json_value_heals_to_json_that_extends_what_was_streamed(value, indent, ascii_only, cut):
    """A value cut anywhere completes to valid JSON that starts with what the stream has said; uncut,
    it is ``json.dumps``' own text."""
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert healed(text) == json.dumps(value, ensure_ascii=False)
    prefix = text[: cut % (len(text) + 1)]
    if not prefix.strip():
        return
    canon = JsonCanon()
    said, _ = canon.feed(prefix)
    whole = said + canon.closing()
    json.loads(whole)
    assert healed(prefix) == whole


@given(cut=st.integers(0, 120), cuts=st.lists(st.integers(0, 200), max_size=20))
def test_a_call_cut_short_streams_and_parses_to_the_same_completed_arguments(cut, cuts):
    """max_tokens inside a forced call: the stream ends the arguments with their completion, and the
    whole reply's parse (``cut_call``) gives the same call; cut before its arguments began, neither
    has a call."""
    full = 'ok <tool_call>{"name": "get_weather", "arguments": {"city": "Par\\u00eds \\"x\\"", "days": [1, 2.5]}}'
    text = full[:cut]
    before, call = cut_call(text, FUNCTIONS)
    deltas = run(CallStream(None, calls=True), pieces(text, cuts))
    named = [c["function"]["name"] for d in deltas for c in d.get("tool_calls", []) if "name" in c["function"]]
    if cut < full.index("{", full.index("arguments")) - 1:
        assert call is None and before == text and not named
        return
    assert before == "ok " and named == ["get_weather"] and call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"]), dict)
    streamed = "".join(c["function"].get("arguments", "") for d in deltas for c in d.get("tool_calls", []))
    assert streamed == call["function"]["arguments"]
