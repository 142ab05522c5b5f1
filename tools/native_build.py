"""Build llama.cpp's shared libraries (llama, ggml*, mtmd) with CMake into a persistent build dir.

An unchanged rebuild only re-runs ninja's up-to-date check. ``CMAKE_ARGS`` from the environment
passes through (e.g. ``-DGGML_CUDA=ON``). ``LLAMA_FFI_PORTABLE=1`` builds what a wheel ships:
``GGML_NATIVE=OFF``, backends as loadable modules (``GGML_BACKEND_DL``) and one CPU module per
instruction-set level (``GGML_CPU_ALL_VARIANTS``), of which ggml loads the best at run time; it
builds into ``build/llama.cpp-portable`` so the native build stays. ``LLAMA_FFI_BUILD_DIR`` names
another build folder (e.g. one per ``CMAKE_ARGS`` set).

Usage::

    python -m tools.native_build              # build the materialised pin into build/llama.cpp
    python -m tools.native_build --reference  # llama-simple/-completion/-bench/-embedding
    python -m tools.native_build --cpu-variant haswell  # the CPU library at ggml's haswell level

``--cpu-variant NAME`` builds the CPU backend at one of ggml's x86 levels (its own table in
``ggml/src/CMakeLists.txt``: ``haswell`` is AVX2 without AVX-512) into
``llama_ffi/lib/cpu-variants/NAME/``, where ``LLAMA_FFI_CPU_VARIANT=NAME`` finds it
(``llama_ffi/_cpu_variant.py``): the numerics of such CPUs, checked on this one.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tools.vendor import REPO_ROOT, Tree, materialise

DEFAULT_BUILD_DIR = REPO_ROOT / "build" / "llama.cpp"
PORTABLE_BUILD_DIR = REPO_ROOT / "build" / "llama.cpp-portable"
TARGETS = ("llama", "ggml", "mtmd")


class NativeBuildError(RuntimeError):
    pass


def _require_tools() -> dict[str, str]:
    found = {name: shutil.which(name) for name in ("cmake", "ninja")}
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    missing = [n for n, p in found.items() if not p]
    if not cc or not cxx:
        missing.append("a C and C++ compiler (e.g. apt-get install build-essential)")
    if "cmake" in missing or "ninja" in missing:
        missing = [m if m not in ("cmake", "ninja") else f"{m} (pip install {m})" for m in missing]
    if missing:
        raise NativeBuildError("cannot build llama.cpp: missing " + ", ".join(missing))
    return {"cmake": found["cmake"], "ninja": found["ninja"]}


def portable() -> bool:
    return os.environ.get("LLAMA_FFI_PORTABLE", "").lower() in ("1", "true", "on", "yes")


def build_dir() -> Path:
    """Where ``build()`` builds: ``LLAMA_FFI_BUILD_DIR``, else one folder per build kind."""
    chosen = os.environ.get("LLAMA_FFI_BUILD_DIR")
    if chosen:
        return Path(chosen).resolve()
    return PORTABLE_BUILD_DIR if portable() else DEFAULT_BUILD_DIR


def cmake_args(tree: Tree) -> list[str]:
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DLLAMA_BUILD_COMMON=OFF",
        "-DLLAMA_BUILD_TOOLS=OFF",
        "-DLLAMA_BUILD_MTMD=ON",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_OPENSSL=OFF",
        # ggml's RPC backend (small): models spread over `rpc-server` workers on other machines.
        "-DGGML_RPC=ON",
        f"-DGGML_NATIVE={'OFF' if portable() else 'ON'}",
        # The thread pool stays GCC's OpenMP (llama.cpp's default where the compiler has it), by
        # measurement (python -m bench --thread-pool, SmolLM2 Q4_1, Intel Xeon with AMX, 2 cores,
        # 3 alternated rounds): against ggml's own pool, prompt 1.41x (263 / 186 t/s), generation
        # and 8 sequences within noise (own pool 0.94-1.09x); with 4 threads on the 2 cores,
        # ggml's pool stalled in every run (past 240 s) where OpenMP kept 253 / 54 / 82 t/s. On an
        # AMD EPYC (2 cores, same test): generation 1.18x (130.8 / 111.1), prompt and 8 sequences
        # even; beside a busy process on every core, generation 5.3x (35.2 / 6.7 t/s).
        # CMAKE_ARGS=-DGGML_OPENMP=OFF builds the other (the Zig-built wheel's pool is ggml's).
        f"-DLLAMA_BUILD_NUMBER={tree.build_number}",
        f"-DLLAMA_BUILD_COMMIT={tree.commit[:12]}",
        # One plain file per library, found next to each other through $ORIGIN.
        "-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON",
        "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
        "-DCMAKE_INSTALL_RPATH=$ORIGIN",
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    ]
    if portable():
        # Every backend a module that ggml_backend_load_all_from_path() finds in the package's
        # lib folder; the CPU backend once per x86 level (x64, SSE4.2, AVX, AVX2, AVX-512, ...),
        # each scoring itself against the running CPU so that the best one loads.
        args += ["-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"]
    elif platform.machine().lower() in ("x86_64", "amd64"):
        # -march=native would turn on ggml's AMX matmul on CPUs that have it, and at this pin that
        # path crashes on Q4_0/Q4_1 batches (SIGSEGV in ggml_backend_amx_mul_mat; llama.cpp issue
        # 20824, PR 16315). An explicit -mno-* beats -march=native whatever the order.
        no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        args += [f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}"]
    return args + shlex.split(os.environ.get("CMAKE_ARGS", ""))


def _run(cmd: list[str], what: str, env: dict | None = None) -> None:
    print("+", shlex.join(cmd), file=sys.stderr, flush=True)
    if subprocess.run(cmd, env=env).returncode != 0:
        raise NativeBuildError(f"{what} failed (command above); see its output")


def _configure_and_build(
    tree: Tree, folder: Path, args: list[str], targets: tuple[str, ...], jobs: int | None, what: str
) -> Path:
    """Configure when the arguments changed, then build ``targets``; return ``folder/bin``."""
    tools = _require_tools()
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / ".llama-ffi-configure"
    # pip's isolated builds bring their own cmake/ninja from a temporary folder: a changed tool
    # path re-runs the (quick) configure so the cache never points at a deleted program.
    wanted = "\n".join([str(tree.path), tree.label, tools["cmake"], tools["ninja"], "git-ceiling", *args])
    previous = stamp.read_text() if stamp.is_file() else ""
    if previous.split("\n")[:2] != wanted.split("\n")[:2] and folder.exists():
        # Another tree (a bump): its files keep the archive's old mtimes, so ninja would keep
        # objects of the previous tree. Start from an empty build folder.
        shutil.rmtree(folder)
        folder.mkdir(parents=True)
    if not (previous == wanted and (folder / "build.ninja").is_file()):
        # A tree without its own .git (an sdist) sits inside our checkout: stop git there, or
        # ggml's CMake would record *our* commit as llama.cpp's (and the import guard refuse it).
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.path.parent))
        _run(
            [
                tools["cmake"],
                "-S",
                str(tree.path),
                "-B",
                str(folder),
                "-G",
                "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={tools['ninja']}",
                *args,
            ],
            f"CMake configure ({what})",
            env,
        )
        stamp.write_text(wanted)
    _run(
        [tools["cmake"], "--build", str(folder), "--target", *targets, "-j", str(jobs or os.cpu_count() or 2)],
        f"CMake build ({what})",
    )
    return folder / "bin"


def build(tree: Tree, into: Path | None = None, jobs: int | None = None) -> Path:
    """The shared libraries the package ships; returns the folder holding them. Libraries the
    build links from elsewhere and the package must carry (``LLAMA_FFI_BUNDLED_LIBRARIES``, paths
    separated by ``os.pathsep``: the wheel's OpenMP runtime) are copied in beside them."""
    lib_dir = _configure_and_build(tree, into or build_dir(), cmake_args(tree), TARGETS, jobs, "libraries")
    for path in filter(None, os.environ.get("LLAMA_FFI_BUNDLED_LIBRARIES", "").split(os.pathsep)):
        replace_file(Path(path), lib_dir / Path(path).name)
    return lib_dir


REFERENCE_BUILD_DIR = REPO_ROOT / "build" / "llama.cpp-reference"
REFERENCE_TOOLS = (
    "llama-simple",
    "llama-completion",
    "llama-bench",
    "llama-embedding",
    "llama-speculative-simple",
    "ggml-rpc-server",
    "llama-batched-bench",
    "llama-mtmd-cli",
    "llama-server",
)
_REFERENCE_OPTIONS = {
    "-DLLAMA_BUILD_COMMON=OFF": "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TOOLS=OFF": "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_EXAMPLES=OFF": "-DLLAMA_BUILD_EXAMPLES=ON",
    "-DLLAMA_BUILD_SERVER=OFF": "-DLLAMA_BUILD_SERVER=ON",
}


def build_reference_tools(
    tree: Tree, targets: tuple[str, ...] = REFERENCE_TOOLS, build_dir: Path = REFERENCE_BUILD_DIR
) -> Path:
    """llama.cpp's own programs from the same tree, with the same compile options as the
    libraries, for reference checks and benchmarks only (never shipped)."""
    args = [_REFERENCE_OPTIONS.get(a, a) for a in cmake_args(tree)]
    return _configure_and_build(tree, build_dir, args, targets, None, "reference tools")


# CPU modules of a GGML_CPU_ALL_VARIANTS build that the package does not ship, and why. Without
# it, a Sapphire Rapids CPU loads the best remaining module (AVX-512 with VNNI and BF16).
LEFT_OUT_MODULES = {
    "libggml-cpu-sapphirerapids.so": "its AMX matmul crashes on Q4_0/Q4_1 batches at this pin (see cmake_args)",
}


def shared_libraries(lib_dir: Path) -> list[Path]:
    """The libraries the package ships from ``lib_dir``."""
    libs = sorted(p for p in lib_dir.glob("lib*.so") if p.is_file() and p.name not in LEFT_OUT_MODULES)
    libs += sorted(p for p in lib_dir.glob("lib*.dylib") if p.is_file())
    if not any(p.name.startswith("libllama.") for p in libs):
        raise NativeBuildError(f"no libllama found in {lib_dir} after the build")
    return libs


def replace_file(source: Path, target: Path) -> None:
    """Copy under a temporary name, then rename over ``target``: a process that has the old file
    mapped keeps its inode (rewriting it in place gives that process SIGBUS)."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.copy2(source, tmp)
    os.replace(tmp, target)


def copy_libraries(lib_dir: Path, dest: Path) -> list[Path]:
    """Make ``dest`` hold exactly this build's libraries: one left from another kind of build (a
    native ``libggml-cpu.so`` beside portable CPU modules) would be loaded or packaged with them."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for lib in shared_libraries(lib_dir):
        target = dest / lib.name
        # copy2 keeps the mtime: any difference means another build's file (older or newer)
        if not target.exists() or (target.stat().st_mtime, target.stat().st_size) != (
            lib.stat().st_mtime,
            lib.stat().st_size,
        ):
            replace_file(lib, target)
        out.append(target)
    for stale in set(dest.glob("lib*.so")) | set(dest.glob("lib*.dylib")):
        if stale not in out:
            stale.unlink()
    return out


