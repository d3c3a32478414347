"""A local HTTP server answering JSON, the stand-in for an API that a client under test reads (the Kubernetes API
server for tools.status, the EKS Pod Identity agent for an AWS SDK)."""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


class JsonServer(ThreadingHTTPServer):
    """Answers GET PATH with answers[PATH] as JSON (404 for any other path; a list answer keeps only the items that
    match `?labelSelector=k=v,...`, as the Kubernetes API does) and notes every request's Authorization header, so a
    test can check what credential the client sent."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers
        self.authorizations: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: JsonServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.authorizations.append(self.headers.get("Authorization", ""))
        path, _, query = self.path.partition("?")
        answer = self.server.answers.get(path)
        selector = parse_qs(query).get("labelSelector", [""])[0]
        if answer and selector and "items" in answer:
            wanted = dict(term.split("=", 1) for term in selector.split(","))
            answer = {**answer, "items": [item for item in answer["items"]
                                          if wanted.items() <= (item["metadata"].get("labels") or {}).items()]}
        body = json.dumps(answer or {"kind": "Status", "code": 404}).encode()
        self.send_response(200 if answer else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class FakeHub(ThreadingHTTPServer):
    """The Hugging Face Hub's file endpoint, as strict as huggingface_hub relies on: HEAD and GET
    /<org>/<name>/resolve/<revision>/<file> (file_download.hf_hub_url). A file answers 200 with X-Repo-Commit and an
    ETag (file_download.get_hf_file_metadata refuses a response without either) and Content-Length. Errors carry the
    Hub's X-Error-Code, which utils/_http.py hf_raise_for_status maps onto its exceptions:
    - a repo that does not exist: 401 RepoNotFound without a token, 404 RepoNotFound with one (the Hub answers 401 to
      anonymous requests for missing, private and gated repos alike; hf_raise_for_status's comment and the gist it
      links, Wauplin/46c27ad266b15998ce56a6603796f0b9);
    - a gated repo: 401 GatedRepo without a token, 403 GatedRepo with a token that was not granted access;
    - a file the repo lacks: 404 EntryNotFound, with the repo's X-Repo-Commit.
    `repos` maps a repo id to {file name: bytes}; `gated` maps a gated repo id to the tokens granted access.
    Every request's (method, path, Authorization) is noted."""

    COMMIT = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, repos: dict[str, dict[str, bytes]], gated: dict[str, set[str]] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _HubHandler)
        self.repos = repos
        self.gated = gated or {}
        self.requests: list[tuple[str, str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _HubHandler(BaseHTTPRequestHandler):
    server: FakeHub

    def _answer(self, body: bool) -> None:
        import hashlib

        authorization = self.headers.get("Authorization", "")
        self.server.requests.append((self.command, self.path, authorization))
        token = authorization.removeprefix("Bearer ") if authorization else ""
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return self._error(404, "", "Not found")
        repo, file_name = "/".join(parts[:2]), "/".join(parts[4:])
        if repo not in self.server.repos:
            return self._error(404 if token else 401, "RepoNotFound", "Repository not found")
        if repo in self.server.gated and token not in self.server.gated[repo]:
            return self._error(403 if token else 401, "GatedRepo",
                               f"Access to model {repo} is restricted and you are not in the authorized list.")
        files = self.server.repos[repo]
        if file_name not in files:
            return self._error(404, "EntryNotFound", "Entry not found", commit=True)
        content = files[file_name]
        self.send_response(200)
        self.send_header("X-Repo-Commit", FakeHub.COMMIT)
        self.send_header("ETag", f'"{hashlib.sha1(content).hexdigest()}"')
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if body:
            self.wfile.write(content)

    def _error(self, status: int, code: str, message: str, commit: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", FakeHub.COMMIT)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def log_message(self, *args) -> None:
        pass


def unreachable_hub(monkeypatch) -> tuple[str, list[float]]:
    """HF_ENDPOINT at a port where nothing listens any more (a Hub that cannot be reached), and the waits
    huggingface_hub's retries would sleep, recorded instead of slept (it retries a refused connection five times with
    backoff: 1, 2, 4, 8, 8 s, utils/_http.py http_backoff). Returns (the endpoint, the waits)."""
    from huggingface_hub.utils import _http

    server = FakeHub({})
    url = server.url
    server.server_close()
    monkeypatch.setenv("HF_ENDPOINT", url)
    waits: list[float] = []
    monkeypatch.setattr(_http.time, "sleep", waits.append)
    return url, waits
