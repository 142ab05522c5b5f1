"""The APIs agent tools speak, through their official SDKs, on a one-slot ``llama-ffi serve``:
Anthropic's Messages (``anthropic``) and OpenAI's Responses (``openai``). Each answer's text equals the
same conversation through ``/v1/chat/completions`` (one slot, a fresh prompt each time: the same
cells, the same batch shapes); forced tool calls stream in fragments whose join is the whole call."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import ServerProcess
from test_chat_constraints import WEATHER as WEATHER_SHAPED

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

SYSTEM = "You are a terse assistant."
GREEDY = {"temperature": 0}  # the anthropic SDK has no temperature argument any more
QUESTION = "Name three fruits."
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}


@pytest.fixture(scope="module")
def server(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "2048", "-np", "1") as s:
        s.openai = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        s.anthropic = anthropic.Anthropic(base_url=s.url, api_key="unused", max_retries=0)
        yield s


def afresh(server) -> None:
    """The slot forgets: the next prompt is evaluated whole (see test_server.afresh)."""
    httpx.post(server.url + "/v1/completions", json={"prompt": "Zebra", "max_tokens": 1}, timeout=60)


def chat_text(server, messages, max_tokens: int = 24) -> tuple[str, object]:
    afresh(server)
    out = server.openai.chat.completions.create(model="any", messages=messages, max_tokens=max_tokens, temperature=0)
    return out.choices[0].message.content, out


# ---- Anthropic Messages ---------------------------------------------------------------------------
def test_messages_equal_chat_completions(server):
    want, chat = chat_text(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
    afresh(server)
    got = server.anthropic.messages.create(
        model="claude-sonnet-4",
        max_tokens=24,
        system=SYSTEM,
        extra_body=GREEDY,
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert got.type == "message" and got.role == "assistant" and got.model
    assert got.content[0].type == "text" and got.content[0].text == want
    assert got.stop_reason == ("max_tokens" if chat.choices[0].finish_reason == "length" else "end_turn")
    assert got.usage.input_tokens == chat.usage.prompt_tokens
    counted = server.anthropic.messages.count_tokens(
        model="claude-sonnet-4", system=SYSTEM, messages=[{"role": "user", "content": QUESTION}]
    )
    assert counted.input_tokens == chat.usage.prompt_tokens

    afresh(server)
    with server.anthropic.messages.stream(
        model="claude-sonnet-4",
        max_tokens=24,
        system=SYSTEM,
        extra_body=GREEDY,
        messages=[{"role": "user", "content": QUESTION}],
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == want and final.content[0].text == want and final.stop_reason == got.stop_reason


def test_stop_sequence_is_named(server):
    want, _ = chat_text(server, [{"role": "user", "content": QUESTION}], max_tokens=32)
    words = [w for w in want.split() if len(w) > 3]
    assert words, want
    stop = words[len(words) // 2]
    afresh(server)
    got = server.anthropic.messages.create(
        model="m",
        max_tokens=32,
        extra_body=GREEDY,
        stop_sequences=[stop],
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert got.stop_reason == "stop_sequence" and got.stop_sequence == stop
    assert got.content[0].text == want[: want.index(stop)]


def test_forced_tool_use_whole_and_streamed(server):
    tool = {"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}
    kwargs = dict(
        model="m",
        max_tokens=64,
        extra_body=GREEDY,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}],
    )
    afresh(server)
    whole = server.anthropic.messages.create(**kwargs)
    use = next(b for b in whole.content if b.type == "tool_use")
    assert whole.stop_reason == "tool_use" and use.name == "get_weather"
    assert isinstance(use.input["city"], str) and isinstance(use.input["days"], int)
    afresh(server)
    fragments = []
    with server.anthropic.messages.stream(**kwargs) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                fragments.append(event.delta.partial_json)
        final = stream.get_final_message()
    assert len(fragments) >= 3 and json.loads("".join(fragments)) == use.input
    assert next(b for b in final.content if b.type == "tool_use").input == use.input

    # the result goes back as a tool_result block: the conversation continues
    afresh(server)
    follow = server.anthropic.messages.create(
        model="m",
        max_tokens=16,
        extra_body=GREEDY,
        tools=[tool],
        messages=[
            kwargs["messages"][0],
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 24 C"}]},
        ],
    )
    assert follow.content and follow.usage.output_tokens > 0


def test_messages_errors_have_anthropics_shape(server):
    r = httpx.post(server.url + "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error" and body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        server.anthropic.messages.create(model="m", max_tokens=4, messages=[{"role": "robot", "content": "x"}])


def test_message_start_counts_the_prompt_and_empty_messages_are_served(server):
    messages = [{"role": "user", "content": QUESTION}]
    counted = server.anthropic.messages.count_tokens(model="m", system=SYSTEM, messages=messages).input_tokens
    with server.anthropic.messages.stream(model="m", max_tokens=4, system=SYSTEM, messages=messages) as stream:
        start = next(e for e in stream if e.type == "message_start")
        final = stream.get_final_message()
    assert start.message.usage.input_tokens == counted == final.usage.input_tokens
    # llama-server's rule: no messages at all renders what the template adds alone
    empty = server.anthropic.messages.create(model="m", max_tokens=4, messages=[])
    assert empty.type == "message" and empty.usage.input_tokens > 0


def test_thinking_history_reaches_the_template_and_tool_results_keep_images(server, tree):
    from llama_ffi.high.chat.templates import ChatTemplate
    from llama_ffi.server.anthropic.convert import chat_body
    from llama_ffi.server.anthropic.protocol import MessagesRequest

    thought = "I should list the files first."
    turns = [
        {"role": "user", "content": "Fix the bug"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": thought, "signature": "x"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "c1", "name": "ls", "input": {"path": "."}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "main.py"}]},
    ]
    chat = chat_body(MessagesRequest(model="m", max_tokens=4, messages=turns))
    assert chat["messages"][1]["reasoning_content"] == thought
    qwen3 = ChatTemplate((tree.path / "models/templates/Qwen-Qwen3-0.6B.jinja").read_text())
    assert thought in qwen3.render(chat["messages"])  # Qwen 3 shows thinking after the last user turn

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    result = {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "a.png"}, image]}
    chat = chat_body(
        MessagesRequest(model="m", max_tokens=4, messages=[*turns[:2], {"role": "user", "content": [result]}])
    )
    parts = chat["messages"][2]["content"]
    assert parts[0] == {"type": "text", "text": "a.png"} and parts[1]["image_url"]["url"].startswith("data:image/png")
    # this model has no projector: refused by name, in Anthropic's shape
    r = httpx.post(
        server.url + "/v1/messages",
        json={"model": "m", "max_tokens": 4, "messages": [*turns[:2], {"role": "user", "content": [result]}]},
        timeout=60,
    )
    assert r.status_code == 400 and "mmproj" in r.json()["error"]["message"]


# ---- OpenAI Responses -----------------------------------------------------------------------------
def test_responses_equal_chat_completions_and_continue(server):
    first, _ = chat_text(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
    afresh(server)
    r1 = server.openai.responses.create(
        model="gpt-5", instructions=SYSTEM, input=QUESTION, max_output_tokens=24, temperature=0
    )
    assert r1.object == "response" and r1.output_text == first

    follow = "And two vegetables?"
    conversation = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first},
        {"role": "user", "content": follow},
    ]
    second, _ = chat_text(server, conversation)
    afresh(server)
    r1_again = server.openai.responses.create(
        model="gpt-5", instructions=SYSTEM, input=QUESTION, max_output_tokens=24, temperature=0
    )
    r2 = server.openai.responses.create(
        model="gpt-5",
        instructions=SYSTEM,
        input=follow,
        previous_response_id=r1_again.id,
        max_output_tokens=24,
        temperature=0,
    )
    assert r2.previous_response_id == r1_again.id
    assert r2.usage.input_tokens_details.cached_tokens > 0  # the conversation's prefix was still in the slot
    assert r2.output_text.split()[:3] == second.split()[:3]  # a reused prefix may decode a near tie otherwise

    assert server.openai.responses.retrieve(r2.id).output_text == r2.output_text
    server.openai.responses.delete(r2.id)
    with pytest.raises(openai.NotFoundError):
        server.openai.responses.retrieve(r2.id)
    with pytest.raises(openai.NotFoundError):
        server.openai.responses.create(model="m", input="x", previous_response_id="resp_nope", max_output_tokens=2)
    unstored = server.openai.responses.create(model="m", input="x", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        server.openai.responses.retrieve(unstored.id)


def test_responses_stream_and_function_calls(server):
    afresh(server)
    whole = server.openai.responses.create(model="m", input=QUESTION, max_output_tokens=24, temperature=0)
    afresh(server)
    kinds, deltas = [], []
    with server.openai.responses.stream(model="m", input=QUESTION, max_output_tokens=24, temperature=0) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "".join(deltas) == whole.output_text == final.output_text

    tool = {"type": "function", **WEATHER}
    afresh(server)
    called = server.openai.responses.create(
        model="m",
        input="Weather in Paris for 3 days?",
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=64,
        temperature=0,
    )
    call = next(item for item in called.output if item.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments)["city"]
    done = server.openai.responses.create(
        model="m",
        previous_response_id=called.id,
        max_output_tokens=8,
        temperature=0,
        tools=[tool],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 C"}],
    )
    assert done.status in ("completed", "incomplete") and done.usage.output_tokens > 0


# ---- tool calls streamed through chat completions -------------------------------------------------
def test_a_forced_call_streams_its_arguments_as_they_are_generated(server):
    kwargs = dict(
        model="m",
        temperature=0,
        max_tokens=64,
        tools=[{"type": "function", "function": WEATHER}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        messages=[{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}],
    )
    afresh(server)
    whole = server.openai.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
    afresh(server)
    start, arrivals, fragments = None, [], []  # the generation's time: from its first chunk
    for chunk in server.openai.chat.completions.create(stream=True, **kwargs):
        start = start or time.perf_counter()
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if call.function and call.function.arguments:
                arrivals.append(time.perf_counter())
                fragments.append(call.function.arguments)
    total = time.perf_counter() - start
    assert len(fragments) >= 3
    assert (arrivals[0] - start) < 0.6 * total, (arrivals[0] - start, total)
    assert "".join(fragments) == whole.function.arguments


# ---- bad input on the new routes ------------------------------------------------------------------
SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
KEYS = st.sampled_from(
    [
        "model",
        "messages",
        "max_tokens",
        "system",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "stream",
        "previous_response_id",
        "prompt",
        "n_probs",
        "stop_sequences",
        "thinking",
        "content",
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(["/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/completion"]),
    body=st.dictionaries(KEYS, JSON, max_size=5),
)
def test_bad_bodies_get_the_apis_own_4xx(server, path, body):
    for name in ("max_tokens", "max_output_tokens", "n_predict"):
        body[name] = 2
    body["stream"] = False
    r = httpx.post(server.url + path, json=body, timeout=60)
    assert r.status_code in (200, 400, 404), (r.status_code, r.text)
    if r.status_code != 200:
        error = r.json()
        if path.startswith("/v1/messages"):
            assert error["type"] == "error" and set(error["error"]) == {"type", "message"}
        else:
            assert set(error["error"]) == {"message", "type", "param", "code"}


# ---- structured outputs on every API ----------------------------------------------------------------
SHAPED = WEATHER_SHAPED["function"]["parameters"]  # what the old converter refused: pattern, bounds, $schema, default
UNENFORCEABLE = {"type": "object", "properties": {"tags": {"type": "array", "contains": {"const": "urgent"}}}}
ASKED = "Weather in Paris for 3 days?"


def forced(api: str, schema: dict, strict: bool | None = None) -> tuple[str, dict]:
    """(path, body) forcing one call of ``get_weather`` with ``schema`` on ``api``."""
    extra = {} if strict is None else {"strict": strict}
    if api == "chat":
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": schema, **extra}}
        return "/v1/chat/completions", {
            "messages": [{"role": "user", "content": ASKED}],
            "tools": [tool],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "max_tokens": 64,
        }
    if api == "messages":
        tool = {"name": "get_weather", "input_schema": schema, **extra}
        return "/v1/messages", {
            "messages": [{"role": "user", "content": ASKED}],
            "tools": [tool],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "max_tokens": 64,
        }
    tool = {"type": "function", "name": "get_weather", "parameters": schema, **extra}
    return "/v1/responses", {
        "input": ASKED,
        "tools": [tool],
        "tool_choice": "required",
        "max_output_tokens": 64,
        "parallel_tool_calls": False,
    }


def arguments(api: str, answer: dict) -> dict:
    if api == "chat":
        (call,) = answer["choices"][0]["message"]["tool_calls"]
        return json.loads(call["function"]["arguments"])
    if api == "messages":
        (use,) = [b for b in answer["content"] if b["type"] == "tool_use"]
        return use["input"]
    (call,) = [item for item in answer["output"] if item["type"] == "function_call"]
    return json.loads(call["arguments"])


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_forced_calls_follow_their_schema_and_strict_refusals_name_the_function(server, api):
    import jsonschema

    for seed in range(2):
        path, body = forced(api, SHAPED)
        answer = httpx.post(server.url + path, json={**body, "temperature": 1.0, "seed": seed}, timeout=120)
        assert answer.status_code == 200, answer.text
        jsonschema.validate(arguments(api, answer.json()), SHAPED)
    path, body = forced(api, UNENFORCEABLE, strict=True)
    body["tool_choice"] = {"type": "auto"} if api == "messages" else "auto"
    refused = httpx.post(server.url + path, json=body, timeout=60)
    assert refused.status_code == 400 and "get_weather" in refused.text and "contains" in refused.text


def test_responses_text_format_json_schema(server):
    import jsonschema

    body = {
        "input": ASKED,
        "text": {"format": {"type": "json_schema", "name": "w", "schema": SHAPED, "strict": True}},
        "max_output_tokens": 64,
        "temperature": 0,
    }
    answer = httpx.post(server.url + "/v1/responses", json=body, timeout=120).json()
    text = next(c["text"] for item in answer["output"] if item["type"] == "message" for c in item["content"])
    jsonschema.validate(json.loads(text), SHAPED)
