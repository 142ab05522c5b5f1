"""The standard string formats llguidance does not know, enforced as patterns written from their
RFCs: each accepts exactly what jsonschema's format checker accepts (the checker MaskBench's
instances were labelled with), and through llguidance itself on a real vocabulary."""

from __future__ import annotations

import json
import logging
import re
import urllib.parse

import jsonschema
import llguidance
import pytest
import regex
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from rfc3986_validator import validate_rfc3986

from llama_ffi.high import Llama
from llama_ffi.high.constraints import ConstraintError, formats, json_schema_grammar
from llama_ffi.high.constraints.rewrite import noted_partly_enforced
from llama_ffi.high.constraints.tokenizer import for_vocab

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
EXACT = sorted(set(formats.PATTERNS) - set(formats.PARTIAL))

# Pieces URIs, templates and pointers are made of, and characters around them, so that drawn
# strings often come close to valid ones.
PIECES = [
    "http", "urn", "a", "Z9", "x+y-z.w", ":", "//", "/", "?", "#", "@", "[", "]", "::", "1", "255",
    "256", ".", "%", "%2F", "%zz", "v1.x", "fe80", "::1", "127.0.0.1", "{", "}", "{var}", "{+x,y:3}",
    "{?q*}", "{.a.b}", "*", "!", "$", "&", "'", "(", ")", "+", ",", ";", "=", "~", "~0", "~1", "-", "_",
    " ", "é", "\u00a0", "\ufffe", "\U0001f600", "\ue000", "\U000e1000", '"', "\\", "|", "^", "`", "<",
]  # fmt: skip
DRAWN = st.lists(st.sampled_from(PIECES), max_size=12).map("".join) | st.text(max_size=12)

# From MaskBench's instances and the RFCs' own examples.
SEEN = {
    "uri-reference": ["invalid uri", "://", "./local-plugin", "https://example.com/a?b#c", "//h:80/p", "a:b", "?q"],
    "iri": ["not-an-iri", "http://ü.example/ȧ?q=é#f", "urn:isbn:0451450523", "mailto:a@b"],
    "iri-reference": ["résumé.html", "#frag", "http://[::1]/", "http://[v7.x]/", "a b"],
    "uri-template": ["http://example.com/resource/{", "http://example.com/{id}", "{+path}/here", "{x,y:3}"],
    "json-pointer": ["/a/b~1c", "", "a/b", "/~2"],
    "relative-json-pointer": ["0", "1/a", "2#", "01", "-1"],
}


# ASCII characters RFC 6570 keeps out of a template's literals, which the uri-template package
# (jsonschema's check) lets through, as it does any non-ASCII character.
NOT_LITERALS = frozenset(" \"'%<>\\^`|")

# RFC 3987, section 2.2.
UCSCHAR = [(0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF), *((p << 16, (p << 16) + 0xFFFD) for p in range(1, 14))]
UCSCHAR.append((0xE1000, 0xEFFFD))
IPRIVATE = [(0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)]


def within(ranges, char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in ranges)


def conforms(name: str, text: str) -> bool:
    """The format checker's verdict; for IRIs, RFC 3987's own definition instead (jsonschema's
    rfc3987-syntax knows no ``ucschar`` beyond the BMP and no IPv6 literal with ``::``): every
    character beyond ASCII is a ``ucschar`` (or in the query, ``iprivate``), and the URI they map to
    (section 3.1: percent-encoded) is one (rfc3986-validator)."""
    if text.endswith("\n") and name in ("uri-reference", "iri", "iri-reference"):
        return False  # rfc3986-validator matches with "$", which lets a final newline through
    if not name.startswith("iri"):
        return CHECKER.conforms(text, name)
    fragment = text.find("#") % (len(text) + 1)
    query = text.find("?", 0, fragment) % (len(text) + 1)
    for at, char in enumerate(text):
        if not char.isascii() and not (within(UCSCHAR, char) or (query < at < fragment and within(IPRIVATE, char))):
            return False
    mapped = "".join(c if c.isascii() else urllib.parse.quote(c) for c in text)
    return validate_rfc3986(mapped, rule="URI" if name == "iri" else "URI_reference") is not None


def beyond_the_checker(name: str, text: str) -> bool:
    """Whether the checker is known to misjudge ``text``: the uri-template package checks
    expressions, not literals."""
    return name == "uri-template" and (
        not NOT_LITERALS.isdisjoint(text) or not text.isascii() or not text.isprintable()
    )


