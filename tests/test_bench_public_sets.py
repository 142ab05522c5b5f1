"""The public-text sets of ``python -m bench --speculative-public``: drawn by a fixed seed from
text that ships with Python and from the committed JSONSchemaBench sample, the same items on every
run of one Python version (the judgement of the speculative defaults must not drift run to run)."""

from __future__ import annotations

import random

from bench import speculative_public


def _draw() -> dict[str, list[str]]:
    rng = random.Random(speculative_public.SEED)
    return {name: build(rng) for name, build in speculative_public.TASKS.items()}


def test_every_task_draws_its_items_from_its_public_source():
    sets = _draw()
    assert set(sets) == {"code editing", "JSON extraction", "summarization"}
    for name, items in sets.items():
        assert len(items) == speculative_public.N_ITEMS, name
        assert len(set(items)) == len(items), f"{name}: an item drawn twice"
    assert all("```python\ndef " in item for item in sets["code editing"])
    sample = speculative_public.MASKBENCH_SAMPLE.read_text()
    for item in sets["JSON extraction"]:
        key, value = item.split("\n\n", 1)[1].splitlines()[0].split(": ", 1)
        assert f'"{key.split(".")[-1]}"' in sample and value in sample  # a field of a committed instance
    assert all(len(item) > 800 for item in sets["summarization"])


def test_the_draw_is_the_same_every_time():
    assert _draw() == _draw()
