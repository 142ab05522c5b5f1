"""String formats as regular expressions, for the formats JSON Schema defines that llguidance does
not enforce itself. Each is written from its RFC's grammar (ABNF), which for these is a regular
language, so the pattern accepts exactly the strings the RFC does; ``regex`` and ``idn-hostname``
are not regular (balanced groups; IDNA's contextual rules), and for them the pattern is the
regular part, which ``PARTIAL`` names so a schema using them says so in the log.

The patterns are for llguidance's regex dialect (Rust's ``regex`` crate) and Python's ``re`` alike:
non-ASCII ranges are written as the characters themselves."""

from __future__ import annotations

# Formats llguidance enforces itself. With ``PATTERNS`` below, every format JSON Schema defines
# (draft 2020-12); other names are annotations, valid for any string.
ENFORCED = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"})
# Draft 3's names for formats later drafts renamed (None: dropped from JSON Schema, an annotation).
DRAFT3_NAMES = {"host-name": "hostname", "ip-address": "ipv4", "utc-millisec": None}


def _any(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


# RFC 3986 (URI), appendix A.
_HEX = "[0-9A-Fa-f]"
_PCT = f"%{_HEX}{_HEX}"
_UNRESERVED = r"A-Za-z0-9._~\-"
_SUB_DELIMS = "!$&'()*+,;="
_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = f"{_HEX}{{1,4}}"
_LS32 = _any(f"{_H16}:{_H16}", _IPV4)
_IPV6 = _any(
    f"(?:{_H16}:){{6}}{_LS32}",
    f"::(?:{_H16}:){{5}}{_LS32}",
    f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
)
_IPVFUTURE = rf"[vV]{_HEX}+\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
_IP_LITERAL = rf"\[{_any(_IPV6, _IPVFUTURE)}\]"
_SCHEME = "[A-Za-z][A-Za-z0-9+.-]*"

# RFC 3987 (IRI), section 2.2: a URI's unreserved characters plus these.
_UCSCHAR = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    + "".join(f"{chr(plane << 16)}-{chr((plane << 16) + 0xFFFD)}" for plane in range(1, 14))
    + "\U000e1000-\U000efffd"
)
_IPRIVATE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"


def _references(unreserved: str, query_extra: str) -> tuple[str, str]:
    """(absolute, relative) reference patterns of RFC 3986's grammar, over ``unreserved``
    (RFC 3987 widens it, and the query, for IRIs)."""
    plain = f"[{unreserved}{_SUB_DELIMS}]|{_PCT}"
    pchar = f"(?:{plain}|[:@])"
    segment, segment_nz = f"{pchar}*", f"{pchar}+"
    segment_nz_nc = f"(?:{plain}|@)+"
    authority = f"(?:(?:{plain}|:)*@)?{_any(_IP_LITERAL, _IPV4, f'(?:{plain})*')}(?::[0-9]*)?"
    path_abempty = f"(?:/{segment})*"
    path_absolute = f"/(?:{segment_nz}(?:/{segment})*)?"
    tail = rf"(?:\?(?:{pchar}|[/?{query_extra}])*)?(?:#(?:{pchar}|[/?])*)?"
    absolute = f"{_SCHEME}:" + _any(f"//{authority}{path_abempty}", path_absolute, f"{segment_nz}(?:/{segment})*", "")
    relative = _any(f"//{authority}{path_abempty}", path_absolute, f"{segment_nz_nc}(?:/{segment})*", "")
    return absolute + tail, relative + tail


_URI, _RELATIVE_REF = _references(_UNRESERVED, "")
_IRI, _IRELATIVE_REF = _references(_UNRESERVED + _UCSCHAR, _IPRIVATE)

# RFC 6570 (URI Template), section 2.
_LITERAL = f"(?:[!#$&(-;=?-\\[\\]_a-z~{_UCSCHAR}{_IPRIVATE}]|{_PCT})"
_VARCHAR = f"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE = rf"(?:{_LITERAL}|\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}})*"

# An internationalised host name: dot-separated labels of letters, marks, digits and hyphens (a
# hyphen neither first nor last). IDNA 2008's contextual and bidirectional rules are not regular.
_IDN_CHAR = r"[\p{L}\p{Mn}\p{Mc}\p{Nd}]"
_IDN_LABEL = rf"{_IDN_CHAR}(?:(?:{_IDN_CHAR}|-)*{_IDN_CHAR})?"
_IDN_HOSTNAME = rf"{_IDN_LABEL}(?:\.{_IDN_LABEL})*\.?"

# A regular expression (ECMA-262 as JSON Schema says; Python's ``re`` as validators check it):
# escapes complete, character classes closed, a quantifier only after something it can repeat.
# Whether groups balance is not regular: that part is left to the model. Its classes hold printable
# characters only: llguidance (1.9.1) lets the escapes \\ and \" through a class that also holds
# control characters, though it excludes the backslash or quote themselves.
_TOP = "\U0010ffff"  # the last code point
_QUANTIFIER = r"(?:[*+?]|\{[0-9]*(?:,[0-9]*)?\})[?+]?"
_CLASS = rf"\[\^?\]?(?:[ -\[\^-{_TOP}]|\\[ -{_TOP}])*\]"
_ATOM = _any(rf"\\[ -{_TOP}]", _CLASS, r"\)", rf"[ -',->@-Z\]-{{}}-{_TOP}]")
_GROUP_KIND = _any(
    rf"#[ -(*-{_TOP}]*\)",  # a comment, closed at once
    r"\([A-Za-z0-9_]+\)",  # a condition on a group
    "[:=!>]|<[=!]",
    "P?<[A-Za-z_][A-Za-z0-9_]*>",
    r"P=[A-Za-z_][A-Za-z0-9_]*\)",
    "[aiLmsux]*(?:-[imsx]+)?:?",  # flags
)
_OPENING = rf"\((?:\?{_GROUP_KIND})?"
_REGEX = f"(?:{_OPENING}|\\||{_ATOM}(?:{_QUANTIFIER})?)*"

PATTERNS = {
    "uri-reference": _any(_URI, _RELATIVE_REF),
    "iri": _IRI,
    "iri-reference": _any(_IRI, _IRELATIVE_REF),
    "uri-template": _URI_TEMPLATE,
    "idn-email": r"[^\s@]+@[^\s@]+",
    "idn-hostname": _IDN_HOSTNAME,
    "json-pointer": "(?:/(?:[^~/]|~[01])*)*",
    "relative-json-pointer": "(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)",
    "regex": _REGEX,
}
# Formats whose pattern is the regular part of a language that is not regular.
PARTIAL = {
    "regex": "whether its groups balance",
    "idn-hostname": "IDNA 2008's contextual and bidirectional rules",
    "idn-email": "the address's syntax beyond one @ between non-empty parts",
}


def pattern(name: str) -> str:
    """The anchored pattern of format ``name`` (a key of ``PATTERNS``)."""
    return f"^{PATTERNS[name]}$"