@pytest.mark.parametrize("name", EXACT)
@settings(max_examples=300, deadline=None)
@given(text=DRAWN)
def test_a_format_pattern_accepts_exactly_what_the_format_checker_accepts(name, text):
    if not beyond_the_checker(name, text):
        assert bool(re.fullmatch(formats.PATTERNS[name], text)) == conforms(name, text), text


def test_an_iri_takes_the_characters_rfc_3987_adds_beyond_the_bmp():
    assert re.fullmatch(formats.PATTERNS["iri"], "http://example.com/\U0001f600?\U000f0000#\U000e1000")
    assert not re.fullmatch(formats.PATTERNS["iri"], "http://example.com/#\U000f0000")  # private use: query only
    assert not re.fullmatch(formats.PATTERNS["uri-reference"], "/\U0001f600")


@pytest.mark.parametrize("name", EXACT)
def test_the_examples_seen_in_maskbench_are_judged_as_the_checker_judges(name):
    for text in SEEN.get(name, []) + [t for n, texts in SEEN.items() if n != name for t in texts]:
        if not beyond_the_checker(name, text):
            assert bool(re.fullmatch(formats.PATTERNS[name], text)) == conforms(name, text), text


@settings(max_examples=300, deadline=None)
@given(text=DRAWN | st.lists(st.sampled_from(["(", ")", "[", "]", "a", "\\", "*", "{2}", "?", "|", "^"])).map("".join))
@example(text="*")
@example(text="\\")
@example(text="[")
@example(text="(?#c)a{,3}?(?P<n>x)(?P=n)")
def test_the_regex_pattern_accepts_every_regex_python_compiles(text):
    if CHECKER.conforms(text, "regex") and all(c >= " " for c in text):  # a control character is written escaped
        assert re.fullmatch(formats.PATTERNS["regex"], text), text


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(["a", "z", "0", "-", ".", "ü", "ß", "A", "日本", "\u0301", "_", " "])).map("".join)
)
@example(text="ü.de")
@example(text="Example.com")
def test_the_idn_hostname_pattern_accepts_every_name_idna_accepts(text):
    if CHECKER.conforms(text, "idn-hostname"):
        assert regex.fullmatch(formats.PATTERNS["idn-hostname"], text), text


@pytest.fixture(scope="module")
def tokenizer(smollm2_path):
    with Llama(smollm2_path, vocab_only=True, progress=False) as llm:
        yield for_vocab(llm.loaded_model.vocab_ptr)


def accepts(tokenizer, matcher: llguidance.LLMatcher, text: str) -> bool:
    matcher.reset()
    return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()


@pytest.mark.parametrize("name", sorted(formats.PATTERNS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=DRAWN)
@example(text="\\")  # MaskBench's invalid regex; llguidance let it through a class with control characters
@example(text='"')
def test_llguidance_enforces_a_format_as_python_reads_its_pattern(tokenizer, name, text):
    # Past plane 3 (unassigned planes, tags, private use) llguidance takes no character, not even for ".".
    assume(all(ord(c) < 0x40000 for c in text))
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": name}}, "required": ["v"]}
    matcher = llguidance.LLMatcher(tokenizer, json_schema_grammar(schema), log_level=0)
    expected = bool(regex.fullmatch(formats.PATTERNS[name], text))
    assert accepts(tokenizer, matcher, json.dumps({"v": text}, ensure_ascii=False)) == expected, text


def test_a_format_enforced_only_in_part_says_so_once_in_the_log(caplog):
    noted_partly_enforced.cache_clear()
    with caplog.at_level(logging.WARNING, logger="llama_ffi"):
        json_schema_grammar({"type": "string", "format": "regex"})
        json_schema_grammar({"type": "string", "format": "regex"})
        json_schema_grammar({"type": "string", "format": "iri"})
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "'regex'" in notes[0] and "balance" in notes[0]


def test_a_format_next_to_a_pattern_enforces_both():
    grammar = json_schema_grammar({"type": "string", "format": "uri-reference", "pattern": "^[a-z:/.]*$"})
    assert grammar
    with pytest.raises(ConstraintError, match="Unsatisfiable"):  # no string is both
        json_schema_grammar({"type": "string", "format": "uri-template", "pattern": "^ $"})