VARIANTS_DIR = REPO_ROOT / "llama_ffi" / "lib" / "cpu-variants"
# ggml's feature names (its GGML_<NAME> options) as /proc/cpuinfo spells the flags
_CPUINFO_FLAGS = {
    "SSE42": "sse4_2",
    "AVX": "avx",
    "F16C": "f16c",
    "FMA": "fma",
    "AVX2": "avx2",
    "BMI2": "bmi2",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AVX_VNNI": "avx_vnni",
    "AMX_TILE": "amx_tile",
    "AMX_INT8": "amx_int8",
}


def cpu_variants(tree: Tree) -> dict[str, list[str]]:
    """ggml's x86 CPU variants (``ggml_add_cpu_backend_variant`` in the tree): name -> features."""
    text = (tree.path / "ggml" / "src" / "CMakeLists.txt").read_text()
    first = text.index("ggml_add_cpu_backend_variant(x64")
    start = text.rindex('if (GGML_SYSTEM_ARCH STREQUAL "x86")', 0, first)
    block = text[start : text.index("elseif", start)]
    return {
        m.group(1): m.group(2).split() for m in re.finditer(r"ggml_add_cpu_backend_variant\((\w+)\s*([^)]*)\)", block)
    }


def build_cpu_variant(tree: Tree, name: str) -> Path:
    """The CPU library alone, at variant ``name``'s level, copied to ``VARIANTS_DIR/name``."""
    variants = cpu_variants(tree)
    if name not in variants:
        raise NativeBuildError(f"no CPU variant {name!r} in this tree (it has: {', '.join(variants)})")
    features = variants[name]
    args = [
        a for a in cmake_args(tree) if not a.startswith(("-DGGML_NATIVE=", "-DCMAKE_C_FLAGS=", "-DCMAKE_CXX_FLAGS="))
    ]
    args += ["-DGGML_NATIVE=OFF", *(f"-DGGML_{f}=ON" for f in features)]
    bin_dir = _configure_and_build(
        tree, REPO_ROOT / "build" / f"llama.cpp-cpu-{name}", args, ("ggml-cpu",), None, f"CPU variant {name}"
    )
    dest = VARIANTS_DIR / name
    dest.mkdir(parents=True, exist_ok=True)
    replace_file(bin_dir / "libggml-cpu.so", dest / "libggml-cpu.so")
    (dest / "features").write_text(" ".join(_CPUINFO_FLAGS.get(f, f.lower()) for f in features) + "\n")
    return dest / "libggml-cpu.so"


def main() -> int:
    if "--cpu-variant" in sys.argv[1:]:
        name = sys.argv[sys.argv.index("--cpu-variant") + 1]
        print(build_cpu_variant(materialise(), name))
        return 0
    if "--reference" in sys.argv[1:]:
        print(build_reference_tools(materialise()))
        return 0
    try:
        lib_dir = build(materialise())
    except (NativeBuildError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for lib in shared_libraries(lib_dir):
        print(lib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
