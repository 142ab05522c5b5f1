"""Libraries built on llama-cpp-python, installed as published into virtual environments of their own
(``library_venvs``; those requiring llama-cpp-python with ``--no-deps`` plus their other
requirements), run their documented llama.cpp examples unchanged once ``install_as_llama_cpp()``
lends llama-ffi the ``llama_cpp`` name: llama-cpp-haystack's ``LlamaCppChatGenerator`` (chat, a
stream, a forced tool call), instructor's llama-cpp-python mode (a pydantic model, partial
streaming), outlines (its tokenizer read through the ctypes functions; text, a pydantic model, a
regex, a choice through its logits processor) and guidance (gen, select, a JSON schema; it decodes
through the ctypes functions itself). Outputs are checked against llama-ffi's
own API on the same model, or by validation."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import library_venvs
import pytest

from llama_ffi.high import Llama

REPO = Path(__file__).resolve().parent.parent
N = 12
QUESTION = "What is the capital of France?"

HAYSTACK = ["haystack-ai>=2.30"]
HAYSTACK_NO_DEPS = ["llama-cpp-haystack==3.0.2"]
INSTRUCTOR = ["instructor==1.17.0"]

HAYSTACK_SCRIPT = r"""
import json, sys
import llama_ffi
assert llama_ffi.install_as_llama_cpp()
from haystack.dataclasses import ChatMessage
from haystack.tools import Tool
from haystack_integrations.components.generators.llama_cpp import LlamaCppChatGenerator

