"""A local port that reaches the Ray head's job server through the Kubernetes API, with no kubectl.

The kubernetes client's `portforward` gives one socket per websocket, good for one TCP connection; the Ray job
client opens several (HTTP requests, the log-tailing websocket). `LocalForward` listens on 127.0.0.1 and opens a
fresh remote stream for each connection it accepts. The job server stays a ClusterIP service, never exposed.
"""
from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Any, Callable, Iterator

# KubeRay's labels on the pods it creates; the head is the one pod with node-type=head.
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
_CHUNK = 64 * 1024


class LocalForward:
    """Listen on 127.0.0.1:<free port>; pipe every accepted connection to a stream from `open_remote()`."""

    def __init__(self, open_remote: Callable[[], Any]) -> None:
        self._open_remote = open_remote
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = threading.Event()
        self._streams: set[Any] = set()
        self._lock = threading.Lock()
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name=f"port-forward :{self.port}", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                local, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(local,), daemon=True).start()

    def _serve(self, local: socket.socket) -> None:
        try:
            remote = self._open_remote()
        except Exception:  # noqa: BLE001 - the client sees a closed connection and reports it
            local.close()
            return
        with self._lock:
            self._streams.update((local, remote))
        try:
            _pump(local, remote, self._closed)
        except (OSError, ValueError):
            # A reset by either end (ConnectionResetError, BrokenPipeError), or a stream shut by close(): this
            # connection is over, which its client sees and reports. Raised here, it would print a traceback from
            # the thread into whatever output the forward serves (threading.excepthook).
            pass
        finally:
            with self._lock:
                self._streams.difference_update((local, remote))
            for end in (local, remote):
                with contextlib.suppress(OSError):
                    end.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            with contextlib.suppress(OSError):
                stream.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> "LocalForward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pump(local: socket.socket, remote: Any, closed: threading.Event) -> None:
    """Copy bytes both ways until either side closes; a half-close is passed on so HTTP/1.0 bodies end."""
    open_ends = {local: remote, remote: local}
    while open_ends and not closed.is_set():
        readable, _, _ = select.select(list(open_ends), [], [], 0.5)
        for source in readable:
            data = source.recv(_CHUNK)
            target = open_ends[source]
            if data:
                target.sendall(data)
                continue
            del open_ends[source]
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)
            if target not in open_ends:
                return


def head_pod_name(api_client: Any, namespace: str, cluster_name: str) -> str:
    """The running head pod of the RayCluster `cluster_name`."""
    from kubernetes import client

    selector = f"{CLUSTER_LABEL}={cluster_name},{NODE_TYPE_LABEL}=head"
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items
    running = [pod.metadata.name for pod in pods if pod.status and pod.status.phase == "Running"]
    if not running:
        phases = ", ".join(f"{pod.metadata.name}={pod.status.phase if pod.status else '?'}" for pod in pods)
        raise RuntimeError(f"no running Ray head pod for RayCluster {namespace}/{cluster_name} "
                           f"(selector {selector}; found: {phases or 'none'})")
    return running[0]


@contextlib.contextmanager
def forward_to_pod(api_client: Any, namespace: str, pod: str, port: int) -> Iterator[LocalForward]:
    """A LocalForward whose connections reach `port` of `pod` through the API server's portforward endpoint."""
    from kubernetes import client
    from kubernetes.stream import portforward

    core = client.CoreV1Api(api_client)
    # `portforward` swaps api_client.call_api while it opens the websocket, so two openings must not overlap.
    opening = threading.Lock()

    def open_remote() -> Any:
        with opening:
            forward = portforward(core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
        return forward.socket(port)

    with LocalForward(open_remote) as local:
        yield local
