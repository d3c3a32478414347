"""A run directory resumed from (--storage_path/--run_name) is untrusted input, held to workload.export's rule before
Ray starts (workload/checkpoint/run_directory.py): every checkpoint's train_step.json a record the job writes (a
step of 0..MAX_STEPS, and k in checkpoint_k), the latest checkpoint's files regular, bounded, without holes, its
`.metadata`'s claims within its shards' blocks, and the recorded flags read or refused, never taken for no record.
Each refusal is one line naming --storage_path, --run_name and the file, and a hint."""
from __future__ import annotations

import json
import os
import time
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.support import run_snapshot
from workload import cli
from workload.checkpoint import run_directory
from workload.config.numeric_bounds import MAX_STEPS
from workload.run import checks, local


def resume(storage, run_name="tides"):
    recorded(storage / run_name)
    return checks.resume_step(local.parse_args(["--storage_path", str(storage), "--run_name", run_name]))


def refusal(storage, run_name="tides") -> str:
    with pytest.raises(cli.UsageError) as refused:
        resume(storage, run_name)
    message = str(refused.value)
    assert message.startswith(f"--storage_path {storage} --run_name {run_name}: "), message
    assert "\n" not in message and refused.value.hint, message
    return message


def recorded(run) -> None:
    """The run as Ray Train left it: every checkpoint_<k>/ listed in its snapshot, the highest k the latest (unless a
    test wrote its own snapshot)."""
    if run.is_dir() and not (run / run_snapshot.SNAPSHOT_FILE).exists():
        run_snapshot.write(run, sorted(int(path.name.split("_")[1]) for path in run.glob("checkpoint_*/")))


def stub(run, step: int, record=None) -> str:
    """checkpoint_<step>/ holding only its record (what the resume reads of an earlier checkpoint)."""
    directory = run / f"checkpoint_{step:06d}"
    directory.mkdir(parents=True)
    (directory / run_directory.STEP_FILE).write_text(json.dumps({"step": step} if record is None else record))
    return str(directory)


def saved(run, step: int) -> str:
    """A DCP checkpoint as the job saves it (FileSystemWriter: .metadata and __0_0.distcp), with its record."""
    directory = run / f"checkpoint_{step:06d}"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": {"w": torch.arange(4096, dtype=torch.float32).reshape(64, 64)}},
                 checkpoint_id=str(directory), no_dist=True)
    (directory / run_directory.STEP_FILE).write_text(json.dumps({"step": step, "tokenizer": ""}))
    return str(directory)


@pytest.mark.parametrize("checkpoint, record, words", [
    (8, {"step": MAX_STEPS + 1}, "its step is past 10,000,000; allowed: 0 to 10,000,000"),
    (8, {"step": -7}, "its step is negative; allowed: 0 to 10,000,000"),
    (8, {"step": 9}, "its step 9 is not its directory's, checkpoint_000008"),
    (8, {"step": 8.0}, "its step is float, not a step number"),
    (8, [8], "holds a list, not a JSON object"),
])
def test_a_step_record_the_job_never_writes_is_refused(tmp_path, checkpoint, record, words):
    stub(tmp_path / "tides", 4)
    stub(tmp_path / "tides", checkpoint, record)
    message = refusal(tmp_path)
    assert f"checkpoint_{checkpoint:06d}/train_step.json" in message and words in message, message


def test_an_earlier_checkpoints_record_is_held_to_the_rule_too(tmp_path):
    stub(tmp_path / "tides", 2, {"step": 7})  # the latest by name is 5; a record of 7 would have been resumed from
    stub(tmp_path / "tides", 5)
    assert "checkpoint_000002/train_step.json: its step 7 is not its directory's" in refusal(tmp_path)


