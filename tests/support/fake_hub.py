"""A stand-in for the Hugging Face Hub on 127.0.0.1, from memory: the endpoints huggingface_hub's create_repo and
upload_folder call, the ones from_pretrained and the preview download through, and the dataset ones, answered as the
Hub does and as strictly as huggingface_hub relies on.

Upload (huggingface_hub/hf_api.py's create_repo and create_commit, huggingface_hub/_commit_api.py; the Hub's API
at https://huggingface.co/docs/hub/api), with the hub's `token`:
- POST /api/repos/create {"name", "organization", "visibility", "type"} -> {"url": ...}; 409 when it exists (create_repo
  with exist_ok=True reads a 409 as "already there").
- POST /api/models/{repo}/preupload/{revision} {"files": [{path, sample, size}]} -> {"files": [{path, uploadMode,
  shouldIgnore}]}: every file "regular", so its bytes come base64 inside the commit (no LFS or Xet storage here).
- POST /api/models/{repo}/commit/{revision}, NDJSON: a {"key": "header"} line, then a {"key": "file", "value":
  {"path", "content", "encoding": "base64"}} line per file -> {"commitUrl", "commitOid"}.

Download (huggingface_hub/file_download.py's hf_hub_url, get_hf_file_metadata and hf_hub_download):
- HEAD and GET /{repo}/resolve/{revision}/{path}: the file with X-Repo-Commit and an ETag (get_hf_file_metadata refuses
  a response without either) and Content-Length; with `Range: bytes=A-B`, that part (206, Content-Range), as
  file_download.py http_get's resumed downloads rely on. A file stored in LFS (`lfs`: repo -> file names; the Hub
  keeps a large tokenizer.json or any safetensors there) is answered with a 302 to its CDN address, /cdn/{sha256},
  carrying X-Linked-Size and X-Linked-Etag (constants.HUGGINGFACE_HEADER_X_LINKED_SIZE/_ETAG, read first by
  get_hf_file_metadata), and the CDN honours Range too. Errors carry the Hub's X-Error-Code, which utils/_http.py
  hf_raise_for_status maps onto its exceptions:
  - a repo that does not exist, or a private one asked without its token: 401 RepoNotFound without a token, 404
    RepoNotFound with one (the Hub answers 401 to anonymous requests for missing, private and gated repos alike;
    hf_raise_for_status's comment and the gist it links, Wauplin/46c27ad266b15998ce56a6603796f0b9);
  - a gated repo: 401 GatedRepo without a token, 403 GatedRepo with a token that was not granted access;
  - a file the repo lacks: 404 EntryNotFound, with the repo's X-Repo-Commit.

A model's files (huggingface_hub/hf_api.py's model_info, GET /api/models/{repo}[/revision/{revision}], whose "siblings"
are what list_repo_files lists; the preview reads them for the weights, infra/preview/model_config.py): {"id", "sha",
"siblings": [{"rfilename"}]}, the repo's files; a missing or private repo asked without its token 401 RepoNotFound (404
with a token); a gated repo's listing is answered to anyone, as the Hub shows a gated model's files.

Datasets (huggingface_hub/hf_api.py's dataset_info, whose "siblings" list_repo_files reads, and hf_hub_url with
repo_type="dataset"; workload/data/hub_dataset.py reads these):
- GET /api/datasets/{repo}: {"id", "siblings": [{"rfilename"}]}; an unknown dataset 401 with RepoNotFound, a gated one
  asked without the hub's token 401 with GatedRepo. With `?blobs=true` (dataset_info(files_metadata=True)) each
  sibling also has "blobId" and "size", and a file in LFS "lfs": {"sha256", "size", "pointerSize"} (hf_api.py
  RepoSibling and BlobLfsInfo, which dataset_info builds from these keys); in LFS here: .parquet files (the Hub's
  default .gitattributes tracks them) and any over 10 MiB (the Hub refuses larger files outside LFS).
- GET /datasets/{repo}/resolve/{revision}/{path}, honouring `Range: bytes=A-B` (206 with Content-Range), as the Hub's
  CDN does.

Who a token is (huggingface_hub/hf_api.py's HfApi.whoami, GET /api/whoami-v2; the fields as huggingface.js types them,
packages/hub/src/types/api/api-who-am-i.ts): {"type": "user", "id", "name", "fullname", "orgs": [{"type": "org",
"name", "roleInOrg"}], "auth": {"type": "access_token", "accessToken": {"displayName", "role", "fineGrained"?}}}, the
role "read", "write" or "fineGrained" (then "fineGrained": {"canReadGatedRepos", "global", "scoped": [{"entity":
{"_id", "type", "name"}, "permissions"}]}); `whoami_answer` builds one. A token in `users` gets its own answer, the
hub's `token` otherwise a write token of the user "hub-user" in no organization, and any other token (or none) 401
{"error": "Invalid credentials in Authorization header"}, which HfApi.whoami raises as "Invalid user token.".

State, for the tests to set and read: `repos` maps a model repo id to {file name: bytes}, `private` holds the private
ones (readable only with `token`), `gated` maps a gated repo id to the tokens granted access, `users` a token to its whoami-v2 answer, `commits` a repo to its
last commit (COMMIT until an upload makes one), `datasets` a dataset id to {"gated": bool, "files": {name: bytes or
LargeFile}}. A LargeFile stands for a file too large to hold: its size is listed, and a ranged read answers with the
bytes of its `head` that the range covers (where the Hub would send the whole range) and the full size in
Content-Range.
Every request's (method, path, Authorization) is noted in `requests`. Use it as a context manager (it serves on a
thread, and stops at the end of the block).

Also `unreachable_hub`: HF_ENDPOINT at a port where nothing listens.
"""
from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

