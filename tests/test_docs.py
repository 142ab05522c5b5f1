"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link, a missing page in
the nav or an API reference that does not resolve fails it), every python block of its pages and of
the README runs as written, and the README stays one screen.

A file name a page uses stands for a fixture the tests build (``model.gguf`` is SmolLM2, ...): the
blocks run in a subprocess, in a scratch folder, with those names replaced by the fixtures' paths and
the docs' server address by a test server's. A block that cannot run here carries ``<!-- not run:
REASON -->`` right above it; the agent frameworks' blocks run in tests/test_agent_frameworks.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import DOCS, DOCS_URL
from server_process import ServerProcess

ROOT = DOCS.parent
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\n```python\n")
BLOCK = re.compile(r"^(<!-- not run: .+? -->\n)?```python\n(.*?)^```$", flags=re.S | re.M)
RUN_ELSEWHERE = {"agents.md": "tests/test_agent_frameworks.py"}
README_MAX_LINES = 250


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def blocks() -> list[tuple[str, int, str]]:
    """(page, index, code) of every block that runs here."""
    found = []
    for page in pages():
        if page.name in RUN_ELSEWHERE:
            continue
        for index, (not_run, code) in enumerate(BLOCK.findall(page.read_text())):
            if not not_run:
                found.append((page.name, index, code))
    return found


@pytest.fixture(scope="module")
def files(smollm2_path, tree, tmp_path_factory) -> dict[str, Path]:
    """The file names the docs use, and what stands for each."""
    import minilm
    import tiny_adapters
    import tiny_mmproj
    from tiny_mtp import TinyMtpConfig, write_gguf

    from llama_ffi.high import Llama

    d = tmp_path_factory.mktemp("docs-files")
    with Llama(smollm2_path, vocab_only=True, progress=False) as llm:
        n_embd, n_layer = int(llm.metadata["llama.embedding_length"]), int(llm.metadata["llama.block_count"])
    rows = tiny_adapters.control_vector_rows(n_embd, n_layer, seed=3)
    return {
        "model.gguf": smollm2_path,
        "SmolLM2-135M-Instruct.Q4_1.gguf": smollm2_path,
        "small.gguf": smollm2_path,  # a draft model: the same vocabulary
        "glm-4.5-air.gguf": write_gguf(d / "tiny-mtp.gguf", TinyMtpConfig()),
        "all-MiniLM-L6-v2-f16.gguf": minilm.gguf_path(tree),
        "reranker.gguf": minilm.rank_gguf_path(tree),
        "mmproj.gguf": tiny_mmproj.write_mmproj(d / "mmproj.gguf", n_embd_text=n_embd),
        "photo.jpg": tree.path / "tools" / "mtmd" / "test-1.jpeg",
        "coder-lora-f16.gguf": tiny_adapters.write_lora(d / "coder.gguf", smollm2_path, seed=1),
        "translator-lora-f16.gguf": tiny_adapters.write_lora(d / "translator.gguf", smollm2_path, seed=2),
        "calm.gguf": tiny_adapters.write_control_vector(d / "calm.gguf", rows),
    }


@pytest.fixture(scope="module")
def server_url(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "2048", "-np", "2", "--metrics") as server:
        yield server.url


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def with_fixtures(code: str, files: dict[str, Path]) -> str:
    for name, path in files.items():
        code = code.replace(f'"{name}"', repr(str(path)))
    return code


@pytest.mark.parametrize(("page", "index", "code"), [pytest.param(*b, id=f"{b[0]}-{b[1]}") for b in blocks()])
def test_block_runs_as_written(page, index, code, files, request, tmp_path):
    code = with_fixtures(code, files)
    if DOCS_URL in code:
        code = code.replace(DOCS_URL, request.getfixturevalue("server_url"))
    done = run(code, tmp_path)
    assert done.returncode == 0, f"{page} block {index} failed:\n{done.stderr[-3000:]}"


def test_blocks_that_do_not_run_say_why_and_are_few():
    reasons = [reason for page in pages() for reason in NOT_RUN.findall(page.read_text())]
    assert all("tests/" in reason for reason in reasons), reasons  # each names the test covering it
    assert len(reasons) <= len(blocks()) // 3, reasons


def test_every_page_is_in_the_nav_and_the_site_builds(tmp_path):
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [p.name for p in DOCS.glob("*.md") if p.name not in nav] == []
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "create_chat_completion" in reference and "from_json_schema" in reference


def test_readme_is_one_screen_and_links_into_the_site():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)\)", readme))
    missing = [name for name in linked if not (DOCS / name).is_file()]
    assert linked and not missing, missing
