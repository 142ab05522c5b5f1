"""One slot's cache in a file (llama-server's ``/slots/{id}?action=save|restore|erase``) and requests
pinned to a slot (``slot_id``, llama-server's ``id_slot``): a restored slot serves the next prompt
sharing its prefix from its cells; a damaged or foreign file is refused before llama.cpp reads it."""

from __future__ import annotations

import httpx
import pytest
from server_process import ServerProcess

from llama_ffi.high import Llama

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. The capital of Germany is"


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_seq_max=2, n_threads=2, progress=False) as m:
        yield m


def cached(result: dict) -> int:
    return result["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_slot_saved_erased_and_restored_elsewhere_serves_its_prefix(llm, tmp_path):
    first = llm.create_completion(PROMPT, max_tokens=6, temperature=0, slot_id=1)
    n_prompt = first["usage"]["prompt_tokens"]
    held = n_prompt + 6 - 1  # the last token sampled is not in the cache yet
    assert llm.slot_files.save(1, tmp_path / "s1.bin") == held
    assert llm.slot_files.erase(1) == held and llm.slot_files.erase(1) == 0
    assert llm.slot_files.erase(0) >= 0  # slot 0 empty too: only the file holds the prompt now
    assert llm.slot_files.restore(0, tmp_path / "s1.bin") == held
    again = llm.create_completion(PROMPT, max_tokens=6, temperature=0, slot_id=0)
    assert cached(again) == n_prompt - 1  # all but the last prompt token, from the file's cells
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    # pinned to the other (empty) slot: nothing cached there
    assert cached(llm.create_completion(PROMPT, max_tokens=1, slot_id=1)) == 0


def test_bad_files_slots_and_busy_slots_are_refused_by_name(llm, tmp_path):
    llm.create_completion(PROMPT, max_tokens=2, slot_id=0)
    path = tmp_path / "s0.bin"
    llm.slot_files.save(0, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "flipped.bin").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum|damaged"):
        llm.slot_files.restore(1, tmp_path / "flipped.bin")
    (tmp_path / "short.bin").write_bytes(bytes(data[:100]))
    with pytest.raises(ValueError):
        llm.slot_files.restore(1, tmp_path / "short.bin")
    llm.save_state(tmp_path / "whole.bin")  # the main slot's state loads into any slot
    assert llm.slot_files.restore(1, tmp_path / "whole.bin") > 0
    for bad in (2, -1, True, "0"):
        with pytest.raises(ValueError, match="no slot"):
            llm.slot_files.save(bad, path)
    with pytest.raises(ValueError, match="slot_id"):
        llm.create_completion(PROMPT, max_tokens=1, slot_id=5)
    stream = llm.create_completion(PROMPT, max_tokens=64, stream=True, slot_id=1)
    next(stream)  # the stream holds slot 1 while it is open
    with pytest.raises(ValueError, match="slot 1 is processing"):
        llm.slot_files.save(1, path)
    stream.close()
    assert llm.slot_files.save(1, path) > 0


def test_server_slot_actions_as_llama_server(smollm2_path, tmp_path):
    folder = tmp_path / "slots"
    folder.mkdir()
    with ServerProcess(smollm2_path, "-c", "1024", "-np", "2", "--slot-save-path", str(folder)) as s:

        def complete(slot: int) -> dict:
            body = {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "id_slot": slot}
            return httpx.post(s.url + "/completion", json=body, timeout=60).json()

        first = complete(1)
        saved = httpx.post(s.url + "/slots/1?action=save", json={"filename": "one.bin"}).json()
        assert (
            saved["n_saved"] > first["timings"]["prompt_n"]
            and saved["n_written"] == (folder / "one.bin").stat().st_size
        )
        assert httpx.post(s.url + "/slots/0?action=erase").json() == {"id_slot": 0, "n_erased": 0}
        restored = httpx.post(s.url + "/slots/0?action=restore", json={"filename": "one.bin"}).json()
        assert restored["n_restored"] == saved["n_saved"] and restored["n_read"] == saved["n_written"]
        again = complete(0)
        assert again["timings"]["prompt_n"] == 1 and again["content"] == first["content"]
        for name in ("../one.bin", "/etc/passwd", "", ".hidden", "a/b"):
            r = httpx.post(s.url + "/slots/0?action=save", json={"filename": name})
            assert r.status_code == 400 and "filename" in r.json()["error"]["message"], name
        assert not any(p.name != "one.bin" for p in folder.iterdir())
        r = httpx.post(s.url + "/slots/0?action=restore", json={"filename": "missing.bin"})
        assert r.status_code == 400 and "missing.bin" in r.json()["error"]["message"]
        r = httpx.post(s.url + "/slots/7?action=erase")
        assert r.status_code == 400 and "no slot 7" in r.json()["error"]["message"]
        assert httpx.post(s.url + "/slots/0?action=fly").status_code == 400
        r = httpx.post(s.url + "/completion", json={"prompt": "x", "n_predict": 1, "id_slot": 9})
        assert r.status_code == 400 and "slot_id" in r.json()["error"]["message"]
    with ServerProcess(smollm2_path, "-c", "512") as s:  # no --slot-save-path: not served
        assert httpx.post(s.url + "/slots/0?action=erase").status_code == 501
