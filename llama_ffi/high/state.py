"""The saved state of a ``Llama``'s sequence: what its KV cache holds, the media among it, the
adapters it was computed under and what computed it, then llama.cpp's sequence state.

Layout (little-endian), version 3: magic ``LFFISTA3``; a JSON header (u32 length, u32 CRC-32 of the
header, then UTF-8) with
the tokens, the media spans, the adapter selection (LoRA names and scales, the control vector's
rows), the producer (``producer_of``: the model file, its trained context and layer count, the KV
cache's types, the llama.cpp build) and the payload's length; the payload (the bytes of
``llama_state_seq_get_data``); then a CRC-32 of everything after the magic. The header's own
checksum lets a cache index files reading their headers only. A file that is cut
short, has bytes appended or flipped, or was made by another model or build fails ``decode`` with a
ValueError before anything reaches llama.cpp. CRC-32 costs about 0.4 ms per MB here: a damaged file
is not an attack to resist, and a cryptographic hash would cost 1.5 times as much.
``LFFISTA2`` (the same without producer and checksum) and ``LFFISTA1`` (the whole context's state)
files still load; prompt caches drop them, having no way to check them.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zlib

import numpy as np

from llama_ffi import lib
from llama_ffi._guard import expected_commit
from llama_ffi.high import compat
from llama_ffi.high.adapters import ControlVector, Selection
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.multimodal.prompt import MEDIA_POSITION

MAGIC = b"LFFISTA3"
MAGIC_V2 = b"LFFISTA2"  # no producer, no checksum
MAGIC_V1 = b"LFFISTA1"  # tokens, then llama_state_get_data (the whole context)
_COUNT = struct.Struct("<I")
_HEADER_SIZE_AND_CRC = struct.Struct("<II")
_PREFIX = len(MAGIC) + _HEADER_SIZE_AND_CRC.size  # magic, header length, header CRC
_PREFIX_V2 = len(MAGIC) + _COUNT.size  # magic, header length
_TRAILER = _COUNT.size  # CRC-32


def producer_of(context) -> dict:
    """What a state's cells depend on besides its tokens: restoring them anywhere else would give
    garbage that llama.cpp does not notice when the shapes happen to agree."""
    model = context.model
    return {
        "model": model.fingerprint,
        "n_ctx_train": model.n_ctx_train,
        "n_layer": model.n_layer,
        "type_k": int(context.type_k),
        "type_v": int(context.type_v),
        "llama_cpp": f"{lib.LLAMA_FFI_BUILD_NUMBER}:{expected_commit()}",
    }


_PRODUCER_NAMES = {
    "model": "another model file",
    "n_ctx_train": "a model with another trained context",
    "n_layer": "a model with another layer count",
    "type_k": "a KV cache of another K type",
    "type_v": "a KV cache of another V type",
    "llama_cpp": "another llama.cpp build",
}


def check_producer(header: dict, producer: dict) -> None:
    made_by = header.get("producer")
    if not isinstance(made_by, dict):
        raise RequestValueError("damaged llama_ffi state: it does not say what made it")
    for field, what in _PRODUCER_NAMES.items():
        if made_by.get(field) != producer[field]:
            raise RequestValueError(
                f"the state was made by {what} ({field} {made_by.get(field)!r}, "
                f"this one has {producer[field]!r}): it cannot be restored here"
            )


def encode(tokens: list[int], spans, selection: Selection | None, seq_state: bytes, producer: dict) -> bytes:
    header = {
        "tokens": list(tokens),
        "media_spans": [list(s) for s in spans],
        "loras": [[a.name, s] for a, s in selection.loras] if selection else [],
        "cvec": None,
        "selection_key": selection.stable_key if selection else None,
        "producer": producer,
        "payload_bytes": len(seq_state),
    }
    if selection is not None and selection.cvec is not None:
        cv = selection.cvec
        header["cvec"] = {
            "n_embd": cv.n_embd,
            "layer_start": cv.layer_start,
            "layer_end": cv.layer_end,
            "rows": cv.data.astype("<f4").tobytes().hex(),
        }
    raw = json.dumps(header).encode()
    body = _HEADER_SIZE_AND_CRC.pack(len(raw), zlib.crc32(raw)) + raw + seq_state
    return MAGIC + body + _COUNT.pack(zlib.crc32(body))


def _parse_header(raw: bytes, crc: int | None = None) -> dict:
    if crc is not None and zlib.crc32(raw) != crc:
        raise RequestValueError("damaged llama_ffi state: its header's checksum does not match")
    try:
        header = json.loads(raw)
    except ValueError:
        header = None
    if not isinstance(header, dict) or not isinstance(header.get("tokens"), list):
        raise RequestValueError("truncated or damaged llama_ffi state (its header does not parse)")
    return header


def decode(data: bytes, producer: dict | None = None) -> tuple[dict, bytes, bool]:
    """(header, llama.cpp's state, whether it is the whole context's); ValueError when it is not
    one, is damaged, or (given ``producer``) was made by something else."""
    if data.startswith(MAGIC_V1) and len(data) >= _PREFIX_V2:
        (n,) = _COUNT.unpack_from(data, len(MAGIC_V1))
        start = _PREFIX_V2
        if len(data) < start + 4 * n:
            raise RequestValueError("truncated llama_ffi state")
        tokens = np.frombuffer(data, dtype="<i4", count=n, offset=start).tolist()
        return {"tokens": tokens, "media_spans": [], "loras": [], "cvec": None}, bytes(data[start + 4 * n :]), True
    if data.startswith(MAGIC_V2) and len(data) >= _PREFIX_V2:
        (n,) = _COUNT.unpack_from(data, len(MAGIC_V2))
        return _parse_header(bytes(data[_PREFIX_V2 : _PREFIX_V2 + n])), bytes(data[_PREFIX_V2 + n :]), False
    if not data.startswith(MAGIC):
        raise RequestValueError("not a llama_ffi state (bad magic)")
    if len(data) < _PREFIX + _TRAILER:
        raise RequestValueError("truncated llama_ffi state")
    body = memoryview(data)[len(MAGIC) : len(data) - _TRAILER]
    (crc,) = _COUNT.unpack_from(data, len(data) - _TRAILER)
    if zlib.crc32(body) != crc:
        raise RequestValueError(
            "damaged llama_ffi state: its checksum does not match (cut short, appended to, or changed)"
        )
    n, header_crc = _HEADER_SIZE_AND_CRC.unpack_from(data, len(MAGIC))
    header = _parse_header(bytes(data[_PREFIX : _PREFIX + n]), header_crc)
    payload = bytes(data[_PREFIX + n : len(data) - _TRAILER])
    if header.get("payload_bytes") != len(payload):
        raise RequestValueError("damaged llama_ffi state: its payload is not the length its header says")
    if producer is not None:
        check_producer(header, producer)
    return header, payload, False


def read_header(path: str | os.PathLike) -> dict:
    """A version-3 file's header, reading only the header; ValueError when the file is not one or
    its size is not what the header says (its checksum is checked when it is read whole)."""
    with open(path, "rb") as f:
        prefix = f.read(_PREFIX)
        if len(prefix) < _PREFIX or not prefix.startswith(MAGIC):
            raise RequestValueError("not a version-3 llama_ffi state")
        n, header_crc = _HEADER_SIZE_AND_CRC.unpack_from(prefix, len(MAGIC))
        size = os.fstat(f.fileno()).st_size
        if _PREFIX + n + _TRAILER > size:
            raise RequestValueError("truncated llama_ffi state")
        header = _parse_header(f.read(n), header_crc)
    if _PREFIX + n + header.get("payload_bytes", -1) + _TRAILER != size:
        raise RequestValueError("damaged llama_ffi state: the file is not the length its header says")
    return header


def write(path: str | os.PathLike, data: bytes) -> None:
    """Write atomically under a name no other writer uses: a crash (even ``kill -9``) leaves the old
    file or the new one, never half of one, and two processes storing the same entry do not mix
    their bytes. No fsync: a file torn by a power loss fails its checksum and is a miss."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read(state: bytes | bytearray | str | os.PathLike) -> bytes:
    if isinstance(state, (bytes, bytearray)):
        return bytes(state)
    path = os.fspath(state)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"state file not found: {path}")
    with open(path, "rb") as f:
        return f.read()


