"""Router mode (``llama-ffi serve --models-dir/--models-preset`` without ``-m``) and sleeping when
idle (``--sleep-idle-seconds``), on real servers: requests routed by ``model`` and answered as the
model alone answers them, the least recently used idle model unloaded at ``--models-max``, a
preset's per-model flags, a broken model beside good ones, and sleep freeing memory (RSS measured)
and waking for the next request."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import httpx
import pytest
import tiny_llama
from server_process import ServerProcess

from llama_ffi.high import Llama

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, smollm2_path):
    """smol (SmolLM2), tiny-a and tiny-b (tiny random llamas), and broken (not a GGUF)."""
    d = tmp_path_factory.mktemp("models")
    os.symlink(smollm2_path, d / "smol.gguf")
    tiny = tiny_llama.write_gguf(d / "tiny-a.gguf")
    shutil.copy(tiny, d / "tiny-b.gguf")
    (d / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    (d / "mmproj-tiny.gguf").write_bytes(b"not listed: a projector")
    return d


@pytest.fixture(scope="module", autouse=True)
def empty_hf_cache(tmp_path_factory):
    """Router mode also lists what -hf has cached: an empty cache keeps this machine's out."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("empty-hf-cache")))
        yield


def router(*flags: str, env: dict | None = None) -> ServerProcess:
    return ServerProcess(None, "-c", "512", "-np", "2", *flags, env=env)


def listing(server) -> dict[str, dict]:
    body = httpx.get(server.url + "/models", timeout=30).json()
    return {m["id"]: m["status"] for m in body["data"]}


