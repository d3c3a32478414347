"""LocalForward, the local end of the port-forward to the job server: one remote stream per connection."""
from __future__ import annotations

import fcntl
import http.server
import queue
import socket
import struct
import termios
import threading
import time
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


def _unread(stream: socket.socket) -> int:
    """Bytes that arrived at `stream` and are not read yet."""
    return struct.unpack("i", fcntl.ioctl(stream, termios.FIONREAD, b"\0" * 4))[0]


def test_a_connection_reset_ends_quietly(monkeypatch):
    """A client that resets its connection (RST, as a killed process's socket does) while the forward writes the job
    server's answer into it ends that connection only: nothing is raised in the forward's thread, where it would print
    a traceback into the command's output.

    The answer is written before the reset, never after: once the client has reset, the forward may close the remote
    end at any moment, and a write into it would fail in the test instead. The client's receive buffer and the
    forward's send buffer are small, so once the forward has taken a chunk of the answer it is writing into the
    client, and cannot be done with it, when the reset comes."""
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: raised.append(hook.exc_value))
    opened: queue.Queue[tuple[socket.socket, socket.socket]] = queue.Queue()
    serving: list[threading.Thread] = []
    answer = b"HTTP/1.1 200 OK\r\n\r\n" * 4096  # 76 KiB: a socketpair holds it all, the client's side a few KiB

    def open_remote() -> socket.socket:
        serving.append(threading.current_thread())  # the thread that serves this connection
        ours, theirs = socket.socketpair()
        opened.put((ours, theirs))
        return ours

    with LocalForward(open_remote) as forward:
        # A connection the listener accepts inherits its buffer sizes; both are set before connecting.
        forward._listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", forward.port))
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        forward_end, remote = opened.get(timeout=10)
        remote.settimeout(10)
        assert remote.recv(64).startswith(b"GET /")
        remote.sendall(answer)
        deadline = time.monotonic() + 10
        while _unread(forward_end) == len(answer):  # until the forward has taken its first chunk of the answer
            assert time.monotonic() < deadline, "the forward must read the remote's answer"
            time.sleep(0.01)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST, not FIN
        try:
            assert remote.recv(1) == b"", "the forward must close the remote stream of the reset connection"
        except ConnectionResetError:
            pass  # closed too, with the rest of the answer unread (a socketpair then reports a reset)
        serving[0].join(timeout=10)
        assert not serving[0].is_alive(), "the reset connection's thread must end"
        assert not forward._streams, "the reset connection's streams are closed"
    assert raised == [], f"the forward's thread raised: {raised!r}"