LFS_OVER_BYTES = 10 * 2**20


@dataclass(frozen=True)
class LargeFile:
    """A dataset file of `size` bytes of which the test holds only the first, `head`."""

    head: bytes
    size: int


def whoami_answer(name: str, orgs: dict[str, str] | None = None, role: str = "write",
                  scoped: list[tuple[str, str, list[str]]] | None = None) -> dict:
    """whoami-v2's answer for a user `name`, a member of `orgs` ({org: roleInOrg}), its token of `role`; a
    "fineGrained" one with `scoped` [(entity type, entity name, permissions)]."""
    token = {"displayName": f"{name}-token", "role": role}
    if role == "fineGrained":
        token["fineGrained"] = {"canReadGatedRepos": False, "global": [], "scoped": [
            {"entity": {"_id": hashlib.sha1(entity.encode()).hexdigest()[:24], "type": kind, "name": entity},
             "permissions": permissions} for kind, entity, permissions in scoped or []]}
    return {"type": "user", "id": hashlib.sha1(name.encode()).hexdigest()[:24], "name": name, "fullname": name,
            "email": f"{name}@example.com", "emailVerified": True, "isPro": False, "canPay": False,
            "orgs": [{"type": "org", "id": hashlib.sha1(org.encode()).hexdigest()[:24], "name": org, "fullname": org,
                      "roleInOrg": org_role} for org, org_role in (orgs or {}).items()],
            "auth": {"type": "access_token", "accessToken": token}}


def _sibling(name: str, data: bytes | LargeFile) -> dict:
    """A sibling as the Hub lists it with blobs=true."""
    content = data.head if isinstance(data, LargeFile) else data
    size = data.size if isinstance(data, LargeFile) else len(data)
    entry = {"rfilename": name, "blobId": hashlib.sha1(content).hexdigest(), "size": size}
    if name.endswith(".parquet") or size > LFS_OVER_BYTES:
        entry["lfs"] = {"sha256": hashlib.sha256(content).hexdigest(), "size": size, "pointerSize": 134}
    return entry


class FakeHub(ThreadingHTTPServer):
    COMMIT = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, token: str | None = None, *, repos: dict[str, dict[str, bytes]] | None = None,
                 gated: dict[str, set[str]] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _HubHandler)
        self.token = token
        self.repos: dict[str, dict[str, bytes]] = repos if repos is not None else {}
        self.private: set[str] = set()
        self.gated = gated or {}
        self.commits: dict[str, str] = {}
        self.users: dict[str, dict] = {}
        self.datasets: dict[str, dict] = {}
        self.lfs: dict[str, set[str]] = {}
        self.cdn: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, str]] = []
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FakeHub:
        # A short poll, so shutdown() at the end of the block returns at once (socketserver polls every 0.5 s).
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()

    def authorized(self, authorization: str) -> bool:
        return self.token is not None and authorization == f"Bearer {self.token}"


