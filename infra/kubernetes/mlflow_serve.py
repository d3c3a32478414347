"""The MLflow server pod's entrypoint (infra/kubernetes/mlflow_server.py mounts this file from a ConfigMap and runs it
with the image's Python): the runs' SQLite store on the pod's own disk, restored from S3 at start and copied back
every MLFLOW_STORE_COPY_SECONDS and at shutdown, so a restarted or rescheduled pod keeps its runs.

Why a copy rather than a volume: the cluster has no EBS CSI driver (no PersistentVolume can be provisioned; monitoring
keeps Prometheus on an emptyDir for the same reason), and SQLite must not sit on S3 itself. The cost: a pod killed
without its grace period (a node lost) loses at most the last interval's runs' records; their artifacts are written
to S3 directly and stay. One replica with the Recreate strategy, so two pods never write the same copy.

Standard library, boto3 and the `mlflow` command only: the image's (ghcr.io/mlflow/mlflow, the -full variant, which
carries boto3). Not imported by the stack's program.
"""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading

STORE = os.environ.get("MLFLOW_STORE_FILE", "/var/lib/mlflow/mlflow.db")
COPY_SECONDS = int(os.environ.get("MLFLOW_STORE_COPY_SECONDS", "300"))


def restore(s3, bucket: str, key: str, store: str = STORE) -> bool:
    """The last copy of the store, if S3 has one; False for a first start."""
    from botocore.exceptions import ClientError

    try:
        s3.download_file(bucket, key, store)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
            raise
        print(f"mlflow-store: no copy at s3://{bucket}/{key} yet, starting empty", flush=True)
        return False
    print(f"mlflow-store: restored from s3://{bucket}/{key}", flush=True)
    return True


def copy(s3, bucket: str, key: str, store: str = STORE) -> bool:
    """A consistent snapshot of the live store (SQLite's online backup, safe while the server writes), uploaded over
    the previous copy. A failure warns and is retried at the next interval: it never stops the server."""
    if not os.path.exists(store):
        return False
    snapshot = f"{store}.copy"
    try:
        source, target = sqlite3.connect(store), sqlite3.connect(snapshot)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        s3.upload_file(snapshot, bucket, key)
        return True
    except Exception as error:  # noqa: BLE001 - one line, the server goes on
        print(f"warning: mlflow-store: copy to s3://{bucket}/{key} failed ({type(error).__name__}: {error}); "
              "retrying at the next interval", file=sys.stderr, flush=True)
        return False


def main() -> int:
    import boto3

    bucket, key = os.environ["MLFLOW_STORE_BUCKET"], os.environ["MLFLOW_STORE_KEY"]
    s3 = boto3.client("s3")
    os.makedirs(os.path.dirname(STORE), exist_ok=True)
    restore(s3, bucket, key)
    server = subprocess.Popen(["mlflow", "server", "--backend-store-uri", f"sqlite:///{STORE}", *sys.argv[1:]])
    stopping = threading.Event()

    def stop(signum, _frame) -> None:
        stopping.set()
        server.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            code = server.wait(timeout=COPY_SECONDS)
            break
        except subprocess.TimeoutExpired:
            copy(s3, bucket, key)
    copy(s3, bucket, key)  # the server has stopped: its last writes
    return 0 if stopping.is_set() else code


if __name__ == "__main__":
    sys.exit(main())