def encode_slot(llm, slot) -> tuple[list[int], bytes]:
    """What ``slot`` holds (between the engine's steps): its tokens, and them with its cells encoded."""
    tokens = list(slot.tokens)
    selection = slot.selection if tokens else None
    cells = llm.context.seq_state_bytes(slot.seq)
    return tokens, encode(tokens, slot.media_spans, selection, cells, producer_of(llm.context))


def save(llm, path: str | os.PathLike | None = None) -> compat.LlamaState | None:
    """The main sequence's state (KV cache) with the tokens it holds: returned as bytes (with
    llama-cpp-python's LlamaState attributes), or written to ``path``. ``load`` takes either."""
    tokens, data = llm.run_on_context(lambda: encode_slot(llm, llm.main_slot))
    if path is None:
        return compat.LlamaState(data, tokens, llm.seed)
    write(path, data)
    return None


def _selection(llm, header: dict) -> Selection:
    """The adapters the saved cache was computed under, as loaded on this Llama now."""
    loras = []
    for item in header.get("loras") or []:
        name, scale = item
        if name not in llm.adapters.by_name:
            raise RequestValueError(
                f"the state was computed under the LoRA adapter {name!r}, which is not loaded: load_lora it first"
            )
        loras.append((llm.adapters.by_name[name], float(scale)))
    cvec = header.get("cvec")
    if cvec is not None:
        rows = np.frombuffer(bytes.fromhex(cvec["rows"]), dtype="<f4").astype(np.float32)
        cvec = ControlVector(rows, int(cvec["n_embd"]), int(cvec["layer_start"]), int(cvec["layer_end"]))
    return Selection(tuple(loras), cvec)


