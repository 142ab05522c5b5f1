"""What one speculative generation did: drafts, acceptance, rollbacks, timing."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class SpeculativeStats:
    type: str = "none"
    draft_calls: int = 0  # drafter calls that returned at least one token
    drafted_tokens: int = 0
    accepted_tokens: int = 0  # drafted tokens the target's sampler chose too
    rollbacks: int = 0  # verifications whose draft tail was rejected and cut
    verify_batches: int = 0  # decodes of [last, draft...]
    generated_tokens: int = 0
    ttft_s: float = 0.0  # call to first generated token
    generation_s: float = 0.0  # first token to the end

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted_tokens / self.draft_calls if self.draft_calls else 0.0

    @property
    def tokens_per_second(self) -> float:
        # the first token comes from the prompt's logits; the rest from generation
        n = self.generated_tokens - 1
        return n / self.generation_s if n > 0 and self.generation_s > 0 else 0.0

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            tokens_per_second=self.tokens_per_second,
        )
        return out

    def summary(self) -> str:
        return (
            f"speculative {self.type}: {self.generated_tokens} tokens, {self.draft_calls} drafts, "
            f"{self.accepted_tokens}/{self.drafted_tokens} accepted ({self.acceptance_rate:.0%}), "
            f"mean accepted {self.mean_accepted_length:.2f}, {self.rollbacks} rollbacks, "
            f"ttft {self.ttft_s * 1000:.1f} ms, {self.tokens_per_second:.1f} t/s"
        )
