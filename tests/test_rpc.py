"""Several machines, on one: `llama-ffi rpc-server` workers as subprocesses on free localhost ports,
SmolLM2's layers split over them, compared with a local CPU run (the same CPU kernels)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from llama_ffi import rpc
from llama_ffi.bench_rpc import free_port, wait_until_serving
from llama_ffi.high import Llama

REPO = Path(__file__).resolve().parent.parent
PROMPTS = ("The capital of France is", "Once upon a time, in a small village,")
N = 24


class Worker:
    def __init__(self, *extra: str, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "llama_ffi", "rpc-server", "-H", host,
                                      "-p", str(self.port), "-t", "1", *extra], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until_serving(self.proc, self.endpoint)
        except rpc.RpcError:
            raise RuntimeError(f"worker did not start: {self.proc.communicate(timeout=30)}") from None

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as a user would; the exit code and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


@pytest.fixture(scope="module")
def workers():
    pair = [Worker(), Worker()]
    yield pair
    for w in pair:
        code, err = w.stop()
        assert code == 0 and "stopped" in err, err  # Ctrl-C stops a worker cleanly


@pytest.fixture(scope="module")
def local_texts(smollm2_path):
    with Llama(smollm2_path, n_threads=2, progress=False) as llm:
        return [llm(p, max_tokens=N, temperature=0)["choices"][0]["text"] for p in PROMPTS]


def test_layers_split_over_two_workers_give_the_local_output(smollm2_path, workers, local_texts):
    with Llama(smollm2_path, rpc_servers=[w.endpoint for w in workers], n_gpu_layers=99,
               n_threads=2, progress=False) as llm:
        remote = llm._model.remote
        assert len(remote.devices) == 2 and all(n.startswith("RPC") for n in remote.names())
        got = [llm(p, max_tokens=N, temperature=0)["choices"][0]["text"] for p in PROMPTS]
        streamed = "".join(c["choices"][0]["text"]
                           for c in llm(PROMPTS[1], max_tokens=N, temperature=0, stream=True))
        # both workers hold layers and computed graphs
        for r in remote.relays:  # a reused graph is sent once and recomputed by reference
            assert r.forwarded["GRAPH_COMPUTE"] + r.forwarded["GRAPH_RECOMPUTE"] >= N, r.forwarded
            assert r.forwarded["SET_TENSOR"] > 0, r.forwarded
    assert got == local_texts
    assert streamed == local_texts[1]


def test_comma_separated_servers_and_tensor_split(smollm2_path, workers, local_texts):
    servers = ",".join(w.endpoint for w in workers)
    with Llama(smollm2_path, rpc_servers=servers, n_gpu_layers=99, tensor_split=[1, 3],
               n_threads=2, progress=False) as llm:
        assert llm(PROMPTS[0], max_tokens=N, temperature=0)["choices"][0]["text"] == local_texts[0]


def test_cli_complete_over_rpc(smollm2_path, workers, local_texts):
    out = subprocess.run([sys.executable, "-m", "llama_ffi", "complete", PROMPTS[0], "-m", str(smollm2_path),
                          "-n", str(N), "--temp", "0", "-t", "2", "-ngl", "99",
                          "--rpc", ",".join(w.endpoint for w in workers)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False) as llm:  # the CLI's context
        assert out.stdout == llm(PROMPTS[0], max_tokens=N, temperature=0)["choices"][0]["text"] + "\n"


@pytest.mark.parametrize("servers, words", [
    ("localhost", "host:port"), ("127.0.0.1:0", "host:port"), ("127.0.0.1:70000", "host:port"),
    ([], "host:port"), ([5], "host:port"), (["a:1"] * 17, "at most"),
])
def test_malformed_servers_are_value_errors(smollm2_path, servers, words):
    with pytest.raises(ValueError, match=words):
        Llama(smollm2_path, rpc_servers=servers, progress=False)


def test_unreachable_server_is_a_clear_error(smollm2_path):
    endpoint = f"127.0.0.1:{free_port()}"  # nobody listens there
    t0 = time.monotonic()
    with pytest.raises(rpc.RpcError, match=f"cannot reach RPC server {endpoint}"):
        Llama(smollm2_path, rpc_servers=[endpoint], progress=False)
    assert time.monotonic() - t0 < 10


def _fake_server(reply: bytes | None):
    """A TCP server that answers every connection with ``reply`` (None: says nothing)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.recv(64)
                conn.sendall(reply)
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener, "127.0.0.1:%d" % listener.getsockname()[1]


