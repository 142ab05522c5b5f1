"""``llama_cpp.llama_tokenizer``: the model's own tokenizer (``LlamaTokenizer``) and a Hugging Face
one (``LlamaHFTokenizer``, for code that tokenizes with ``transformers`` beside the model)."""

from __future__ import annotations

from collections.abc import Sequence

from llama_ffi.high.tokenizer import BaseLlamaTokenizer, LlamaTokenizer
from llama_ffi.llama_cpp import not_provided

__all__ = ["BaseLlamaTokenizer", "LlamaHFTokenizer", "LlamaTokenizer"]


class LlamaHFTokenizer(BaseLlamaTokenizer):
    """A ``transformers`` tokenizer with llama-cpp-python's byte interface. ``Llama`` itself always
    tokenizes with llama.cpp (its ``tokenizer=`` parameter is refused): use this one on its own."""

    def __init__(self, hf_tokenizer) -> None:
        self.hf_tokenizer = hf_tokenizer

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.hf_tokenizer.encode(text.decode("utf-8", errors="ignore"), add_special_tokens=special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None, special: bool = False
    ) -> bytes:
        skip = not special
        if prev_tokens is None:
            return self.hf_tokenizer.decode(list(tokens), skip_special_tokens=skip).encode("utf-8", errors="ignore")
        head = self.hf_tokenizer.decode(list(prev_tokens), skip_special_tokens=skip).encode("utf-8", errors="ignore")
        whole = self.hf_tokenizer.decode(list(prev_tokens) + list(tokens), skip_special_tokens=skip)
        return whole.encode("utf-8", errors="ignore")[len(head) :]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str) -> LlamaHFTokenizer:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise ImportError("LlamaHFTokenizer needs transformers: pip install transformers") from exc
        return cls(AutoTokenizer.from_pretrained(pretrained_model_name_or_path))


def __getattr__(name: str):
    return not_provided.missing("llama_tokenizer", name)
