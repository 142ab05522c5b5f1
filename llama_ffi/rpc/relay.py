"""The relay between ggml's RPC client and one worker: it forwards the protocol unchanged while the
worker lives and, once it is gone, answers in its place with well-formed empty replies (so llama.cpp
returns instead of aborting the process, and the model's owner raises ``RpcWorkerLost``)."""

from __future__ import annotations

import collections
import socket
import threading

from llama_ffi import lib
from llama_ffi.rpc.protocol import (
    CHUNK,
    CONN_CAPS_SIZE,
    CONNECT_TIMEOUT_S,
    REPLY_SIZES,
    U64,
    Cmd,
    keepalive,
    recv_exact,
    reply_size,
    split_endpoint,
)


class StandIn:
    """Replies in a lost worker's place: well-formed and empty, so the client never aborts."""

    def __init__(self) -> None:
        self.last: dict[int, bytes] = {}  # the worker's last real reply per command
        self.next_ptr = 1 << 40

    def reply(self, cmd: int, request: bytes) -> bytes:
        if cmd == Cmd.HELLO:
            return bytes([lib.RPC_PROTO_MAJOR_VERSION, lib.RPC_PROTO_MINOR_VERSION, 0, 0]) + bytes(CONN_CAPS_SIZE)
        if cmd in (Cmd.GET_TENSOR, Cmd.GET_TENSOR_2D):
            return bytes(reply_size(cmd, request))
        if cmd == Cmd.COMM_INIT:
            return b"\x00"  # not initialised: ggml falls back to its own all-reduce
        if cmd in (Cmd.ALLOC_BUFFER, Cmd.BUFFER_GET_BASE):
            self.next_ptr += 1 << 32
            size = U64.unpack(request[4:12])[0] if cmd == Cmd.ALLOC_BUFFER else 0
            return U64.pack(self.next_ptr) + (U64.pack(size) if cmd == Cmd.ALLOC_BUFFER else b"")
        if cmd in (Cmd.SET_TENSOR_HASH, Cmd.COPY_TENSOR):
            return b"\x01"
        if cmd == Cmd.GET_ALLOC_SIZE:
            return bytes(8)  # the client takes max(this, the tensor's size) and caches it
        size = REPLY_SIZES[cmd]
        return self.last.get(cmd, bytes(size))


class Relay:
    """127.0.0.1:<free port> → one worker. One upstream connection per accepted client
    connection; requests and replies strictly alternate, so a plain loop forwards them."""

    def __init__(self, upstream: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
        self.upstream, self.timeout = upstream, timeout
        self.lost: str | None = None  # why the worker is gone, once it is
        self.forwarded: collections.Counter[str] = collections.Counter()  # commands the worker got
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(4)
        self.endpoint = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept_loop, name=f"rpc-relay {upstream}", daemon=True).start()

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why

    def _connect(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(split_endpoint(self.upstream), timeout=self.timeout)
        except OSError as exc:
            self._lose(f"cannot reconnect: {exc.strerror or exc}")
            return None
        sock.settimeout(None)  # a graph computation may take as long as it takes
        keepalive(sock)
        return sock

    def _serve(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        worker = self._connect() if self.lost is None else None
        stand_in = StandIn()
        try:
            while True:
                head = recv_exact(client, 9)
                if head is None:
                    return  # the client let go (its model was freed)
                cmd, size = head[0], U64.unpack(head[1:])[0]
                if cmd not in Cmd._value2member_map_:
                    return  # not the protocol we know: drop the connection rather than guess
                worker = self._relay_one(client, worker, cmd, size, stand_in)
        except OSError:
            return  # the client's side broke: nothing left to serve
        finally:
            client.close()
            if worker is not None:
                worker.close()

    def _relay_one(self, client, worker, cmd: int, size: int, stand_in: StandIn):
        """Forward one request (and its reply); after a failure, answer it in the worker's place.
        Returns the worker socket, or None once the worker is lost."""
        small = size <= CHUNK
        request = recv_exact(client, size) if small else None
        if small and request is None:
            raise OSError("client closed mid-request")
        if cmd == Cmd.HELLO:  # plain TCP on both legs: no transport upgrade through the relay
            request = bytes(len(request))
        if cmd == Cmd.COMM_INIT and small:
            # Two workers would connect to each other at the host the client names, which through
            # the relay is 127.0.0.1: wrong for remote workers, and rank 0 would wait forever in
            # accept(). Refused here, ggml keeps its own all-reduce through this process.
            reply = stand_in.reply(cmd, request)
            client.sendall(U64.pack(len(reply)) + reply)
            return worker
        if worker is not None:
            self.forwarded[Cmd(cmd).name] += 1
            try:
                worker.sendall(bytes([cmd]) + U64.pack(size))
                if small:
                    worker.sendall(request)
                else:
                    self._stream(client, worker, size)
                    size = 0
            except OSError as exc:
                self._lose(f"connection failed while sending: {exc.strerror or exc}")
                worker = None
        if worker is None and not small and size:
            self._drain(client, size)
        if cmd not in REPLY_SIZES:
            return worker
        if worker is not None:
            try:
                reply_head = recv_exact(worker, 8)
                reply = recv_exact(worker, U64.unpack(reply_head)[0]) if reply_head else None
                if reply is None:
                    raise OSError("the worker closed the connection")
                if cmd == Cmd.HELLO:
                    reply = reply[:4] + bytes(CONN_CAPS_SIZE)
                stand_in.last[cmd] = reply
                client.sendall(U64.pack(len(reply)) + reply)
                return worker
            except OSError as exc:
                self._lose(f"{exc.strerror or exc}")
                worker.close()
                worker = None
        reply = stand_in.reply(cmd, request or b"")
        client.sendall(U64.pack(len(reply)) + reply)
        return None

    @staticmethod
    def _stream(client, worker, size: int) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while size:
            k = client.recv_into(view[: min(size, CHUNK)])
            if k == 0:
                raise OSError("client closed mid-request")
            worker.sendall(view[:k])
            size -= k

    @staticmethod
    def _drain(client, size: int) -> None:
        buf = bytearray(CHUNK)
        while size:
            k = client.recv_into(buf, min(size, CHUNK))
            if k == 0:
                raise OSError("client closed mid-request")
            size -= k
