"""llama-ffi's constraints on the oldest llguidance it supports (1.5.0, which guidance pins, so
that the two install together): the constraint tests run in a virtual environment of their own
holding that version (``library_venvs``), against the same checkout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import library_venvs

REPO = Path(__file__).resolve().parent.parent
OLDEST = "1.5.0"


def test_the_constraint_tests_pass_on_the_oldest_llguidance():
    python = library_venvs.prepared("llguidance-oldest", [f"llguidance=={OLDEST}", "pytest", "hypothesis"])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    version = library_venvs.printed(python, "import importlib.metadata as m; print(m.version('llguidance'))", env)
    assert version == OLDEST
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_constraints.py",
            "tests/test_json_schema.py",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
