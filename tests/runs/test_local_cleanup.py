"""The local run's cluster goes when the run goes: on SIGHUP (the terminal closed), on SIGTERM, and when the run
itself is SIGKILLed, in which case no code of it runs and its supervisor (workload/run/head_supervisor.py) stops the
cluster. And the checks before Ray starts: each mistake one `error:` line and exit 2, through the real command.

One real `ray start --head` (the SIGKILL case, the one no handler can cover); the signal handlers' path is shown
on a stand-in for `ray` that, like Ray's processes, puts its children in process groups of their own within the
session, so what is checked is the mechanism that finds them, in a second.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support import run_snapshot
from workload import cli
from workload.run.head_supervisor import session_members, stop_session

REPO = Path(__file__).resolve().parents[2]
# A wait for a condition, not a timing: what the supervisor does after the run dies takes well under a second,
# plus Ray's SIGTERM grace of 1 s.
GONE_WITHIN_S = 30

# The local run up to the point where it waits on its job: the cluster started, then nothing but waiting.
DRIVER = textwrap.dedent("""
    import signal, sys, time
    from workload import cli
    from workload.run import local
    # SIGHUP at its default, as a terminal starts the run, even where these tests run under nohup, which ignores it
    # (and cli.run leaves an ignored signal ignored).
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if sys.argv[1:]:  # a stand-in for ray: no job server to wait for
        local.RAY_CLI = sys.argv[1]
        local._wait_for_job_server = lambda *args: None
    def main(argv):
        with local.local_cluster():
            print("ready", flush=True)
            time.sleep(600)
    sys.exit(cli.run(main))
""")
# `ray start --block` as far as its processes go: with job control on, each child has its own process group.
FAKE_RAY = "#!/bin/bash\nset -m\nsleep 600 &\nsleep 600 &\nwait\n"


def start_driver(*args: str) -> tuple[subprocess.Popen, int]:
    """The driver, once its cluster is up, and the cluster's session id (its supervisor's pid, the driver's
    child)."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, *args], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert driver.stdout.readline().strip() == "ready", driver.stderr.read()
    (session,) = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if _parent(pid) == driver.pid]
    return driver, session


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:  # ended in between
        return ""


def wait_until_gone(session: int) -> list[int]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := session_members(session)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_signal_to_the_run_stops_every_process_of_its_cluster(tmp_path, sig):
    fake_ray = tmp_path / "ray"
    fake_ray.write_text(FAKE_RAY)
    fake_ray.chmod(0o755)
    driver, session = start_driver(str(fake_ray))
    deadline = time.monotonic() + GONE_WITHIN_S
    while len(session_members(session)) < 4 and time.monotonic() < deadline:  # supervisor, bash, two sleeps
        time.sleep(0.05)
    groups = {Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2] for pid in session_members(session)}
    assert len(groups) >= 3, f"the stand-in's children are in process groups of their own, as Ray's are: {groups}"
    driver.send_signal(sig)
    assert driver.wait(timeout=GONE_WITHIN_S) == cli.INTERRUPTED, driver.stderr.read()
    assert session_members(session) == [], f"{sig.name}: processes of the cluster left: {session_members(session)}"
    assert driver.stderr.read().strip() == "error: interrupted"


# A listener that ignores SIGTERM, as `ray start --block` lingers after it: only SIGKILL ends it.
STUBBORN_LISTENER = textwrap.dedent("""
    import signal, socket, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)
    time.sleep(600)
""")


