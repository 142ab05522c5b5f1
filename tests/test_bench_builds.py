"""The benchmark runs another Python's llama-ffi (a venv holding the wheel) on that install."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import common

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_a_probe_in_another_python_runs_that_pythons_install_with_the_benchmark_beside_it():
    proc = common.run_elsewhere(sys.executable, "import sys, bench.common, llama_ffi; print(llama_ffi.__file__)")
    assert proc.returncode == 0, proc.stderr
    where = Path(proc.stdout.strip().splitlines()[-1])
    assert REPO_ROOT not in where.parents, where  # the checkout's package would shadow the install
