"""Submit the training driver to a Ray job server through the Jobs API, stream its log, and return its summary.

The `workload/` package goes up as the job's working_dir and runs as `python3 -m workload.train <train_args>`.
The same module serves the local run (workload.local) and the Pulumi job step.

Token authentication: Ray 2.60 turns it on by default and its job server answers 401/403 without a bearer token.
The token travels as an `Authorization: Bearer` header, which JobSubmissionClient sends on every request
(including the log websocket) in Ray 2.60 and in the older 2.5x of the cluster image alike. The token is never
printed: it lives only in the client's headers.
"""
from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import tempfile
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

from ray.job_submission import JobStatus, JobSubmissionClient

from workload.config import SUMMARY_PREFIX

LOG_TAIL_LINES = 60
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


class JobFailedError(RuntimeError):
    """A job that failed, was stopped, timed out or printed no summary; the message ends with its log tail."""

    def __init__(self, job_id: str, status: str, log_tail: str, reason: str = "") -> None:
        self.job_id = job_id
        self.status = status
        self.log_tail = log_tail
        self.reason = reason or f"ended {status}"
        super().__init__(f"Ray job {job_id} {reason or 'ended ' + status}. Last lines of its log:\n{log_tail}")


class JobAuthenticationError(PermissionError):
    """The job server refused the request's token (missing or wrong)."""


@dataclass(frozen=True)
class JobResult:
    job_id: str
    status: str
    """JobStatus value, e.g. "SUCCEEDED"."""
    summary: dict
    """The driver's final TRAIN_SUMMARY line, parsed."""
    logs: str
    """The whole job log."""


def connect(address: str, token: str | None = None) -> JobSubmissionClient:
    """A client for the job server at `address` (http://host:8265); a refused token raises
    JobAuthenticationError, without the token in the message."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    with _auth_refusals(address, token):
        return JobSubmissionClient(address, headers=headers)


@contextmanager
def _auth_refusals(address: str, token: str | None) -> Iterator[None]:
    """Turns the server's 401/403 into JobAuthenticationError, whichever request the server first refuses."""
    try:
        yield
    except Exception as error:
        if not _is_auth_refusal(error):
            raise
        raise JobAuthenticationError(
            f"The Ray job server at {address} refused the "
            f"{'given auth token' if token else 'request: it needs an auth token'} ({_first_line(error)})"
        ) from None  # Ray's error carries no token, but its internals add nothing to the message


