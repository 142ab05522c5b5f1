"""The saved state of a ``Llama``'s main sequence: what its KV cache holds, the media among it and
the adapters it was computed under, then llama.cpp's sequence state.

Layout (little-endian): magic ``LFFISTA2``, a JSON header (u32 length, then UTF-8) with the tokens,
the media spans and the adapter selection (LoRA names and scales, the control vector's rows), then
the bytes of ``llama_state_seq_get_data`` for the main slot's sequence. Read back, everything is checked before
anything reaches llama.cpp. ``LFFISTA1`` files (the whole context's state) still load.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from llama_ffi.high import compat
from llama_ffi.high.adapters import ControlVector, Selection
from llama_ffi.high.multimodal.prompt import MEDIA_POSITION

MAGIC = b"LFFISTA2"
MAGIC_V1 = b"LFFISTA1"  # tokens, then llama_state_get_data (the whole context)
_COUNT = struct.Struct("<I")


def encode(tokens: list[int], spans, selection: Selection | None, seq_state: bytes) -> bytes:
    header = {"tokens": list(tokens), "media_spans": [list(s) for s in spans],
              "loras": [[a.name, s] for a, s in selection.loras] if selection else [],
              "cvec": None, "selection_key": selection.stable_key if selection else None}
    if selection is not None and selection.cvec is not None:
        cv = selection.cvec
        header["cvec"] = {"n_embd": cv.n_embd, "layer_start": cv.layer_start, "layer_end": cv.layer_end,
                          "rows": cv.data.astype("<f4").tobytes().hex()}
    raw = json.dumps(header).encode()
    return MAGIC + _COUNT.pack(len(raw)) + raw + seq_state


def decode(data: bytes) -> tuple[dict, bytes, bool]:
    """(header, llama.cpp's state, whether it is the whole context's); ValueError when it is not one."""
    if data.startswith(MAGIC_V1) and len(data) >= len(MAGIC_V1) + _COUNT.size:
        (n,) = _COUNT.unpack_from(data, len(MAGIC_V1))
        start = len(MAGIC_V1) + _COUNT.size
        if len(data) < start + 4 * n:
            raise ValueError("truncated llama_ffi state")
        tokens = np.frombuffer(data, dtype="<i4", count=n, offset=start).tolist()
        return {"tokens": tokens, "media_spans": [], "loras": [], "cvec": None}, bytes(data[start + 4 * n:]), True
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _COUNT.size:
        raise ValueError("not a llama_ffi state (bad magic)")
    (n,) = _COUNT.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _COUNT.size
    try:
        header = json.loads(bytes(data[start:start + n]))
        if not isinstance(header, dict) or not isinstance(header.get("tokens"), list):
            raise ValueError
    except ValueError:
        raise ValueError("truncated or damaged llama_ffi state (its header does not parse)") from None
    return header, bytes(data[start + n:]), False


def write(path: str | os.PathLike, data: bytes) -> None:
    """Write atomically: a crash leaves the old file or the new one, never half of one."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read(state: bytes | bytearray | str | os.PathLike) -> bytes:
    if isinstance(state, (bytes, bytearray)):
        return bytes(state)
    path = os.fspath(state)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"state file not found: {path}")
    with open(path, "rb") as f:
        return f.read()


def save(llm, path: str | os.PathLike | None = None) -> compat.LlamaState | None:
    """The main sequence's state (KV cache) with the tokens it holds: returned as bytes (with
    llama-cpp-python's LlamaState attributes), or written to ``path``. ``load`` takes either."""
    with llm.single():
        main = llm._main
        tokens = list(main.tokens)
        selection = (main.selection if llm.engine is not None else llm.adapters.applied) if tokens else None
        data = encode(tokens, main.media_spans, selection, llm.context.seq_state_bytes(main.seq))
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
            raise ValueError(f"the state was computed under the LoRA adapter {name!r}, which is not loaded: "
                             "load_lora it first")
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
            raise ValueError(f"damaged llama_ffi state: a media span ({start}, {n}) lies outside its {len(tokens)} cells")
        media.update(range(start, start + n))
    text = [t for i, t in enumerate(tokens) if i not in media]
    if any(tokens[i] != MEDIA_POSITION for i in media):
        raise ValueError("damaged llama_ffi state: a media span covers text tokens")
    llm.tokenizer.check_tokens(text)
    return spans


def load(llm, saved: bytes | str | os.PathLike) -> None:
    header, context_state, whole_context = decode(read(saved))
    tokens = header["tokens"]
    spans = _check_cells(llm, tokens, header.get("media_spans") or [])
    selection = _selection(llm, header)
    with llm.single(idle=whole_context):
        if whole_context:
            if llm.engine is not None:
                llm.engine.slots.forget_all()
            llm.context.set_state_bytes(context_state)
        else:
            llm.context.set_seq_state_bytes(llm._main.seq, context_state)
        main = llm._main
        main.tokens, main.media_spans, main.selection = list(tokens), spans, selection if tokens else None
        llm.adapters.apply(llm.context, selection)
        # llama.cpp's state holds the KV cache but not the logits: recompute the last token's, as
        # llama.cpp's server does after restoring a slot (a last media cell is not decoded again:
        # the next prompt evaluates that media afresh anyway).
        if tokens and tokens[-1] != MEDIA_POSITION:
            last_pos = len(tokens) - 1
            llm.context.seq_rm(main.seq, last_pos, -1)
            last = main.tokens.pop()
            llm._resync_drafter(main.tokens)
            llm._decode([last], last_pos)
        else:
            llm._resync_drafter(list(main.tokens))
