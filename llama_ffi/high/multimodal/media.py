"""Media parts of OpenAI chat messages → bytes, each replaced in the message by Hugging Face's
part of its kind (``{"type": "image"}``, ``{"type": "audio"}``), as templates take them.

Accepted: ``{"type": "image_url", "image_url": {"url": U}}`` or ``"image_url": U`` where U is a
``data:`` URI, a ``file://`` URL, a local path or raw ``bytes``; ``{"type": "input_audio",
"input_audio": {"data": BASE64, "format": "wav" | "mp3" | "flac"}}``. The library never fetches from
the network: an http(s) URL is an error.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from llama_ffi.high.errors import RequestValueError

AUDIO_FORMATS = ("wav", "mp3", "flac")
MEDIA_TYPES = ("image_url", "input_audio")  # OpenAI's parts, carrying the data
MEDIA_PART_TYPES = ("image", "audio")  # Hugging Face's, as templates take them (and Media.kind)


@dataclasses.dataclass(frozen=True)
class Media:
    kind: str  # "image" or "audio"
    data: bytes


def _image_bytes(value, where: str) -> bytes:
    if isinstance(value, dict):
        value = value.get("url")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise RequestValueError(f"{where}: image_url must be a URL string, {{'url': ...}} or bytes")
    if value.startswith("data:"):
        header, sep, payload = value.partition(",")
        if not sep or ";base64" not in header:
            raise RequestValueError(f"{where}: a data: URI must be base64 ('data:image/png;base64,...')")
        return _b64(payload, where)
    scheme = urlparse(value).scheme.lower()
    if scheme in ("http", "https"):
        raise RequestValueError(
            f"{where}: {value[:60]!r} is a network URL; llama-ffi never fetches from the network: "
            "download it and pass its bytes, a data: URI or a local path"
        )
    path = Path(unquote(urlparse(value).path)) if scheme == "file" else Path(value)
    if not path.is_file():
        raise FileNotFoundError(f"{where}: image file not found: {path}")
    return path.read_bytes()


def _b64(payload: str, where: str) -> bytes:
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise RequestValueError(f"{where}: the base64 data is malformed") from None


def _audio_bytes(value, where: str) -> bytes:
    if not isinstance(value, dict) or not isinstance(value.get("data"), str):
        raise RequestValueError(f'{where}: input_audio must be {{"data": BASE64, "format": "wav" | "mp3" | "flac"}}')
    if value.get("format") not in AUDIO_FORMATS:
        raise RequestValueError(
            f"{where}: audio format {value.get('format')!r} is not one of {', '.join(AUDIO_FORMATS)}"
        )
    return _b64(value["data"], where)


def extract_media(messages) -> tuple[list, list[Media]]:
    """Copies of ``messages`` whose media parts became ``{"type": "image" | "audio"}``, and the
    media in order. Messages without media come back as they are."""
    out, media = [], []
    for i, m in enumerate(messages if isinstance(messages, (list, tuple)) else []):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list) or not any(
            isinstance(p, dict) and p.get("type") in (*MEDIA_TYPES, *MEDIA_PART_TYPES) for p in content
        ):
            out.append(m)
            continue
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            where = f"message {i}, content part {j}"
            if kind == "image_url":
                media.append(Media("image", _image_bytes(part.get("image_url"), where)))
            elif kind == "input_audio":
                media.append(Media("audio", _audio_bytes(part.get("input_audio"), where)))
            elif kind in MEDIA_PART_TYPES:
                raise RequestValueError(
                    f"{where}: a bare {kind!r} part carries no data; send "
                    + ("image_url" if kind == "image" else "input_audio")
                    + " parts"
                )
            else:
                parts.append(part)
                continue
            parts.append({"type": media[-1].kind})
        out.append({**m, "content": parts})
    return (out if media else messages), media