@pytest.mark.parametrize("reply", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b""])
def test_a_server_that_is_not_rpc_is_refused(smollm2_path, reply):
    listener, endpoint = _fake_server(reply)
    with listener, pytest.raises(rpc.RpcError, match="not a ggml RPC server"):
        Llama(smollm2_path, rpc_servers=[endpoint], progress=False)


def test_a_silent_server_times_out():
    listener, endpoint = _fake_server(None)
    t0 = time.monotonic()
    with listener, pytest.raises(rpc.RpcError, match="did not answer within 1 s"):
        rpc.probe(endpoint, timeout=1)
    assert time.monotonic() - t0 < 5


KILL_MID_STREAM = textwrap.dedent("""
    import sys, time
    from llama_ffi import rpc
    from llama_ffi.high import Llama
    import subprocess
    victim, survivor, model = sys.argv[1], sys.argv[2], sys.argv[3]
    pid = int(sys.argv[4])
    import os, signal
    llm = Llama(model, rpc_servers=[victim, survivor], n_gpu_layers=99, n_threads=2, progress=False)
    n = 0
    try:
        for chunk in llm("Once upon a time", max_tokens=400, temperature=0, stream=True):
            n += 1
            if n == 2:
                os.kill(pid, signal.SIGKILL)
        print("NOT LOST")
    except rpc.RpcWorkerLost as exc:
        print("LOST", n, exc)
    t0 = time.monotonic()
    try:
        llm("Hello", max_tokens=4)
        print("AFTER: no error")
    except rpc.RpcWorkerLost as exc:
        print("AFTER LOST", round(time.monotonic() - t0, 3))
    llm.close()
    with Llama(model, rpc_servers=[survivor], n_gpu_layers=99, n_threads=2, progress=False) as again:
        print("SURVIVOR", repr(again("The capital of France is", max_tokens=8, temperature=0)["choices"][0]["text"]))
""")


def test_a_worker_killed_mid_generation_raises_and_the_client_lives(smollm2_path, tmp_path):
    victim, survivor = Worker(), Worker()
    script = tmp_path / "kill.py"
    script.write_text(KILL_MID_STREAM)
    try:
        out = subprocess.run([sys.executable, str(script), victim.endpoint, survivor.endpoint, str(smollm2_path),
                              str(victim.proc.pid)], capture_output=True, text=True, timeout=120, cwd=REPO)
    finally:
        victim.stop()
        survivor.stop()
    assert out.returncode == 0, out.stderr[-3000:]  # no abort, no crash of the client
    lines = out.stdout.splitlines()
    lost = [line for line in lines if line.startswith("LOST")]
    assert lost and f"RPC worker {victim.endpoint} was lost" in lost[0], out.stdout
    assert int(lost[0].split()[1]) < 400
    assert any(line.startswith("AFTER LOST") for line in lines), out.stdout  # unusable, and says so
    with Llama(smollm2_path, n_threads=2, progress=False) as local:
        want = local("The capital of France is", max_tokens=8, temperature=0)["choices"][0]["text"]
    assert f"SURVIVOR {want!r}" in lines


def test_worker_bound_beyond_localhost_warns():
    w = Worker(host="0.0.0.0")
    code, err = w.stop()
    assert code == 0 and "no authentication" in err


def test_worker_refuses_a_busy_port_and_unknown_devices():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "llama_ffi", "rpc-server", "-p", str(port)], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in out.stderr
    with pytest.raises(ValueError, match="unknown device 'NOPE'"):
        rpc.worker_devices(["NOPE"])
