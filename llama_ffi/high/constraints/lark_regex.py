"""A regular Lark grammar as one regular expression. A value that must follow a grammar but sits
inside JSON (a custom tool's input, given as a JSON string argument) can only be checked through a
JSON Schema ``pattern``, which llguidance enforces on the string's decoded characters, escapes
included; a Lark grammar has no such form. Where the grammar is regular (no rule reaches itself;
OpenAI's and Codex's freeform tools are), its rules inline into one pattern. A recursive grammar,
or a Lark feature with no regular meaning here (``%declare``, templates, llguidance's ``%json`` and
special tokens), is a ``ConstraintError`` naming it, never a constraint silently loosened."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from llama_ffi.high.constraints.grammars import ConstraintError

# Lark's ``common`` terminals a grammar may import (the ones with a regular meaning).
COMMON = {
    "LF": r"\n",
    "CR": r"\r",
    "NEWLINE": r"(?:\r?\n)+",
    "WS": r"[ \t\f\r\n]+",
    "WS_INLINE": r"[ \t]+",
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "SIGNED_INT": r"[+-]?[0-9]+",
    "DECIMAL": r"(?:[0-9]+\.[0-9]*|\.[0-9]+)",
    "NUMBER": r"(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)",
    "SIGNED_NUMBER": r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)",
    "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]",
    "LETTER": r"[A-Za-z]",
    "WORD": r"[A-Za-z]+",
    "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
    "ESCAPED_STRING": r'"(?:[^"\\]|\\.)*"',
}

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t]+|\\\n)
  | (?P<comment>//[^\n]*)
  | (?P<newline>\n)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regex>/(?:[^/\\\n]|\\.)+/[imsxu]*)
  | (?P<directive>%[a-z]+)
  | (?P<name>[?!]?[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)
  | (?P<range>\.\.)
  | (?P<number>-?[0-9]+)
  | (?P<op>->|[:|()\[\]?*+~,.{}<>])
    """,
    re.VERBOSE,
)


@dataclass
class _Rule:
    alternatives: list  # token lists, one per alternative
    terminal: bool  # a terminal's definition (an uppercase name): no %ignore gaps inside it


@dataclass
class _Grammar:
    rules: dict[str, _Rule] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def lark_to_regex(grammar: str, what: str = "the grammar") -> str:
    """``grammar`` (Lark, starting at ``start``) as one regular expression matching the same strings."""
    parsed = _parse(grammar, what)
    if "start" not in parsed.rules:
        raise ConstraintError(f"{what} has no start rule")
    ignore = "|".join(_Inliner(parsed, what).rule(name) for name in parsed.ignored)
    inliner = _Inliner(parsed, what, f"(?:{ignore})*" if ignore else "")
    return inliner.rule("start") + inliner.gap


