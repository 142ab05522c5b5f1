"""Images and audio through a model's own chat template, as Hugging Face templates take them.

A multimodal template renders ``{"type": "image"}`` and ``{"type": "audio"}`` content parts as
its family's placeholder tokens (Qwen-VL's ``<|vision_start|><|image_pad|><|vision_end|>``,
Gemma's ``<|image|>`` / ``<|audio|>``, ...). mtmd wants one marker per medium instead, and adds
the family's own begin/end tokens around the media itself. So each medium's placeholder becomes
exactly one marker:

1. render the conversation with media parts 1..k present and the later ones left out, for every
   k: the text a render has in addition to the previous one is what the template emitted for
   medium k (found by a diff, so no table of every family's tokens is needed, and a bump's new
   family works unchanged);
2. replace each emission's placeholder tags (from its first tag to its last) by the marker; what
   the template writes around them for the medium (whitespace, Qwen's "Picture 1: ") stays text.

A medium for which the template emits nothing (it does not take that kind), or one that changes
the render in more than one place, is a clear error. A template that names no media at all (a
text-only template such as ChatML) gets llama.cpp's rule instead: the marker as text where the
part was, which is what llama-mtmd-cli and llama-server do.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.multimodal.media import MEDIA_PART_TYPES

# What a placeholder is made of: tags such as <|image_pad|>, <start_of_image>, <image>, [IMG].
# Text a template puts around them for a medium ("Picture 1: ") stays text.
PLACEHOLDER_TAG = re.compile(r"<[^<>\s]{1,64}>|\[[A-Z_]{2,32}\]")


def template_takes_media(source: str) -> bool:
    """Whether a template renders media parts itself (it names an image or audio part)."""
    return any(f"'{kind}'" in source or f'"{kind}"' in source for kind in MEDIA_PART_TYPES)


def is_media_part(part) -> bool:
    return isinstance(part, dict) and part.get("type") in MEDIA_PART_TYPES


def keep_media(messages: list[dict], n: int) -> list[dict]:
    """Copies of ``messages`` holding only their first ``n`` media parts (in message order)."""
    out, seen = [], 0
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        parts = []
        for part in content:
            if is_media_part(part):
                seen += 1
                if seen > n:
                    continue
            parts.append(part)
        out.append({**m, "content": parts})
    return out


def as_marker_text(messages: list[dict], marker: str) -> list[dict]:
    """llama.cpp's rule: each media part becomes a text part holding the marker."""
    return [
        {**m, "content": [{"type": "text", "text": marker} if is_media_part(p) else p for p in m["content"]]}
        if isinstance(m.get("content"), list)
        else m
        for m in messages
    ]


def _insertion(before: str, after: str, index: int, kind: str) -> tuple[int, int]:
    """Where ``after`` has text that ``before`` lacks: one contiguous insertion, else an error.
    The common head and tail are cut first, so a long conversation costs a linear scan."""
    head = 0
    while head < min(len(before), len(after)) and before[head] == after[head]:
        head += 1
    tail = 0
    while tail < min(len(before), len(after)) - head and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    middle = difflib.SequenceMatcher(
        None, before[head : len(before) - tail], after[head : len(after) - tail], autojunk=False
    ).get_opcodes()
    ops = [(op, i1 + head, i2 + head, j1 + head, j2 + head) for op, i1, i2, j1, j2 in middle if op != "equal"]
    if not ops:
        raise RequestValueError(
            f"the chat template emitted nothing for media item {index} ({kind}): it does not take "
            f"{kind} (is this projector's family the model's?)"
        )
    if len(ops) > 1 or ops[0][0] != "insert":
        raise RequestValueError(
            f"the chat template changed its output in {len(ops)} places for media item {index} "
            f"({kind}); one placeholder per medium is expected"
        )
    return ops[0][3], ops[0][4]


def _placeholder(emitted: str) -> tuple[int, int]:
    """The placeholder inside what a template emitted for a medium: from its first tag to its
    last, else the emission without its surrounding whitespace."""
    tags = list(PLACEHOLDER_TAG.finditer(emitted))
    if tags:
        return tags[0].start(), tags[-1].end()
    return len(emitted) - len(emitted.lstrip()), len(emitted.rstrip())


def _placed(text: str, start: int, end: int, spans: list[list[int]]) -> tuple[int, int]:
    """An insertion's place where the diff could have put it elsewhere (``<|image|>`` inserted
    after ``<|image|>`` also reads as ``|><|image`` one step earlier): as far right as the text
    allows, then left again while that cuts into an earlier medium's emission."""
    while end < len(text) and text[start] == text[end]:
        start, end = start + 1, end + 1
    while any(s < start < e for s, e in spans) and start > 0 and text[start - 1] == text[end - 1]:
        start, end = start - 1, end - 1
    if any(s < start < e for s, e in spans):
        raise RequestValueError("the chat template's placeholders of two media overlap")
    return start, end


def render_with_markers(
    render: Callable[[list[dict]], str], messages: list[dict], kinds: Sequence[str], marker: str
) -> tuple[str, list[int]]:
    """``render(messages)`` with each medium's placeholder replaced by ``marker``, and the media's
    indices in the order their markers appear (a template may place a medium before an earlier
    one); ``kinds`` are the media's kinds in message order."""
    previous = render(keep_media(messages, 0))
    spans: list[list[int]] = []  # [start, end) of each emission in the latest render
    for k, kind in enumerate(kinds):
        current = render(keep_media(messages, k + 1))
        start, end = _placed(current, *_insertion(previous, current, k, kind), spans)
        if not current[start:end].strip():
            raise RequestValueError(
                f"the chat template emitted only whitespace for media item {k} ({kind}): it does not take {kind}"
            )
        for span in spans:  # earlier emissions after this one move by its length
            if span[0] >= start:
                span[0] += end - start
                span[1] += end - start
        spans.append([start, end])
        previous = current
    text = previous
    order = sorted(range(len(spans)), key=lambda k: spans[k][0])
    for start, end in sorted(spans, reverse=True):
        core_start, core_end = _placeholder(text[start:end])
        text = text[: start + core_start] + marker + text[start + core_end :]
    if text.count(marker) != len(kinds):
        raise RequestValueError(
            f"the prompt holds {text.count(marker)} media markers for {len(kinds)} media: a message's "
            f"text contains the marker {marker!r}"
        )
    return text, order
