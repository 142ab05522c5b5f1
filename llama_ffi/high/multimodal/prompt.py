"""A prompt of text and media chunks (``mtmd_tokenize``), evaluated with mtmd's helper.

To the generation loop a MediaPrompt looks like a token list: its length is the number of
positions it fills (media included, which is also what ``usage.prompt_tokens`` counts), and it
iterates over its text tokens (what penalties and DRY accept as the prompt). With M-RoPE (Qwen-VL)
an image fills fewer positions than KV cells (``mtmd_input_chunk_get_n_pos`` against
``..._n_tokens``): ``n_cells`` is what the cache must hold.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Sequence

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors, reason
from llama_ffi.high.context import ContextLengthError
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.multimodal.context import MtmdContext
from llama_ffi.high.multimodal.media import Media

MEDIA_POSITION = -1  # what the Llama's token list holds where media fill the cache


@dataclasses.dataclass(frozen=True)
class Piece:
    """One chunk of a MediaPrompt: where it starts, and its text tokens or its media's id."""

    chunk: object
    start: int
    tokens: list[int] | None
    media_id: str | None

    @property
    def end(self) -> int:
        return self.start + (
            len(self.tokens) if self.tokens is not None else lib.mtmd_input_chunk_get_n_pos(self.chunk)
        )


class MediaPrompt:
    def __init__(self, mtmd: MtmdContext, text: str, media: Sequence[Media], add_special: bool) -> None:
        self.mtmd = mtmd
        self._chunks = ffi.NULL
        n_markers = text.count(mtmd.marker)
        if n_markers != len(media):
            raise RequestValueError(
                f"the prompt has {n_markers} media markers ({mtmd.marker!r}) for {len(media)} media items"
            )
        bitmaps = [_bitmap(mtmd, item, i) for i, item in enumerate(media)]
        try:
            data = text.encode()
            buf = ffi.new("char[]", data)
            text_in = ffi.new(
                "mtmd_input_text *",
                {"text": buf, "text_len": len(data), "add_special": add_special, "parse_special": True},
            )
            chunks = lib.mtmd_input_chunks_init()
            arr = ffi.new("mtmd_bitmap *[]", bitmaps or [ffi.NULL])
            with capture_errors() as errors:
                rc = lib.mtmd_tokenize(mtmd.ptr, chunks, text_in, arr, len(bitmaps))
            if rc != 0:
                lib.mtmd_input_chunks_free(chunks)
                raise RequestValueError(
                    f"mtmd could not tokenize the prompt (code {rc}): {reason(errors, 'see the llama_ffi logger')}"
                )
            self._chunks = chunks
        finally:
            for b in bitmaps:
                lib.mtmd_bitmap_free(b)
        self.cells: list[int] = []  # per position: the text token, or MEDIA_POSITION
        self.pieces: list[Piece] = []
        self.n_cells = 0  # KV cells: text tokens, and every media chunk's tokens
        for i in range(lib.mtmd_input_chunks_size(chunks)):
            chunk = lib.mtmd_input_chunks_get(chunks, i)
            start = len(self.cells)
            if lib.mtmd_input_chunk_get_type(chunk) == lib.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ffi.new("size_t *")
                tokens = lib.mtmd_input_chunk_get_tokens_text(chunk, n)
                text_tokens = [tokens[j] for j in range(n[0])]
                self.cells += text_tokens
                self.n_cells += len(text_tokens)
                self.pieces.append(Piece(chunk, start, text_tokens, None))
            else:
                media_id = ffi.string(lib.mtmd_input_chunk_get_id(chunk)).decode()
                self.cells += [MEDIA_POSITION] * lib.mtmd_input_chunk_get_n_pos(chunk)
                self.n_cells += lib.mtmd_input_chunk_get_n_tokens(chunk)
                self.pieces.append(Piece(chunk, start, None, media_id))

    def check_cells(self, n_ctx: int) -> None:
        """ContextLengthError (a ValueError) where the prompt's KV cells exceed a sequence's
        ``n_ctx`` (positions may not)."""
        if self.n_cells > n_ctx:
            raise ContextLengthError(
                f"the prompt fills {len(self)} positions but needs {self.n_cells} KV cells (its media take more "
                f"cells than positions), and the context holds only {n_ctx} (n_ctx={n_ctx})",
                self.n_cells,
                n_ctx,
            )

    def __len__(self) -> int:
        return len(self.cells)

    def __iter__(self) -> Iterator[int]:
        return (t for t in self.cells if t != MEDIA_POSITION)

    def close(self) -> None:
        chunks, self._chunks = self._chunks, ffi.NULL
        if chunks != ffi.NULL:
            lib.mtmd_input_chunks_free(chunks)

    def __del__(self) -> None:
        if getattr(self, "_chunks", ffi.NULL) != ffi.NULL:
            self.close()


def check_kind(mtmd: MtmdContext, item: Media, index: int) -> None:
    if item.kind == "image" and not mtmd.supports_vision:
        raise RequestValueError(f"media item {index} is an image, but the projector {mtmd.path.name} takes no images")
    if item.kind == "audio" and not mtmd.supports_audio:
        raise RequestValueError(f"media item {index} is audio, but the projector {mtmd.path.name} takes no audio")


