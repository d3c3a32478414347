"""Submit the training driver to a Ray job server through the Jobs API, stream its log, and return its summary.

The `workload/` package goes up as the job's working_dir and runs as `python3 -m workload.train <train_args>`.
The same module serves the local run (workload.local) and the Pulumi job step.

Token authentication: Ray 2.60 turns it on by default and its job server answers 401/403 without a bearer token.
The token travels as an `Authorization: Bearer` header, which JobSubmissionClient sends on every request
(including the log websocket) in Ray 2.60 and in the older 2.5x of the cluster image alike. The token is never
printed: it lives only in the client's headers.

A job is found again by its submission id. `start_job` submits under an id derived from the run (the Pulumi job
resource derives it from the stack, trainRunId and the job's flags) or attaches to the job already there: a
`pulumi up` cut off while it waited, then run again, follows the job it started instead of starting a second.
Ray refuses a second submission under an existing id ("Job with submission_id ... already exists") in 2.58 and 2.60
alike, and keeps ended jobs; a run whose job failed or was stopped is tried again as `<id>-2`, `<id>-3`, ...
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

from ray.job_submission import JobDetails, JobStatus, JobSubmissionClient

from workload.config import SUMMARY_PREFIX, TRANSPORT_PREFIX
from workload.run.output import HEARTBEAT_PREFIX, own_line

LOG_TAIL_LINES = 60
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # workload/, the whole package
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
# A run's job that ended this way is tried again under the next attempt id; one that succeeded is its result.
RETRIED = {JobStatus.FAILED, JobStatus.STOPPED}
MAX_ATTEMPTS = 100
# How often the log is read again once its stream has dropped (a port-forward cutting an idle websocket).
POLL_S = 5.0
# The job server's answer while its head's job agent has not registered yet, and how long to keep asking.
NO_AGENT_YET = "No available agent to submit job"
AGENT_WAIT_S = 60
AGENT_RETRY_INTERVAL_S = 0.25
# While the workers start (Ray schedules them, installs trainPip, each loads the model) the log can be silent for a
# minute: a line this often, until the first training line, says the job is alive and how long it has waited.
HEARTBEAT_S = 10.0
# How often the follower looks at the clock between log lines.
TICK_S = 1.0
# The trainer's first lines once the workers are up (workload/trainer.py's _progress).
STARTED_PREFIXES = ("training ", "effective batch ", "step ")


class JobFailedError(RuntimeError):
    """A job that failed, was stopped, timed out or printed no summary; the message ends with its log tail."""

    def __init__(self, job_id: str, status: str, log_tail: str, reason: str = "") -> None:
        self.job_id = job_id
        self.status = status
        self.log_tail = log_tail
        self.reason = reason or f"ended {status}"
        super().__init__(f"Ray job {job_id} {self.reason}. Last lines of its log:\n{log_tail}")


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
    # Ray's client sends its requests with requests, which reads $NETRC (~/.netrc) before each (requests/utils.py
    # get_netrc_auth): a FIFO there would wait forever (workload/run/credential_files.py).
    from workload.run import credential_files

    credential_files.check()
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
) -> JobResult:
    """Run `python3 -m workload.train <train_args>` as a Ray job and wait for it; raises JobFailedError with the
    tail of the log when it fails, is stopped, or runs past `timeout_s` (it is then stopped). Interrupted (Ctrl-C),
    it stops the job: a local run's job must not outlive the command."""
    client = connect(address, token)
    with _auth_refusals(address, token):
        job_id, _ = start_job(client, train_args, pip=pip, env_vars=env_vars)
    on_log(f"submitted Ray job {job_id} to {address}")
    try:
        return wait_for_end(client, job_id, on_log, timeout_s)
    except JobFailedError:
        raise
    except BaseException:
        # Interrupted or the server unreachable: nobody is waiting for the job any more, so it must not keep
        # holding the machine.
        with suppress(Exception):
            client.stop_job(job_id)
        raise


def start_job(
    client: JobSubmissionClient,
    train_args: Sequence[str],
    *,
    submission_id: str | None = None,
    pip: Sequence[str] = (),
    env_vars: Mapping[str, str] | None = None,
    time_limit_s: float | None = None,
    metadata: Mapping[str, str] | None = None,
) -> tuple[str, bool]:
    """Submit `python3 -m workload.train <train_args>` (with `--time_limit_s`, its own deadline), or attach to the job
    of this run already there: (job id, attached). Without `submission_id`, Ray picks one and it always submits."""
    if submission_id is None:
        return _submit(client, train_args, None, pip, env_vars, time_limit_s, metadata), False
    for attempt in range(1, MAX_ATTEMPTS + 1):
        job_id = submission_id if attempt == 1 else f"{submission_id}-{attempt}"
        info = job_info(client, job_id)
        if info is not None and info.status not in RETRIED:
            return job_id, True  # running, pending, or succeeded: this run's job
        if info is None:
            try:
                return _submit(client, train_args, job_id, pip, env_vars, time_limit_s, metadata), False
            except RuntimeError as error:
                if "already exists" not in str(error):
                    raise
                return job_id, True  # submitted in between by another create of the same run
    raise RuntimeError(f"{MAX_ATTEMPTS} attempts of {submission_id} failed or were stopped; change trainRunId")


