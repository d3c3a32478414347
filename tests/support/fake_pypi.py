"""A local stand-in for PyPI's JSON API (https://pypi.org/pypi/<project>/json), as strict as Warehouse's: the fields
its "JSON API" documentation (docs.pypi.org/api/json/) gives a project (`info`, `last_serial`, `releases`, `urls`,
`vulnerabilities`) and each file (`filename`, `packagetype` bdist_wheel or sdist, `python_version`, `requires_python`
null or a specifier, `yanked`, `yanked_reason`, `size`, `digests`, `url`, `upload_time_iso_8601`); a project not held
is 404 with Warehouse's JSON body, and a name that is not the canonical one (PEP 503) is answered with a 301 to it, as
Warehouse redirects."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def file(filename: str, *, requires_python: str | None = None, yanked: bool = False) -> dict[str, Any]:
    """One release file as the JSON API lists it; its packagetype from its name (a .whl is a bdist_wheel)."""
    wheel = filename.endswith(".whl")
    digest = hashlib.sha256(filename.encode()).hexdigest()
    return {"comment_text": "", "digests": {"md5": digest[:32], "sha256": digest}, "downloads": -1,
            "filename": filename, "has_sig": False, "md5_digest": digest[:32],
            "packagetype": "bdist_wheel" if wheel else "sdist",
            "python_version": filename.split("-")[2] if wheel else "source", "requires_python": requires_python,
            "size": 1024, "upload_time": "2026-01-02T03:04:05", "upload_time_iso_8601": "2026-01-02T03:04:05.000000Z",
            "url": f"https://files.example.invalid/{filename}", "yanked": yanked,
            "yanked_reason": "broken" if yanked else None}


def project(name: str, releases: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    newest = max(releases, key=lambda v: [int(p) if p.isdigit() else 0 for p in re.split(r"[.a-z]+", v)])
    return {"info": {"name": name, "version": newest, "requires_python": None, "summary": "", "yanked": False},
            "last_serial": 1, "releases": releases, "urls": releases[newest], "vulnerabilities": []}


class FakePyPI(ThreadingHTTPServer):
    def __init__(self, projects: dict[str, dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.projects = {canonical(name): answer for name, answer in projects.items()}
        self.asked: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/pypi"


class _Handler(BaseHTTPRequestHandler):
    server: FakePyPI

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.asked.append(self.path)
        match = re.fullmatch(r"/pypi/([^/]+)/json/?", self.path)
        if match and match.group(1) != canonical(match.group(1)):
            self.send_response(301)
            self.send_header("Location", f"/pypi/{canonical(match.group(1))}/json")
            self.end_headers()
            return
        answer = self.server.projects.get(match.group(1)) if match else None
        body = json.dumps(answer if answer is not None else {"message": "Not Found"}).encode()
        self.send_response(200 if answer is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def serving(projects: dict[str, dict[str, Any]]) -> Iterator[FakePyPI]:
    """The fake index, serving on a thread for as long as the generator is open (for a fixture's `yield from`)."""
    server = FakePyPI(projects)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