def _is_auth_refusal(error: Exception) -> bool:
    # Ray 2.60 raises ray.exceptions.AuthenticationError; older clients a RuntimeError quoting the HTTP status.
    text = str(error)
    return type(error).__name__ == "AuthenticationError" or "status code 401" in text or "status code 403" in text


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def submit_training_job(
    address: str,
    train_args: list[str],
    *,
    token: str | None = None,
    pip: Sequence[str] = (),
    env_vars: Mapping[str, str] | None = None,
    timeout_s: float = 3600.0,
    on_log: Callable[[str], None] = print,
    submission_id: str | None = None,
) -> JobResult:
    """Run `python3 -m workload.train <train_args>` as a Ray job and wait for it; raises JobFailedError with the
    tail of the log when it fails, is stopped, or runs past `timeout_s` (it is then stopped)."""
    client = connect(address, token)
    runtime_env: dict = {}
    if pip:
        runtime_env["pip"] = list(pip)
    if env_vars:
        runtime_env["env_vars"] = dict(env_vars)
    with tempfile.TemporaryDirectory() as staging:
        # Only the package goes up, not the repository (its .venv alone is gigabytes).
        shutil.copytree(PACKAGE_DIR, os.path.join(staging, "workload"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        with _auth_refusals(address, token):
            job_id = client.submit_job(
                # python3, as the original recipe runs it: Ubuntu-based images need not have a `python`.
                entrypoint=shlex.join(["python3", "-m", "workload.train", *train_args]),
                runtime_env={**runtime_env, "working_dir": staging},
                submission_id=submission_id,
            )
    on_log(f"submitted Ray job {job_id} to {address}")

    deadline = time.monotonic() + timeout_s
    try:
        _follow_log(client, job_id, on_log, timeout_s)
        status = _wait_for_end(client, job_id, deadline)
    except (asyncio.TimeoutError, TimeoutError):
        client.stop_job(job_id)
        logs = client.get_job_logs(job_id)
        raise JobFailedError(job_id, str(client.get_job_status(job_id).value), log_tail(logs),
                             reason=f"ran past its timeout of {timeout_s:.0f} s and was stopped") from None
    except BaseException:
        # Interrupted (Ctrl-C, a cancelled `pulumi up`) or the server unreachable: nobody is waiting for the job
        # any more, so it must not keep holding the GPUs.
        with suppress(Exception):
            client.stop_job(job_id)
        raise

    logs = client.get_job_logs(job_id)
    if status != JobStatus.SUCCEEDED:
        info = client.get_job_info(job_id)
        reason = f"ended {status.value}" + (f": {info.message}" if info.message else "")
        raise JobFailedError(job_id, status.value, log_tail(logs), reason=reason)
    summary = parse_summary(logs)
    if summary is None:
        raise JobFailedError(job_id, status.value, log_tail(logs),
                             reason=f"succeeded but printed no {SUMMARY_PREFIX.strip()} line")
    return JobResult(job_id=job_id, status=status.value, summary=summary, logs=logs)


def _run_on_private_loop(coroutine) -> None:
    """Like asyncio.run, but leaves the calling thread's current event loop alone (Pulumi's runtime, for one,
    needs it afterwards). On an interrupt (Ctrl-C, SIGTERM) the log stream is cancelled and its websocket closed
    before the loop is, so nothing is left dangling."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(coroutine)
    try:
        loop.run_until_complete(task)
    finally:
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                loop.run_until_complete(task)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _follow_log(client: JobSubmissionClient, job_id: str, on_log: Callable[[str], None], timeout_s: float) -> None:
    """Stream the job's log until it ends. A dropped stream (a port-forward or proxy cutting an idle websocket
    while the job installs packages or compiles) is not the job failing: say so and let the caller poll."""
    try:
        _run_on_private_loop(asyncio.wait_for(_stream_log(client, job_id, on_log), timeout=timeout_s))
    except (asyncio.TimeoutError, TimeoutError):
        raise
    except Exception as error:  # noqa: BLE001 any transport error of the websocket
        if _is_auth_refusal(error):
            raise
        on_log(f"log stream of {job_id} lost ({_first_line(error)}); waiting for the job to end")


async def _stream_log(client: JobSubmissionClient, job_id: str, on_log: Callable[[str], None]) -> None:
    # The websocket closes when the job reaches a terminal state.
    async for chunk in client.tail_job_logs(job_id):
        for line in chunk.splitlines():
            on_log(line)


def _wait_for_end(client: JobSubmissionClient, job_id: str, deadline: float) -> JobStatus:
    # The log stream can close a moment before the job's status turns terminal.
    while (status := client.get_job_status(job_id)) not in TERMINAL:
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.5)
    return status


def parse_summary(logs: str) -> dict | None:
    """The last TRAIN_SUMMARY line of a job log, parsed; None when there is none."""
    for line in reversed(logs.splitlines()):
        if line.startswith(SUMMARY_PREFIX):
            return json.loads(line[len(SUMMARY_PREFIX):])
    return None


def log_tail(logs: str | None, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a job log."""
    return "\n".join((logs or "").splitlines()[-lines:])


def stop_job(address: str, submission_id: str, *, token: str | None = None) -> None:
    """Ask the job server to stop a job; a job already finished is left as it is."""
    connect(address, token).stop_job(submission_id)