def test_an_earlier_record_cut_off_while_copied_is_passed_over_the_latests_is_refused(tmp_path):
    (tmp_path / "tides" / "checkpoint_000004").mkdir(parents=True)
    (tmp_path / "tides" / "checkpoint_000004" / run_directory.STEP_FILE).write_text('{"step": 4, "tok')
    stub(tmp_path / "tides", 6)
    assert resume(tmp_path) == 6  # only the latest is read on resume
    stub(tmp_path / "tides", 9, {"step": 9})
    (tmp_path / "tides" / "checkpoint_000009" / run_directory.STEP_FILE).write_text('{"step": 9, "tok')
    os.remove(tmp_path / "tides" / run_snapshot.SNAPSHOT_FILE)
    assert "checkpoint_000009/train_step.json is not JSON" in refusal(tmp_path)


def test_the_latest_genuine_checkpoint_resumes(tmp_path):
    saved(tmp_path / "tides", 5)
    stub(tmp_path / "tides", 2)
    assert resume(tmp_path) == 5


def _link_metadata(directory: str) -> None:
    os.replace(os.path.join(directory, ".metadata"), os.path.join(directory, "..", "elsewhere"))
    os.symlink(os.path.join(directory, "..", "elsewhere"), os.path.join(directory, ".metadata"))


def _shard_cut(directory: str) -> None:
    shard = os.path.join(directory, "__0_0.distcp")
    os.truncate(shard, os.path.getsize(shard) // 3)


def _shard_sparse(directory: str) -> None:
    shard = os.path.join(directory, "__0_0.distcp")
    with open(shard, "r+b") as file:
        file.truncate(8 << 30)  # a hole after the real bytes: 8 GiB claimed, a few KiB stored


def _config_fifo(directory: str) -> None:
    os.mkfifo(os.path.join(directory, "config.json"))


@pytest.mark.parametrize("tamper, words", [
    (_link_metadata, "its file .metadata is a symbolic link, not a regular file"),
    (_shard_cut, "/.metadata places an item at bytes"),
    (_shard_sparse, "its file __0_0.distcp is a sparse file"),
    (_config_fifo, "its file config.json is a FIFO (named pipe)"),
])
def test_the_latest_checkpoint_passes_exports_checks_of_its_files(tmp_path, tamper, words):
    saved(tmp_path / "tides", 2)
    latest = saved(tmp_path / "tides", 11)
    tamper(latest)
    message = refusal(tmp_path)
    assert "checkpoint_000011" in message and words in message, message


def _flags_link(path):
    (path.parent / "elsewhere.json").write_text("{}")
    os.symlink(path.parent / "elsewhere.json", path)


@pytest.mark.parametrize("make, words", [
    (os.mkdir, "is a directory, not a regular file"),
    (_flags_link, "is a symbolic link, not a regular file"),
    (lambda path: path.write_text('["--steps", "30"]'), "holds a list, not the JSON object of the flags"),
    (lambda path: path.write_text('{"steps": 3'), "is not JSON"),
    (lambda path: path.write_text(" " * (run_directory.MAX_JSON_BYTES + 1)), "allowed: at most"),
])
def test_recorded_flags_that_cannot_be_read_are_refused_not_taken_for_none(tmp_path, make, words):
    stub(tmp_path / "tides", 3)
    make(tmp_path / "tides" / run_directory.FLAGS_FILE)
    message = refusal(tmp_path)
    assert f"tides/{run_directory.FLAGS_FILE}" in message and words in message, message


def test_no_recorded_flags_is_no_record(tmp_path):
    stub(tmp_path / "tides", 3)
    assert resume(tmp_path) == 3


def test_the_command_refuses_it_in_two_lines_before_ray(tmp_path, capsys, monkeypatch):
    def no_cluster(*args, **kwargs):
        raise AssertionError("the local Ray cluster would start now")

    monkeypatch.setattr(local, "local_cluster", no_cluster)
    stub(tmp_path / "tides", 12, {"step": 10**24})
    recorded(tmp_path / "tides")
    started = time.perf_counter()
    code = cli.run(local.main, ["--storage_path", str(tmp_path), "--run_name", "tides", "--steps", "20"])
    took = time.perf_counter() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert code == cli.USAGE and len(err) == 2, err
    assert "--storage_path" in err[0] and "--run_name tides" in err[0] and "train_step.json" in err[0], err
    assert str(10**24) not in err[0] and took < 1, (err, took)
