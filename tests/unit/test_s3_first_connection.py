"""An s3:// location the tools copy (workload/storage.py local_copy: tools.loss_curve's RUN, workload.export's
CHECKPOINT) at an endpoint that refuses the connection: said at once, exit 3 naming the argument, from one request of
a single attempt (check_connects), not after pyarrow's retries with backoff (6 s). The keys are never shown. A
reachable S3 keeps its retries (tests/program/test_storage_policy.py copies through moto's server)."""
from __future__ import annotations

import socket
import time

import pytest

from tools import loss_curve
from workload import cli, storage

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzEXAMPLEKEY"


@pytest.fixture
def refusing_endpoint(monkeypatch):
    """AWS_ENDPOINT_URL_S3 at a local port nothing listens on (bound, then closed: the kernel answers RST)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    return port


def test_loss_curve_of_an_unreachable_run_is_exit_3_at_once(refusing_endpoint, tmp_path, capsys):
    started = time.perf_counter()
    code = cli.run(loss_curve.main, ["s3://team-metrics/runs/lr-sweep-3", "--out", str(tmp_path / "c.svg")])
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == cli.ENVIRONMENT and err.startswith("error: RUN s3://team-metrics/runs/lr-sweep-3"), err
    assert "S3 is not reachable" in err and str(refusing_endpoint) in err and len(err.splitlines()) <= 2, err
    assert SECRET not in err and "wJalr" not in err
    assert elapsed < 3, f"one attempt, not the SDK's retries with backoff: {elapsed:.1f} s"


def test_every_copy_of_a_remote_location_applies_it(refusing_endpoint):
    with pytest.raises(cli.EnvironmentProblem, match=r"^CHECKPOINT s3://models-b/ckpt/checkpoint_000040: S3 is not "):
        with storage.local_copy("s3://models-b/ckpt/checkpoint_000040", what="CHECKPOINT"):
            pass


def test_a_local_file_system_is_not_probed(tmp_path):
    import pyarrow.fs

    storage.check_connects(pyarrow.fs.LocalFileSystem(), str(tmp_path / "absent"), "RUN")  # no request, no error
