"""Llama.from_pretrained and ``llama-ffi complete -hf`` against a fake Hub on 127.0.0.1 (tests/fake_hub.py).
huggingface_hub reads HF_ENDPOINT at import, so each call runs in a subprocess with its own
environment; every subprocess and server is bounded in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_hub import FakeHub

from llama_ffi.high import Llama

pytest.importorskip("huggingface_hub", reason="huggingface_hub is the optional [hf] extra")
REPO = Path(__file__).resolve().parent.parent
PROMPT = "The capital of France is"

RUN = r"""
import json, sys
from llama_ffi.high import Llama, hub
kind, args = sys.argv[1], json.loads(sys.argv[2])
try:
    if kind == "complete":
        with Llama.from_pretrained(**args, n_ctx=256, progress=False) as llm:
            print(json.dumps({"path": llm.model_path,
                              "text": llm(PROMPT_REPR, max_tokens=8, temperature=0)["choices"][0]["text"]}))
    else:
        print(json.dumps({"path": str(hub.download(**args))}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
""".replace("PROMPT_REPR", repr(PROMPT))


def call(hub: FakeHub, cache: Path, kind: str, offline: bool = False, **args) -> dict:
    env = dict(
        os.environ,
        HF_ENDPOINT=hub.endpoint,
        HF_HUB_CACHE=str(cache),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        HF_HUB_ETAG_TIMEOUT="5",
        HF_HUB_DOWNLOAD_TIMEOUT="10",
        PYTHONPATH=str(REPO),
    )
    env.pop("HF_HUB_OFFLINE", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", RUN, kind, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def hub(smollm2_path):
    server = FakeHub(
        {
            "tiny/smollm2": {"SmolLM2-135M-Instruct-Q4_1.gguf": smollm2_path, "README.md": b"# SmolLM2\n"},
            "tiny/two": {"a-Q4_1.gguf": b"GGUF a", "b-Q4_1.gguf": b"GGUF b", "mmproj-f16.gguf": b"GGUF m"},
            "tiny/split": {
                "big-Q8_0-00001-of-00002.gguf": b"GGUF 1",
                "big-Q8_0-00002-of-00002.gguf": b"GGUF 2",
                "broken-00001-of-00003.gguf": b"GGUF x",
            },
            "tiny/cut": {"cut-Q4_1.gguf": bytes(range(256)) * 4096},
        },
        truncated={"cut-Q4_1.gguf"},
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def local_text(smollm2_path):
    with Llama(smollm2_path, n_ctx=256, progress=False) as llm:
        return llm(PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"]


def test_download_then_answer_offline_without_a_request(hub, tmp_path, local_text):
    first = call(hub, tmp_path, "complete", repo_id="tiny/smollm2", filename="*Q4_1.gguf")
    assert first.get("text") == local_text, first
    assert any("/resolve/main/SmolLM2-135M-Instruct-Q4_1.gguf" in r for r in hub.requests)
    seen = len(hub.requests)
    again = call(hub, tmp_path, "complete", repo_id="tiny/smollm2", filename="*Q4_1.gguf")
    assert again == first and len(hub.requests) == seen  # cached: no request at all
    hub.stop()
    offline = call(hub, tmp_path, "complete", offline=True, repo_id="tiny/smollm2", filename="*Q4_1.gguf")
    assert offline == first
    missing = call(hub, tmp_path, "download", offline=True, repo_id="tiny/smollm2", filename="*.md")
    assert missing["error"] == "HubError" and "HF_HUB_OFFLINE is set" in missing["message"]


def test_a_glob_must_match_one_file(hub, tmp_path):
    none = call(hub, tmp_path, "download", repo_id="tiny/two", filename="*Q8_0.gguf")
    assert none["error"] == "HubError" and "no file in tiny/two matches '*Q8_0.gguf'" in none["message"]
    assert "a-Q4_1.gguf" in none["message"]  # it lists what there is
    two = call(hub, tmp_path, "download", repo_id="tiny/two", filename="*Q4_1.gguf")
    assert two["error"] == "HubError" and "2 files in tiny/two match" in two["message"]
    one = call(hub, tmp_path, "download", repo_id="tiny/two", filename="a-*.gguf", additional_files=["mmproj-*"])
    assert Path(one["path"]).read_bytes() == b"GGUF a"
    assert (Path(one["path"]).parent / "mmproj-f16.gguf").read_bytes() == b"GGUF m"


def test_a_split_model_brings_all_its_parts(hub, tmp_path):
    got = call(hub, tmp_path, "download", repo_id="tiny/split", filename="*Q8_0*.gguf")
    first = Path(got["path"])
    assert first.name == "big-Q8_0-00001-of-00002.gguf" and first.read_bytes() == b"GGUF 1"
    assert (first.parent / "big-Q8_0-00002-of-00002.gguf").read_bytes() == b"GGUF 2"
    broken = call(hub, tmp_path, "download", repo_id="tiny/split", filename="broken-*")
    assert broken["error"] == "HubError" and "broken-00002-of-00003.gguf" in broken["message"]


def test_a_missing_repository_and_a_cut_download_are_clear_errors(hub, tmp_path):
    missing = call(hub, tmp_path, "download", repo_id="tiny/nothing", filename="*.gguf")
    assert missing["error"] == "HubError" and "repository tiny/nothing not found" in missing["message"]
    cut = call(hub, tmp_path, "download", repo_id="tiny/cut", filename="*.gguf")
    assert "error" in cut, cut
    snapshots = list(tmp_path.glob("models--tiny--cut/snapshots/*/cut-Q4_1.gguf"))
    assert snapshots == []  # no half file where a model would be looked for


def test_cli_hf_repo_and_quant(hub, tmp_path, local_text):
    env = dict(
        os.environ, HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(tmp_path), HF_HUB_DISABLE_XET="1", PYTHONPATH=str(REPO)
    )
    env.pop("HF_HUB_OFFLINE", None)
    base = [sys.executable, "-m", "llama_ffi", "complete", PROMPT, "-n", "8", "--temp", "0", "-c", "256"]
    out = subprocess.run(
        base + ["-hf", "tiny/smollm2:Q4_1"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO
    )
    assert out.returncode == 0 and out.stdout == local_text + "\n", out.stderr[-2000:]
    bad = subprocess.run(
        base + ["-hf", "tiny/two", "--hf-file", "*.bin"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO
    )
    assert bad.returncode == 2 and "no file in tiny/two matches '*.bin'" in bad.stderr
