"""The agent frameworks of ``docs/agents.md`` (OpenAI Agents SDK, LangChain, pydantic-ai) run their
examples as written against ``llama-ffi serve`` on the tiny model: each completes its loop (a tool
called and its result used, or a typed answer validated)."""

from __future__ import annotations

import ast
import sys

import pytest
from doc_blocks import python_blocks, run_block
from server_process import ServerProcess

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="the frameworks need Python 3.11")
BLOCKS = {block.split("\n", 1)[0].split()[1].split(".")[0]: block for block in python_blocks("agents.md")}


@pytest.fixture(scope="module")
def url(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "4096", "-np", "1", "--api-key", "secret") as server:
        yield server.url


def test_every_framework_has_its_example():
    assert set(BLOCKS) == {"agents", "langchain_core", "pydantic"}


def test_openai_agents_sdk_calls_the_tool_through_responses(url):
    printed = run_block(BLOCKS["agents"], url)
    assert printed.startswith("Sunny in ") and len(printed.strip()) > len("Sunny in"), printed


def test_langchain_sends_the_tool_result_back(url):
    arguments, _, answer = run_block(BLOCKS["langchain_core"], url).partition("} ")
    assert isinstance(ast.literal_eval(arguments + "}")["city"], str)
    assert answer.strip(), "no answer after the tool's result"


def test_pydantic_ai_gets_a_validated_typed_answer(url):
    printed = run_block(BLOCKS["pydantic"], url)
    assert printed.startswith("city=") and " country=" in printed, printed
