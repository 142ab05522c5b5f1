"""The request parameters other than sampling (``sampling_fields`` holds those), declared once:
each one's keyword in ``create_completion``, the library's bounds, the narrower bounds the server's
API keeps (OpenAI's), and llama.cpp's command-line flags. ``completion.prepare`` checks with it,
the server's request schemas take their bounds from it, and the command line its flags."""

from __future__ import annotations

import dataclasses

from llama_ffi.high._checks import integer


@dataclasses.dataclass(frozen=True)
class RequestField:
    name: str
    low: int | None = None  # the library's bounds (None: open)
    high: int | None = None
    api_low: int | None = None  # the server's, where narrower
    api_high: int | None = None
    help: str = ""
    flags: tuple[str, ...] = ()  # llama.cpp's (the first is the one shown)

    def check(self, value, high: int | None = None) -> int:
        """``value`` as the library takes it; ``high`` narrows the upper bound (e.g. to n_vocab)."""
        return integer(self.name, value, self.low, self.high if high is None else high)

    def bounds(self) -> dict[str, int]:
        """pydantic's ``Field`` bounds of the server's schema."""
        low = self.low if self.api_low is None else self.api_low
        high = self.high if self.api_high is None else self.api_high
        return {k: v for k, v in (("ge", low), ("le", high)) if v is not None}


MAX_TOKENS = RequestField(
    "max_tokens",
    api_low=1,  # the library's None or <= 0 (until the context is full) is n_predict -1 on the wire
    help="tokens to generate at most",
    flags=("-n", "--n-predict", "--predict"),
)
N = RequestField("n", low=1, api_high=64, help="choices per prompt")
LOGPROBS = RequestField("logprobs", low=0, api_high=20, help="most likely tokens reported with each token")
TOP_LOGPROBS = RequestField("top_logprobs", low=0, api_high=20, help="chat: most likely tokens with each token")
FIELDS: tuple[RequestField, ...] = (MAX_TOKENS, N, LOGPROBS, TOP_LOGPROBS)
