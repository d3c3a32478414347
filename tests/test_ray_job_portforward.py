"""LocalForward, the local end of the port-forward to the job server: one remote stream per connection."""
from __future__ import annotations

import http.server
import socket
import threading
import urllib.request

import pytest

from infra.portforward import LocalForward


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        reply = b"echo:" + body
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address
    httpd.shutdown()
    httpd.server_close()


def test_each_connection_gets_its_own_remote_stream(server):
    opened = []

    def open_remote():
        opened.append(1)
        return socket.create_connection(server)

    body = b"x" * 300_000  # larger than one chunk, so the pump loops
    with LocalForward(open_remote) as forward:
        for _ in range(3):
            request = urllib.request.Request(forward.address + "/", data=body, method="POST")
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.read() == b"echo:" + body, "the body must come back intact through the forward"
    assert len(opened) == 3, f"three connections must open three remote streams, opened {len(opened)}"


def test_failing_remote_closes_the_local_connection():
    def open_remote():
        raise ConnectionRefusedError("no head pod")

    with LocalForward(open_remote) as forward:
        with socket.create_connection(("127.0.0.1", forward.port), timeout=5) as client:
            try:
                received = client.recv(1024)
            except ConnectionResetError:
                received = b""
            assert received == b"", "the local connection must be closed when the remote cannot open"
