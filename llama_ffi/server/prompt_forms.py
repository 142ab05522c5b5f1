"""llama-server's prompt forms as the library's inputs: a prompt as a text, token ids, a mix of both,
an object with ``prompt_string``, or a list of them (``/completion``, ``/embeddings``,
``/v1/embeddings``, ``/infill``)."""

from __future__ import annotations

from llama_ffi.server.errors import ApiError


def prompts_of(llm, prompt) -> list:
    """llama-server's prompt forms as the library's: one text or token list per prompt. A list
    mixing texts and token ids is one prompt; a list of texts, token lists or mixes is several."""
    if isinstance(prompt, dict) and isinstance(prompt.get("prompt_string"), str):
        if prompt.get("multimodal_data"):
            raise ApiError(400, "multimodal_data needs the images through /v1/chat/completions", "prompt")
        return [prompt["prompt_string"]]
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise ApiError(400, "prompt must be a string, a list of tokens, or a list of prompts", "prompt")
    if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return [prompt]
    if any(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
        return [mixed_tokens(llm, prompt)]
    return [tokens_of(llm, prompts_of(llm, p)[0]) for p in prompt]  # the library takes one kind per list


def embedding_inputs(llm, raw) -> list:
    """An embedding request's ``input`` in llama-server's forms, as texts and token lists: one
    input (a text, token ids, a mix, an object) or a list of them."""
    if raw is None or raw == []:
        raise ApiError(400, "input is required: a text, token ids, or a list of them", "input")
    one = isinstance(raw, (str, dict)) or (isinstance(raw, list) and any(_is_token(x) for x in raw))
    items = [raw] if one else raw
    if not isinstance(items, list):
        raise ApiError(400, "input must be a text, token ids, or a list of them", "input")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and isinstance(item.get("content"), list):
            parts = item["content"]
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts
            ):
                raise ApiError(400, f"input[{i}].content must be a list of text parts", "input")
            item = "".join(p["text"] for p in parts)
        if isinstance(item, list) and not all(_is_token(x) for x in item):
            item = mixed_tokens(llm, item)
        elif not isinstance(item, (str, list)):
            item = prompts_of(llm, item)[0]
        out.append(item)
    return out


def _is_token(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def tokens_of(llm, prompt) -> list[int]:
    return llm.tokenize(prompt, add_bos=True, special=True) if isinstance(prompt, str) else prompt


def mixed_tokens(llm, parts: list) -> list[int]:
    out: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            out += llm.tokenize(part, add_bos=i == 0, special=True)
        elif isinstance(part, int) and not isinstance(part, bool):
            out.append(part)
        else:
            raise ApiError(400, f"prompt[{i}] must be a string or a token id", "prompt")
    return out
