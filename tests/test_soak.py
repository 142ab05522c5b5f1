"""The soak for 80 requests (``python -m bench --soak MINUTES`` runs it for minutes): one
``Llama`` under mixed concurrent load with a disk cache that a corrupter damages; every greedy
answer equals its request alone or leaves it at a measured near tie, nothing fails unexpectedly,
and ``close()`` with requests in flight ends them all."""

from __future__ import annotations

import pytest

from bench.soak import Soak

pytestmark = pytest.mark.slow  # minutes of mixed load: out of the default run (-m slow runs it)

KINDS = {"plain", "stream", "abandoned", "n2", "list", "sampled", "chat", "bad", "state", "async", "closed-loop"}


def test_mixed_load_serves_every_request_right(smollm2_path):
    report = Soak(str(smollm2_path), minutes=10.0, threads=2, seed=3, requests=80).run()
    summary = report.summary()
    assert not report.wrong, report.wrong[:5]
    assert not report.unexpected, report.unexpected[:5]
    assert KINDS <= set(summary["by_kind"]), summary["by_kind"]
    assert summary["requests"] >= 80 and summary["tokens_per_s"] > 0
    assert summary["expected_errors"] == summary["by_kind"]["bad"]  # each bad request refused, by name
    assert summary["corruptions"] > 5  # cache files were damaged while in use
    # close() waited for the plain request (its whole answer) and ended the two streams
    assert (
        summary["close_outcomes"][0] == "plain: 64 tokens, length"
        or summary["close_outcomes"][0].startswith("plain: ")
        and summary["close_outcomes"][0].endswith("stop")
    )
    assert summary["close_outcomes"][1:] == ["stream 0: closed", "stream 1: closed"], summary["close_outcomes"]
    assert summary["rss_growth_mb"] < 200, summary
