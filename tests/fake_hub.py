"""A Hugging Face Hub stand-in on 127.0.0.1 for the endpoints huggingface_hub uses to list and
download a model repository: ``GET /api/models/OWNER/NAME/tree/REV`` and ``HEAD``/``GET
/OWNER/NAME/resolve/REV/PATH``. ``HF_ENDPOINT`` points huggingface_hub at it (read at import,
so tests run huggingface_hub in a subprocess). It counts the requests it answers, so a test can
say that none was made; a file marked truncated is cut off halfway through its body."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/?]+)")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, Path | bytes]], truncated: set[str] = frozenset()) -> None:
        """``repos``: repo id -> repository path -> the file (or its bytes)."""
        self.repos = repos
        self.truncated = truncated
        self.requests: list[str] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _data(self, repo: str, path: str) -> bytes:
        item = self.repos[repo][path]
        return item if isinstance(item, bytes) else Path(item).read_bytes()

    def _answer(self, h: http.server.BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append(f"{h.command} {h.path}")
        path = h.path.split("?")[0]
        tree, resolve = _TREE.match(path), _RESOLVE.match(path)
        repo = (tree or resolve)["repo"] if (tree or resolve) else None
        if repo not in self.repos:
            return self._error(h, 404, "RepoNotFound", f"Repository {repo} not found")
        if tree:
            listing = [
                {
                    "type": "file",
                    "path": p,
                    "size": len(self._data(repo, p)),
                    "oid": hashlib.sha1(self._data(repo, p)).hexdigest(),
                }
                for p in self.repos[repo]
            ]
            return self._send(h, 200, json.dumps(listing).encode(), {"Content-Type": "application/json"}, body)
        file = resolve["path"]
        if file not in self.repos[repo]:
            return self._error(h, 404, "EntryNotFound", f"{file} not found in {repo}")
        data = self._data(repo, file)
        headers = {
            "X-Repo-Commit": COMMIT,
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            "Content-Type": "application/octet-stream",
        }
        if body and file in self.truncated:  # promise everything, send half, hang up
            h.send_response(200)
            for k, v in {**headers, "Content-Length": str(len(data))}.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        self._send(h, 200, data, headers, body)

    @staticmethod
    def _send(h, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(data))}.items():
            h.send_header(k, v)
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _error(self, h, status: int, code: str, message: str) -> None:
        self._send(
            h,
            status,
            json.dumps({"error": message}).encode(),
            {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message},
            h.command == "GET",
        )
