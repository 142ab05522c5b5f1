"""The portable wheel: built by ``python -m tools.wheel``, installed in a fresh virtual environment
where no compiler, no CMake and no llama.cpp tree can be reached, and run there.

Long (the first wheel build compiles every CPU variant: about 25 minutes on 2 cores), so these
tests are marked ``wheel`` and left out of the default run:
``python -m pytest -m wheel tests/test_wheel.py``. ``LLAMA_FFI_WHEEL=path.whl`` tests a wheel
already built.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import gpu_offload
import numpy as np
import pytest

from llama_ffi.testing import assert_same_or_near_tie, bound_across

pytestmark = pytest.mark.wheel

REPO_ROOT = Path(__file__).resolve().parent.parent
PROMPT = "The capital of France is"
N_TOKENS = 32


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    given = os.environ.get("LLAMA_FFI_WHEEL")
    if given:
        return Path(given).resolve()
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "tools.wheel", str(out)], cwd=REPO_ROOT, check=True)
    (built,) = out.glob("llama_ffi-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    # Only binaries: a step that needed a compiler would fail here rather than build something.
    subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--only-binary", ":all:", str(wheel)], check=True
    )
    return root


def isolated_env(venv: Path, **extra: str) -> dict[str, str]:
    """Nothing to build with: only the venv on PATH, compilers named as missing files, no tree."""
    env = {
        "PATH": str(venv / "bin"),
        "HOME": os.environ["HOME"],
        "CC": "/nonexistent/cc",
        "CXX": "/nonexistent/c++",
        "LANG": "C.UTF-8",
    }
    env.update({k: v for k, v in os.environ.items() if k in ("LLAMA_FFI_CACHE", "XDG_CACHE_HOME", "TMPDIR")})
    env.update(extra)
    return env


def run_in_venv(venv: Path, code: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=tmp_path,
        env=isolated_env(venv, **extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_environment_has_nothing_to_build_with(venv, tmp_path):
    env = isolated_env(venv)
    for tool in ("cc", "gcc", "c++", "g++", "clang", "cmake", "ninja"):
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    proc = run_in_venv(
        venv, "import importlib.util as u, llama_ffi; print(u.find_spec('cmake'), llama_ffi.__file__)", tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    found_cmake, where = proc.stdout.split()
    assert found_cmake == "None" and where.startswith(str(venv))


def test_the_wheel_carries_the_cpu_variants_and_no_development_files(wheel, tree):
    from tools.native_build import LEFT_OUT_MODULES, cpu_variants

    assert re.search(r"-manylinux_\d+_\d+_x86_64", wheel.name), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith("llama_ffi/lib/")}
    wanted = {f"libggml-cpu-{v}.so" for v in cpu_variants(tree)} - set(LEFT_OUT_MODULES)
    assert wanted <= shipped, sorted(wanted - shipped)
    assert not set(LEFT_OUT_MODULES) & shipped
    assert {"libllama.so", "libggml.so", "libggml-base.so", "libmtmd.so", "libggml-rpc.so"} <= shipped
    assert "libggml-cpu.so" not in shipped  # no native CPU library beside the variants
    assert "libiomp5.so" in shipped  # the OpenMP runtime the CPU modules run on (tools/openmp_runtime.py)
    assert not [n for n in names if n.endswith((".h", ".a", ".cmake", ".pc"))]
    assert not [n for n in names if "libvulkan" in n or "libcuda" in n]


def test_the_cpu_variant_is_the_best_this_cpu_runs(venv, tmp_path, tree):
    proc = run_in_venv(venv, "import json, llama_ffi; print(json.dumps(llama_ffi.build_info()))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["backend_modules"] is True and "CPU" in info["backends"] and "RPC" in info["backends"]
    assert Path(info["cpu_library"]).is_relative_to(venv)
    # ggml's score (ggml-cpu/arch/x86/cpu-feats.cpp): a variant runs if the CPU has all its
    # features; each feature weighs a power of two in this order.
    order = [
        "FMA",
        "F16C",
        "SSE42",
        "BMI2",
        "AVX",
        "AVX2",
        "AVX_VNNI",
        "AVX512",
        "AVX512_VBMI",
        "AVX512_BF16",
        "AVX512_VNNI",
        "AMX_INT8",
    ]
    flag = {
        "FMA": ["fma"],
        "F16C": ["f16c"],
        "SSE42": ["sse4_2"],
        "BMI2": ["bmi2"],
        "AVX": ["avx"],
        "AVX2": ["avx2"],
        "AVX_VNNI": ["avx_vnni"],
        "AVX512": ["avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"],
        "AVX512_VBMI": ["avx512vbmi"],
        "AVX512_BF16": ["avx512_bf16"],
        "AVX512_VNNI": ["avx512_vnni"],
        "AMX_INT8": ["amx_int8"],
    }
    cpu = set(Path("/proc/cpuinfo").read_text().split())
    from tools.native_build import LEFT_OUT_MODULES, cpu_variants

    scores = {}
    for name, feats in cpu_variants(tree).items():
        if f"libggml-cpu-{name}.so" in LEFT_OUT_MODULES:
            continue
        if all(f in cpu for feat in feats if feat in flag for f in flag[feat]):
            scores[name] = 1 + sum(1 << order.index(f) for f in feats if f in order)
    best = max(scores.values())
    assert scores.get(info["cpu_variant"]) == best, (info["cpu_variant"], scores)


def test_readme_completion_runs_without_a_compiler(venv, tmp_path):
    env = isolated_env(venv)
    proc = subprocess.run(
        [str(venv / "bin" / "llama-ffi"), "complete", PROMPT, "-n", str(N_TOKENS), "--temp", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), "no completion text"


_OPENMP = """
import json
from llama_ffi import Llama, lib
from llama_ffi.registry import fetch
llm = Llama(str(fetch()), n_ctx=256, n_threads=2, progress=False)
llm.create_completion("Hello", max_tokens=4)
maps = open("/proc/self/maps").read()
print(json.dumps(sorted({{line.split()[-1] for line in maps.splitlines() if "omp" in line.rsplit("/", 1)[-1]}})))
print(lib.llama_ffi_release_threads())
"""


def test_the_cpu_modules_run_on_the_wheels_own_openmp_runtime(venv, tmp_path):
    proc = run_in_venv(venv, _OPENMP.format(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded, paused = proc.stdout.strip().splitlines()[-2:]
    runtimes = json.loads(loaded)
    assert len(runtimes) == 1 and runtimes[0].endswith("/llama_ffi/lib/libiomp5.so"), runtimes
    assert paused == "0"  # an idle loop's pool is handed back through the same runtime


# In the venv: the greedy tokens, and the logits of every position of a fixed text (to measure how
# far the portable CPU variant's numbers are from the source build's on this machine).
_GREEDY = """
import json, sys
import numpy as np
from llama_ffi import Llama
from llama_ffi.registry import fetch
llm = Llama(str(fetch()), n_ctx=256, progress=False)
out = llm.create_completion({prompt!r}, max_tokens={n}, temperature=0.0)
from llama_ffi.testing import stepwise_logits
np.save("logits.npy", stepwise_logits(llm))
print(json.dumps({{"text": out["choices"][0]["text"]}}))
"""


def test_greedy_text_equals_the_source_build_or_a_near_tie(venv, tmp_path, smollm2_path):
    from llama_ffi.high import Llama

    code = _GREEDY.format(prompt=PROMPT, n=N_TOKENS)
    proc = run_in_venv(venv, code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])["text"]
    portable = np.load(tmp_path / "logits.npy")
    with Llama(str(smollm2_path), n_ctx=256, progress=False) as llm:
        assert_same_or_near_tie(llm, PROMPT, got, N_TOKENS, limit=bound_across(llm, portable))


def test_another_builds_libraries_are_refused(venv, tmp_path):
    """The wheel finds its own libraries by RPATH, which LD_LIBRARY_PATH cannot override; another
    build's libllama loaded first (LD_PRELOAD) gets the import guard's error, not a crash."""
    other = REPO_ROOT / "llama_ffi" / "lib" / "libllama.so"
    if not other.is_file():
        pytest.skip("no source build in this checkout to load first")
    on_path = run_in_venv(
        venv,
        "import llama_ffi; from llama_ffi import _guard; print(_guard.loaded_library())",
        tmp_path,
        LD_LIBRARY_PATH=str(other.parent),
    )
    assert on_path.returncode == 0, on_path.stderr
    assert on_path.stdout.strip().startswith(str(venv))
    proc = run_in_venv(venv, "import llama_ffi", tmp_path, LD_PRELOAD=str(other))
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "LibraryMismatchError" in proc.stderr and "another llama.cpp build is first" in proc.stderr


# ---- one wheel for every CPython from 3.10, and for glibc 2.28 ------------------------------------
OLDEST_GLIBC = (2, 28)
PYTHONS = ("3.10", "3.11", "3.13")  # the oldest llguidance >= 1.5.0 serves, to the newest


def glibc_versions(library: bytes) -> set[tuple[int, ...]]:
    """The GLIBC_x.y symbol versions an ELF file's dynamic section asks for."""
    return {tuple(int(p) for p in m.split(b".")) for m in re.findall(rb"GLIBC_(\d+(?:\.\d+)+)", library)}


