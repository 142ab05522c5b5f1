"""``GET /metrics``: Prometheus text under llama-server's metric names, from the requests this
server finished and the engine's running totals; and the gauges a router of replicas reads under
vLLM's names (the Gateway API Inference Extension's model server protocol: requests running and
waiting, the share of KV cells in use, the LoRA adapters loaded)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from llama_ffi.high.engine import EngineStats, EngineStatus


@dataclasses.dataclass
class Metrics:
    requests: int = 0
    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0
    tokens_predicted: int = 0
    n_tokens_max: int = 0
    since: float = dataclasses.field(default_factory=lambda: float(int(time.time())))  # adapters loaded
    # the totals of engines freed by sleeping (the counters go on from them after a wake)
    carried: EngineStats = dataclasses.field(default_factory=EngineStats)
    asleep: tuple[EngineStatus, int] | None = None  # the last engine's status and n_ctx, while it sleeps
    window: tuple[float, ...] = (0, 0.0, 0, 0.0)  # prompt tokens and seconds, generated and seconds, at last read

    def finished(self, usage: dict | None) -> None:
        """A request ended (its usage, when it got that far)."""
        self.requests += 1
        if not usage:
            return
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        self.prompt_tokens += usage.get("prompt_tokens", 0) - cached
        self.prompt_tokens_cached += cached
        self.tokens_predicted += usage.get("completion_tokens", 0)
        self.n_tokens_max = max(self.n_tokens_max, usage.get("total_tokens", 0))

    def retire(self, llm) -> None:
        """``llm`` goes to sleep: its engine's totals are kept, and its status answers meanwhile."""
        status = llm.engine.status()
        self.asleep = (status, int(llm.context.n_ctx))  # answered as just before it slept
        self.carried = _sum(self.carried, status.stats)

    def prometheus(self, llm, in_flight: int, model: str = "", loras: Sequence[str] = ()) -> str:
        """The text of one scrape; the two throughput gauges are over the time since the last one
        (llama-server's window). ``llm`` None: the model sleeps."""
        if llm is not None:
            self.asleep = None
            status, n_ctx = llm.engine.status(), int(llm.context.n_ctx)
            stats = _sum(self.carried, status.stats)
        else:
            (status, n_ctx), stats = self.asleep, self.carried
        now = (stats.prompt_tokens, stats.prompt_s, stats.generated_tokens, stats.generation_s)
        d = [a - b for a, b in zip(now, self.window)]
        self.window = now
        processing = status.processing
        waiting = max(in_flight - processing, status.waiting)
        steps = stats.prompt_steps + stats.generation_steps + stats.embedding_decodes
        counters = [
            (
                "prompt_tokens_total",
                "Number of prompt tokens processed, excluding cached tokens",
                self.prompt_tokens + stats.embedded_tokens,  # embedding inputs are prompts too
            ),
            ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", self.prompt_tokens_cached),
            ("prompt_seconds_total", "Total time spent processing prompts", stats.prompt_s),
            ("tokens_predicted_total", "Number of generation tokens processed", self.tokens_predicted),
            (
                "tokens_predicted_seconds_total",
                "Total time spent generating tokens",
                stats.generation_s,
            ),
            ("n_decode_total", "Total number of decode steps", steps),
            ("n_tokens_max", "Largest observed sequence length (prompt + generation)", self.n_tokens_max),
            ("requests_total", "Number of requests finished", self.requests),
            ("spec_decode_num_draft_tokens_total", "Number of draft tokens verified", stats.draft_tokens),
            ("spec_decode_num_accepted_tokens_total", "Number of draft tokens accepted", stats.accepted_draft_tokens),
            ("spec_decode_num_drafts_total", "Number of drafts verified", stats.drafts),
        ]
        gauges = [
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
                d[0] / d[1] if d[1] > 0 else 0.0,
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
                d[2] / d[3] if d[3] > 0 else 0.0,
            ),
            ("requests_processing", "Number of requests processing", processing),
            ("requests_deferred", "Number of requests deferred", waiting),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per decode step",
                stats.generated_tokens / stats.generation_steps if stats.generation_steps else 0.0,
            ),
        ]
        lines = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, description, value in items:
                lines += [
                    f"# HELP llamacpp:{name} {description}",
                    f"# TYPE llamacpp:{name} {kind}",
                    f"llamacpp:{name} {value}",
                ]
        return "\n".join(lines + _vllm(status, waiting, n_ctx, model, loras, self.since)) + "\n"


def _sum(a: EngineStats, b: EngineStats) -> EngineStats:
    return EngineStats(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in dataclasses.fields(EngineStats)})


def _vllm(status, waiting: int, n_ctx: int, model: str, loras: Sequence[str], since: float) -> list[str]:
    used = sum(s.cached_tokens for s in status.slots) / max(1, n_ctx)
    label = f'model_name="{_quoted(model)}"'
    gauges = [
        ("num_requests_running", "Number of requests being decoded", status.processing),
        ("num_requests_waiting", "Number of requests waiting for a slot", waiting),
        ("kv_cache_usage_perc", "KV-cache usage: 1 means 100 percent usage", min(1.0, used)),
    ]
    lines = []
    for name, description, value in gauges:
        lines += [f"# HELP vllm:{name} {description}", f"# TYPE vllm:{name} gauge", f"vllm:{name}{{{label}}} {value}"]
    adapters = _quoted(",".join(loras))
    lines += [
        "# HELP vllm:lora_requests_info LoRA adapters loaded (running) and waiting; the value is when it was read",
        "# TYPE vllm:lora_requests_info gauge",
        f'vllm:lora_requests_info{{max_lora="{len(loras)}",running_lora_adapters="{adapters}",'
        f'waiting_lora_adapters=""}} {since}',
    ]
    return lines


def _quoted(text: str) -> str:
    """A Prometheus label value."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
