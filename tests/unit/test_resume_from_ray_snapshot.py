"""The step a resumed local run announces is the one Ray Train resumes from: the latest checkpoint its own
checkpoint_manager_snapshot.json lists (workload/checkpoint/ray_snapshot.py, read as Ray's CheckpointManager reads
it). A checkpoint_<k>/ the snapshot does not list, or any where the run has none, is refused naming --run_name and
the directory (Ray Train would train past it, or from step 0, and save over it); a snapshot Ray would stop on is
refused naming the file. The snapshots here are written by Ray's own classes (tests/support/run_snapshot.py)."""
from __future__ import annotations

import json
import os

import pytest

from tests.support import run_snapshot
from workload import cli
from workload.checkpoint import ray_snapshot, run_directory
from workload.run import checks, local, resumed_model


def checkpoint(run, step: int) -> None:
    """checkpoint_<step>/ holding the record the job writes (what the resume reads of it before Ray)."""
    (run / f"checkpoint_{step:06d}").mkdir(parents=True)
    (run / f"checkpoint_{step:06d}" / run_directory.STEP_FILE).write_text(json.dumps({"step": step}))


def flags(storage, run_name="gale"):
    return local.parse_args(["--storage_path", str(storage), "--run_name", run_name, "--steps", "25"])


def refusal(storage, run_name="gale") -> cli.UsageError:
    with pytest.raises(cli.UsageError) as refused:
        checks.resume_step(flags(storage, run_name))
    assert "\n" not in str(refused.value), refused.value
    return refused.value


def test_a_checkpoint_without_ray_s_snapshot_is_refused_not_announced(tmp_path):
    checkpoint(tmp_path / "gale", 7)  # another model's files under the run's name: Ray Train would start at step 0
    refused = refusal(tmp_path)
    directory = tmp_path / "gale" / "checkpoint_000007"
    assert str(refused) == (f"--run_name gale: {directory} is no checkpoint Ray Train recorded for this run (the run "
                            "has no checkpoint_manager_snapshot.json): Ray Train would start the run at step 0"), \
        refused
    assert refused.hint == f"remove {directory} (Ray Train would save over it), or give a new --run_name", refused.hint


def test_a_checkpoint_the_snapshot_does_not_list_is_refused(tmp_path):
    for step in (5, 10, 12):
        checkpoint(tmp_path / "gale", step)
    run_snapshot.write(tmp_path / "gale", [5, 10])  # checkpoint_000012 never reported: Ray resumes from 10
    refused = refusal(tmp_path)
    assert str(refused).startswith(f"--run_name gale: {tmp_path / 'gale' / 'checkpoint_000012'} is no checkpoint Ray "
                                   "Train recorded for this run (its checkpoint_manager_snapshot.json does not list "
                                   "it): Ray Train would not resume from it"), refused
    checkpoint(tmp_path / "gale", 1)
    message = str(refusal(tmp_path))
    assert "checkpoint_000012 is no checkpoint" in message and "(and 1 more such)" in message, message


def test_the_step_is_the_snapshot_s_latest_not_the_highest_name(tmp_path):
    for step in (4, 8, 16):
        checkpoint(tmp_path / "gale", step)
    run_snapshot.write(tmp_path / "gale", [4, 8, 16])
    assert checks.resume_step(flags(tmp_path)) == 16  # a run the job wrote resumes
    run_snapshot.write(tmp_path / "gale", [4, 8, 16], latest=8)
    assert checks.resume_step(flags(tmp_path)) == 8  # what ray.train.get_checkpoint() hands the workers


def test_a_snapshot_of_no_checkpoint_is_a_new_run(tmp_path):
    run_snapshot.write(tmp_path / "gale", [])
    assert checks.resume_step(flags(tmp_path)) is None


def _write(content: bytes):
    def make(path):
        path.write_bytes(content)
    return make


def _edited(change):
    def make(path):
        state = json.loads(path.read_text())
        change(state)
        path.write_text(json.dumps(state))
    return make


def _escape(state):
    state["checkpoint_results"][0]["checkpoint_dir_name"] = "../elsewhere/checkpoint_000003"


