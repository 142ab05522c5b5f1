"""What an operator decides about a server, apart from the model: names, keys, limits, media."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass
class ServerOptions:
    alias: str | None = None  # the model's id in /v1/models and in results (-a)
    api_keys: Sequence[str] = ()  # any of them opens every route but /health (--api-key)
    metrics: bool = True  # GET /metrics (--no-metrics turns it off)
    slots: bool = True  # GET /slots (--no-slots)
    slot_save_path: str | None = None  # POST /slots/ID?action=...: slot files live here (--slot-save-path)
    queue_size: int = 64  # requests waiting beyond the slots; past it, 503 (--queue-size)
    media_path: str | None = None  # local image/audio files under it may be named (--media-path)
    lora_names: Sequence[str] = ()  # the adapters a request's ``lora`` ids name, in --lora order
    # sampling for requests that do not set it (--temp, --top-k...: SamplingParams' names)
    sampling: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    n_predict: int | None = None  # max tokens for requests that do not say (-n; -1: no limit)
    tags: Sequence[str] = ()  # the model's tags in /v1/models (--tags)
    cors_origins: Sequence[str] = ("*",)  # origins CORS allows (--cors-origins)
    api_prefix: str = ""  # a path prefix for every route (--api-prefix)
    reasoning: str | None = None  # on / off / auto: whether the template lets the model think (--reasoning)
    reasoning_format: str | None = None  # deepseek / auto: thinking goes to reasoning_content (the default)
    verbose: bool = False  # the rendered prompt in every chat answer's "__verbose" (--verbose)
    reasoning_budget: int | None = None  # thinking tokens per request (--reasoning-budget; -1: no limit)
    sleep_idle_seconds: float | None = None  # free the model after this long without requests

    def __post_init__(self) -> None:
        if isinstance(self.api_keys, str):
            self.api_keys = (self.api_keys,)
        self.api_keys = tuple(k for k in self.api_keys if k)
        if isinstance(self.queue_size, bool) or not isinstance(self.queue_size, int) or self.queue_size < 0:
            raise ValueError(f"queue_size must be an int >= 0, got {self.queue_size!r}")
        self.lora_names = tuple(self.lora_names)