def _submit(client: JobSubmissionClient, train_args: Sequence[str], submission_id: str | None, pip: Sequence[str],
            env_vars: Mapping[str, str] | None, time_limit_s: float | None, metadata: Mapping[str, str] | None) -> str:
    runtime_env: dict = {}
    if pip:
        runtime_env["pip"] = list(pip)
    if env_vars:
        runtime_env["env_vars"] = dict(env_vars)
    limit = ["--time_limit_s", f"{time_limit_s:g}"] if time_limit_s else []
    with tempfile.TemporaryDirectory() as staging:
        # Only the package goes up, not the repository (its .venv alone is gigabytes).
        shutil.copytree(PACKAGE_DIR, os.path.join(staging, "workload"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        deadline = time.monotonic() + AGENT_WAIT_S
        while True:
            try:
                return client.submit_job(
                    # python3, as the original recipe runs it: Ubuntu-based images need not have a `python`.
                    entrypoint=shlex.join(["python3", "-m", "workload.train", *train_args, *limit]),
                    runtime_env={**runtime_env, "working_dir": staging},
                    submission_id=submission_id,
                    metadata=dict(metadata) if metadata else None,
                )
            except RuntimeError as error:
                # A head that has just started answers HTTP before its job agent registers, and says so with a 500
                # that asks to try again (ray/dashboard/modules/job/job_head.py, submit_job): nothing was submitted.
                if NO_AGENT_YET not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(AGENT_RETRY_INTERVAL_S)


def job_info(client: JobSubmissionClient, job_id: str) -> JobDetails | None:
    """The job's details; None when the job server has no job of that id."""
    try:
        return client.get_job_info(job_id)
    except RuntimeError as error:
        if "status code 404" in str(error):
            return None
        raise


def wait_for_end(client: JobSubmissionClient, job_id: str, on_log: Callable[[str], None],
                 timeout_s: float) -> JobResult:
    """Stream the job's log until it ends and return its summary; JobFailedError with the log's tail when it failed,
    was stopped, printed no summary, or ran past `timeout_s` (it is then stopped)."""
    deadline = time.monotonic() + timeout_s
    try:
        follow_log(client, job_id, on_log, timeout_s)
        status = wait_for_status(client, job_id, deadline)
    except (asyncio.TimeoutError, TimeoutError):
        raise _stopped_at_timeout(client, job_id, timeout_s) from None
    logs = client.get_job_logs(job_id)
    if status != JobStatus.SUCCEEDED:
        raise JobFailedError(job_id, status.value, log_tail(logs), reason=_ended(client, job_id, status))
    summary = parse_summary(logs)
    if summary is None:
        raise JobFailedError(job_id, status.value, log_tail(logs),
                             reason=f"succeeded but printed no {SUMMARY_PREFIX.strip()} line")
    return JobResult(job_id=job_id, status=status.value, summary=summary, logs=logs)


def wait_for_transport(client: JobSubmissionClient, job_id: str, on_log: Callable[[str], None],
                       timeout_s: float) -> tuple[dict, str]:
    """Stream the job's log until its TRAIN_TRANSPORT report (every rank's NCCL lines after the first steps) and
    return (report, the log so far); the job runs on. JobFailedError when it ends without one, or when none came
    within `timeout_s` (it is then stopped)."""
    deadline = time.monotonic() + timeout_s
    try:
        line = follow_log(client, job_id, on_log, timeout_s, until=lambda text: TRANSPORT_PREFIX in text).match
        # The stream ended (the job did) or dropped: read the log as it stands until the report is in it.
        while line is None:
            logs = client.get_job_logs(job_id)
            if (report := parse_transport(logs)) is not None:
                return report, logs
            status = client.get_job_status(job_id)
            if status in TERMINAL:
                raise JobFailedError(job_id, status.value, log_tail(logs),
                                     reason=_ended(client, job_id, status) + " before reporting its NCCL transport")
            if time.monotonic() > deadline:
                raise TimeoutError
            time.sleep(POLL_S)
    except (asyncio.TimeoutError, TimeoutError):
        raise _stopped_at_timeout(client, job_id, timeout_s, "before reporting its NCCL transport") from None
    logs = client.get_job_logs(job_id)
    return parse_transport(logs) or parse_transport(line), logs


def _stopped_at_timeout(client: JobSubmissionClient, job_id: str, timeout_s: float, what: str = "") -> JobFailedError:
    client.stop_job(job_id)
    logs = client.get_job_logs(job_id)
    return JobFailedError(job_id, str(client.get_job_status(job_id).value), log_tail(logs),
                          reason=" ".join(filter(None, [f"ran past its timeout of {timeout_s:.0f} s", what,
                                                        "and was stopped"])))


def _ended(client: JobSubmissionClient, job_id: str, status: JobStatus) -> str:
    info = client.get_job_info(job_id)
    return f"ended {status.value}" + (f": {info.message}" if info.message else "")


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


class Heartbeat:
    """`waiting for workers: N s` into `on_log` every `every_s` of `clock` until a line of the trainer's arrives."""

    def __init__(self, on_log: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                 every_s: float = HEARTBEAT_S) -> None:
        self.on_log, self.clock, self.every_s = on_log, clock, every_s
        self.started = self.last = clock()
        self.done = False

    def line(self, text: str) -> None:
        """A line of the job's log arrived: the first of the trainer's ends the heartbeat."""
        shown = own_line(text)
        self.done = self.done or bool(shown and shown.startswith(STARTED_PREFIXES))

    def tick(self) -> None:
        now = self.clock()
        if not self.done and now - self.last >= self.every_s:
            self.last = now
            self.on_log(f"{HEARTBEAT_PREFIX}{now - self.started:.0f} s")


@dataclass
class Followed:
    """How far `follow_log` got."""

    match: str | None = None
    """The line `until` accepted; None when the stream ended first."""
    lines: int = 0
    """Lines of the log streamed, from its first (the skipped ones included)."""
    lost: bool = False
    """The stream dropped before the job ended."""


def follow_log(client: JobSubmissionClient, job_id: str, on_log: Callable[[str], None], timeout_s: float | None,
               until: Callable[[str], bool] | None = None, skip: int = 0,
               clock: Callable[[], float] = time.monotonic) -> Followed:
    """Stream the job's log, from its first line, into `on_log` until the job ends or a line satisfies `until`;
    the first `skip` lines (shown already) are not passed on. A dropped stream (a port-forward or proxy cutting an
    idle websocket while the job installs packages or compiles) is not the job failing: say so and return, for
    the caller to poll or stream again. Until the trainer's first line, a Heartbeat line every HEARTBEAT_S."""
    followed = Followed()
    heartbeat = Heartbeat(on_log, clock)
    try:
        _run_on_private_loop(asyncio.wait_for(_stream_log(client, job_id, on_log, until, skip, followed, heartbeat),
                                              timeout=timeout_s))
    except (asyncio.TimeoutError, TimeoutError):
        raise
    except Exception as error:  # noqa: BLE001 any transport error of the websocket
        if _is_auth_refusal(error):
            raise
        followed.lost = True
        on_log(f"log stream of {job_id} lost ({_first_line(error)}); reading the job's state instead")
    return followed


async def _stream_log(client: JobSubmissionClient, job_id: str, on_log: Callable[[str], None],
                      until: Callable[[str], bool] | None, skip: int, followed: Followed,
                      heartbeat: Heartbeat) -> None:
    # The websocket closes when the job reaches a terminal state. Leaving early (`until`), the stream is closed
    # here, on this loop, so its websocket and HTTP session do not outlive it.
    stream = client.tail_job_logs(job_id)
    beating = asyncio.ensure_future(_beat(heartbeat))
    try:
        async for chunk in stream:
            for line in chunk.splitlines():
                followed.lines += 1
                heartbeat.line(line)
                if followed.lines <= skip:
                    continue
                heartbeat.tick()
                on_log(line)
                if until is not None and until(line):
                    followed.match = line
                    return
    finally:
        beating.cancel()
        await stream.aclose()


async def _beat(heartbeat: Heartbeat) -> None:
    while not heartbeat.done:
        await asyncio.sleep(TICK_S)
        heartbeat.tick()


def wait_for_status(client: JobSubmissionClient, job_id: str, deadline: float) -> JobStatus:
    """The job's status once it is terminal; TimeoutError past `deadline` (a time.monotonic()). The log stream can
    close a moment before the status turns terminal, and a stopped job takes a moment to end."""
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


def parse_transport(logs: str) -> dict | None:
    """The first TRAIN_TRANSPORT report of a job log, parsed; None when there is none. Rank 0's worker prints it,
    so Ray puts its own prefix ("(RayTrainWorker pid=...)") before it in the job's log."""
    for line in logs.splitlines():
        if TRANSPORT_PREFIX in line:
            return json.loads(line[line.index(TRANSPORT_PREFIX) + len(TRANSPORT_PREFIX):])
    return None


def log_tail(logs: str | None, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a job log."""
    return "\n".join((logs or "").splitlines()[-lines:])
