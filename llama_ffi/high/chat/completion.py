"""``create_chat_completion``: messages → prompt (handler, named format, the model's template, or
the ChatML fallback) → the completion engine → OpenAI ``chat.completion`` shapes."""

from __future__ import annotations

import dataclasses
import inspect
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing

from llama_ffi import ffi, lib
from llama_ffi.high import shapes
from llama_ffi.high.chat import formats, media_parts
from llama_ffi.high.chat import tools as tool_calls
from llama_ffi.high.chat.constraint import call_form, reply_constraint
from llama_ffi.high.chat.formats import format_with_builtin
from llama_ffi.high.chat.messages import text_only, validate_messages
from llama_ffi.high.chat.reasoning import ReasoningBudget, split_reasoning
from llama_ffi.high.chat.templates import ChatTemplate
from llama_ffi.high.chat.tool_stream import CallStream
from llama_ffi.high.compat import chat_logprobs, chat_options
from llama_ffi.high.constraints.composed import Reasoning
from llama_ffi.high.engine import results
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.multimodal import MediaPrompt, extract_media
from llama_ffi.high.multimodal.prompt import check_kind
from llama_ffi.high.request import GenerationRequest, from_keywords

FALLBACK_FORMAT = "chatml"  # used when the model has no template and none is given


def model_template(llm, name: str | None) -> ChatTemplate | None:
    """The model's chat template (``name``: one of its named ones), or the Llama's replacement."""
    vocab = llm.loaded_model.vocab_ptr
    if name is None and llm.chat_template is not None:
        source = llm.chat_template
    else:
        ptr = lib.llama_model_chat_template(llm.loaded_model.ptr, name.encode() if name else ffi.NULL)
        if ptr == ffi.NULL:
            if name:
                raise RequestValueError(f"the model has no chat template named {name!r}")
            return None
        source = ffi.string(ptr).decode("utf-8")

    def special(t: int) -> str:
        return llm.tokenizer.piece(t, special=True).decode("utf-8", "replace") if t >= 0 else ""

    return ChatTemplate(
        source,
        name or "tokenizer.chat_template",
        bos_token=special(lib.llama_vocab_bos(vocab)),
        eos_token=special(lib.llama_vocab_eos(vocab)),
    )


def render_prompt(
    llm,
    messages: list[dict],
    *,
    chat_handler: Callable | None = None,
    chat_format: str | None = None,
    chat_template_name: str | None = None,
    extra_template_arguments: dict | None = None,
    assistant_prefill: bool = False,
) -> str:
    if assistant_prefill:
        # The history up to the last (partial) assistant message, rendered as if asking for a
        # reply, then that partial text appended: the model continues it, no end-of-turn between.
        if messages[-1]["role"] != "assistant":
            raise RequestValueError("assistant_prefill=True needs the last message to be the assistant's")
        head = render_prompt(
            llm,
            messages[:-1],
            chat_handler=chat_handler,
            chat_format=chat_format,
            chat_template_name=chat_template_name,
            extra_template_arguments=extra_template_arguments,
        )
        return head + (messages[-1].get("content") or "")
    if chat_handler is not None:
        return chat_handler(messages=messages, **(extra_template_arguments or {}))
    if chat_format is not None:
        return format_with_builtin(chat_format, messages)
    template = model_template(llm, chat_template_name)
    if template is None:
        return format_with_builtin(FALLBACK_FORMAT, messages)
    # llama.cpp passes enable_thinking (true unless asked otherwise) to every Jinja template; the
    # template arguments may also turn the generation prompt off (llama-server's add_generation_prompt)
    arguments = {"add_generation_prompt": True, "enable_thinking": True, **(extra_template_arguments or {})}
    return template.render(messages, **arguments)


def render_media_prompt(llm, messages: list[dict], media: list, **options) -> tuple[str, list]:
    """The prompt, and the media in the order of their markers in it. A model template that takes
    media parts renders them itself, each placeholder becoming mtmd's marker (media_parts);
    otherwise, llama.cpp's rule: the marker as text where the part was."""
    marker = llm.mtmd.marker if llm.mtmd is not None else MEDIA_MARKER
    template = (
        None
        if options["chat_handler"] or options["chat_format"]
        else model_template(llm, options["chat_template_name"])
    )
    if media and template is not None and media_parts.template_takes_media(template.source):
        prompt, order = media_parts.render_with_markers(
            lambda m: render_prompt(llm, m, **options), messages, [item.kind for item in media], marker
        )
        return prompt, [media[i] for i in order]
    return render_prompt(llm, text_only(media_parts.as_marker_text(messages, marker)), **options), media