def wait_for(server, model: str, state: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while listing(server)[model]["value"] != state:
        assert time.monotonic() < deadline, f"{model} never became {state}: {listing(server)[model]}"
        time.sleep(0.05)


def complete(server, model: str, **extra) -> httpx.Response:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0, **extra}
    return httpx.post(server.url + "/v1/completions", json=body, timeout=120)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def test_every_model_is_listed_and_a_request_goes_to_the_model_it_names(models_dir, smollm2_path):
    with router("--models-dir", str(models_dir)) as server:
        states = listing(server)
        assert set(states) == {"smol", "tiny-a", "tiny-b", "broken"}  # companions are not models
        assert all(s["value"] == "unloaded" for s in states.values())
        props = httpx.get(server.url + "/props", timeout=10).json()
        assert props["role"] == "router" and props["max_instances"] == 4 and props["models_autoload"] is True
        response = complete(server, "smol")
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "smol"
        with Llama(str(smollm2_path), n_ctx=512, n_threads=2, progress=False) as llm:
            alone = llm(PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"]
        assert response.json()["choices"][0]["text"] == alone
        assert listing(server)["smol"]["value"] == "loaded"
        assert listing(server)["tiny-a"]["value"] == "unloaded"  # nothing else was loaded
        # per-model routes by ?model=
        props = httpx.get(server.url + "/props", params={"model": "smol"}, timeout=10).json()
        assert props["model_alias"] == "smol" and props["default_generation_settings"]["n_ctx"] > 0
        assert len(httpx.get(server.url + "/slots", params={"model": "smol"}, timeout=10).json()) == 2
        missing = complete(server, "nope")
        assert missing.status_code == 400 and "'nope' not found" in missing.json()["error"]["message"]
        nameless = httpx.post(server.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
        assert nameless.status_code == 400 and "model name is missing" in nameless.json()["error"]["message"]


def test_models_cached_by_hf_are_listed_and_served_from_the_cache(models_dir, tmp_path):
    """llama-server's router lists every repository:quantisation -hf downloaded (one entry for a
    split model, none for a projector) and loads it with -hf, here offline from the cache."""
    cache = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--test--tiny-GGUF"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    (snapshot / "tiny-Q8_0.gguf").symlink_to(models_dir / "tiny-a.gguf")
    (snapshot / "mmproj-tiny-F16.gguf").write_bytes(b"a projector, not a model")
    for part in (1, 2):
        (snapshot / f"big-Q4_K_M-0000{part}-of-00002.gguf").write_bytes(b"one model in two files")
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    with router("--models-dir", str(models_dir), env=env) as server:
        body = httpx.get(server.url + "/models", timeout=30).json()["data"]
        cached = {m["id"]: m for m in body if m["source"] == "cache"}
        assert set(cached) == {"test/tiny-GGUF:Q8_0", "test/tiny-GGUF:Q4_K_M"}
        assert all(m["can_remove"] for m in cached.values())
        assert {m["id"] for m in body if m["source"] == "models_dir"} == {"smol", "tiny-a", "tiny-b", "broken"}
        response = complete(server, "test/tiny-GGUF:Q8_0")
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"] == complete(server, "tiny-a").json()["choices"][0]["text"]


def test_models_max_one_unloads_the_least_recently_used_idle_model(models_dir):
    with router("--models-dir", str(models_dir), "--models-max", "1") as server:
        assert complete(server, "tiny-a").status_code == 200
        assert complete(server, "tiny-b").status_code == 200
        states = listing(server)
        assert states["tiny-b"]["value"] == "loaded" and states["tiny-a"]["value"] == "unloaded"
        # a busy model is not taken from its request: the next model waits until the stream ends
        stream_done, streaming = [], threading.Event()

        def stream():
            with httpx.stream(
                "POST",
                server.url + "/v1/completions",
                json={
                    "model": "tiny-b",
                    "prompt": PROMPT,
                    "max_tokens": 48,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "ignore_eos": True,
                },
                timeout=120,
            ) as r:
                usage = None
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        usage = json.loads(line[len("data: ") :]).get("usage") or usage
                        streaming.set()
            # tokens, not chunks: a random model's byte tokens wait in the stream until they spell a character
            stream_done.append((time.monotonic(), usage and usage["completion_tokens"]))

        t = threading.Thread(target=stream)
        t.start()
        assert streaming.wait(60), "the stream sent nothing"
        assert complete(server, "tiny-a").status_code == 200
        answered = time.monotonic()
        t.join()
        ((ended, n_tokens),) = stream_done
        assert n_tokens == 48 and ended <= answered  # the stream was whole, then tiny-a loaded
        assert listing(server)["tiny-a"]["value"] == "loaded"


def test_the_least_recently_used_model_is_the_one_unloaded(models_dir):
    with router("--models-dir", str(models_dir), "--models-max", "2") as server:
        for model in ("tiny-a", "tiny-b", "tiny-a", "smol"):  # tiny-b: used least recently
            assert complete(server, model).status_code == 200
        states = {k: v["value"] for k, v in listing(server).items()}
        assert states == {"tiny-a": "loaded", "smol": "loaded", "tiny-b": "unloaded", "broken": "unloaded"}


def test_load_and_unload_by_hand_and_no_autoload(models_dir):
    with router("--models-dir", str(models_dir), "--no-models-autoload") as server:
        refused = complete(server, "tiny-a")
        assert refused.status_code == 400 and "not loaded" in refused.json()["error"]["message"]
        r = httpx.post(server.url + "/models/load", json={"model": "tiny-a"}, timeout=10)
        assert r.status_code == 200 and r.json() == {"success": True}
        wait_for(server, "tiny-a", "loaded")
        again = httpx.post(server.url + "/models/load", json={"model": "tiny-a"}, timeout=10)
        assert again.status_code == 400 and "already running" in again.json()["error"]["message"]
        assert complete(server, "tiny-a").status_code == 200
        assert httpx.post(server.url + "/models/unload", json={"model": "tiny-a"}, timeout=10).status_code == 200
        wait_for(server, "tiny-a", "unloaded")
        assert complete(server, "tiny-a").status_code == 400


def test_a_broken_model_fails_its_own_requests_and_the_others_serve(models_dir):
    with router("--models-dir", str(models_dir)) as server:
        broken = complete(server, "broken")
        assert broken.status_code == 500
        assert "'broken' could not be loaded" in broken.json()["error"]["message"]
        status = listing(server)["broken"]
        assert status["value"] == "unloaded" and status["failed"] is True and status["error"]
        assert complete(server, "tiny-a").status_code == 200
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_a_preset_gives_each_model_its_own_flags(models_dir, tmp_path):
    preset = tmp_path / "models.ini"
    preset.write_text(
        "[*]\n"
        "ctx-size = 1024\n"
        "n-predict = 3\n"
        "\n"
        f"[short]\nmodel = {models_dir / 'tiny-a.gguf'}\nctx-size = 512\nparallel = 1\n"
        "\n"
        f"[wide]\nLLAMA_ARG_MODEL = {models_dir / 'tiny-b.gguf'}\n"
    )
    # llama-server's precedence: this command line, then the model's section, then [*]
    with ServerProcess(None, "--models-preset", str(preset), "-np", "2") as server:
        assert set(listing(server)) == {"short", "wide"}
        assert "ctx-size = 512" in listing(server)["short"]["preset"]
        body = {"prompt": PROMPT, "temperature": 0, "ignore_eos": True}
        short = httpx.post(server.url + "/completion", json={"model": "short", **body}, timeout=60).json()
        wide = httpx.post(server.url + "/completion", json={"model": "wide", **body}, timeout=60).json()
        assert short["tokens_predicted"] == wide["tokens_predicted"] == 3  # [*]'s n-predict
        short_props = httpx.get(server.url + "/props", params={"model": "short"}, timeout=10).json()
        wide_props = httpx.get(server.url + "/props", params={"model": "wide"}, timeout=10).json()
        assert short_props["total_slots"] == wide_props["total_slots"] == 2  # -np 2 over short's parallel = 1
        assert short_props["default_generation_settings"]["n_ctx"] == 512 // 2  # its section's ctx-size, per slot
        assert wide_props["default_generation_settings"]["n_ctx"] == 1024 // 2  # [*]'s
    bad = tmp_path / "bad.ini"
    bad.write_text("[x]\nno-such-flag = 1\n")
    failed = router("--models-preset", str(bad))
    with pytest.raises(RuntimeError, match="no-such-flag: not a flag"):
        failed.start()


def test_a_sleeping_router_model_frees_its_memory_and_wakes_for_a_request(models_dir):
    with router("--models-dir", str(models_dir), "--sleep-idle-seconds", "1") as server:
        before = rss_mb(server.proc.pid)
        assert complete(server, "smol").status_code == 200
        loaded = rss_mb(server.proc.pid)
        wait_for(server, "smol", "sleeping", timeout=30)
        asleep = rss_mb(server.proc.pid)
        assert loaded - before > 50 and loaded - asleep > 0.7 * (loaded - before), (before, loaded, asleep)
        again = complete(server, "smol")
        assert again.status_code == 200 and listing(server)["smol"]["value"] == "loaded"


def test_a_single_model_server_sleeps_and_wakes(smollm2_path):
    server = ServerProcess(smollm2_path, "--sleep-idle-seconds", "1", "--metrics")
    with server:
        r = httpx.post(server.url + "/completion", json={"prompt": PROMPT, "n_predict": 4}, timeout=60)
        assert r.status_code == 200
        awake = rss_mb(server.proc.pid)
        httpx.get(server.url + "/metrics", timeout=10)  # ends the throughput window of that request
        metrics = httpx.get(server.url + "/metrics", timeout=10).text
        deadline = time.monotonic() + 30
        while not httpx.get(server.url + "/props", timeout=10).json()["is_sleeping"]:
            assert time.monotonic() < deadline, "never slept"
            time.sleep(0.1)
        assert awake - rss_mb(server.proc.pid) > 50  # the model's memory went back
        # what does not wake it answers as before
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        assert httpx.get(server.url + "/metrics", timeout=10).text == metrics
        assert httpx.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"] == smollm2_path.name
        assert httpx.get(server.url + "/props", timeout=10).json()["is_sleeping"] is True
        tokens = httpx.post(server.url + "/tokenize", json={"content": "Hello"}, timeout=60)
        assert tokens.status_code == 200 and tokens.json()["tokens"]
        assert httpx.get(server.url + "/props", timeout=10).json()["is_sleeping"] is False
        # the counters go on from the totals of the freed model
        predicted = metric_of(metrics, "tokens_predicted_total")
        body = {"prompt": PROMPT, "n_predict": 4, "ignore_eos": True}
        assert httpx.post(server.url + "/completion", json=body, timeout=60).status_code == 200
        now = httpx.get(server.url + "/metrics", timeout=10).text
        assert metric_of(now, "tokens_predicted_total") == predicted + 4
        assert metric_of(now, "n_decode_total") > metric_of(metrics, "n_decode_total")  # the engine's totals


def metric_of(text: str, name: str) -> float:
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(f"llamacpp:{name} ")))