def _bitmap(mtmd: MtmdContext, item: Media, index: int):
    check_kind(mtmd, item, index)
    data = ffi.from_buffer(item.data)
    with capture_errors():
        wrapped = lib.mtmd_helper_bitmap_init_from_buf(
            mtmd.ptr, data, len(item.data), False, lib.mtmd_helper_init_opt_default()
        )
    if wrapped.bitmap == ffi.NULL:
        raise RequestValueError(
            f"media item {index} ({item.kind}, {len(item.data)} bytes) could not be decoded: "
            "corrupt, or not a format mtmd reads (images: JPEG, PNG, BMP, GIF...; audio: WAV, MP3, FLAC)"
        )
    # the content's hash names the chunk: the same image in a later turn is the same chunk
    lib.mtmd_bitmap_set_id(wrapped.bitmap, hashlib.sha256(item.data).hexdigest().encode())
    return wrapped.bitmap


def evaluate(ctx, slot, prompt: MediaPrompt, decode_text, counters) -> None:
    """Make ``slot``'s sequence hold ``prompt``, with logits for its last position. What the cache
    already holds is kept chunk by chunk: text token by token, media when the same content (its
    id) sits at the same position, so a later turn about the same image encodes nothing again.
    ``decode_text(tokens, start)`` decodes text into the slot (appending to ``slot.tokens``); the
    slot's token list then holds the prompt's cells."""
    mtmd = prompt.mtmd
    keep = ctx.cut_to(slot.tokens, cached_prefix(slot.tokens, slot.media_spans, prompt), slot.seq)
    slot.media_spans = [s for s in slot.media_spans if s[0] + s[1] <= keep]
    last = len(prompt.pieces) - 1
    for i, piece in enumerate(prompt.pieces):
        if piece.end <= keep:
            continue
        if piece.tokens is not None:
            decode_text(piece.tokens[max(keep - piece.start, 0) :], max(keep, piece.start))
            continue
        n_past = ffi.new("llama_pos *")
        with capture_errors() as errors:
            rc = lib.mtmd_helper_eval_chunk_single(
                mtmd.ptr, ctx.ptr, piece.chunk, piece.start, slot.seq, ctx.n_batch, i == last, n_past
            )
        if rc != 0:
            lib.llama_memory_seq_rm(ctx.memory, slot.seq, -1, -1)
            slot.tokens, slot.media_spans = [], []
            raise RuntimeError(
                f"mtmd could not evaluate media chunk {i} (code {rc}): {reason(errors, 'see the llama_ffi logger')}"
            )
        mtmd.media_encoded += 1
        slot.tokens += prompt.cells[piece.start : piece.end]
        counters.evaluated += piece.end - piece.start
        slot.media_spans.append((piece.start, piece.end - piece.start, piece.media_id))


def cached_prefix(cached: list[int], media_spans, prompt: MediaPrompt, prompt_cells: int = 0) -> int:
    """How many leading positions of ``prompt`` a cache holding ``cached`` (with ``media_spans``)
    serves already, short of the last one (re-evaluated for its logits; a prompt ending in media
    keeps nothing of that media). ``prompt_cells``: how many of ``cached`` a prompt filled (the
    rest were generated), see ``_whole_text_after_media``."""
    keep = 0
    media_at = {start: (n, media_id) for start, n, media_id in media_spans}
    for piece in prompt.pieces:
        if piece.tokens is not None:
            same = 0
            for a, b in zip(cached[piece.start :], piece.tokens):
                if a != b:
                    break
                same += 1
            keep = piece.start + same
            if same < len(piece.tokens):
                break
        elif (
            media_at.get(piece.start) == (piece.end - piece.start, piece.media_id)
            and len(cached) >= piece.end
            and all(t == MEDIA_POSITION for t in cached[piece.start : piece.end])
        ):
            keep = piece.end
        else:
            break
    if keep >= len(prompt.cells):
        final = prompt.pieces[-1]
        keep = len(prompt.cells) - 1 if final.tokens is not None else final.start
    return _whole_text_after_media(prompt, keep) if keep <= prompt_cells else keep


def _whole_text_after_media(prompt: MediaPrompt, keep: int) -> int:
    """``keep`` (within what the cached prompt filled) moved back to the start of the text piece it
    falls in, when media precede that piece. A fresh evaluation decodes the text after a medium as
    one batch, and llama.cpp's cells and logits depend on the batch they were computed in:
    evaluating such a piece whole again gives exactly what a fresh request gets (measured with
    gemma-3 and a Gemma 4 projector, flash attention on: an exact repeat moved the
    log-probabilities by 0.07 and image + audio after an image by 1.25; both 0 this way). Where the
    cache goes on with generated tokens (a conversation about an image), those were decoded one at
    a time and no reuse equals a fresh batch: token-level reuse stays, as llama-server does; so
    does text before any medium."""
    seen_media = False
    for piece in prompt.pieces:
        if piece.tokens is None:
            seen_media = True
        elif piece.start < keep < piece.end:
            return piece.start if seen_media else keep
    return keep
