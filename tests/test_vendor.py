"""The pin and the native build refuse bad input with messages that say what to do."""

from __future__ import annotations

import dataclasses
import io
import tarfile

import pytest

from tools import native_build, vendor


def _pin(**changes) -> vendor.Pin:
    base = vendor.Pin(
        package="llama-ffi-test-archive",
        version="0.0.1",
        sha256="0" * 64,
        inner_path="vendor/llama.cpp",
        commit="abc",
        build_number=1,
    )
    return dataclasses.replace(base, **changes)


def _fake_archive(path):
    with tarfile.open(path, "w:gz") as tar:
        data = b"int x;\n"
        info = tarfile.TarInfo("pkg-0.0.1/vendor/llama.cpp/include/llama.h")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_archive_with_wrong_sha256_is_refused_naming_both(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMA_FFI_CACHE", str(tmp_path))
    pin = _pin()
    folder = tmp_path / "archives" / pin.package / pin.version
    folder.mkdir(parents=True)
    _fake_archive(folder / "pkg-0.0.1.tar.gz")
    actual = vendor.sha256_of(folder / "pkg-0.0.1.tar.gz")
    with pytest.raises(vendor.VendorError) as err:
        vendor.fetch_archive(pin)
    assert pin.sha256 in str(err.value) and actual in str(err.value)


def test_matching_archive_extracts_only_the_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMA_FFI_CACHE", str(tmp_path))
    archive = tmp_path / "a.tar.gz"
    _fake_archive(archive)
    pin = _pin(sha256=vendor.sha256_of(archive))
    vendor.extract_tree(archive, pin, tmp_path / "out" / "llama.cpp")
    assert (tmp_path / "out/llama.cpp/include/llama.h").read_text() == "int x;\n"
    assert (tmp_path / "out/llama.cpp" / vendor.STAMP_NAME).read_text().strip() == pin.sha256


def test_a_pin_without_commit_is_named_by_its_build_number(tmp_path):
    """An sdist that vendors the tree (xllamacpp: thirdparty/llama.cpp) may not say which commit."""
    pin = _pin(commit=vendor.UNKNOWN_COMMIT, build_number=11549, inner_path="thirdparty/llama.cpp")
    path = tmp_path / "pin.toml"
    vendor.write_pin(pin, path)
    assert "commit" not in path.read_text().split("[llama_cpp]")[1]
    assert vendor.load_pin(path) == pin
    assert vendor.Tree(tmp_path, pin.commit, pin.build_number, True).label == "b11549"
    assert vendor.Tree(tmp_path, "5e03bdd87", 11434, True).label == "5e03bdd87"


def test_no_network_and_no_cache_says_how_to_use_a_local_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMA_FFI_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # as good as no network: pip finds nothing
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(vendor.VendorError, match="LLAMA_CPP_DIR=/path/to/llama.cpp"):
        vendor.fetch_archive(_pin())


def test_own_tree_that_is_not_llama_cpp_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(vendor.TREE_ENV, str(tmp_path))
    with pytest.raises(vendor.VendorError, match="not a llama.cpp tree"):
        vendor.materialise()


def test_own_tree_records_its_commit(tree, monkeypatch):
    monkeypatch.setenv(vendor.TREE_ENV, str(tree.path))
    own = vendor.materialise()
    expected = tree.commit if (tree.path / ".git").exists() else "unknown"  # no git: unknown
    assert own.commit == expected and not own.pinned
    monkeypatch.setenv("LLAMA_BUILD_COMMIT", "abc1234def")
    assert vendor.materialise().commit == ("abc1234def" if expected == "unknown" else expected)


def test_pinned_tree_is_the_pinned_archive(tree):
    pin = vendor.load_pin()
    assert (tree.path / vendor.STAMP_NAME).read_text().strip() == pin.sha256
    if pin.git_dir:  # the archive ships the tree's git: the tree is exactly the commit
        vendor.verify_git_tree(tree.path, tree.commit)
        with pytest.raises(vendor.VendorError, match="the pin says"):
            vendor.verify_git_tree(tree.path, "f" * 40)


def test_missing_cmake_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(native_build.NativeBuildError, match=r"cmake \(pip install cmake\)"):
        native_build.build(vendor.Tree(tmp_path, "x", 0, False), tmp_path / "b")


def test_pin_round_trips(tmp_path):
    pin = vendor.load_pin()
    vendor.write_pin(pin, tmp_path / "pin.toml")
    assert vendor.load_pin(tmp_path / "pin.toml") == pin


def test_copy_libraries_leaves_exactly_this_builds_libraries(tmp_path):
    """Switching a checkout between a native and a portable build: the package's lib folder ends
    with this build's files only, even where the other build's copy is newer."""
    import os

    built, package = tmp_path / "bin", tmp_path / "lib"
    built.mkdir()
    package.mkdir()
    for name in ("libllama.so", "libggml-cpu-x64.so", "libggml-base.so"):
        (built / name).write_bytes(b"portable " + name.encode())
    (built / next(iter(native_build.LEFT_OUT_MODULES))).write_bytes(b"not shipped")
    (package / "libggml-cpu.so").write_bytes(b"native cpu")
    (package / "libllama.so").write_bytes(b"native libllama, newer")
    os.utime(built / "libllama.so", (1_000_000, 1_000_000))
    old_inode = (package / "libllama.so").stat().st_ino
    copied = native_build.copy_libraries(built, package)
    # renamed over, not rewritten: a process with the old file mapped keeps it
    assert (package / "libllama.so").stat().st_ino != old_inode
    assert sorted(p.name for p in package.iterdir()) == ["libggml-base.so", "libggml-cpu-x64.so", "libllama.so"]
    assert sorted(copied) == sorted(package.iterdir())
    assert (package / "libllama.so").read_bytes() == b"portable libllama.so"
