"""LocalForward, the local end of the port-forward to the job server: one remote stream per connection."""
from __future__ import annotations

import http.server
import socket
import threading
import urllib.request

import pytest

from infra.kubernetes.portforward import LocalForward


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


def test_a_connection_reset_ends_quietly(monkeypatch):
    """A client that resets its connection (RST, as a killed process's socket does) ends that connection only:
    nothing is raised in the forward's thread, where it would print a traceback into the command's output."""
    import struct
    import time

    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: raised.append(hook.exc_value))
    remote_ends: list[socket.socket] = []

    def open_remote() -> socket.socket:
        ours, theirs = socket.socketpair()
        remote_ends.append(theirs)
        return ours

    with LocalForward(open_remote) as forward:
        client = socket.create_connection(("127.0.0.1", forward.port))
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        deadline = time.monotonic() + 10
        while not remote_ends and time.monotonic() < deadline:
            time.sleep(0.01)
        assert remote_ends[0].recv(64).startswith(b"GET /")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST, not FIN
        remote_ends[0].sendall(b"HTTP/1.1 200 OK\r\n\r\n" * 4096)  # the forward writes into the reset connection
        while forward._streams and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not forward._streams, "the reset connection's streams are closed"
    assert raised == [], f"the forward's thread raised: {raised!r}"
