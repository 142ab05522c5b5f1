"""Custom (freeform) tools of the Responses API, as Codex sends ``apply_patch`` in its freeform form:
the model is offered a function of one string whose characters must follow the tool's Lark or
regex grammar. The Lark grammar is inlined into one pattern (``constraints.lark_regex``), judged
against llguidance's own reading of the Lark grammar on the same strings; on the server, a forced
custom call's input follows the grammar, comes back as a ``custom_tool_call`` (whole and
streamed, through the OpenAI SDK), and its output goes back to the model."""

from __future__ import annotations

import json
import re

import httpx
import llguidance
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import ServerProcess

from llama_ffi.high import Llama
from llama_ffi.high.constraints import ConstraintError
from llama_ffi.high.constraints.lark_regex import lark_to_regex
from llama_ffi.high.constraints.tokenizer import for_vocab

openai = pytest.importorskip("openai")

# A patch language of the shape Codex's freeform apply_patch takes (written here for the test).
PATCH = r"""
start: begin hunk+ end
begin: "*** Begin Patch" LF
end: "*** End Patch" LF?
hunk: add | delete | update
add: "*** Add File: " path LF added+
delete: "*** Delete File: " path LF
update: "*** Update File: " path LF ("*** Move to: " path LF)? change*
path: /[^\n]+/
added: "+" /[^\n]*/ LF -> line
change: ("@@" | "@@ " /[^\n]+/) LF
      | ("+" | "-" | " ") /[^\n]*/ LF
%import common.LF
"""
# Lark's other forms: ranges, repeats, optional brackets, case-insensitive strings, %ignore.
FORMS = r"""
start: _item ("," _item)* [";"]
_item: KEY "=" (VALUE | "on"i | "off"i)
KEY: ("a".."c")~1..3
VALUE: DIGIT+ ("." DIGIT+)?
%import common (DIGIT, WS_INLINE)
%ignore WS_INLINE
"""
# One bounded edit: a tiny model's patch ends within the test's token budget.
ONE_EDIT = r"""
start: "*** Begin Patch" LF "*** Update File: " PATH LF change~1..3 "*** End Patch" LF?
PATH: /[a-z_]{1,12}\.py/
change: ("+" | "-" | " ") /[^\n]{0,40}/ LF
%import common.LF
"""
PIECES = {
    PATCH: [
        "*** Begin Patch\n",
        "*** End Patch\n",
        "*** End Patch",
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
        "@@",
        "@@ f",
        "+",
        "-",
        " ",
        "a.py",
        "x = 1",
        "\n",
        '"',
        "\\",
    ],
    FORMS: ["a=1", "bc = 2.5", "cab=On", "a", "d", "=", "1", ".", "OFF", ",", ", ", ";", " ", "\t", "\n"],
}


@pytest.fixture(scope="module")
def tokenizer(smollm2_path):
    with Llama(smollm2_path, vocab_only=True, progress=False) as llm:
        yield for_vocab(llm.loaded_model.vocab_ptr)


def accepts(tokenizer, grammar: str, text: str) -> bool:
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    ok = matcher.consume_tokens(tokenizer.tokenize_str(text))
    return ok and not matcher.is_error() and matcher.is_accepting()


def as_json_string(grammar: str) -> str:
    """The grammar's strings inside JSON, as a custom tool's input is written."""
    pattern = f"^(?:{lark_to_regex(grammar)})$"
    return llguidance.grammar_from("json_schema", {"type": "string", "pattern": pattern})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.parametrize("grammar", [PATCH, FORMS], ids=["patch", "forms"])
def test_the_inlined_pattern_takes_what_llguidance_takes_from_the_lark_grammar(tokenizer, grammar, data):
    text = "".join(data.draw(st.lists(st.sampled_from(PIECES[grammar]), max_size=12)))
    lark = llguidance.grammar_from("lark", grammar)
    assert accepts(tokenizer, lark, text) == accepts(tokenizer, as_json_string(grammar), json.dumps(text)), text