def test_the_wheel_is_abi3_and_needs_nothing_newer_than_glibc_2_28(wheel, tmp_path):
    tag = re.search(r"-cp310-abi3-manylinux_(\d+)_(\d+)_x86_64", wheel.name)
    assert tag and (int(tag[1]), int(tag[2])) <= OLDEST_GLIBC, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "llama_ffi/_lib.abi3.so" in names and not [n for n in names if "cpython-3" in n]
    libraries = [n for n in names if n.endswith(".so") or ".so." in n]
    needed = {}
    for name in libraries:
        needed[name] = glibc_versions(zipfile.ZipFile(wheel).read(name))
    too_new = {n: max(v) for n, v in needed.items() if v and max(v) > OLDEST_GLIBC}
    assert not too_new, too_new
    assert len(libraries) >= 10 and all(needed.values()), needed  # every library was read
    # auditwheel show, told of glibc's libraries only: the Vulkan loader the Vulkan module links is
    # the user's system's (never grafted), so its own needs are not the wheel's.
    glibc_only = tmp_path / "glibc"
    glibc_only.mkdir()
    for name in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"):
        found = next(
            (Path(d) / name for d in ("/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64") if (Path(d) / name).exists()),
            None,
        )
        if found is not None:
            (glibc_only / name).symlink_to(found)
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", "--json", "--ldpaths", str(glibc_only), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert show.returncode == 0, show.stderr
    report = json.loads(show.stdout)
    platform = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", report["sym_tag"])
    assert platform and (int(platform[1]), int(platform[2])) <= OLDEST_GLIBC, report["sym_tag"]
    assert set(report["external_libs"]) <= {"libvulkan.so.1"}, report["external_libs"]


