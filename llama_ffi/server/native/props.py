"""llama-server's ``GET /props``: the defaults a request gets, the slots, the model, the build."""

from __future__ import annotations

from llama_ffi.high import completion
from llama_ffi.server.native.completion import settings_json


def props(llm, served) -> dict:
    """llama-server's ``GET /props``: the defaults a request gets, the slots, the model."""
    options = served.options
    settings = completion.token_settings(llm, None, None, None, None, None, dict(options.sampling))
    vocab = llm.tokenizer
    return {
        "default_generation_settings": {
            "n_ctx": int(llm.context.n_ctx_seq),
            "params": settings_json(settings, options.n_predict),
        },
        "total_slots": served.n_slots,
        "model_alias": served.model_id,
        "model_path": llm.model_path,
        "modalities": {
            "vision": llm.mtmd is not None and llm.mtmd.supports_vision,
            "audio": llm.mtmd is not None and llm.mtmd.supports_audio,
        },
        "chat_template": llm.metadata.get("tokenizer.chat_template", ""),
        "bos_token": vocab.piece(llm.token_bos(), special=True).decode("utf-8", "replace"),
        "eos_token": vocab.piece(llm.token_eos(), special=True).decode("utf-8", "replace"),
        "build_info": build_info(),
        "is_sleeping": False,
    }


def build_info() -> str:
    from llama_ffi import build_info as info

    built = info()
    return f"b{built['llama_cpp_build_number']}-{built['llama_cpp_commit'][:8]}"
