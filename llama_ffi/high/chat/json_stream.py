"""One JSON value read as it is generated: ``JsonCanon`` re-writes it a token at a time as
``json.dumps`` would (the default separators; strings in pieces as their characters arrive), and
``closing()`` is what completes a value the generation cut short (open strings and brackets closed,
a key left without a value given ``null``; a key is written only once it is whole, so a cut one is
dropped), so that a tool call cut by ``max_tokens`` still has arguments that parse (llama-server
heals them the same way)."""

from __future__ import annotations

import json

_OPENERS = {"{": "}", "[": "]"}
_LITERALS = ("true", "false", "null")


class JsonCanon:
    def __init__(self) -> None:
        # per open bracket: [its closer, what comes next: "key" / "colon" / "value" / "comma"]
        self.stack: list[list[str]] = []
        self.started = self.done = False
        self.in_string = False
        self.string_is_key = False
        self.escape = ""  # an escape sequence being read ("\\", "\\u12"...)
        self.high = ""  # a high surrogate waiting for its pair
        self.scalar = ""  # a number or literal being read
        self.comma = False  # a "," read and held: it is written with what follows it, or dropped at a cut
        self.key: list[str] | None = None  # an object key being read: written whole once it ends

    def feed(self, text: str) -> tuple[str, str]:
        """(canonical text to emit, raw text left after the value ended)."""
        out = []
        for i, ch in enumerate(text):
            if self.done:
                return "".join(out), text[i:]
            if self.in_string:
                piece = self._string_char(ch)
                if self.key is None:
                    out.append(piece)
                elif not self.in_string:  # the key ended: it goes out with the "," before it
                    out += [self._held_comma(), *self.key, piece]
                    self.key = None
                else:
                    self.key.append(piece)
                continue
            if self.scalar and not (ch.isalnum() or ch in "+-."):
                out.append(self._end_scalar())
                if self.done:
                    return "".join(out), text[i:]
            if ch.isspace():
                continue  # between tokens: json.dumps writes none
            if ch == ",":
                self.comma = True
                if self.stack:
                    self.stack[-1][1] = "key" if self.stack[-1][0] == "}" else "value"
                continue
            self.started = True
            if ch == '"':
                self.in_string = True
                self.string_is_key = bool(self.stack) and self.stack[-1][1] == "key"
                if self.string_is_key:  # a key cut short is dropped whole, so it is held until it ends
                    self.key = ['"']
                    continue
                out += [self._held_comma(), '"']
                continue
            out.append(self._held_comma())
            if ch in _OPENERS:
                if self.stack:  # the enclosing value is this one: what it waits for next is a ","
                    self.stack[-1][1] = "comma"
                self.stack.append([_OPENERS[ch], "key" if ch == "{" else "value"])
                out.append(ch)
            elif ch in "}]":
                if self.stack:
                    self.stack.pop()
                out.append(ch)
                self._value_ended()
            elif ch == ":":
                if self.stack:
                    self.stack[-1][1] = "value"
                out.append(": ")
            else:
                self.scalar += ch
        return "".join(out), ""

    def closing(self) -> str:
        """The text that completes the value as read so far (empty once it is complete)."""
        if self.done or not self.started:
            return ""
        out = []
        if self.in_string and self.key is None:  # a cut escape or surrogate is dropped
            out.append('"')
            if self.stack:
                self.stack[-1][1] = "comma"
        elif self.scalar:
            out.append(_completed(self.scalar))
            if self.stack:
                self.stack[-1][1] = "comma"
        for closer, next_up in reversed(self.stack):
            if closer == "}" and next_up == "colon":
                out.append(": null")
            elif closer == "}" and next_up == "value":
                out.append("null")
            out.append(closer)
        return "".join(out)

    def _held_comma(self) -> str:
        if not self.comma:
            return ""
        self.comma = False
        return ", "

    def _value_ended(self) -> None:
        if not self.stack:
            self.done = True
        else:
            self.stack[-1][1] = "comma"

    def _end_scalar(self) -> str:
        token, self.scalar = self.scalar, ""
        try:
            text = json.dumps(json.loads(token))
        except ValueError:
            text = token
        self._value_ended()
        return text

    def _string_char(self, ch: str) -> str:
        if self.escape:
            self.escape += ch
            if self.escape.startswith("\\u") and len(self.escape) < 6:
                return ""
            decoded = (
                json.loads(f'"{self.escape}"') if not self.escape.startswith("\\u") else chr(int(self.escape[2:], 16))
            )
            self.escape = ""
            return self._decoded(decoded)
        if ch == "\\":
            self.escape = "\\"
            return ""
        if ch == '"':
            self.in_string = False
            if self.string_is_key:
                self.stack[-1][1] = "colon"
            else:
                self._value_ended()
            return '"'
        return self._decoded(ch)

    def _decoded(self, ch: str) -> str:
        if "\ud800" <= ch <= "\udbff":
            self.high = ch
            return ""
        if self.high and "\udc00" <= ch <= "\udfff":
            ch = (self.high + ch).encode("utf-16", "surrogatepass").decode("utf-16")
        self.high = ""
        return json.dumps(ch, ensure_ascii=False)[1:-1]


def _completed(scalar: str) -> str:
    """A number or literal cut short, as the value it was becoming (``tr`` -> true, ``1.`` -> 1)."""
    literal = next((w for w in _LITERALS if w.startswith(scalar)), None)
    if literal is not None:
        return literal
    digits = scalar.rstrip("+-.eE")
    try:
        return json.dumps(json.loads(digits)) if digits else "null"
    except ValueError:
        return "null"


def healed(text: str) -> str | None:
    """The JSON value ``text`` starts with (what follows it is ignored), completed if it was cut
    short, written as ``json.dumps`` would; None when ``text`` does not start a JSON value."""
    canon = JsonCanon()
    written, _ = canon.feed(text)
    whole = written + canon.closing()
    try:
        json.loads(whole)
    except ValueError:
        return None
    return whole
