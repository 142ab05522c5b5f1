"""Several machines, on one: `llama-ffi rpc-server` workers as subprocesses on free localhost ports,
SmolLM2's layers split over them, compared with a local CPU run (the same CPU kernels)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from llama_ffi import lib, rpc
from llama_ffi.high import Llama

REPO = Path(__file__).resolve().parent.parent
PROMPTS = ("The capital of France is", "Once upon a time, in a small village,")
N = 24


class Worker:
    def __init__(self, *extra: str, host: str = "127.0.0.1", sigint=None) -> None:
        """``sigint``: the SIGINT disposition the worker starts with (None: whatever this run has,
        which is SIG_IGN under nohup, a background job or some CI runners)."""
        self.port = rpc.free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_ffi", "rpc-server", "-H", host, "-p", str(self.port), "-t", "1", *extra],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=None if sigint is None else lambda: signal.signal(signal.SIGINT, sigint),
        )
        try:
            rpc.wait_until_serving(self.endpoint, self.proc)
        except rpc.RpcError:
            raise RuntimeError(f"worker did not start: {self.proc.communicate(timeout=30)}") from None

    def stop(self, how: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
        """SIGTERM, as a service manager would (or ``how``); the exit code and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(how)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


@pytest.fixture(scope="module")
def workers():
    pair = [Worker(), Worker()]
    yield pair
    for w in pair:
        code, err = w.stop()
        assert code == 0 and "stopped" in err, err  # SIGTERM stops a worker cleanly


@pytest.fixture(scope="module")
def local_texts(smollm2_path):
    with Llama(smollm2_path, n_threads=2, progress=False) as llm:
        return [llm(p, max_tokens=N, temperature=0)["choices"][0]["text"] for p in PROMPTS]


def test_layers_split_over_two_workers_give_the_local_output(smollm2_path, workers, local_texts):
    with Llama(
        smollm2_path, rpc_servers=[w.endpoint for w in workers], n_gpu_layers=99, n_threads=2, progress=False
    ) as llm:
        remote = llm.loaded_model.remote
        assert len(remote.devices) == 2 and all(n.startswith("RPC") for n in remote.names())
        got = [llm(p, max_tokens=N, temperature=0)["choices"][0]["text"] for p in PROMPTS]
        streamed = "".join(c["choices"][0]["text"] for c in llm(PROMPTS[1], max_tokens=N, temperature=0, stream=True))
        # both workers hold layers and computed graphs
        for r in remote.relays:  # a reused graph is sent once and recomputed by reference
            assert r.forwarded["GRAPH_COMPUTE"] + r.forwarded["GRAPH_RECOMPUTE"] >= N, r.forwarded
            assert r.forwarded["SET_TENSOR"] > 0, r.forwarded
    assert got == local_texts
    assert streamed == local_texts[1]


def test_comma_separated_servers_and_tensor_split(smollm2_path, workers, local_texts):
    servers = ",".join(w.endpoint for w in workers)
    with Llama(
        smollm2_path, rpc_servers=servers, n_gpu_layers=99, tensor_split=[1, 3], n_threads=2, progress=False
    ) as llm:
        assert llm(PROMPTS[0], max_tokens=N, temperature=0)["choices"][0]["text"] == local_texts[0]


def test_cli_complete_over_rpc(smollm2_path, workers, local_texts):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "llama_ffi",
            "complete",
            PROMPTS[0],
            "-m",
            str(smollm2_path),
            "-n",
            str(N),
            "--temp",
            "0",
            "-t",
            "2",
            "-ngl",
            "99",
            "--rpc",
            ",".join(w.endpoint for w in workers),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False) as llm:  # the CLI's context
        assert out.stdout == llm(PROMPTS[0], max_tokens=N, temperature=0)["choices"][0]["text"] + "\n"


