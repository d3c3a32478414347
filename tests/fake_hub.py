"""A stand-in for the Hugging Face Hub on 127.0.0.1: the endpoints huggingface_hub's create_repo and upload_folder call,
and the ones from_pretrained downloads through, answered as the Hub does, from memory.

Upload (huggingface_hub/hf_api.py's create_repo and create_commit, huggingface_hub/_commit_api.py; the Hub's API
at https://huggingface.co/docs/hub/api):
- POST /api/repos/create {"name", "organization", "visibility", "type"} -> {"url": ...}; 409 when it exists (create_repo
  with exist_ok=True reads a 409 as "already there").
- POST /api/models/{repo}/preupload/{revision} {"files": [{path, sample, size}]} -> {"files": [{path, uploadMode,
  shouldIgnore}]}: every file "regular", so its bytes come base64 inside the commit (no LFS or Xet storage here).
- POST /api/models/{repo}/commit/{revision}, NDJSON: a {"key": "header"} line, then a {"key": "file", "value":
  {"path", "content", "encoding": "base64"}} line per file -> {"commitUrl", "commitOid"}.

Download (huggingface_hub/file_download.py's get_hf_file_metadata and hf_hub_download):
- HEAD and GET /{repo}/resolve/{revision}/{path}: the file with X-Repo-Commit, ETag and Content-Length; an unknown
  file is 404 with X-Error-Code EntryNotFound, an unknown repo 401 with RepoNotFound (as the Hub answers either).

Datasets (huggingface_hub/hf_api.py's dataset_info, whose "siblings" list_repo_files reads, and hf_hub_url with
repo_type="dataset"; workload/data/hub_dataset.py reads these):
- GET /api/datasets/{repo}: {"id", "siblings": [{"rfilename"}]}; an unknown dataset 401 with RepoNotFound, a gated one
  asked without the token 401 with GatedRepo.
- GET /datasets/{repo}/resolve/{revision}/{path}, honouring `Range: bytes=A-B` (206 with Content-Range), as the Hub's
  CDN does.

Every request must carry `Authorization: Bearer <token>` (the Hub's private repos do); `requests` records what was
asked, for the tests' assertions.
"""
from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class FakeHub:
    def __init__(self, token: str) -> None:
        self.token = token
        self.repos: dict[str, dict] = {}  # repo id -> {"private": bool, "files": {path: bytes}, "commit": sha}
        self.datasets: dict[str, dict] = {}  # dataset id -> {"gated": bool, "files": {path: bytes}}
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub._serve(self, body=False)

            def do_GET(self):
                hub._serve(self, body=True)

            def do_POST(self):
                hub._post(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- answers

    def _authorized(self, request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    def _json(self, request, status: int, document: dict, headers: dict | None = None) -> None:
        data = json.dumps(document).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)

    def _post(self, request) -> None:
        path = unquote(urlparse(request.path).path)
        self.requests.append(("POST", path))
        body = request.rfile.read(int(request.headers.get("Content-Length", 0)))
        if not self._authorized(request):
            return self._json(request, 401, {"error": "Invalid credentials in Authorization header"})
        if path == "/api/repos/create":
            payload = json.loads(body)
            repo = f"{payload['organization']}/{payload['name']}"
            if repo in self.repos:
                return self._json(request, 409, {"error": "You already created this model repo", "url":
                                                 f"{self.url}/{repo}"})
            self.repos[repo] = {"private": payload.get("visibility") == "private", "files": {}, "commit": "0" * 40}
            return self._json(request, 200, {"url": f"{self.url}/{repo}", "name": repo})
        parts = path.split("/")  # ['', 'api', 'models', owner, name, 'preupload'|'commit', revision]
        if len(parts) == 7 and parts[:3] == ["", "api", "models"]:
            repo = f"{parts[3]}/{parts[4]}"
            if repo not in self.repos:
                return self._json(request, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            if parts[5] == "preupload":
                files = json.loads(body)["files"]
                return self._json(request, 200, {"files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]})
            if parts[5] == "commit":
                state = self.repos[repo]
                for line in body.decode().splitlines():
                    entry = json.loads(line)
                    if entry["key"] == "file":
                        value = entry["value"]
                        assert value["encoding"] == "base64", value
                        state["files"][value["path"]] = base64.b64decode(value["content"])
                state["commit"] = hashlib.sha1(json.dumps(sorted(
                    (p, hashlib.sha256(b).hexdigest()) for p, b in state["files"].items())).encode()).hexdigest()
                return self._json(request, 200, {"commitUrl": f"{self.url}/{repo}/commit/{state['commit']}",
                                                 "commitOid": state["commit"], "pullRequestUrl": None})
        return self._json(request, 404, {"error": f"the fake Hub does not answer POST {path}"})

    def _serve(self, request, body: bool) -> None:
        path = unquote(urlparse(request.path).path)
        self.requests.append((request.command, path))
        parts = path.lstrip("/").split("/")
        if parts[:2] == ["api", "datasets"] or parts[0] == "datasets":
            return self._dataset(request, parts, body)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = f"{parts[0]}/{parts[1]}", "/".join(parts[4:])
            state = self.repos.get(repo)
            if state is None or (state["private"] and not self._authorized(request)):
                return self._json(request, 401, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            data = state["files"].get(name)
            if data is None:
                return self._json(request, 404, {"error": "Entry not found"},
                                  {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": state["commit"]})
            request.send_response(200)
            request.send_header("Content-Type", "application/octet-stream")
            request.send_header("Content-Length", str(len(data)))
            request.send_header("X-Repo-Commit", state["commit"])
            request.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            request.end_headers()
            if body:
                request.wfile.write(data)
            return None
        return self._json(request, 404, {"error": f"the fake Hub does not answer {request.command} {path}"})

    def _dataset(self, request, parts: list[str], body: bool) -> None:
        listing = parts[0] == "api"
        repo = "/".join(parts[2:4] if listing else parts[1:3])
        state = self.datasets.get(repo)
        if state is None:
            return self._json(request, 401, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        if state.get("gated") and not self._authorized(request):
            return self._json(request, 401, {"error": "Access to this dataset is restricted"},
                              {"X-Error-Code": "GatedRepo"})
        if listing:
            return self._json(request, 200, {"id": repo, "siblings": [{"rfilename": name} for name in state["files"]]})
        data = state["files"].get("/".join(parts[5:]))
        if data is None or parts[3:5] != ["resolve", "main"]:
            return self._json(request, 404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        wanted = request.headers.get("Range", "")
        status, part = 200, data
        if wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            status, part = 206, data[int(first):int(last) + 1]
        request.send_response(status)
        request.send_header("Content-Length", str(len(part)))
        if status == 206:
            request.send_header("Content-Range", f"bytes {wanted[6:]}/{len(data)}")
        request.end_headers()
        if body:
            request.wfile.write(part)
        return None
