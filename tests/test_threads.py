"""Thread counts: a count beyond the CPUs this process may use is capped (ggml's threads meet at
spinning barriers, so one without a CPU stalls every operation), with a log line; counts within
are passed through as given."""

from __future__ import annotations

import logging

from llama_ffi import lib
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
