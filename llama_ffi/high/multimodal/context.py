"""The owner of one ``mtmd_context`` (a multimodal projector bound to a loaded text model)."""

from __future__ import annotations

import os
from pathlib import Path

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors, reason
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.model import Model, check_gguf_file
from llama_ffi.high.threads import default_threads


class MtmdContext:
    """Freed by ``close()`` (the Llama closes it before its model) or at garbage collection."""

    def __init__(
        self, model: Model, mmproj_path: str | os.PathLike, n_threads: int | None, use_gpu: bool, handler=None
    ) -> None:
        self._ptr = ffi.NULL
        self.path = Path(mmproj_path)
        if not self.path.exists():
            raise FileNotFoundError(f"mmproj file not found: {self.path}")
        check_gguf_file(self.path)
        params = lib.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.print_timings = False
        params.n_threads = default_threads() if n_threads is None else n_threads
        # a chat handler's bounds on an image's tokens (dynamic-resolution projectors: Qwen-VL)
        if handler is not None and handler.image_min_tokens:
            params.image_min_tokens = handler.image_min_tokens
        if handler is not None and handler.image_max_tokens:
            params.image_max_tokens = handler.image_max_tokens
        with capture_errors() as errors:
            ptr = lib.mtmd_init_from_file(os.fsencode(self.path), model.ptr, params)
        if ptr == ffi.NULL:
            raise RequestValueError(
                f"llama.cpp could not load the multimodal projector {self.path} for this model: "
                f"{reason(errors, 'unknown error (see the llama_ffi logger)')}"
            )
        self._ptr = ptr
        self.model = model
        self.marker = ffi.string(lib.mtmd_default_marker()).decode()
        self.media_encoded = 0  # media chunks encoded so far (a cached one is not encoded again)

    @property
    def ptr(self):
        if self._ptr == ffi.NULL:
            raise RuntimeError("this multimodal context has been closed")
        return self._ptr

    @property
    def supports_vision(self) -> bool:
        return bool(lib.mtmd_support_vision(self.ptr))

    @property
    def supports_audio(self) -> bool:
        return bool(lib.mtmd_support_audio(self.ptr))

    def close(self) -> None:
        ptr, self._ptr = self._ptr, ffi.NULL
        if ptr != ffi.NULL:
            lib.mtmd_free(ptr)

    def __del__(self) -> None:
        if getattr(self, "_ptr", ffi.NULL) != ffi.NULL:
            self.close()
