"""How long a sequence's next draft may be: the draft length follows the acceptance.

On a CPU a verification batch costs several single decodes (measured on 2 cores with SmolLM2: 16
tokens ~9 singles, 48 tokens ~20): a draft of one or two tokens costs more than it saves, and only
long accepted drafts pay. The window doubles after a fully accepted draft and falls back to what
was accepted + 1 after a rejection, between these bounds; on a GPU a batch costs about one decode
and the bounds cost nothing.
"""

from __future__ import annotations

INITIAL_WINDOW = 16
MIN_WINDOW = 4
MIN_DRAFT = 3  # shorter drafts are decoded plainly
# A draft with nothing accepted cost a verification for one token: the next drafts wait 1, 2, 4,
# ... tokens (up to MAX_PAUSE) until one is accepted again, so a drafter that keeps missing (a
# poor draft model, text unlike the history) costs little.
MAX_PAUSE = 32


class DraftWindow:
    """One speculating sequence's draft length and pauses."""

    def __init__(self, max_draft: int, n_min: int | None = None) -> None:
        self.max_draft = max_draft
        self.window = min(max_draft, INITIAL_WINDOW)
        self.min_draft = min(max_draft, MIN_DRAFT if n_min is None else max(n_min, 1))
        self.pause = 0  # after consecutive misses: tokens to decode without drafting
        self.wait = 0  # tokens left in the current pause

    def length(self, room: int) -> int:
        """The longest draft worth asking for now (0: decode this token plainly), at most ``room``."""
        if self.wait > 0:
            return 0
        n = min(self.window, room)
        return n if n >= self.min_draft else 0

    def decoded_plainly(self, n: int = 1) -> None:
        """``n`` tokens went by without a draft: the pause shortens by as many."""
        self.wait = max(0, self.wait - n)

    def worth_verifying(self, draft: list[int]) -> bool:
        return len(draft) >= self.min_draft

    def settle(self, accepted: int, drafted: int) -> None:
        """A verification kept ``accepted`` of ``drafted`` tokens."""
        if accepted < drafted:
            self.window = min(self.max_draft, max(accepted + 1, MIN_WINDOW))
            if accepted == 0:
                self.pause = min(MAX_PAUSE, 2 * self.pause or 1)
                self.wait = self.pause
        else:
            self.window = min(self.max_draft, 2 * self.window)
        if accepted:
            self.pause = 0
