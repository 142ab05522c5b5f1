"""Thread counts: a count beyond the CPUs this process may use is capped (ggml's threads meet at
spinning barriers, so one without a CPU stalls every operation), with a log line; counts within
are passed through as given. An idle Llama holds no compute threads: its loop hands its OpenMP
workers back, which otherwise count against every other Llama in the process."""

from __future__ import annotations

import logging
import os

import pytest
from waiting import wait_until

from llama_ffi import ffi, lib
from llama_ffi.high import Llama
from llama_ffi.high.threads import usable_threads


def test_counts_beyond_the_cpus_are_capped_and_logged(smollm2_path, caplog):
    usable = usable_threads()
    with caplog.at_level(logging.WARNING, logger="llama_ffi"):
        llm = Llama(smollm2_path, n_ctx=64, n_threads=usable + 2, n_threads_batch=4 * usable, progress=False)
    with llm:
        assert lib.llama_n_threads(llm.context.ptr) == usable
        assert lib.llama_n_threads_batch(llm.context.ptr) == usable
        assert llm("Hello", max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2
    assert f"n_threads={usable + 2} is more than the {usable} CPUs" in caplog.text
    assert f"n_threads_batch={4 * usable} is more than" in caplog.text


def test_counts_within_the_cpus_are_kept(smollm2_path, caplog):
    with caplog.at_level(logging.WARNING, logger="llama_ffi"):
        llm = Llama(smollm2_path, n_ctx=64, n_threads=1, n_threads_batch=usable_threads(), progress=False)
    with llm:
        assert lib.llama_n_threads(llm.context.ptr) == 1
        assert lib.llama_n_threads_batch(llm.context.ptr) == usable_threads()
    assert "more than the" not in caplog.text


def _threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def _uses_openmp() -> bool:
    return "OPENMP = 1" in ffi.string(lib.llama_print_system_info()).decode()


@pytest.mark.skipif(usable_threads() < 2, reason="one CPU: ggml starts no worker threads")
def test_an_idle_llama_hands_its_compute_threads_back(smollm2_path):
    """After a request, the loop's thread stays (it serves the next one) but the workers it ran
    llama_decode with end once it idles: with them kept, libgomp manages more threads than there
    are CPUs and every other Llama's barriers sleep in the kernel (generation halved on 2 cores;
    ``python -m bench --thread-pool``'s "beside an idle Llama" row). Without OpenMP (the wheel's
    ggml pool) the workers end with each decode and this holds as well."""
    with Llama(smollm2_path, n_ctx=64, n_threads=2, n_threads_batch=2, progress=False) as llm:
        before = _threads()
        assert llm("Hello", max_tokens=4, temperature=0)["usage"]["completion_tokens"] == 4
        if _uses_openmp():  # the glue finds libgomp (this thread has no team: nothing to end)
            assert lib.llama_ffi_release_threads() == 0
        started = wait_until(lambda: _threads() - before, "the loop's thread")
        assert len(started) >= 1
        wait_until(lambda: len(_threads() - before) == 1, "the loop's OpenMP workers to end", timeout=10)
        assert llm("Hello", max_tokens=4, temperature=0)["usage"]["completion_tokens"] == 4  # a new team
