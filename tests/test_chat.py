"""Chat: every real template in llama.cpp's models/templates renders, known formats are exact,
the sandbox holds, and create_chat_completion works with SmolLM2."""

from __future__ import annotations

import json

import pytest

from llama_ffi.high import Llama
from llama_ffi.high.chat import (
    ChatTemplate,
    TemplateError,
    TemplateSecurityError,
    builtin_formats,
    format_with_builtin,
    validate_messages,
)

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    # Cohere's templates read tools in their own shape: the same tool, described their way
    "name": "get_weather",
    "description": "Weather for a city",
    "parameter_definitions": {"city": {"type": "str", "description": "city", "required": True}},
}


def conversation(
    arguments_as_text: bool = False,
    system: bool = True,
    tool_turns: bool = True,
    reasoning: bool = False,
    translation: bool = False,
) -> list[dict]:
    """``reasoning``: assistant turns carry ``reasoning_content`` (some templates require a thinking
    field); ``translation``: each user turn is one text item with language codes (TranslateGemma)."""
    msgs = _conversation(arguments_as_text, system, tool_turns)
    if reasoning:
        msgs = [dict(m, reasoning_content="Thinking.") if m["role"] == "assistant" else m for m in msgs]
    if translation:
        msgs = [
            dict(
                m, content=[{"type": "text", "source_lang_code": "en", "target_lang_code": "fr", "text": m["content"]}]
            )
            if m["role"] == "user"
            else m
            for m in msgs
        ]
    return msgs


def _conversation(arguments_as_text: bool, system: bool, tool_turns: bool) -> list[dict]:
    args = {"city": "Paris"}
    call = {
        "id": "call12345",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(args) if arguments_as_text else args},
    }
    msgs = [{"role": "system", "content": "You are helpful."}] if system else []
    if not tool_turns:  # for templates without tool support
        return msgs + [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "It is 20 degrees."},
            {"role": "user", "content": "Thanks!"},
        ]
    return msgs + [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temp": 20}'},
        {"role": "assistant", "content": "It is 20 degrees."},
        {"role": "user", "content": "Thanks!"},
    ]


def template_files(tree):
    return sorted((tree.path / "models/templates").glob("*.jinja"))


def test_every_model_template_renders_a_standard_conversation(tree):
    files = template_files(tree)
    assert len(files) >= 60
    failures = []
    for path in files:
        t = ChatTemplate(path.read_text(), path.name, bos_token="<s>", eos_token="</s>")
        extra = dict(tools=[TOOL], functions=json.dumps([TOOL]), datetime="2026-12-02")
        attempts = [
            dict(),
            dict(arguments_as_text=True),
            dict(system=False),
            dict(arguments_as_text=True, system=False),
        ]
        if "tool" not in t.source:
            attempts = [dict(tool_turns=False), dict(tool_turns=False, system=False)]
        attempts += [dict(a, reasoning=True) for a in attempts]  # templates that require a thinking field
        attempts.append(dict(tool_turns=False, system=False, translation=True))
        rendered = None
        for variant in attempts:  # templates differ on tool-call arguments and system support
            try:
                rendered = t.render(conversation(**variant), **extra)
                break
            except (TemplateError, TypeError) as exc:
                last = exc
        if rendered is None:
            failures.append((path.name, repr(last)))
            continue
        # every turn, in the conversation's order; the system message where the variant has one
        # (Mistral's templates place it before the last user turn, so only its presence counts)
        texts = ["Weather in Paris?", "It is 20 degrees.", "Thanks!"]
        at = [rendered.find(x) for x in texts]
        if -1 in at or at != sorted(at):
            failures.append((path.name, f"turns missing or out of order: {dict(zip(texts, at))}"))
        if variant.get("system", True) and "You are helpful." not in rendered:
            failures.append((path.name, "system message missing"))
    assert not failures, failures


def test_chatml_of_smollm2_is_exact(smollm2_path):
    with Llama(smollm2_path, vocab_only=True, progress=False) as m:
        from llama_ffi.high.chat.completion import model_template

        t = model_template(m, None)
        out = t.render([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])
    assert out == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


SYSTEM_USER = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
USER_ONLY = [{"role": "user", "content": "Hi"}]


# The prompt formats as the model makers document them, written out by hand: the model files'
# own templates must render exactly these.
@pytest.mark.parametrize(
    "file, messages, extra, expected",
    [
        (
            "meta-llama-Llama-3.1-8B-Instruct.jinja",
            SYSTEM_USER,
            {"date_string": "26 Jul 2024"},
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
        (
            "google-gemma-2-2b-it.jinja",
            USER_ONLY,
            {},
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        ),
        (
            "Qwen-Qwen2.5-7B-Instruct.jinja",
            SYSTEM_USER,
            {},
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        ),
        (
            "Qwen-Qwen3-0.6B.jinja",
            USER_ONLY,
            {"enable_thinking": False},
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        ),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", USER_ONLY, {}, "<s>[INST]Hi[/INST]"),
        (
            "mistralai-Mistral-Nemo-Instruct-2407.jinja",
            USER_ONLY + [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}],
            {},
            "<s>[INST]Hi[/INST]Hello</s>[INST]Bye[/INST]",
        ),
    ],
)
def test_well_known_model_templates_render_their_documented_format(tree, file, messages, extra, expected):
    bos = "<bos>" if file.startswith("google") else "<|begin_of_text|>" if file.startswith("meta") else "<s>"
    t = ChatTemplate((tree.path / "models/templates" / file).read_text(), file, bos_token=bos, eos_token="</s>")
    assert t.render(messages, **extra) == expected


