"""Virtual environments of their own for libraries written against llama-cpp-python, cached under
~/.cache/llama-ffi/venvs: the libraries never enter the test run's environment, while llama-ffi and
its dependencies come from the running one (a ``.pth`` appends its site-packages after the venv's
own, so the libraries' pins win there). Each is keyed on the running environment and on what it
installs; without the registry, the tests that need one are skipped with the reason."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest


def running_site_packages() -> list[str]:
    """Where the interpreter running the tests finds llama-ffi's dependencies (a virtual
    environment's site-packages when the README's commands run in one, as a new user's do)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def prepared(name: str, requirements: list[str], without_deps: list[str] = ()) -> Path:
    """The python of the venv ``name`` holding ``requirements`` (and ``without_deps``, installed
    with ``--no-deps``: those that require llama-cpp-python, which llama-ffi stands in for)."""
    key = repr((sys.prefix, running_site_packages(), requirements, list(without_deps)))
    base = Path(os.environ.get("LLAMA_FFI_CACHE") or Path.home() / ".cache" / "llama-ffi") / "venvs"
    env_dir = base / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    python = env_dir / "bin" / "python"
    if (env_dir / ".ready").is_file():
        return python
    venv.EnvBuilder(clear=True, with_pip=True).create(env_dir)
    site = printed(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    Path(site, "llama_ffi_test_run.pth").write_text("\n".join(running_site_packages()) + "\n")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for cmd in [pip + requirements] + ([pip + ["--no-deps", *without_deps]] if without_deps else []):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"{name} could not be installed from the registry (offline?): {done.stderr.strip()[-400:]}")
    (env_dir / ".ready").write_text("\n".join([*requirements, *without_deps]) + "\n")
    return python


def printed(python: Path, code: str, env: dict | None = None) -> str:
    """What ``code`` prints when ``python`` runs it (a failure raises, with its output)."""
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()