def _check_cells(llm, tokens: list, spans: list) -> list[tuple[int, int, str]]:
    spans = [(int(s), int(n), str(i)) for s, n, i in spans]
    media = set()
    for start, n, _ in spans:
        if start < 0 or n <= 0 or start + n > len(tokens):
            raise RequestValueError(
                f"damaged llama_ffi state: a media span ({start}, {n}) lies outside its {len(tokens)} cells"
            )
        media.update(range(start, start + n))
    text = [t for i, t in enumerate(tokens) if i not in media]
    if any(tokens[i] != MEDIA_POSITION for i in media):
        raise RequestValueError("damaged llama_ffi state: a media span covers text tokens")
    llm.tokenizer.check_tokens(text)
    return spans


def checked_cells(llm, header: dict) -> tuple[list[int], list, Selection]:
    """A decoded header's tokens, media spans and adapter selection, checked against this Llama
    (token ids, spans, loaded adapters, a sequence's size) before llama.cpp sees the state."""
    tokens = header["tokens"]
    try:
        spans = _check_cells(llm, tokens, header.get("media_spans") or [])
        selection = _selection(llm, header)
    except (TypeError, KeyError, AttributeError) as error:
        raise RequestValueError(f"damaged llama_ffi state: its header is malformed ({error!r})") from None
    if len(tokens) > llm.context.n_ctx_seq:
        raise RequestValueError(
            f"the state holds {len(tokens)} tokens; this context's sequences hold {llm.context.n_ctx_seq}"
        )
    return list(tokens), spans, selection


def load(llm, saved: bytes | str | os.PathLike) -> None:
    header, context_state, whole_context = decode(read(saved), producer_of(llm.context))
    tokens, spans, selection = checked_cells(llm, header)

    def restore() -> None:
        main = llm.main_slot
        try:
            if whole_context:
                llm.engine.slots.forget_all()
                llm.context.set_state_bytes(context_state)
            else:
                llm.context.set_seq_state_bytes(main.seq, context_state)
        except ValueError:  # what llama.cpp took of it is not trusted: the sequence holds nothing
            if whole_context:
                llm.context.clear()
            else:
                llm.context.seq_rm(main.seq, -1, -1)
            main.tokens, main.media_spans, main.selection = [], [], None
            raise
        main.tokens, main.media_spans, main.selection = list(tokens), spans, selection if tokens else None
        llm.adapters.apply(llm.context, selection)
        # llama.cpp's state holds the KV cache but not the logits: recompute the last token's, as
        # llama.cpp's server does after restoring a slot (a last media cell is not decoded again:
        # the next prompt evaluates that media afresh anyway). A recurrent state cannot give back
        # its last position: there the next request evaluates its prompt again instead.
        if tokens and tokens[-1] != MEDIA_POSITION and not llm.memory_is_recurrent:
            last_pos = len(tokens) - 1
            llm.context.seq_rm(main.seq, last_pos, -1)
            last = main.tokens.pop()
            llm.main_sequence.decode([last], last_pos)

    llm.run_on_context(restore, idle=whole_context)
    if isinstance(saved, compat.LlamaState):  # it recorded where the seed chain stood
        llm.set_seed(saved.seed)
