"""The request parameters other than sampling are declared once (``request_fields``): the library
checks them by name, the server's schemas keep the declared (OpenAI's) bounds, and the command
lines take llama.cpp's flags."""

from __future__ import annotations

import pytest

from llama_ffi.cli import build_parser
from llama_ffi.high import Llama
from llama_ffi.high.request_fields import FIELDS, LOGPROBS, MAX_TOKENS, TOP_LOGPROBS, N


def test_the_flags_are_llama_cpps(tree):
    arg_cpp = (tree.path / "common" / "arg.cpp").read_text()
    for field in FIELDS:
        for flag in field.flags:
            assert f'"{flag}"' in arg_cpp, flag
    for command in (["complete", "x"], ["chat"], ["serve"]):
        for flag in MAX_TOKENS.flags:
            assert build_parser().parse_args([*command, flag, "7"]).n_predict == 7


def test_the_server_schemas_keep_the_declared_bounds():
    pytest.importorskip("pydantic")
    from llama_ffi.server.schemas import ChatRequest, CompletionRequest

    completion = CompletionRequest.model_json_schema()["properties"]
    chat = ChatRequest.model_json_schema()["properties"]

    def bounds(prop: dict) -> dict:
        """An integer property's bounds (an optional one is anyOf integer / null)."""
        prop = next((p for p in prop.get("anyOf", [prop]) if p.get("type") == "integer"), prop)
        return {k: v for k, v in prop.items() if k in ("minimum", "maximum")}

    want = {N: {"minimum": 1, "maximum": 64}, LOGPROBS: {"minimum": 0, "maximum": 20}, MAX_TOKENS: {"minimum": 1}}
    for field, expected in want.items():
        assert bounds(completion[field.name]) == expected, field.name
    assert bounds(chat["top_logprobs"]) == {"minimum": 0, "maximum": TOP_LOGPROBS.api_high}
    assert bounds(chat["max_completion_tokens"]) == want[MAX_TOKENS]


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        (dict(n=0), ValueError, "n must be >= 1, got 0"),
        (dict(n=2.0), TypeError, "n must be an int, got float"),
        (dict(logprobs=-1), ValueError, "logprobs must be >= 0, got -1"),
        (dict(max_tokens="8"), TypeError, "max_tokens must be an int, got str"),
    ],
)
def test_the_library_refuses_by_name(smollm2_path, keywords, error, message):
    with Llama(smollm2_path, n_ctx=128, progress=False) as llm:
        with pytest.raises(error, match=message):
            llm.create_completion("hi", **keywords)
        with pytest.raises(ValueError, match=f"logprobs must be <= {llm.n_vocab}"):
            llm.create_completion("hi", logprobs=llm.n_vocab + 1)