def _python(version: str) -> Path:
    found = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python"))
    if not found:
        pytest.skip(f"no CPython {version} under ~/.pyenv/versions")
    return found[-1]


_SMOKE = """
import json, sys
import numpy as np
import llama_ffi
from llama_ffi import lib
from llama_ffi.registry import fetch
from llama_ffi import Llama
model = str(fetch())
assert lib.llama_max_devices() >= 1
with Llama(model, n_ctx=256, progress=False) as llm:
    text = llm.create_completion({prompt!r}, max_tokens={n}, temperature=0.0)["choices"][0]["text"]
with Llama(model, n_ctx=256, embedding=True, pooling_type=1, progress=False) as llm:
    vector = llm.embed({prompt!r})
print(json.dumps({{"python": list(sys.version_info[:2]), "module": llama_ffi._lib.__file__, "text": text,
                  "embedding": vector}}))
"""


@pytest.mark.parametrize("version", PYTHONS)
def test_the_one_wheel_runs_on_each_cpython(wheel, version, tmp_path, smollm2_path):
    """Installed without a compiler on CPython 3.10, 3.11 and 3.13: the raw API, a greedy completion
    (the source build's text, or a near tie) and an embedding (the source build's, to rounding)."""
    from llama_ffi.high import Llama

    root = tmp_path / "env"
    subprocess.run([str(_python(version)), "-m", "venv", str(root)], check=True)
    subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--only-binary", ":all:", str(wheel)], check=True
    )
    proc = run_in_venv(root, _SMOKE.format(prompt=PROMPT, n=N_TOKENS), tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["python"] == [int(p) for p in version.split(".")]
    assert got["module"].endswith("_lib.abi3.so") and got["module"].startswith(str(root))
    with Llama(str(smollm2_path), n_ctx=256, progress=False) as llm:
        assert_same_or_near_tie(llm, PROMPT, got["text"], N_TOKENS)
    with Llama(str(smollm2_path), n_ctx=256, embedding=True, pooling_type=1, progress=False) as llm:
        want = np.asarray(llm.embed(PROMPT))
    vector = np.asarray(got["embedding"])
    assert vector.shape == want.shape and np.isfinite(vector).all()
    assert float(vector @ want / (np.linalg.norm(vector) * np.linalg.norm(want))) > 0.999


# ---- the Vulkan module ------------------------------------------------------------------------
LAVAPIPE_ICDS = ("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", "/usr/share/vulkan/icd.d/lvp_icd.json")


def test_the_vulkan_module_offloads_every_layer_on_mesas_software_device(wheel, venv, tmp_path, smollm2_path):
    from llama_ffi.high import Llama

    assert "llama_ffi/lib/libggml-vulkan.so" in zipfile.ZipFile(wheel).namelist()
    icd = next((p for p in LAVAPIPE_ICDS if Path(p).is_file()), None)
    if icd is None:
        pytest.skip("no Vulkan device to run on: apt-get install mesa-vulkan-drivers (lavapipe)")
    # ggml hides CPU-type Vulkan devices (lavapipe) unless they are named
    env = isolated_env(venv, GGML_VK_VISIBLE_DEVICES="0", VK_ICD_FILENAMES=icd)
    run = gpu_offload.run(venv / "bin" / "python", env, tmp_path, smollm2_path, tmp_path / "logits.npy")
    (device,) = run["devices"]
    assert device["name"] == "Vulkan0" and "llvmpipe" in device["description"], device
    (line,) = run["layers"]
    done, total = line.split("offloaded ")[1].split(" layers")[0].split("/")
    assert int(done) == int(total) > 0, line
    assert any("Vulkan0" in m for m in run["buffers"]), run["buffers"]  # the weights live on the device
    listed = subprocess.run(
        [str(venv / "bin" / "llama-ffi"), "devices"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.stdout.startswith("Vulkan0: llvmpipe") or "\nVulkan0: llvmpipe" in listed.stdout, listed
    with Llama(str(smollm2_path), n_ctx=256, progress=False) as llm:
        limit = bound_across(llm, np.load(tmp_path / "logits.npy"))
        assert_same_or_near_tie(llm, gpu_offload.PROMPT, run["text"], gpu_offload.N_TOKENS, limit=limit)


_ON_CPU = (
    "import json, llama_ffi; from llama_ffi import Llama; from llama_ffi.registry import fetch;"
    "llm = Llama(str(fetch()), n_ctx=128, progress=False);"
    "out = llm('The capital of France is', max_tokens=4, temperature=0);"
    "print(json.dumps([llama_ffi.build_info()['backends'], out['choices'][0]['text']]))"
)


def test_without_a_vulkan_loader_the_wheel_runs_on_the_cpu_and_prints_nothing(venv, tmp_path):
    """The loader hidden (an empty file bound over it in a private mount namespace): ggml cannot
    open the Vulkan module, skips it, and the CPU runs the completion."""
    unshare = shutil.which("unshare")
    loaders = sorted({str(Path(p).resolve()) for p in Path("/").glob("usr/lib*/**/libvulkan.so.1")})
    if unshare is None or not loaders:
        pytest.skip("needs unshare(1) and a Vulkan loader to hide")
    mount = shutil.which("mount") or "/bin/mount"
    hide = " && ".join(f"{mount} --bind /dev/null {shlex.quote(p)}" for p in loaders)
    code = _ON_CPU
    inner = f"{hide} && exec {shlex.quote(str(venv / 'bin' / 'python'))} -c {shlex.quote(code)}"
    proc = subprocess.run(
        [unshare, "-m", "--propagation", "private", "/bin/sh", "-c", inner],
        cwd=tmp_path,
        env=isolated_env(venv),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 and "unshare" in proc.stderr and "Operation not permitted" in proc.stderr:
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    backends, text = json.loads(proc.stdout)
    assert "Vulkan" not in backends and "CPU" in backends and text.strip()


def test_with_a_vulkan_loader_but_no_driver_the_wheel_runs_on_the_cpu_and_exits_cleanly(venv, tmp_path):
    """The loader finds no driver: Vulkan's instance fails, ggml unloads the module (whose static
    destructors must not outlive it: a crash at exit), and the CPU runs the completion."""
    proc = run_in_venv(venv, _ON_CPU, tmp_path, VK_ICD_FILENAMES=str(tmp_path / "no-driver.json"))
    assert (proc.returncode, proc.stderr) == (0, ""), (proc.returncode, proc.stderr)
    backends, text = json.loads(proc.stdout)
    assert "Vulkan" not in backends and "CPU" in backends and text.strip()
