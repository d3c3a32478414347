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