def _tokens(text: str, what: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise ConstraintError(f"{what}: cannot read the Lark grammar at {text[at : at + 20]!r}")
        kind = match.lastgroup
        if kind not in ("space", "comment"):
            out.append((kind, match.group()))
        at = match.end()
    return out + [("newline", "\n")]


def _statements(tokens: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Lines joined where a definition goes on (a line opening with ``|``, or inside brackets)."""
    out: list[list[tuple[str, str]]] = [[]]
    depth = 0
    for i, (kind, text) in enumerate(tokens):
        if kind == "newline":
            following = next((t for t in tokens[i + 1 :] if t[0] != "newline"), None)
            if depth == 0 and not (following and following[1] == "|"):
                out.append([])
            continue
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(text, 0) if kind == "op" else 0
        out[-1].append((kind, text))
    return [s for s in out if s]


def _parse(grammar: str, what: str) -> _Grammar:
    parsed = _Grammar()
    for statement in _statements(_tokens(grammar, what)):
        kind, text = statement[0]
        if kind == "directive":
            _directive(parsed, text, statement[1:], what)
            continue
        if kind != "name":
            raise ConstraintError(f"{what}: a definition must start with its name, not {text!r}")
        name = text.lstrip("?!")
        body = statement[1:]
        if body and body[0] == ("op", "."):  # a terminal's priority: no meaning for one pattern
            body = body[2:]
        if body and body[0] == ("op", "{"):
            raise ConstraintError(f"{what}: rule templates ({name}{{...}}) are not supported")
        if not body or body[0] != ("op", ":"):
            raise ConstraintError(f"{what}: expected ':' after {name!r}")
        alternatives = _alternatives(body[1:])
        parsed.rules[name] = _Rule(alternatives, name.lstrip("_")[:1].isupper())
    return parsed


def _alternatives(tokens: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """``tokens`` split at the ``|`` outside brackets."""
    parts: list[list[tuple[str, str]]] = [[]]
    depth = 0
    for token in tokens:
        if token[0] == "op" and token[1] in "([":
            depth += 1
        elif token[0] == "op" and token[1] in ")]":
            depth -= 1
        if token == ("op", "|") and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _directive(parsed: _Grammar, text: str, args: list[tuple[str, str]], what: str) -> None:
    if text == "%ignore":  # a named terminal, or one given inline (kept as a terminal of its own)
        if len(args) == 1 and args[0][0] == "name":
            parsed.ignored.append(args[0][1])
        else:
            name = f"IGNORED_{len(parsed.ignored)}"
            parsed.rules[name] = _Rule([args], True)
            parsed.ignored.append(name)
    elif text == "%import":
        _import(parsed, args, what)
    else:
        raise ConstraintError(f"{what}: {text} has no regular meaning here")


def _import(parsed: _Grammar, args: list[tuple[str, str]], what: str) -> None:
    """``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)``."""
    texts = [t for _, t in args]
    if len(texts) >= 1 and texts[0].startswith("common.") and len(texts) in (1, 3):
        names = [(texts[0].split(".", 1)[1], texts[2] if len(texts) == 3 else None)]
    elif texts[:2] == ["common", "("] and texts[-1] == ")":
        names = [(t, None) for t in texts[2:-1] if t != ","]
    else:
        raise ConstraintError(f"{what}: only Lark's common terminals can be imported, not {' '.join(texts)!r}")
    for name, alias in names:
        if name not in COMMON:
            raise ConstraintError(f"{what}: common.{name} cannot be imported here")
        parsed.rules[alias or name] = _Rule([[("regex", f"/{COMMON[name]}/")]], True)


class _Inliner:
    """Rules inlined into one pattern; ``gap``: what ``%ignore`` lets stand before each terminal
    a rule uses (none inside a terminal's own definition)."""

    def __init__(self, parsed: _Grammar, what: str, gap: str = "") -> None:
        self.parsed, self.what, self.gap = parsed, what, gap
        self.done: dict[str, str] = {}
        self.open: list[str] = []

    def rule(self, name: str) -> str:
        if name in self.done:
            return self.done[name]
        if name not in self.parsed.rules:
            raise ConstraintError(f"{self.what}: {name!r} is used but not defined")
        if name in self.open:
            path = " -> ".join([*self.open[self.open.index(name) :], name])
            raise ConstraintError(
                f"{self.what} is recursive ({path}): only a regular grammar can be enforced inside a JSON string"
            )
        self.open.append(name)
        rule = self.parsed.rules[name]
        alternatives = [self.sequence(alternative, in_terminal=rule.terminal) for alternative in rule.alternatives]
        self.open.pop()
        self.done[name] = f"(?:{'|'.join(alternatives)})"
        return self.done[name]

    def sequence(self, tokens: list[tuple[str, str]], in_terminal: bool) -> str:
        if ("op", "->") in tokens:  # an alias names the tree node: no meaning for the strings
            tokens = tokens[: tokens.index(("op", "->"))]
        out, at = [], 0
        while at < len(tokens):
            atom, at = self.atom(tokens, at, in_terminal)
            atom, at = self.repeat(atom, tokens, at)
            out.append(atom)
        return "".join(out)

    def atom(self, tokens: list[tuple[str, str]], at: int, in_terminal: bool) -> tuple[str, int]:
        kind, text = tokens[at]
        gap = "" if in_terminal else self.gap
        if kind == "op" and text in "([":
            close = ")" if text == "(" else "]"
            end = _closing(tokens, at, text, close, self.what)
            inner = self.alternatives(tokens[at + 1 : end], in_terminal)
            return f"(?:{inner})" + ("?" if text == "[" else ""), end + 1
        if kind == "string":
            if at + 2 < len(tokens) and tokens[at + 1][0] == "range":
                low, high = _string(text, self.what), _string(tokens[at + 2][1], self.what)
                if len(low) != 1 or len(high) != 1:
                    raise ConstraintError(f'{self.what}: a range takes single characters ("a".."z")')
                return f"{gap}[{re.escape(low)}-{re.escape(high)}]", at + 3
            literal = re.escape(_string(text, self.what))
            return gap + (f"(?i:{literal})" if text.endswith("i") else literal), at + 1
        if kind == "regex":
            body, flags = text[1:].rsplit("/", 1)
            body = body.replace("\\/", "/")
            flags = flags.replace("u", "")
            return gap + (f"(?{flags}:{body})" if flags else f"(?:{body})"), at + 1
        if kind == "name":
            name = text.lstrip("?!")
            referenced = self.rule(name)
            return (gap if self.parsed.rules[name].terminal and not in_terminal else "") + referenced, at + 1
        raise ConstraintError(f"{self.what}: {text!r} has no regular meaning here")

    def alternatives(self, tokens: list[tuple[str, str]], in_terminal: bool) -> str:
        return "|".join(self.sequence(part, in_terminal) for part in _alternatives(tokens))

    def repeat(self, atom: str, tokens: list[tuple[str, str]], at: int) -> tuple[str, int]:
        if at < len(tokens) and tokens[at][0] == "op" and tokens[at][1] in "?*+":
            return f"(?:{atom}){tokens[at][1]}", at + 1
        if at < len(tokens) and tokens[at] == ("op", "~"):
            low = tokens[at + 1][1] if at + 1 < len(tokens) and tokens[at + 1][0] == "number" else None
            if low is None:
                raise ConstraintError(f"{self.what}: '~' needs a count")
            if at + 3 < len(tokens) and tokens[at + 2][0] == "range" and tokens[at + 3][0] == "number":
                return f"(?:{atom}){{{low},{tokens[at + 3][1]}}}", at + 4
            return f"(?:{atom}){{{low}}}", at + 2
        return atom, at


def _closing(tokens: list[tuple[str, str]], at: int, opener: str, closer: str, what: str) -> int:
    depth = 0
    for i in range(at, len(tokens)):
        if tokens[i] == ("op", opener):
            depth += 1
        elif tokens[i] == ("op", closer):
            depth -= 1
            if depth == 0:
                return i
    raise ConstraintError(f"{what}: an unclosed {opener!r}")


def _string(text: str, what: str) -> str:
    body = text[:-1] if text.endswith("i") else text
    try:
        return ast.literal_eval(body)
    except (ValueError, SyntaxError):
        raise ConstraintError(f"{what}: cannot read the string {text}") from None