class _HubHandler(BaseHTTPRequestHandler):
    server: FakeHub

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
        self._get(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._get(body=True)

    def do_POST(self) -> None:  # noqa: N802
        self._post()

    # ---- answers

    def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, status: int, document: dict, headers: dict | None = None) -> None:
        self._send(status, json.dumps(document).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        if commit:
            headers["X-Repo-Commit"] = commit
        self._json(status, {"error": message}, headers)

    def _note(self) -> tuple[str, str]:
        path = unquote(urlparse(self.path).path)
        authorization = self.headers.get("Authorization", "")
        self.server.requests.append((self.command, path, authorization))
        return path, authorization

    def _post(self) -> None:
        hub = self.server
        path, authorization = self._note()
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not hub.authorized(authorization):
            return self._json(401, {"error": "Invalid credentials in Authorization header"})
        if path == "/api/repos/create":
            payload = json.loads(body)
            repo = f"{payload['organization']}/{payload['name']}"
            if repo in hub.repos:
                return self._json(409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo}"})
            hub.repos[repo] = {}
            if payload.get("visibility") == "private":
                hub.private.add(repo)
            return self._json(200, {"url": f"{hub.url}/{repo}", "name": repo})
        parts = path.split("/")  # ['', 'api', 'models', owner, name, 'preupload'|'commit', revision]
        if len(parts) == 7 and parts[:3] == ["", "api", "models"]:
            repo = f"{parts[3]}/{parts[4]}"
            if repo not in hub.repos:
                return self._error(404, "RepoNotFound", "Repository not found")
            if parts[5] == "preupload":
                files = json.loads(body)["files"]
                return self._json(200, {"files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]})
            if parts[5] == "commit":
                files = hub.repos[repo]
                for line in body.decode().splitlines():
                    entry = json.loads(line)
                    if entry["key"] == "file":
                        value = entry["value"]
                        assert value["encoding"] == "base64", value
                        files[value["path"]] = base64.b64decode(value["content"])
                commit = hub.commits[repo] = hashlib.sha1(json.dumps(sorted(
                    (p, hashlib.sha256(b).hexdigest()) for p, b in files.items())).encode()).hexdigest()
                return self._json(200, {"commitUrl": f"{hub.url}/{repo}/commit/{commit}", "commitOid": commit,
                                        "pullRequestUrl": None})
        return self._json(404, {"error": f"the fake Hub does not answer POST {path}"})

    def _get(self, body: bool) -> None:
        hub = self.server
        path, authorization = self._note()
        parts = path.strip("/").split("/")
        if path == "/api/whoami-v2":
            return self._whoami(authorization)
        if parts[0] == "cdn" and len(parts) == 2 and parts[1] in hub.cdn:
            return self._ranged(hub.cdn[parts[1]], {"Content-Type": "application/octet-stream"})
        if parts[:2] == ["api", "datasets"] or parts[0] == "datasets":
            return self._dataset(parts, authorization)
        if parts[:2] == ["api", "models"] and (len(parts) == 4 or (len(parts) == 6 and parts[4] == "revision")):
            return self._model_info("/".join(parts[2:4]), authorization)
        if len(parts) < 5 or parts[2] != "resolve":
            return self._json(404, {"error": f"the fake Hub does not answer {self.command} {path}"})
        token = authorization.removeprefix("Bearer ") if authorization else ""
        repo, file_name = "/".join(parts[:2]), "/".join(parts[4:])
        if repo not in hub.repos or (repo in hub.private and not hub.authorized(authorization)):
            return self._error(404 if token else 401, "RepoNotFound", "Repository not found")
        if repo in hub.gated and token not in hub.gated[repo]:
            return self._error(403 if token else 401, "GatedRepo",
                               f"Access to model {repo} is restricted and you are not in the authorized list.")
        commit = hub.commits.get(repo, FakeHub.COMMIT)
        content = hub.repos[repo].get(file_name)
        if content is None:
            return self._error(404, "EntryNotFound", "Entry not found", commit=commit)
        digest = hashlib.sha256(content).hexdigest()
        if file_name in hub.lfs.get(repo, ()):
            # An LFS file: a redirect to the CDN with the file's own size and sha256 (file_download.py
            # get_hf_file_metadata reads X-Linked-Size and X-Linked-Etag before Content-Length and ETag).
            hub.cdn[digest] = content
            return self._send(302, b"", {"Location": f"{hub.url}/cdn/{digest}", "X-Repo-Commit": commit,
                                         "X-Linked-Size": str(len(content)), "X-Linked-Etag": f'"{digest}"',
                                         "ETag": f'"{hashlib.sha1(content).hexdigest()}"'})
        return self._ranged(content, {"Content-Type": "application/octet-stream", "X-Repo-Commit": commit,
                                      "ETag": f'"{digest}"'})

    def _whoami(self, authorization: str) -> None:
        hub = self.server
        token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
        if token is not None and token in hub.users:
            return self._json(200, hub.users[token])
        if hub.authorized(authorization):
            return self._json(200, whoami_answer("hub-user"))
        return self._json(401, {"error": "Invalid credentials in Authorization header"})

    def _model_info(self, repo: str, authorization: str) -> None:
        """HfApi.model_info's answer: {"id", "sha", "siblings": [{"rfilename"}]}, the repo's files as its siblings
        (with ?expand=siblings the Hub sends only "_id", "id" and those). A gated repo's listing needs no token: the
        Hub shows a gated model's page and files to anyone and gates only their contents (a GET of /resolve/)."""
        hub = self.server
        if repo not in hub.repos or (repo in hub.private and not hub.authorized(authorization)):
            return self._error(404 if authorization else 401, "RepoNotFound", "Repository not found")
        return self._json(200, {"_id": hashlib.sha1(repo.encode()).hexdigest()[:24], "id": repo,
                                "sha": hub.commits.get(repo, FakeHub.COMMIT),
                                "siblings": [{"rfilename": name} for name in hub.repos[repo]]})

    def _ranged(self, content: bytes, headers: dict[str, str]) -> None:
        """The file, or the part `Range: bytes=A-B` asks for (206 with Content-Range, B past the end read as the
        end), as the Hub and its CDN answer huggingface_hub's resumed downloads (file_download.py http_get)."""
        wanted = self.headers.get("Range", "")
        if not wanted.startswith("bytes="):
            return self._send(200, content, headers)
        first, _, last = wanted[6:].partition("-")
        start, end = int(first), min(int(last) if last else len(content) - 1, len(content) - 1)
        return self._send(206, content[start:end + 1], {**headers, "Content-Range": f"bytes {start}-{end}/{len(content)}"})

    def _dataset(self, parts: list[str], authorization: str) -> None:
        hub = self.server
        listing = parts[0] == "api"
        repo = "/".join(parts[2:4] if listing else parts[1:3])
        state = hub.datasets.get(repo)
        if state is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        if state.get("gated") and not hub.authorized(authorization):
            return self._error(401, "GatedRepo", "Access to this dataset is restricted")
        if listing:
            blobs = parse_qs(urlparse(self.path).query).get("blobs") == ["true"]
            return self._json(200, {"id": repo, "siblings": [_sibling(name, data) if blobs else {"rfilename": name}
                                                             for name, data in state["files"].items()]})
        data = state["files"].get("/".join(parts[5:]))
        if data is None or parts[3:5] != ["resolve", "main"]:
            return self._error(404, "EntryNotFound", "Entry not found")
        size = data.size if isinstance(data, LargeFile) else len(data)
        content = data.head if isinstance(data, LargeFile) else data
        wanted = self.headers.get("Range", "")
        if wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            last = min(int(last), size - 1)
            return self._send(206, content[int(first):last + 1], {"Content-Range": f"bytes {first}-{last}/{size}"})
        assert not isinstance(data, LargeFile), "a LargeFile is read in ranges only"
        return self._send(200, data, {})


def unreachable_hub(monkeypatch) -> tuple[str, list[float]]:
    """HF_ENDPOINT at a port where nothing listens any more (a Hub that cannot be reached), and the waits
    huggingface_hub's retries would sleep, recorded instead of slept (it retries a refused connection five times with
    backoff: 1, 2, 4, 8, 8 s, utils/_http.py http_backoff). Returns (the endpoint, the waits)."""
    from huggingface_hub.utils import _http

    server = FakeHub()
    url = server.url
    server.server_close()
    monkeypatch.setenv("HF_ENDPOINT", url)
    waits: list[float] = []
    # _http.time is the time module itself, so the patch reaches every thread of the process: a sleep of another
    # thread (a poller an earlier test of this worker left running) is slept, not recorded as this test's retry.
    owner, real_sleep = threading.get_ident(), _http.time.sleep

    def sleep(seconds: float) -> None:
        waits.append(seconds) if threading.get_ident() == owner else real_sleep(seconds)

    monkeypatch.setattr(_http.time, "sleep", sleep)
    return url, waits