def test_model_file_templates_named_variants_and_extra_arguments(tree, tiny_config, tmp_path):
    from tiny_llama import write_gguf

    from llama_ffi.high.chat.completion import render_prompt

    qwen3 = (tree.path / "models/templates/Qwen-Qwen3-0.6B.jinja").read_text()
    gemma = (tree.path / "models/templates/google-gemma-2-2b-it.jinja").read_text()
    path = write_gguf(tmp_path / "templated.gguf", tiny_config, {"default": qwen3, "tool_use": gemma})
    with Llama(path, vocab_only=True, progress=False) as m:
        thinking = render_prompt(m, USER_ONLY)
        direct = render_prompt(m, USER_ONLY, extra_template_arguments={"enable_thinking": False})
        named = render_prompt(m, USER_ONLY, chat_template_name="tool_use")
        with pytest.raises(ValueError, match="no chat template named 'nope'"):
            render_prompt(m, USER_ONLY, chat_template_name="nope")
    assert thinking == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert direct == thinking + "<think>\n\n</think>\n\n"
    assert named.endswith("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")


def test_templates_get_todays_date_and_join_strings_with_undefined_as_llama_cpp(tree):
    """llama.cpp gives every template ``date_string`` and ``datetime`` and joins a string with an
    undefined value as with "" (FireFunction adds an undefined ``functions`` when given no tools)."""
    import datetime

    def render(file, **extra):
        source = (tree.path / "models/templates" / file).read_text()
        return ChatTemplate(source, file).render(USER_ONLY, **extra)

    today = datetime.date.today()
    assert f"Today Date: {today.strftime('%d %b %Y')}\n" in render("meta-llama-Llama-3.3-70B-Instruct.jinja")
    assert "Today Date: 1 Jan 2000\n" in render("meta-llama-Llama-3.3-70B-Instruct.jinja", date_string="1 Jan 2000")
    firefunction = render("fireworks-ai-llama-3-firefunction-v2.jinja")
    assert f"Available functions as JSON spec:\n\nToday is {today.strftime('%b %d %Y')}." in firefunction
    assert ChatTemplate("{{ a + 'x' }}|{{ 'y' + none }}|{{ 1 + 2 }}|{{ [1] + [2] }}").render([]) == "x|y|3|[1, 2]"
    with pytest.raises(TemplateError, match="undefined"):
        ChatTemplate("{{ a + 1 }}").render([])


def test_template_arguments_can_turn_the_generation_prompt_off(tree, tiny_config, tmp_path):
    from tiny_llama import write_gguf

    from llama_ffi.high.chat.completion import render_prompt

    qwen3 = (tree.path / "models/templates/Qwen-Qwen3-0.6B.jinja").read_text()
    with Llama(write_gguf(tmp_path / "t.gguf", tiny_config, {"default": qwen3}), vocab_only=True, progress=False) as m:
        without = render_prompt(m, USER_ONLY, extra_template_arguments={"add_generation_prompt": False})
    assert without == "<|im_start|>user\nHi<|im_end|>\n"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("chatml", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        (
            "llama3",
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
        ("gemma", "<start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\n"),
        ("zephyr", "<|system|>\nS<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\n"),
    ],
)
def test_named_formats_are_llama_cpps(name, expected):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
    assert format_with_builtin(name, msgs) == expected
    assert name in builtin_formats()


def test_named_formats_aliases_and_unknown():
    msgs = [{"role": "user", "content": "Hi"}]
    assert format_with_builtin("llama-3", msgs) == format_with_builtin("llama3", msgs)
    with pytest.raises(ValueError, match="unknown chat_format"):
        format_with_builtin("no-such-format", msgs)


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.__class__.__mro__ }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{{ raise_exception.__globals__ }}",
        "{% for i in range(10**9) %}x{% endfor %}",
        "{{ self._TemplateReference__context }}",
        "{% for i in range(90000) %}{% for j in range(90000) %}{% endfor %}{% endfor %}",
        "{{ 'x' * 1000000000 }}",
        "{{ 2 ** 100000000 }}",
        "{{ cycler.__init__.__globals__.os }}",
    ],
)
def test_hostile_templates_raise_a_security_error(source):
    with pytest.raises(TemplateSecurityError):
        ChatTemplate(source, "hostile").render([{"role": "user", "content": "x"}])


