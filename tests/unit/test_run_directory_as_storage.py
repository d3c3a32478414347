"""`--storage_path runs/r1 --run_name r1`: the run's own directory given as the storage path started a new run at
runs/r1/r1 where resuming r1 was meant. A --storage_path holding a run's checkpoint_<step>/ or its recorded flags is
refused before Ray, naming the two flags that resume it (workload/run/checks.py); the run's small records are read
by the user-files rule (a FIFO is not waited on, and is refused: tests/unit/test_resumed_run_untrusted.py)."""
from __future__ import annotations

import json
import os

import pytest

from tests.support import run_snapshot
from workload import cli
from workload.run import checks, local


def stopped_run(runs, name="r1", step=20):
    cfg = local.parse_args(["--storage_path", str(runs), "--run_name", name])
    checks.record_flags(cfg)
    (runs / name / f"checkpoint_{step:06d}").mkdir()
    (runs / name / f"checkpoint_{step:06d}" / "train_step.json").write_text(json.dumps({"step": step}))
    run_snapshot.write(runs / name, [step])
    return runs / name


@pytest.mark.parametrize("run_name", ["r1", "r2"])
def test_a_run_directory_as_the_storage_path_names_the_flags_that_resume_it(tmp_path, run_name):
    directory = stopped_run(tmp_path)
    with pytest.raises(cli.UsageError) as refused:
        checks.resume_step(local.parse_args(["--storage_path", str(directory), "--run_name", run_name]))
    assert str(refused.value) == (f"--storage_path {directory} is a run's own directory (it holds checkpoint_000020/),"
                                  f" and --run_name {run_name} would start a new run inside it"), refused.value
    assert refused.value.hint.startswith(f"to resume that run give --storage_path {tmp_path} --run_name r1;")


def test_the_recorded_flags_alone_mark_a_run_directory(tmp_path):
    cfg = local.parse_args(["--storage_path", str(tmp_path), "--run_name", "fresh"])
    checks.record_flags(cfg)  # a run stopped before its first checkpoint
    with pytest.raises(cli.UsageError, match=r"it holds local_run_flags\.json"):
        checks.resume_step(local.parse_args(["--storage_path", str(tmp_path / "fresh"), "--run_name", "x"]))


def test_a_storage_path_of_runs_resumes_and_a_new_name_starts_afresh(tmp_path):
    stopped_run(tmp_path)
    assert checks.resume_step(local.parse_args(["--storage_path", str(tmp_path), "--run_name", "r1"])) == 20
    assert checks.resume_step(local.parse_args(["--storage_path", str(tmp_path), "--run_name", "r9"])) is None


def test_a_fifo_among_a_runs_records_is_refused_not_waited_on(tmp_path):
    directory = stopped_run(tmp_path)
    os.replace(directory / checks.FLAGS_FILE, tmp_path / "flags.json")
    os.mkfifo(directory / checks.FLAGS_FILE)  # unread, and refused: flags that cannot be compared are no "no record"
    with pytest.raises(cli.UsageError, match=r"local_run_flags\.json is a FIFO \(named pipe\)"):
        checks.resume_step(local.parse_args(["--storage_path", str(tmp_path), "--run_name", "r1"]))
    os.remove(directory / checks.FLAGS_FILE)
    (directory / "checkpoint_000030").mkdir()
    os.mkfifo(directory / "checkpoint_000030" / "train_step.json")
    run_snapshot.write(directory, [20, 30])
    with pytest.raises(cli.UsageError, match=r"checkpoint_000030/train_step\.json is a FIFO"):
        checks.resume_step(local.parse_args(["--storage_path", str(tmp_path), "--run_name", "r1"]))