def test_a_model_is_downloaded_into_the_cache_served_and_deleted(models_dir, tmp_path):
    """``POST /models`` fetches OWNER/NAME:TAG as -hf would (here from a Hub stand-in on 127.0.0.1),
    ``/models/sse`` says when it is done, the model is listed and served from the cache, and
    ``DELETE /models?model=`` unloads it and removes its files (other models' stay)."""
    from fake_hub import FakeHub

    tiny = models_dir / "tiny-a.gguf"
    hub = FakeHub({"test/dl-GGUF": {"dl-Q8_0.gguf": tiny, "dl-F16.gguf": tiny, "README.md": b"hi"}})
    cache = tmp_path / "hub"
    env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_XET": "1"}
    events: list[dict] = []
    try:
        with router("--models-dir", str(models_dir), env=env) as server:
            listening = threading.Event()

            def listen():
                with httpx.stream("GET", server.url + "/models/sse", timeout=120) as response:
                    listening.set()
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            events.append(json.loads(line[6:]))
                events.append({"event": "(the stream ended)", "model": ""})

            threading.Thread(target=listen, daemon=True).start()
            assert listening.wait(10)
            bad = httpx.post(server.url + "/models", json={"model": "no-slash"}, timeout=10)
            assert bad.status_code == 400 and "owner/name" in bad.json()["error"]["message"]
            for tag in ("Q8_0", "F16"):
                started = httpx.post(server.url + "/models", json={"model": f"test/dl-GGUF:{tag}"}, timeout=10)
                assert started.json() == {"success": True}
                until(lambda tag=tag: any(e["event"] == "download_finished" and tag in e["model"] for e in events))
            again = httpx.post(server.url + "/models", json={"model": "test/dl-GGUF:Q8_0"}, timeout=10)
            assert again.status_code == 400 and "already exists" in again.json()["error"]["message"]
            missing = httpx.post(server.url + "/models", json={"model": "test/none-GGUF:Q8_0"}, timeout=10)
            assert missing.status_code == 200
            until(lambda: any(e["event"] == "download_failed" and "none" in e["model"] for e in events))
            assert "not found" in next(e for e in events if e["event"] == "download_failed")["data"]["error"]
            assert listing(server)["test/dl-GGUF:Q8_0"]["value"] == "unloaded"
            served = complete(server, "test/dl-GGUF:Q8_0")
            assert served.status_code == 200
            assert served.json()["choices"][0]["text"] == complete(server, "tiny-a").json()["choices"][0]["text"]
            assert ("status_change", "test/dl-GGUF:Q8_0", "loaded") in [
                (e["event"], e["model"], e.get("data", {}).get("status")) for e in events
            ]
            gone = httpx.delete(server.url + "/models", params={"model": "test/dl-GGUF:Q8_0"}, timeout=60)
            assert gone.json() == {"success": True}
            assert "test/dl-GGUF:Q8_0" not in listing(server) and "test/dl-GGUF:F16" in listing(server)
            assert [p.name for p in cache.rglob("*.gguf")] == ["dl-F16.gguf"]
            until(lambda: any(e["event"] == "model_remove" for e in events))
            local = httpx.delete(server.url + "/models", params={"model": "tiny-a"}, timeout=10)
            assert local.status_code == 400 and "not removable" in local.json()["error"]["message"]
            httpx.delete(server.url + "/models", params={"model": "test/dl-GGUF:F16"}, timeout=60)
            assert not (cache / "models--test--dl-GGUF").exists()  # the last model takes its repository
            began = time.monotonic()
        assert time.monotonic() - began < 10  # an open /models/sse does not hold up the stop
        until(lambda: events[-1]["event"] == "(the stream ended)")
    finally:
        hub.stop()


def until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
