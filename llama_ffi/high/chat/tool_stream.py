"""Tool calls and reasoning parsed as the text streams: ``CallStream`` turns a reply's text, piece by
piece, into chat deltas — ``reasoning_content`` inside the thinking tags, ``content`` outside, and for
each Hermes-form call (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, the form forced
calls are generated in) a ``tool_calls`` delta with its name as soon as it is known, then its
arguments in fragments as they are generated. The fragments are the arguments re-serialised token by
token as ``json.dumps`` writes them, so joined they equal the call parsed from the whole text.
Text that could still become a tag is held back until it cannot. A call the generation cut short
(``max_tokens``) ends with the text that completes its arguments (``JsonCanon.closing``), as
llama-server heals it.

With ``functions`` (``tool_choice: "auto"``) the model may also answer in text or in another family's
form (Mistral's ``[TOOL_CALLS]``, functionary's ``<function=``, ``>>>``, a Llama 3 JSON reply): text
streams until such a form begins, or a Hermes call names a function not offered; from there the reply
is parsed whole at its end and what the stream has not said yet follows, so the joined deltas still
equal the whole reply's parse."""

from __future__ import annotations

import json
import uuid

from llama_ffi.high.chat.json_stream import JsonCanon
from llama_ffi.high.chat.reasoning import split_reasoning
from llama_ffi.high.chat.tools import HERMES_HEAD, parse_tool_calls

CALL_START, CALL_END = "<tool_call>", "</tool_call>"
OTHER_FORMS = ("[TOOL_CALLS]", "<function=")  # parsed whole, wherever they begin
OTHER_OPENINGS = (">>>", "{", "<|python_tag|>")  # parsed whole when a reply begins with them


