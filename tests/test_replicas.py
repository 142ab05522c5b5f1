"""Replicas on Ray Serve (``llama-ffi serve --ray --replicas 2``), on a local Ray cluster that the
test starts and stops: concurrent OpenAI requests are spread over both replicas (each response
names its replica) and each answer is the model's own (equal to a single Llama's or a measured near
tie: requests decoded together); a session's requests stay on one replica; a killed replica loses
only its running requests and comes back. Marked ``ray``: ``pip install 'llama-ffi[ray]'`` and
``python -m pytest -m ray tests``."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from server_process import free_port

from llama_ffi.high import Llama
from llama_ffi.testing import assert_same_or_near_tie, parallel_bound

pytestmark = pytest.mark.ray

PROMPTS = [f"Question {i}: name a city in country number {i}. Answer:" for i in range(6)]


@contextlib.contextmanager
def replicas(model, count: int = 2, *flags: str):
    """``llama-ffi serve --ray --replicas count`` on a local cluster of its own; yields its URL."""
    pytest.importorskip("ray.serve")  # here, not at collection: the default run never imports Ray
    port = free_port()
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own, started and stopped by the server
    command = [sys.executable, "-m", "llama_ffi.server", "--ray", "--replicas", str(count), "-m", str(model)]
    command += ["-c", "1024", "-np", "4", "-t", "1", "--port", str(port), *flags]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        answered: set[str] = set()  # every replica up, not just the first (Serve routes to those it has)
        while len(answered) < count:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-3000:]
            try:
                health = httpx.get(url + "/health", timeout=5)
                if health.status_code == 200:
                    answered.add(health.headers["x-llama-ffi-replica"])
                    continue
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{len(answered)} of {count} replicas answered /health"
            time.sleep(0.5)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, proc.stdout.read().decode(errors="replace")[-3000:]


def ask(url: str, prompt: str, max_tokens: int = 12, session: str | None = None) -> tuple[str, str]:
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    headers = {"x-session-id": session} if session else {}
    r = httpx.post(url + "/v1/completions", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return r.headers["x-llama-ffi-replica"], r.json()["choices"][0]["text"]


def test_two_replicas_share_concurrent_requests_and_answer_as_the_model(smollm2_path):
    with replicas(smollm2_path) as url:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda p: ask(url, p), PROMPTS * 3))
        assert len({replica for replica, _ in answers}) == 2, answers  # both replicas served
        with Llama(str(smollm2_path), n_ctx=1024, n_threads=2, progress=False) as llm:
            bound = parallel_bound(llm)
            for prompt, (_, text) in zip(PROMPTS * 3, answers):
                assert_same_or_near_tie(llm, prompt, text, 12, limit=bound)
        # A session's turns stay on one replica (its prompt cache); the sessions use both.
        sessions = [f"conversation-{i}" for i in range(12)]  # all on one replica: 1 run in 2048
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # sessions side by side: each stays put
            placed = dict(
                zip(
                    sessions,
                    pool.map(lambda s: {ask(url, f"{s}: turn {t}.", session=s)[0] for t in range(3)}, sessions),
                )
            )
        assert all(len(replicas_of) == 1 for replicas_of in placed.values()), placed
        assert len(set().union(*placed.values())) == 2, placed


def test_with_prefix_affinity_a_conversation_stays_on_one_replica_without_a_session(smollm2_path):
    """``--affinity prefix``: the ingress reads each body, so the turns of a conversation (same
    system prompt and first user turn) and its stream go to one replica, with no header from the
    client; different conversations use both replicas; errors come back in the server's shape."""
    with replicas(smollm2_path, 2, "--affinity", "prefix") as url:

        def turn(conversation: int, turns: int, stream: bool = False) -> str:
            messages = [{"role": "system", "content": f"You help user {conversation}."}]
            messages += [{"role": "user", "content": f"Hello, I am number {conversation}."}]
            for t in range(1, turns):
                messages += [{"role": "assistant", "content": "Hi."}, {"role": "user", "content": f"Turn {t}?"}]
            body = {"model": "m", "messages": messages, "max_tokens": 6, "temperature": 0, "stream": stream}
            r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            if stream:
                assert r.text.rstrip().endswith("data: [DONE]") and '"delta"' in r.text
            return r.headers["x-llama-ffi-replica"]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            placed = dict(zip(range(10), pool.map(lambda c: {turn(c, t, stream=t == 2) for t in (1, 2, 3)}, range(10))))
        assert all(len(replicas_of) == 1 for replicas_of in placed.values()), placed
        assert len(set().union(*placed.values())) == 2, placed  # 10 conversations on one: 1 run in 512
        bad = httpx.post(url + "/v1/chat/completions", json={"messages": "no"}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"


def replica_processes() -> dict[int, str]:
    """PID -> process title of each Serve replica of the llama-ffi deployment on this machine."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                title = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "ServeReplica:llama-ffi" in title:
                out[int(entry)] = title
    return out


def test_a_killed_replica_loses_only_its_running_requests_and_comes_back(smollm2_path):
    """A replica's process killed (SIGKILL) while requests run on both: at most the requests it was
    running fail; every other one, and every one sent after, is answered; Serve starts a new
    replica, which then serves."""
    with replicas(smollm2_path) as url:
        first = {ask(url, p)[0] for p in PROMPTS}
        processes = replica_processes()
        assert len(first) == 2 and len(processes) == 2, (first, processes)
        victim = sorted(processes)[0]
        results: list = []

        def one(i: int):
            try:
                results.append(("ok", ask(url, PROMPTS[i % len(PROMPTS)], max_tokens=48)))
            except (AssertionError, httpx.HTTPError) as error:
                results.append(("failed", repr(error)[:200]))

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            running = [pool.submit(one, i) for i in range(8)]
            time.sleep(1.0)  # requests are decoding on both replicas
            os.kill(victim, signal.SIGKILL)
            after = [pool.submit(one, i) for i in range(8, 24)]
            concurrent.futures.wait(running + after)
        failed = [r for r in results if r[0] == "failed"]
        # A replica is sent at most as many requests as it has slots (-np 4): only those may be lost.
        assert len(failed) <= 4, failed
        assert len(results) - len(failed) >= 20, results
        killed_at = time.monotonic()
        deadline = killed_at + 180
        seen = set()
        while not (seen - first):  # a replica that did not exist before answers
            assert time.monotonic() < deadline, f"no new replica answered (seen {seen})"
            seen |= {ask(url, p)[0] for p in PROMPTS}  # every request answered meanwhile
            time.sleep(1)
        assert len(replica_processes()) == 2
        print(
            f"\n{len(failed)} of {len(results)} requests failed with the killed replica; a new one served after "
            f"{time.monotonic() - killed_at:.0f} s"
        )
