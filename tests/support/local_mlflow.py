"""A real MLflow tracking server for the tests: `mlflow server` on 127.0.0.1 and a free port, a SQLite store and an
artifact root in a temporary directory, started once per test session (pytest_plugins in tests/conftest.py) by the
tests that ask for the `mlflow_server` fixture, and stopped with the session.

One uvicorn worker (its default of 4 would each import MLflow's server on a 2-core machine) and no job execution:
the server's job runner wants huey, which mlflow-skinny leaves out, and the tracking API needs no job.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

START_TIMEOUT_S = 300  # seconds on a 2-core machine at rest; a loaded CI machine needs minutes


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server():
    """The server's URL (http://127.0.0.1:PORT)."""
    directory = tempfile.mkdtemp(prefix="mlflow-server-")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        env.pop(name, None)
    log = open(os.path.join(directory, "server.log"), "w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{directory}/mlflow.db", "--artifacts-destination",
         f"{directory}/artifacts"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                log.seek(0)
                pytest.fail(f"mlflow server exited with {server.returncode}:\n{log.read()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"mlflow server did not answer /health in {START_TIMEOUT_S} s:\n{log.read()[-3000:]}")
                time.sleep(0.2)
        yield url
    finally:
        # Its uvicorn worker is a child in the same session: the group goes together.
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)