MEDIA_MARKER = "<__media__>"  # mtmd's default, for messages checked without an mmproj


def plan_chat(
    llm,
    messages,
    request: GenerationRequest | None = None,
    *,
    chat_handler=None,
    chat_format=None,
    chat_template_name=None,
    extra_template_arguments=None,
    response_format=None,
    assistant_prefill: bool = False,
    tools=None,
    tool_choice=None,
    parallel_tool_calls: bool = True,
    reasoning_budget: int | None = None,
    reasoning_start: str = "<think>",
    reasoning_end: str = "</think>",
    reasoning_budget_message: str = "",
    reasoning_start_in_prompt: bool | None = None,
    reasoning_start_max_tokens: int | None = None,
):
    """The chat request as a completion of its rendered prompt: ``request`` (the typed request,
    ``high.request``) with the constraint and processors the chat options add, and how the result
    becomes ``chat.completion`` shapes."""
    request = request if request is not None else GenerationRequest(max_tokens=None)
    mtmd = llm.mtmd
    messages, media = extract_media(messages)
    if media and mtmd is None:
        raise RequestValueError(
            "the messages hold images or audio, but this Llama was loaded without an mmproj "
            "(Llama(..., mmproj_path=...) or chat_handler=MTMDChatHandler(mmproj_path=...))"
        )
    for i, item in enumerate(media):  # the projector's refusal names the cause; a template's would not
        check_kind(mtmd, item, i)
    messages = validate_messages(messages)
    tool_plan = dataclasses.replace(tool_calls.plan(tools, tool_choice), parallel=parallel_tool_calls)
    extra = dict(extra_template_arguments or {})
    offering = tool_plan.mode != "none"
    template = None if chat_handler or chat_format else model_template(llm, chat_template_name)
    template_source = template.source if template is not None else ""
    form = call_form(template_source)
    if offering or tool_calls.has_tool_turns(messages):
        if "tools" in template_source:
            if offering:
                extra["tools"] = tool_calls.declarations(tool_plan.functions)
        else:  # the template knows no tools: describe them (and earlier tool turns) in text
            messages = tool_calls.inline_messages(messages, tool_plan.functions if offering else {})
    prompt, media = render_media_prompt(
        llm,
        messages,
        media,
        chat_handler=chat_handler,
        chat_format=chat_format,
        chat_template_name=chat_template_name,
        extra_template_arguments=extra,
        assistant_prefill=assistant_prefill,
    )
    started = (
        prompt.rstrip().endswith(reasoning_start)
        if reasoning_start_in_prompt is None
        else bool(reasoning_start_in_prompt)
    )
    think = (reasoning_start, reasoning_end, started)
    if reasoning_budget is not None:
        budget = ReasoningBudget(
            lambda t: llm.tokenize(t, add_bos=False, special=True),
            reasoning_budget,
            reasoning_start,
            reasoning_end,
            reasoning_budget_message,
            started,
            reasoning_start_max_tokens,
        )
        request = dataclasses.replace(request, logits_processor=(*request.logits_processor, budget))
    thinks = started or reasoning_budget is not None or reasoning_start in template_source
    reasoning = Reasoning(reasoning_start, reasoning_end, started) if thinks else None
    # with a grammar of the caller's own, calls under "auto" are parsed, not checked as written
    checked_form = form if request.grammar is None else None
    grammar = reply_constraint(llm.loaded_model.vocab_ptr, tool_plan, response_format, reasoning, checked_form)
    if grammar is not None:
        if request.grammar is not None:  # never one constraint silently dropped for another
            raise RequestValueError("grammar and response_format (or a forced tool call) both constrain the output")
        request = dataclasses.replace(request, grammar=grammar)
    bos_text = llm.tokenizer.piece(llm.token_bos(), special=True) if llm.token_bos() >= 0 else b""
    add_bos = bool(lib.llama_vocab_get_add_bos(llm.loaded_model.vocab_ptr)) and not (
        bos_text and prompt.encode().startswith(bos_text)
    )
    if media:  # text and media chunks: the markers the template kept become the media
        tokens = MediaPrompt(mtmd, prompt, media, add_special=add_bos)
    else:
        tokens = llm.tokenize(prompt, add_bos=add_bos, special=True)
    parse_calls = tool_plan.mode != "none" or reasoning_budget is not None or started
    # Calls and reasoning stream as they are generated (tool_stream): forced calls in the Hermes form
    # their grammar sets; with "auto", Hermes calls too, other families' forms whole at the end.
    return ChatPlan(tokens, request, parse_calls, tool_plan, think, request.model or llm.model_path, prompt)