def test_a_stopped_session_has_no_process_and_no_port_left_when_the_stop_returns():
    """The teardown of tests/runs/test_workload_submit.py's cluster once found its job server's port still answering:
    SIGKILL is only queued by kill(). stop_session returns once its processes are gone."""
    listener = subprocess.Popen([sys.executable, "-c", STUBBORN_LISTENER], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    port = int(listener.stdout.readline())
    stop_session(listener.pid, reap=listener.poll)
    assert session_members(listener.pid) == [], "every process of the session is gone when stop_session returns"
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is closed when stop_session returns"
    assert listener.wait(timeout=GONE_WITHIN_S) == -signal.SIGKILL, "SIGTERM was ignored: SIGKILL ended it"


def test_a_sigkilled_run_leaves_no_ray_process_behind():
    driver, session = start_driver()
    # The job server answers (the driver's "ready") before `ray start` has always spawned the raylet: look again,
    # for a bounded while, until both are there.
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        ray_processes = [_cmdline(pid) for pid in session_members(session)]
        running = all(any(name in line for line in ray_processes) for name in ("gcs_server", "raylet"))
        if running or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert running, f"a real Ray head runs in the session: {ray_processes}"
    driver.kill()
    driver.wait()
    left = wait_until_gone(session)
    assert left == [], f"Ray processes left after the run was SIGKILLed: {left}"


def local_run(*flags: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workload.local", *flags], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("flags, expected", [
    (["--dataset", "data/corpus.jsonl"],
     f'error: --dataset {REPO}/data/corpus.jsonl line 1: no field "text" (the record\'s fields: body, id); allowed: '
     f'a record with "text" (--text_field)'),
    (["--data_format", "chat", "--dataset", "data/corpus.jsonl"],
     f'error: --dataset {REPO}/data/corpus.jsonl line 1: no field "messages" (the record\'s fields: body, id); '
     f"allowed: the field of its turns named with --messages_field, or ShareGPT's conversations"),
    (["--dataset", "data"], "error: --dataset data is a directory; give one file in it: data/conversations.jsonl, "
                            "data/corpus.jsonl, data/corpus.txt, data/instructions.jsonl"),
    (["--dataset", "./data"], "error: --dataset './data' is a directory; give one .txt, .jsonl, .json, .csv, .parquet, "
                              ".txt.gz, .jsonl.gz, .json.gz, .csv.gz file in it"),
    (["--storage_path", "README.md/runs"], f"error: --storage_path {REPO}/README.md/runs: {REPO}/README.md is a file, not a directory"),
    (["--num_workers", "999"], "error: --num_workers 999: the local cluster has "),
], ids=["text_field", "messages_field", "folder", "./folder", "storage_path", "num_workers"])
def test_the_local_run_refuses_a_bad_dataset_storage_or_worker_count_before_ray(flags, expected):
    done = local_run(*flags)
    assert done.returncode == cli.USAGE and done.stderr.startswith(expected), done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stdout == "", (done.stdout, done.stderr)


def test_a_reused_run_name_says_where_it_resumes_and_refuses_other_flags(tmp_path, capsys):
    """A run directory as a stopped run leaves it: its flags, a checkpoint at step 20 and Ray Train's snapshot."""
    from workload.run import checks as local_checks
    from workload.run import local

    cfg = local.parse_args(["--storage_path", str(tmp_path), "--run_name", "mine"])
    local_checks.record_flags(cfg)
    (tmp_path / "mine" / "checkpoint_000020").mkdir()
    (tmp_path / "mine" / "checkpoint_000020" / "train_step.json").write_text(json.dumps({"step": 20}))
    run_snapshot.write(tmp_path / "mine", [20])
    assert local_checks.check_before_ray(cfg) == 20
    local.announce_resume(cfg, 20)
    *checked, resuming = capsys.readouterr().out.splitlines()
    assert resuming == "resuming run mine from step 20, its latest checkpoint: steps 21..40", resuming
    assert all(line.startswith("dataset ") for line in checked), f"only the data check's line before it: {checked}"
    done = local_run("--storage_path", str(tmp_path), "--run_name", "mine", "--learning_rate", "0.001")
    assert done.returncode == cli.USAGE, done.stderr
    assert done.stderr.splitlines() == [
        f"error: --run_name mine exists under {tmp_path} with other flags: --learning_rate 0.005 then, 0.001 now",
        "give the same flags to resume it, or a new --run_name for a new run"], done.stderr


def test_two_runs_in_the_same_second_get_two_directories():
    """Two local runs alive at once, their clocks showing the same second."""
    same_second = ("import sys, time; time.strftime = lambda pattern: 'local-20261201-120000-'; "
                   "from workload.run import local; print(local.parse_args([]).run_name, flush=True); sys.stdin.read()")
    runs = [subprocess.Popen([sys.executable, "-c", same_second], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]
    names = [run.stdout.readline().strip() for run in runs]  # both still running
    for run in runs:
        run.communicate("")
    assert names[0] != names[1] and all(name.startswith("local-20261201-120000-") for name in names), names