def _latest_unlisted(state):
    state["latest_checkpoint_result"]["checkpoint_dir_name"] = "checkpoint_000009"


def _no_latest(state):
    state["latest_checkpoint_result"] = None


def _indices_short(state):
    state["checkpoint_report_indices"] = [0]


def _missing_directory(path):
    os.rename(path.parent / "checkpoint_000006", path.parent.parent / "checkpoint_000006")


def _fifo(path):
    os.remove(path)
    os.mkfifo(path)


@pytest.mark.parametrize("tamper, words", [
    (_write(b'{"checkpoint_results": ['), "checkpoint_manager_snapshot.json is not JSON"),
    (_write(b"\xff\xfe{}"), "is not UTF-8 text"),
    (_write(b"[]"), "holds a list, not the JSON object Ray Train writes"),
    (_write(b'{"checkpoint_results": {}}'), "checkpoint_results is dict, not the list Ray Train writes"),
    (_edited(_escape), "checkpoint_results names '../elsewhere/checkpoint_000003', not a checkpoint_<step> directory"),
    (_edited(_latest_unlisted), "its latest_checkpoint_result (checkpoint_000009) is not among its checkpoint_results"),
    (_edited(_no_latest), "its latest_checkpoint_result (None) is not among its checkpoint_results (2)"),
    (_edited(_indices_short), "checkpoint_report_indices does not pair with checkpoint_results"),
    (_missing_directory, "lists checkpoint_000006, and"),
    (_fifo, "is a FIFO (named pipe), not a regular file"),
])
def test_a_snapshot_ray_would_stop_on_is_refused_naming_the_file(tmp_path, tamper, words):
    checkpoint(tmp_path / "gale", 3)
    checkpoint(tmp_path / "gale", 6)
    path = tmp_path / "gale" / ray_snapshot.SNAPSHOT_FILE
    run_snapshot.write(tmp_path / "gale", [3, 6])
    tamper(path)
    message = str(refusal(tmp_path))
    assert message.startswith(f"--storage_path {tmp_path} --run_name gale: run file ") and words in message, message


def test_a_snapshot_past_its_bound_is_refused_unread(tmp_path, monkeypatch):
    checkpoint(tmp_path / "gale", 2)
    run_snapshot.write(tmp_path / "gale", [2])
    monkeypatch.setattr(ray_snapshot, "MAX_SNAPSHOT_BYTES", 64)
    assert "allowed: at most 64 (refused unread)" in str(refusal(tmp_path))


def test_the_latest_listed_checkpoint_must_hold_its_record(tmp_path):
    checkpoint(tmp_path / "gale", 3)
    (tmp_path / "gale" / "checkpoint_000006").mkdir()
    run_snapshot.write(tmp_path / "gale", [3, 6])
    assert "checkpoint_000006, the checkpoint Ray Train would resume from, is not a complete checkpoint" in str(
        refusal(tmp_path))


def test_the_command_says_no_resume_and_starts_no_ray(tmp_path, capsys, monkeypatch):
    def no_cluster(*args, **kwargs):
        raise AssertionError("the local Ray cluster would start now")

    monkeypatch.setattr(local, "local_cluster", no_cluster)
    checkpoint(tmp_path / "gale", 7)
    code = cli.run(local.main, ["--storage_path", str(tmp_path), "--run_name", "gale", "--steps", "25"])
    captured = capsys.readouterr()
    assert code == cli.USAGE and "resuming run" not in captured.out, captured
    err = captured.err.strip().splitlines()
    assert len(err) == 2 and "--run_name gale" in err[0] and "checkpoint_000007" in err[0], err


def test_the_job_s_driver_holds_the_run_to_the_same_rule(tmp_path):
    checkpoint(tmp_path / "gale", 4)
    run_snapshot.write(tmp_path / "gale", [4])
    resumed_model.check_job(flags(tmp_path))  # the job's own run passes
    checkpoint(tmp_path / "gale", 9)
    with pytest.raises(cli.UsageError, match=r"checkpoint_000009 is no checkpoint Ray Train recorded"):
        resumed_model.check_job(flags(tmp_path))