class ChatPlan:
    """A chat request as a completion request (``tokens``, the typed ``request``), and how its
    result becomes ``chat.completion`` shapes (``finish``, or ``afinish`` for asyncio)."""

    def __init__(
        self,
        tokens,
        request: GenerationRequest,
        parse_calls: bool,
        tool_plan,
        think,
        model: str,
        prompt: str = "",
    ) -> None:
        self.tokens, self.request, self.prompt = tokens, request, prompt
        self.stream, self.parse_calls, self.tool_plan, self.think = request.stream, parse_calls, tool_plan, think
        self.model = model
        self.cid, self.created = f"chatcmpl-{uuid.uuid4()}", int(time.time())

    def finish(self, result):
        cid, created, tool_plan, think, stream = self.cid, self.created, self.tool_plan, self.think, self.stream
        if not stream:
            choices = []
            for choice in result["choices"]:  # n > 1: one message per choice
                message, finish = _message(choice, tool_plan, think)
                choices.append(
                    {
                        "index": choice["index"],
                        "message": message,
                        "logprobs": chat_logprobs(choice["logprobs"]),
                        "finish_reason": finish,
                        "stop_reason": choice.get("stop_reason"),
                    }
                )
            return shapes.chat(cid, created, result["model"], choices, result["usage"])

        def chunks() -> Iterator[dict]:
            started: dict = {}
            for c in result:
                yield from self._deltas(c, started)

        return chunks()

    async def afinish(self, result):
        """``finish`` for an awaited completion: a dict, or an async iterator of chunks."""
        if self.stream:
            return self._adeltas(result)
        return self.finish(result)

    async def _adeltas(self, result) -> AsyncIterator[dict]:
        started: dict = {}
        async with aclosing(result):  # closed with this stream: the completion's slot is freed
            async for c in result:
                for chunk in self._deltas(c, started):
                    yield chunk

    def _deltas(self, completion_chunk: dict, started: dict) -> list[dict]:
        """The chat chunks of one completion chunk (the first of each choice says its role); with
        calls or reasoning to parse, its text goes through the choice's ``CallStream``."""
        if "prompt_progress" in completion_chunk:
            shell = shapes.chat_chunk(self.cid, self.created, self.model, {}, None, 0)
            return [{**shell, "choices": [], "prompt_progress": completion_chunk["prompt_progress"]}]
        choice = completion_chunk["choices"][0]
        index, out = choice["index"], []
        if index not in started:
            plan = self.tool_plan
            functions = plan.functions if plan.mode == "auto" else None  # other forms: parsed whole at the end
            started[index] = CallStream(self.think, plan.mode != "none", functions) if self.parse_calls else None
            out.append(shapes.chat_chunk(self.cid, self.created, self.model, {"role": "assistant"}, None, index))
        parser = started[index]
        deltas = [{"content": choice["text"]}] if parser is None and choice["text"] else []
        if parser is not None:
            deltas = parser.feed(choice["text"]) + (parser.finish() if choice["finish_reason"] is not None else [])
        logprobs = chat_logprobs(choice["logprobs"]) if parser is None else None  # a plain stream's tokens
        out += [shapes.chat_chunk(self.cid, self.created, self.model, d, None, index, None, logprobs) for d in deltas]
        if choice["finish_reason"] is not None:
            calls = parser is not None and parser.n_calls and choice["finish_reason"] != "length"
            finish = "tool_calls" if calls else choice["finish_reason"]  # "length" wins, as in _message
            stop = choice.get("stop_reason")
            out.append(shapes.chat_chunk(self.cid, self.created, self.model, {}, finish, index, stop))
        if "usage" in completion_chunk and out:  # the stream's last chunk: the request's usage
            out[-1]["usage"] = completion_chunk["usage"]
        return out


CHAT_OPTIONS = frozenset(inspect.signature(plan_chat).parameters) - {"llm", "messages", "request"}


def call_options(llm, kwargs: dict) -> dict:
    """A call's chat options after llama-cpp-python's spellings, with the Llama's own chat settings
    (handler, format, template variables) where the call gives none; a call's own
    ``extra_template_arguments`` win over the Llama's."""
    chat_options(kwargs)
    if llm.chat_handler is not None:
        kwargs.setdefault("chat_handler", llm.chat_handler)
    if llm.chat_format is not None:
        kwargs.setdefault("chat_format", llm.chat_format)
    if llm.template_arguments:
        kwargs["extra_template_arguments"] = {
            **llm.template_arguments,
            **(kwargs.get("extra_template_arguments") or {}),
        }
    return kwargs