model = sys.argv[1]
out = {}
generator = LlamaCppChatGenerator(model=model, n_ctx=1024, generation_kwargs={"max_tokens": %(n)d, "temperature": 0})
generator.warm_up()
out["chat"] = generator.run([ChatMessage.from_user(%(question)r)])["replies"][0].text
chunks = []
streamed = generator.run([ChatMessage.from_user(%(question)r)], streaming_callback=lambda c: chunks.append(c.content))
out["stream"] = streamed["replies"][0].text
out["chunks"] = "".join(chunks)
weather = Tool(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    function=lambda city: f"sunny in {city}",
)
forced = generator.run(
    [ChatMessage.from_user("What is the weather in Paris?")],
    tools=[weather],
    generation_kwargs={"tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 48},
)
call = forced["replies"][0].tool_calls[0]
out["tool"] = {"name": call.tool_name, "arguments": call.arguments}
print(json.dumps(out))
""" % {"n": N, "question": QUESTION}  # noqa: UP031 - a script full of braces

INSTRUCTOR_SCRIPT = r"""
import json, sys
import llama_ffi
assert llama_ffi.install_as_llama_cpp()
import llama_cpp
import instructor
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
from pydantic import BaseModel

llama = llama_cpp.Llama(
    model_path=sys.argv[1],
    n_gpu_layers=-1,
    chat_format="chatml",
    n_ctx=2048,
    draft_model=LlamaPromptLookupDecoding(num_pred_tokens=2),
    logits_all=True,
    verbose=False,
)
create = instructor.patch(create=llama.create_chat_completion_openai_v1, mode=instructor.Mode.JSON_SCHEMA)


class UserDetail(BaseModel):
    name: str
    age: int


user = create(
    messages=[{"role": "user", "content": "Extract `Jason is 30 years old`"}],
    response_model=UserDetail,
    max_tokens=64,
    temperature=0,
)
out = {"user": user.model_dump()}
partials = list(
    create(
        messages=[{"role": "user", "content": "Extract `Anna is 41 years old`"}],
        response_model=instructor.Partial[UserDetail],
        stream=True,
        max_tokens=64,
        temperature=0,
    )
)
out["partials"] = [p.model_dump() for p in partials]
print(json.dumps(out))
"""


def run_in(python: Path, script: str, *args: str) -> dict:
    done = subprocess.run(
        [str(python), "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_haystack_chat_stream_and_forced_tool_call(request, model):
    path = request.getfixturevalue(model)
    python = library_venvs.prepared("haystack", HAYSTACK, HAYSTACK_NO_DEPS)
    out = run_in(python, HAYSTACK_SCRIPT, str(path))
    with Llama(path, n_ctx=1024, progress=False) as llm:
        messages = [{"role": "user", "content": QUESTION}]
        want = llm.create_chat_completion(messages, max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    assert out["chat"] == want and out["stream"] == want and out["chunks"] == want
    assert out["tool"]["name"] == "get_weather" and isinstance(out["tool"]["arguments"].get("city"), str)


@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_instructor_json_schema_mode_and_partial_streaming(request, model):
    path = request.getfixturevalue(model)
    python = library_venvs.prepared("instructor", INSTRUCTOR)
    out = run_in(python, INSTRUCTOR_SCRIPT, str(path))
    # the answer validated against the model: a str name and an int age (what a small model writes
    # in them is its own business; the constraint makes the shape certain)
    assert isinstance(out["user"]["name"], str) and isinstance(out["user"]["age"], int)
    partials = out["partials"]
    assert len(partials) > 1  # the model arrived field by field, not at once
    last = partials[-1]
    assert isinstance(last["name"], str) and isinstance(last["age"], int)
    assert any(p.get("age") is None for p in partials[:-1])  # earlier partials lacked what came later


OUTLINES = ["outlines==1.3.3", "numba"]  # numba: outlines_core's numpy kernels, which its llama.cpp backend uses
OUTLINES_SCRIPT = r"""
import json, re, sys
from typing import Literal
import llama_ffi
assert llama_ffi.install_as_llama_cpp()
import outlines
from llama_cpp import Llama
from outlines.types import Regex
from pydantic import BaseModel, Field

model = outlines.from_llamacpp(Llama(sys.argv[1], n_ctx=1024, verbose=False))


class Character(BaseModel):  # bounded fields (outlines' integers are not), so the object closes in time
    name: str = Field(max_length=16)
    role: Literal["hero", "villain"]
    alive: bool


out = {
    "text": model("Name a colour.", max_tokens=8, temperature=0),
    "character": model("Create a character: name, role, alive?", Character, max_tokens=64, temperature=0),
    "regex": model("Give a three-digit number.", Regex(r"[0-9]{3}"), max_tokens=8, temperature=0),
    "choice": model("Is the sky blue? Answer yes or no.", Literal["yes", "no"], max_tokens=4, temperature=0),
}
print(json.dumps(out))
"""


@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_outlines_text_pydantic_regex_and_choice(request, model):
    import re

    path = request.getfixturevalue(model)
    python = library_venvs.prepared("outlines", OUTLINES)
    out = run_in(python, OUTLINES_SCRIPT, str(path))
    with Llama(path, n_ctx=1024, progress=False) as llm:
        messages = [{"role": "user", "content": "Name a colour."}]
        want = llm.create_chat_completion(messages, max_tokens=8, temperature=0)["choices"][0]["message"]["content"]
    assert out["text"] == want  # outlines' chat mode is create_chat_completion
    character = json.loads(out["character"])
    assert set(character) == {"name", "role", "alive"} and len(character["name"]) <= 16
    assert character["role"] in ("hero", "villain") and isinstance(character["alive"], bool)
    assert re.fullmatch(r"[0-9]{3}", out["regex"]) and out["choice"] in ("yes", "no")


GUIDANCE = ["guidance==0.3.1"]  # it pins llguidance 1.5.0, which llama-ffi supports (test_llguidance_oldest)
GUIDANCE_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "alive": {"type": "boolean"}},
    "required": ["name", "alive"],
    "additionalProperties": False,
}
GUIDANCE_SCRIPT = r"""
import json, sys
import llama_ffi
assert llama_ffi.install_as_llama_cpp()
from guidance import gen, json as json_schema, select
from guidance.models import LlamaCpp

lm = LlamaCpp(sys.argv[1], n_ctx=1024, echo=False)
out = {"gen": (lm + "The capital of France is" + gen("answer", max_tokens=6, temperature=0))["answer"]}
out["select"] = (lm + "Is the sky blue? Answer: " + select(["yes", "no"], name="choice"))["choice"]
schema = json.loads(sys.argv[2])
out["json"] = (lm + "A character as JSON: " + json_schema(name="c", schema=schema, temperature=0, max_tokens=48))["c"]
print(json.dumps(out))
"""


@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_guidance_gen_select_and_json(request, model):
    """guidance drives the context itself through the ctypes functions (``Llama.ctx``, its own
    batches and KV removals): the Llama it made serves guidance alone."""
    import jsonschema

    path = request.getfixturevalue(model)
    python = library_venvs.prepared("guidance", GUIDANCE)
    out = run_in(python, GUIDANCE_SCRIPT, str(path), json.dumps(GUIDANCE_SCHEMA))
    assert isinstance(out["gen"], str) and out["gen"].strip()
    assert out["select"] in ("yes", "no")
    jsonschema.validate(json.loads(out["json"]), GUIDANCE_SCHEMA)