def test_template_syntax_error_names_template_and_line():
    with pytest.raises(TemplateError, match=r"'broken', line 2"):
        ChatTemplate("ok\n{% for m in messages %}", "broken").render([{"role": "user", "content": "x"}])


def test_generation_block_and_helpers():
    t = ChatTemplate(
        "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
        "{{ {'a': [1, 2]} | tojson(indent=1) }}{{ strftime_now('%Y') | length }}",
        "h",
    )
    out = t.render([{"role": "user", "content": "hi"}])
    assert out.startswith('hi{\n "a"') and out.endswith("4")
    with pytest.raises(TemplateError, match="nope"):
        ChatTemplate("{{ raise_exception('nope') }}", "r").render([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "bad, match",
    [
        ([{"content": "x"}], "no 'role'"),
        ([{"role": "wizard", "content": "x"}], "unknown role"),
        ([{"role": "user"}], "no 'content'"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}], "unsupported type"),
        ("hello", "must be a list of dicts"),
        (["hello"], "must be a dict"),
    ],
)
def test_bad_messages(bad, match):
    with pytest.raises(ValueError, match=match):
        validate_messages(bad)


def test_content_parts_are_joined():
    msgs = validate_messages(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    )
    assert msgs[0]["content"] == "ab"


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=2048, progress=False) as m:
        yield m


def test_chat_round_trip(llm):
    from llama_ffi.high.chat.completion import model_template

    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    llm.reset()
    out = llm.create_chat_completion(msgs, max_tokens=16, temperature=0.0)
    assert out["object"] == "chat.completion"
    msg = out["choices"][0]["message"]
    # the reply is the model's greedy completion of its own template's prompt (run the same way)
    prompt = model_template(llm, None).render(msgs)
    llm.reset()
    plain = llm(llm.tokenize(prompt, add_bos=False, special=True), max_tokens=16, temperature=0.0)
    assert msg["role"] == "assistant" and msg["content"].strip() == plain["choices"][0]["text"].strip()
    assert msg["content"].strip()
    assert "<|im_end|>" not in msg["content"] and out["choices"][0]["finish_reason"] == "stop"
    chunks = list(llm.create_chat_completion(msgs, max_tokens=16, temperature=0.0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == msg["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_chat_format_overrides_the_model_template(llm):
    msgs = [{"role": "user", "content": "Hi"}]
    out = llm.create_chat_completion(msgs, chat_format="chatml", max_tokens=4, temperature=0.0)
    assert out["choices"][0]["message"]["content"]
    seen = []

    def handler(messages, **kw):
        seen.append(messages)
        return "<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\n"

    llm.create_chat_completion(msgs, chat_handler=handler, max_tokens=2, temperature=0.0)
    assert seen and seen[0][0]["content"] == "Hi"


def test_json_mode_output_parses_whenever_it_stops(llm):
    """JSON mode's promise: a reply that ends by itself (finish_reason "stop") is one complete JSON
    object; a reply cut by max_tokens ("length") is the text so far, a prefix of one."""
    msgs = [{"role": "user", "content": "Give a JSON object describing a cat with a name and an age."}]
    stopped = 0
    for seed in range(4):
        out = llm.create_chat_completion(
            msgs, response_format={"type": "json_object"}, max_tokens=400, temperature=0.8, seed=seed
        )
        choice, text = out["choices"][0], out["choices"][0]["message"]["content"]
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict), text
            stopped += 1
        else:
            assert choice["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 400
            assert text.lstrip().startswith("{")
    assert stopped >= 3
    cut = llm.create_chat_completion(msgs, response_format={"type": "json_object"}, max_tokens=4, temperature=0)
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["message"]["content"].lstrip().startswith("{")


def test_bad_response_format_is_refused(llm):
    with pytest.raises(ValueError, match="json_schema"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], response_format={"type": "json_schema"})
    with pytest.raises(ValueError, match="response_format"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], response_format={"type": "xml"})


def test_assistant_prefill_continues_the_given_text(llm):
    msgs = [
        {"role": "user", "content": "List three fruits."},
        {"role": "assistant", "content": "Here are three fruits: 1. Apple, 2."},
    ]
    # Both sides from an empty cache: a prompt found in the cache evaluates its last token alone,
    # and on AVX2 CPUs that moves a near tie here (the plain side stopped two tokens earlier).
    llm.reset()
    out = llm.create_chat_completion(msgs, assistant_prefill=True, max_tokens=12, temperature=0.0)
    text = out["choices"][0]["message"]["content"]
    # the continuation of "... 2." — not a new turn: it goes on with the list
    from llama_ffi.high.chat.completion import render_prompt

    prompt = render_prompt(llm, msgs, assistant_prefill=True)
    assert prompt.endswith("<|im_start|>assistant\nHere are three fruits: 1. Apple, 2.")
    llm.reset()
    plain = llm(prompt, max_tokens=12, temperature=0.0)["choices"][0]["text"]
    assert text == plain and text.strip()
    with pytest.raises(ValueError, match="assistant_prefill"):
        llm.create_chat_completion(msgs[:1], assistant_prefill=True, max_tokens=2)