def split_keywords(llm, kwargs: dict) -> tuple[GenerationRequest, dict]:
    """A chat call's keyword arguments as the typed request and the chat options (the conversion
    at ``create_chat_completion``'s edge; a chat's ``max_tokens`` defaults to None)."""
    kwargs = dict(kwargs)
    chat_options(kwargs)  # llama-cpp-python's chat spellings (legacy functions, logprobs=True)
    chat = {k: v for k, v in kwargs.items() if k in CHAT_OPTIONS}
    request = from_keywords(llm, {k: v for k, v in kwargs.items() if k not in chat}, max_tokens=None)
    return request, chat


def chat_prompt(llm, messages, request: GenerationRequest | None = None, **chat) -> tuple[str, int]:
    """The prompt this chat request renders to, and its length in tokens (llama-server's
    /apply-template and /chat/completions/input_tokens; Anthropic's count_tokens)."""
    plan = plan_chat(llm, messages, request, **call_options(llm, chat))
    return plan.prompt, len(plan.tokens)


def chat_completion(llm, messages, request: GenerationRequest, **chat):
    """A chat completion of the typed ``request`` (``chat``: the chat options of ``plan_chat``)."""
    plan = plan_chat(llm, messages, request, **call_options(llm, chat))
    return plan.finish(results.complete(llm, plan.tokens, plan.request))


async def achat_completion(llm, messages, request: GenerationRequest, **chat):
    """``chat_completion`` for asyncio."""
    plan = plan_chat(llm, messages, request, **call_options(llm, chat))
    return await plan.afinish(await results.acomplete(llm, plan.tokens, plan.request))


def completion_handler(llm, kwargs: dict):
    """The llama-cpp-python chat completion handler this call goes to (its own ``chat_handler``,
    the Llama's, or a registered ``chat_format``) and the call's other options; None for
    llama-ffi's own chat path."""
    handler = kwargs.get("chat_handler", llm.chat_handler)
    if handler is None:
        handler = formats.REGISTERED.get(kwargs.get("chat_format", llm.chat_format))
    if not formats.is_completion_handler(handler):
        return None, kwargs
    return handler, {k: v for k, v in kwargs.items() if k not in ("chat_handler", "chat_format")}


def create_chat_completion(llm, messages, **kwargs):
    handler, options = completion_handler(llm, kwargs)
    if handler is not None:
        return handler(llama=llm, messages=messages, **options)
    request, chat = split_keywords(llm, kwargs)
    return chat_completion(llm, messages, request, **chat)


async def acreate_chat_completion(llm, messages, **kwargs):
    handler, options = completion_handler(llm, kwargs)
    if handler is not None:
        if not isinstance(handler, formats.FormatterChatHandler):  # another's handler is synchronous code
            raise RequestValueError(
                "acreate_chat_completion runs formatter handlers only: call create_chat_completion for this one"
            )
        return await handler.acall(llama=llm, messages=messages, **options)
    request, chat = split_keywords(llm, kwargs)
    return await achat_completion(llm, messages, request, **chat)


def _message(choice: dict, tool_plan, think: tuple[str, str, bool]) -> tuple[dict, str]:
    """The assistant message of a completion choice: ``reasoning_content`` split off when the
    model thinks in tags, ``tool_calls`` when the rest holds calls."""
    reasoning, text = split_reasoning(choice["text"], *think)
    message = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_plan.mode == "none":
        return message, choice["finish_reason"]
    rest, cut = (text, None)
    if choice["finish_reason"] == "length":  # a call cut short keeps its arguments, completed
        rest, cut = tool_calls.cut_call(text, tool_plan.functions)
    content, calls = tool_calls.parse_tool_calls(rest, tool_plan.functions)
    if cut is not None:
        content, calls = (content or "").strip() or None, [*calls, cut]
    if calls and tool_plan.mode != "auto" and "<tool_call>".startswith((content or "").strip()):
        content = None  # a forced reply cut as its next call began: nothing of it is content
    if not calls:
        return message, choice["finish_reason"]
    # a reply the token limit ended says "length" even with calls (as llama-server): a cut call's
    # arguments were completed here, not written by the model
    finish = "length" if choice["finish_reason"] == "length" else "tool_calls"
    return {**message, "content": content, "tool_calls": calls}, finish
