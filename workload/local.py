"""`python -m workload.local [train flags]`: the whole job on this machine, through the same path as a real cluster.

It starts a one-node Ray cluster (`ray start --head`, token authentication on, as Ray 2.60 defaults to), submits
the tiny-model training job through workload.submit, streams its progress, prints the summary, and stops the
cluster it started, also on an error or Ctrl-C. Extra flags are passed to `python3 -m workload.train` after the
defaults below, so they override them (e.g. `--steps 5`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from workload.config import is_local_dataset, parse_args
from workload.submit import JobAuthenticationError, connect, submit_training_job
from workload.train import validate

# Small enough to finish in well under two minutes on 2 CPU cores, large enough to show a few FSDP steps and a
# sharded checkpoint round trip.
DEFAULT_TRAIN_ARGS = (
    "--model_config", "tiny",
    "--steps", "20",
    "--batch_size", "4",
    "--seq_len", "64",
    "--learning_rate", "1e-3",
    "--checkpoint_every", "10",
)
# Under the repository's git-ignored runs/, whatever the current directory.
CHECKPOINT_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs", "local")
HEAD_START_TIMEOUT_S = 90
JOB_TIMEOUT_S = 600
# `ray start --block` itself lingers after SIGTERM; Ray processes are safe to SIGKILL (`ray stop --force` does).
STOP_GRACE_S = 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def head_environment(token_path: str) -> dict[str, str]:
    """The `ray start` process's environment: token auth from our own token file, and this interpreter first on
    PATH, since the job's entrypoint `python3 -m workload.train` is resolved there (so
    `.venv/bin/python -m workload.local` works without activating the venv)."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}
    env.pop("RAY_AUTH_TOKEN", None)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


@contextmanager
def local_cluster() -> Iterator[tuple[str, str]]:
    """A `ray start --head --block` of our own, CPU only: yields (job server address, token). On exit every process
    it started is stopped, and nothing else (other Ray clusters on this machine are left alone)."""
    temp_dir = tempfile.mkdtemp(prefix="ray-local-")
    token = secrets.token_hex(32)
    token_path = os.path.join(temp_dir, "auth_token")
    with open(os.open(token_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as file:
        file.write(token)
    dashboard_port = free_port()
    env = head_environment(token_path)
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    command = [
        ray_cli, "start", "--head", "--block", "--disable-usage-stats",
        "--temp-dir", temp_dir,
        "--port", str(free_port()),
        "--ray-client-server-port", str(free_port()),
        "--dashboard-host", "127.0.0.1",
        "--dashboard-port", str(dashboard_port),
        "--dashboard-agent-listen-port", str(free_port()),
        # The local run is the CPU path even on a machine with a GPU: the driver then sizes 2 CPU workers, which
        # must fit even on a one-core machine.
        "--num-gpus", "0",
        "--num-cpus", str(max(2, os.cpu_count() or 1)),
    ]
    head_log = open(os.path.join(temp_dir, "ray-start.log"), "w+")
    head = subprocess.Popen(command, env=env, stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address = f"http://127.0.0.1:{dashboard_port}"
        _wait_for_job_server(address, token, head, head_log)
        yield address, token
    finally:
        _stop(head)
        head_log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_for_job_server(address: str, token: str, head: subprocess.Popen, head_log) -> None:
    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while True:
        if head.poll() is not None:
            head_log.seek(0)
            raise RuntimeError(f"ray start --head exited with code {head.returncode}:\n{head_log.read()[-4000:]}")
        try:
            connect(address, token)
            return
        except JobAuthenticationError:
            raise
        except Exception as error:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray job server at {address} did not come up within "
                                   f"{HEAD_START_TIMEOUT_S} s ({error})") from error
            time.sleep(1)


def _stop(head: subprocess.Popen) -> None:
    """Stop every process the head started: SIGTERM, then SIGKILL to what is left after a grace period.

    `start_new_session` made the head a session leader. Ray's workers take process groups of their own but keep
    the session, so the session id, not the process group, names exactly the processes of this cluster."""
    _signal_session(head.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while _session_members(head.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
        head.poll()  # reaps the head, so it stops counting as a member
    _signal_session(head.pid, signal.SIGKILL)
    head.wait()


def _session_members(session_id: int) -> list[int]:
    """Live (not zombie) processes of a session, from /proc; on systems without /proc, the head alone."""
    if not os.path.isdir("/proc"):
        return [session_id]
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                stat = file.read()
        except OSError:
            continue
        # Fields after the parenthesised command name: state, ppid, pgrp, session, ...
        state, _, _, session = stat[stat.rindex(")") + 2 :].split()[:4]
        if int(session) == session_id and state != "Z":
            members.append(int(entry))
    return members


def _signal_session(session_id: int, sig: signal.Signals) -> None:
    for pid in _session_members(session_id):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def main(argv: Sequence[str] | None = None) -> dict:
    extra = list(sys.argv[1:] if argv is None else argv)
    # A SIGTERM (CI timeout, kill) unwinds like Ctrl-C, so the cluster is still stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    run_name = time.strftime("local-%Y%m%d-%H%M%S")
    cfg = parse_args([*DEFAULT_TRAIN_ARGS, "--storage_path", CHECKPOINT_ROOT, "--run_name", run_name, *extra])
    # The job runs in a copy of workload/ elsewhere, so local files are passed by absolute path.
    cfg = dataclasses.replace(
        cfg,
        dataset=os.path.abspath(os.path.expanduser(cfg.dataset)) if is_local_dataset(cfg.dataset) else cfg.dataset,
        tokenizer=os.path.abspath(cfg.tokenizer) if os.path.isdir(cfg.tokenizer) else cfg.tokenizer,
    )
    validate(cfg)  # a bad flag fails here, naming it, before Ray starts
    train_args = cfg.to_args()
    print("starting a local Ray cluster (ray start --head, token authentication on)", flush=True)
    with local_cluster() as (address, token):
        result = submit_training_job(
            address, train_args, token=token, timeout_s=JOB_TIMEOUT_S, on_log=lambda line: print(line, flush=True)
        )
    print("local Ray cluster stopped", flush=True)
    print("summary:", json.dumps(result.summary, indent=2), flush=True)
    return result.summary


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted; the local Ray cluster was stopped", file=sys.stderr)
        sys.exit(130)
    except ValueError as error:  # a bad flag, found before Ray started
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