class CallStream:
    def __init__(
        self, think: tuple[str, str, bool] | None = None, calls: bool = True, functions: dict | None = None
    ) -> None:
        self.think = think or ("", "", False)
        self.think_start, self.think_end, inside = self.think
        self.functions = functions  # "auto": other forms and unknown names are parsed whole at the end
        self.reply = ""  # everything fed (for that parse)
        self.said = ""  # the content emitted so far
        self.state = "think" if inside and self.think_start else "text"
        self.calls = calls
        self.pending = ""
        self.n_calls = 0
        self.call_raw = ""
        self.named = False
        self.args: JsonCanon | None = None
        self.arguments: list[str] = []  # each call's arguments as emitted
        # whitespace the whole reply's parse strips (around reasoning, after it, around calls),
        # held until text follows it
        self.held = ""
        self.trim = self.state == "think"  # leading whitespace of the next block is dropped
        self.seen_text = False  # a thinking block opens only at the start of the reply

    def _markers(self) -> list[str]:
        if self.state == "think":
            return [self.think_end]
        out = [CALL_START] if self.calls else []
        if self.think_start and not self.seen_text and not self.n_calls:
            out.append(self.think_start)
        if self.functions is not None:
            out += OTHER_FORMS
            if not self.seen_text and not self.n_calls:
                out += OTHER_OPENINGS
        return out

    def feed(self, text: str) -> list[dict]:
        self.reply += text
        if self.state == "whole":
            return []
        self.pending += text
        deltas: list[dict] = []
        while self.pending and self.state != "whole":
            if self.state == "call":
                if not self._call(deltas):
                    break
                continue
            markers = self._markers()
            found = [(self.pending.find(m), m) for m in markers if m and m in self.pending]
            # a thinking block, or another family's reply, opens only the reply: after text it is text
            opening = (self.think_start, *OTHER_OPENINGS)
            found = [(i, m) for i, m in found if m not in opening or not self.pending[:i].strip()]
            if found:
                cut, marker = min(found)
                if marker in OTHER_FORMS or (marker in OTHER_OPENINGS and marker != self.think_start):
                    self._emit(deltas, self.pending[:cut])
                    self.state = "whole"  # the rest is parsed at the end
                    break
                self._emit(deltas, self.pending[:cut])
                self.pending = self.pending[cut + len(marker) :]
                if marker == CALL_START:  # the text around calls is kept as it is (its ends stripped)
                    self.state, self.call_raw, self.named, self.args = "call", "", False, None
                    continue
                self.state = "think" if marker == self.think_start and self.state == "text" else "text"
                self.held, self.trim = "", True
                continue
            hold = max((k for m in markers for k in range(1, len(m)) if self.pending.endswith(m[:k])), default=0)
            self._emit(deltas, self.pending[: len(self.pending) - hold])
            self.pending = self.pending[len(self.pending) - hold :]
            break
        return deltas

    def _emit(self, deltas: list[dict], text: str) -> None:
        if self.trim:
            text = text.lstrip()
            self.trim = not text
        if not text:
            return
        if self.state == "think" or self.calls or not self.seen_text:  # whitespace waits for what follows
            body = text.rstrip()
            if not body:
                self.held += text
                return
            text, self.held = self.held + body, text[len(body) :]
        else:
            text, self.held = self.held + text, ""
        self.seen_text = self.seen_text or self.state == "text"
        if self.state != "think":
            self.said += text
        deltas.append({"reasoning_content" if self.state == "think" else "content": text})

    def _call(self, deltas: list[dict]) -> bool:
        """Consume call text; False when it needs more."""
        if not self.named:
            self.call_raw += self.pending
            self.pending = ""
            m = HERMES_HEAD.match(self.call_raw)
            if m is None:
                if CALL_END in self.call_raw and self.functions is not None:
                    self.state = "whole"
                    return False
                if CALL_END in self.call_raw:  # not the form streamed here: whole, at its end
                    raw, _, rest = self.call_raw.partition(CALL_END)
                    self._whole(deltas, raw)
                    self.pending, self.state = rest, "text"
                    self.trim = not self.seen_text
                    return True
                return False
            name = json.loads(f'"{m.group(1)}"')
            if self.functions is not None and name not in self.functions:
                self.state = "whole"  # not a call of this request's: the whole parse decides
                return False
            index = self.n_calls
            self.n_calls += 1
            self.arguments.append("")
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            function = {"name": name, "arguments": ""}
            deltas.append({"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": function}]})
            self.named, self.args = True, JsonCanon()
            self.pending = self.call_raw[m.end() :]
            return True
        if not self.args.done:
            emitted, self.pending = self.args.feed(self.pending)
            if emitted:
                self.arguments[-1] += emitted
                delta = {"index": self.n_calls - 1, "function": {"arguments": emitted}}
                deltas.append({"tool_calls": [delta]})
            if not self.args.done:
                return False
        end = self.pending.find(CALL_END)
        if end < 0:
            return False
        self.pending, self.state = self.pending[end + len(CALL_END) :], "text"
        self.trim = not self.seen_text
        return True

    def _settle(self) -> list[dict]:
        """The whole reply's parse, less what the stream said already (the content emitted and the
        calls streamed are its start: they were text, and valid calls, before the form changed)."""
        _, text = split_reasoning(self.reply, *self.think)
        content, calls = parse_tool_calls(text, self.functions)
        content = content or ""
        deltas: list[dict] = []
        if content.startswith(self.said) and content != self.said:
            deltas.append({"content": content[len(self.said) :]})
        for index, call in enumerate(calls[self.n_calls :], start=self.n_calls):
            self.arguments.append(call["function"]["arguments"])
            deltas.append({"tool_calls": [{"index": index, **call}]})
        self.n_calls = max(self.n_calls, len(calls))
        return deltas

    def _whole(self, deltas: list[dict], raw: str) -> None:
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            return
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return
        index = self.n_calls
        self.n_calls += 1
        arguments = json.dumps(obj.get("arguments", {}), ensure_ascii=False)
        self.arguments.append(arguments)
        function = {"name": obj["name"], "arguments": arguments}
        deltas.append(
            {
                "tool_calls": [
                    {"index": index, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}
                ]
            }
        )

    def finish(self) -> list[dict]:
        """What is held back, at the end of the reply."""
        if self.state == "whole":
            return self._settle()
        deltas: list[dict] = []
        if self.state == "call" and self.named and not self.args.done:
            emitted, _ = self.args.feed(self.pending)  # a call cut short: its arguments completed
            emitted += self.args.closing() if self.args.started else "{}"
            if emitted:
                self.arguments[-1] += emitted
                deltas.append({"tool_calls": [{"index": self.n_calls - 1, "function": {"arguments": emitted}}]})
        if self.calls and self.functions is None and CALL_START.startswith(self.pending.strip()):
            self.pending = ""  # a forced reply cut as its next call began: nothing of it is content
        if self.state != "call":
            self._emit(deltas, self.pending)
        if self.state == "text" and self.held and not self.n_calls:
            deltas.append({"content": self.held})  # only a reply with calls or reasoning is stripped
        self.pending = self.held = ""
        return deltas