@pytest.mark.parametrize(
    "servers, words",
    [
        ("localhost", "host:port"),
        ("127.0.0.1:0", "host:port"),
        ("127.0.0.1:70000", "host:port"),
        ([], "host:port"),
        ([5], "host:port"),
        (["a:1"] * 17, "at most"),
    ],
)
def test_malformed_servers_are_value_errors(smollm2_path, servers, words):
    with pytest.raises(ValueError, match=words):
        Llama(smollm2_path, rpc_servers=servers, progress=False)


def test_unreachable_server_is_a_clear_error(smollm2_path):
    endpoint = f"127.0.0.1:{rpc.free_port()}"  # nobody listens there
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
    return listener, f"127.0.0.1:{listener.getsockname()[1]}"


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
        out = subprocess.run(
            [sys.executable, str(script), victim.endpoint, survivor.endpoint, str(smollm2_path), str(victim.proc.pid)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )  # this checkout, installed or not
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


@pytest.mark.parametrize("inherited", [signal.SIG_IGN, signal.SIG_DFL], ids=["sigint-ignored", "sigint-default"])
def test_sigterm_stops_a_worker_whatever_sigint_it_inherited(inherited):
    w = Worker(sigint=inherited)
    code, err = w.stop(signal.SIGTERM)
    assert code == 0 and "rpc-server stopped" in err, (code, err)


def test_ctrl_c_stops_a_worker_started_in_a_terminal():
    w = Worker(sigint=signal.SIG_DFL)  # a terminal's foreground job: Python turns SIGINT into Ctrl-C
    code, err = w.stop(signal.SIGINT)
    assert code == 0 and "rpc-server stopped" in err, (code, err)


def test_worker_bound_beyond_localhost_warns():
    w = Worker(host="0.0.0.0")
    code, err = w.stop()
    assert code == 0 and "no authentication" in err


def test_worker_refuses_a_busy_port_and_unknown_devices():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "llama_ffi", "rpc-server", "-p", str(port)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in out.stderr
    with pytest.raises(ValueError, match="unknown device 'NOPE'"):
        rpc.worker_devices(["NOPE"])


def test_protocol_8_commands_through_the_relay(workers):
    """v8's communicator set-up is answered by the relay itself (workers told to meet at the
    relay's 127.0.0.1 would wait forever); the connection goes on. A lost worker's stand-in sizes
    GET_TENSOR_2D's reply from the request (size x copies), as the client reads it."""
    assert rpc.PROTOCOL_MAJOR == lib.RPC_PROTO_MAJOR_VERSION
    relay = rpc.Relay(workers[0].endpoint)
    try:
        with socket.create_connection(("127.0.0.1", int(relay.endpoint.rsplit(":", 1)[1])), timeout=10) as s:

            def call(cmd: rpc.Cmd, payload: bytes, reply: int) -> bytes:
                s.sendall(bytes([cmd]) + rpc.U64.pack(len(payload)) + payload)
                head = rpc.recv_exact(s, 8)
                assert rpc.U64.unpack(head)[0] == reply
                return rpc.recv_exact(s, reply)

            hello = call(rpc.Cmd.HELLO, bytes(rpc.CONN_CAPS_SIZE), 4 + rpc.CONN_CAPS_SIZE)
            assert hello[0] == lib.RPC_PROTO_MAJOR_VERSION
            comm_init = struct.pack("<IIII", 0, 0, 2, 50099) + bytes(64)
            assert call(rpc.Cmd.COMM_INIT, comm_init, 1) == b"\x00"
            assert struct.unpack("<I", call(rpc.Cmd.DEVICE_COUNT, b"", 4))[0] >= 1  # still served
        assert relay.forwarded["COMM_INIT"] == 0 and relay.forwarded["DEVICE_COUNT"] == 1
    finally:
        relay.close()
    request_2d = bytes(100) + struct.pack("<QQQQ", 0, 3, 4, 16)  # tensor | offset | size | n_copies | stride
    assert rpc.StandIn().reply(rpc.Cmd.GET_TENSOR_2D, request_2d) == bytes(12)
    assert rpc.StandIn().reply(rpc.Cmd.COMM_INIT, bytes(80)) == b"\x00"