def test_known_strings_on_both_sides(tokenizer):
    valid = '*** Begin Patch\n*** Update File: a.py\n@@ def f\n-x = "1"\n+x = "\\\\2"\n*** End Patch\n'
    moved = "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n*** Add File: c\n+\n*** End Patch"
    for grammar, goods, bads in [
        (PATCH, [valid, moved], [valid.replace("*** End", "** End"), moved.replace("+\n", "")]),
        (FORMS, ["ab=1.5, c = ON;", "a=off", "cab = 12"], ["abcd=1", "a=1,", "d=1", "a=1.;"]),
    ]:
        lark, inside = llguidance.grammar_from("lark", grammar), as_json_string(grammar)
        for good in goods:
            assert accepts(tokenizer, lark, good) and accepts(tokenizer, inside, json.dumps(good)), good
        for bad in bads:
            assert not accepts(tokenizer, lark, bad) and not accepts(tokenizer, inside, json.dumps(bad)), bad


@pytest.mark.parametrize(
    "grammar, named",
    [
        ("start: a\na: b\nb: a", "recursive (a -> b -> a)"),
        ('start: "(" start ")" | "x"', "recursive (start -> start)"),
        ("start: %json {}", "%json"),
        ("start: A\n%declare A", "%declare"),
        ("start: X\n%import common.NOT_THERE", "common.NOT_THERE"),
        ('start: other "x"', "'other' is used but not defined"),
        ('x: "a"', "no start rule"),
    ],
)
def test_grammars_with_no_regular_form_are_refused_by_name(grammar, named):
    with pytest.raises(ConstraintError, match=named.replace("(", r"\(").replace(")", r"\)")):
        lark_to_regex(grammar)


# ---- on the server --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "2048", "-np", "1") as s:
        s.openai = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        yield s


def patch_tool(syntax: str = "lark", definition: str = ONE_EDIT) -> dict:
    return {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files with a patch",
        "format": {"type": "grammar", "syntax": syntax, "definition": definition},
    }


ASK = "Change x = 1 to x = 2 in a.py."


def test_a_forced_custom_call_follows_its_grammar_whole_and_streamed(server, tokenizer):
    kwargs = dict(
        model="m",
        input=ASK,
        tools=[patch_tool()],
        tool_choice={"type": "custom", "name": "apply_patch"},
        max_output_tokens=160,
        temperature=0,
    )
    whole = server.openai.responses.create(**kwargs)
    call = next(item for item in whole.output if item.type == "custom_tool_call")
    assert call.name == "apply_patch" and call.call_id
    assert whole.status == "completed"
    assert accepts(tokenizer, llguidance.grammar_from("lark", ONE_EDIT), call.input), call.input

    kinds, deltas = [], []
    with server.openai.responses.stream(**kwargs) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.custom_tool_call_input.delta":
                deltas.append(event.delta)
        streamed = next(i for i in stream.get_final_response().output if i.type == "custom_tool_call")
    assert "response.custom_tool_call_input.done" in kinds and "response.function_call_arguments.delta" not in kinds
    assert "".join(deltas) == streamed.input == call.input

    # the call and its output go back, as Codex sends them (store: false, the whole history)
    again = server.openai.responses.create(
        model="m",
        store=False,
        tools=[patch_tool()],
        max_output_tokens=8,
        temperature=0,
        input=[
            {"type": "message", "role": "user", "content": ASK},
            {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch", "input": call.input},
            {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done."},
        ],
    )
    assert again.status in ("completed", "incomplete") and again.usage.input_tokens > 40


def test_a_regex_custom_tool_and_refusals(server):
    version = patch_tool("regex", r"v[0-9]\.[0-9]+")
    answer = server.openai.responses.create(
        model="m",
        input="Which version?",
        tools=[version],
        tool_choice={"type": "custom", "name": "apply_patch"},
        max_output_tokens=64,
        temperature=0,
    )
    call = next(item for item in answer.output if item.type == "custom_tool_call")
    assert answer.status == "completed" and re.fullmatch(r"v[0-9]\.[0-9]+", call.input), call.input

    for tool, named in [
        (patch_tool("lark", 'start: "(" start ")" | "x"'), "recursive"),
        (patch_tool("pcre", "x"), "syntax must be lark or regex"),
        ({"type": "custom"}, "needs a name"),
    ]:
        reply = httpx.post(server.url + "/v1/responses", json={"input": "hi", "tools": [tool]}, timeout=60)
        assert reply.status_code == 400 and named in reply.json()["error"]["message"], reply.text
