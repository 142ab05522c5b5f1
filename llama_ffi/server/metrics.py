"""``GET /metrics``: Prometheus text under llama-server's metric names, from the requests this
server finished and the engine's running totals."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Metrics:
    requests: int = 0
    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0
    tokens_predicted: int = 0
    n_tokens_max: int = 0

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

    def prometheus(self, llm, in_flight: int) -> str:
        status = llm.engine.status()
        stats = status.stats
        processing = status.processing
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
                stats.prompt_tokens / stats.prompt_s if stats.prompt_s else 0.0,
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
                stats.generated_tokens / stats.generation_s if stats.generation_s else 0.0,
            ),
            ("requests_processing", "Number of requests processing", processing),
            ("requests_deferred", "Number of requests deferred", max(in_flight - processing, status.waiting)),
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
        return "\n".join(lines) + "\n"
