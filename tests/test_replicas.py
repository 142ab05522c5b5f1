"""Replicas on Ray Serve (``llama-ffi serve --ray --replicas 2``), on a local Ray cluster that the
test starts and stops: concurrent OpenAI requests are spread over both replicas (each response
names its replica) and each answer is the model's own (equal to a single Llama's or a measured near
tie: requests decoded together). Marked ``ray``: ``pip install 'llama-ffi[ray]'`` and
``python -m pytest -m ray tests``."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from server_process import free_port

from llama_ffi.high import Llama
from llama_ffi.near_tie import assert_same_or_near_tie, parallel_bound

pytestmark = pytest.mark.ray

PROMPTS = [f"Question {i}: name a city in country number {i}. Answer:" for i in range(6)]


def test_two_replicas_share_concurrent_requests_and_answer_as_the_model(smollm2_path):
    pytest.importorskip("ray.serve")  # here, not at collection: the default run never imports Ray
    port = free_port()
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own, started and stopped by the server
    command = [sys.executable, "-m", "llama_ffi.server", "--ray", "--replicas", "2", "-m", str(smollm2_path)]
    command += ["-c", "1024", "-np", "4", "-t", "1", "--port", str(port)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-3000:]
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the replicas never answered /health"
            time.sleep(0.5)

        def ask(prompt):
            body = {"model": "m", "prompt": prompt, "max_tokens": 12, "temperature": 0}
            r = httpx.post(url + "/v1/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            return r.headers["x-llama-ffi-replica"], r.json()["choices"][0]["text"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, PROMPTS * 3))
        assert len({replica for replica, _ in answers}) == 2, answers  # both replicas served
        with Llama(str(smollm2_path), n_ctx=1024, n_threads=2, progress=False) as llm:
            bound = parallel_bound(llm)
            for prompt, (_, text) in zip(PROMPTS * 3, answers):
                assert_same_or_near_tie(llm, prompt, text, 12, limit=bound)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, proc.stdout.read().decode(errors="replace")[-3000:]
