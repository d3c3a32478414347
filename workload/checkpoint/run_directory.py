"""A run directory resumed from (--storage_path/--run_name), as untrusted input like a checkpoint workload.export
reads: whoever can write the storage decides what each of its files is, and the resume reads them on every worker.

What it resumes from is what Ray Train will resume from: the latest checkpoint its own snapshot lists
(ray_snapshot.py); a checkpoint directory the snapshot does not list is refused. Before Ray starts, the local run
holds that to export's rule (file_checks.py): each listed checkpoint's train_step.json is a record the job writes
(a regular file within its bound; a step of 0..MAX_STEPS, and k in checkpoint_k), the latest checkpoint's files are
regular files within their bounds, not sparse, its `.metadata` read with the stand-in unpickler and its claims held
to the shard files' blocks; and the run's recorded flags are read, or refused, but never taken for "no record" when
the file is there (a resume whose flags cannot be compared may mix two runs). A refusal is a CheckpointRefused
naming the file; the caller names the flags.

Standard library only: nothing heavy has loaded when this runs.
"""
from __future__ import annotations

import glob
import json
import os

from workload import user_files
from workload.checkpoint import ray_snapshot
from workload.checkpoint.file_checks import MAX_JSON_BYTES, CheckpointRefused, RecordCutOff, check_files, read_record

# Beside the run's checkpoints: the flags it was started with, to compare a later run of the same name against
# (workload/run/checks.py record_flags writes it).
FLAGS_FILE = "local_run_flags.json"
STEP_FILE = "train_step.json"  # sharded.STEP_FILE


class NotRecorded(CheckpointRefused):
    """A checkpoint_*/ of the run that Ray Train's snapshot does not list: never resumed from."""

    def __init__(self, directory: str, why: str):
        super().__init__(f"{directory} {why}")
        self.directory = directory


def resumed(run: str) -> tuple[int, str] | None:
    """(step, directory) of the checkpoint Ray Train will resume run directory `run` from: its snapshot's latest
    (ray_snapshot.py), its step from the record the job wrote in it; None for a run Ray Train starts at step 0.
    Every listed checkpoint's record is held to the job's rule (one cut off while copied is passed over: only the
    latest is read on resume); the latest's must be complete.

    A checkpoint_*/ the snapshot does not list (or any, where there is no snapshot) is refused, NotRecorded, rather
    than announced as passed over: the user gave the run's name to resume what is there, and Ray Train would instead
    train from the snapshot's step (or from 0) and, on reaching that directory's step, copy its save into it over
    whatever it holds (storage.py persist_current_checkpoint: create_dir, then copy_files, no removal), a checkpoint
    of two origins. Ray's own advice for a run directory its snapshot does not describe is the same: delete it, or a
    new RunConfig(name) (checkpoint_manager.py _maybe_load_state_from_storage, _assert_checkpoints_exist). A run
    stopped between a checkpoint's upload and Ray's record of it leaves one such directory too: the refusal names it,
    and once it is removed the run resumes from the snapshot's latest, as Ray Train would."""
    snapshot = ray_snapshot.read(run)
    listed = snapshot.listed if snapshot is not None else ()
    found = glob.glob(os.path.join(glob.escape(run), "checkpoint_*" + os.sep))
    directories = [path.rstrip(os.sep) for path in sorted(found)]
    if unlisted := [path for path in directories if os.path.basename(path) not in listed]:
        more = f" (and {len(unlisted) - 1} more such)" if len(unlisted) > 1 else ""
        raise NotRecorded(unlisted[-1], "is no checkpoint Ray Train recorded for this run " + (
            f"(its {ray_snapshot.SNAPSHOT_FILE} does not list it){more}: Ray Train would not resume from it"
            if snapshot is not None else
            f"(the run has no {ray_snapshot.SNAPSHOT_FILE}){more}: Ray Train would start the run at step 0"))
    if snapshot is None or snapshot.latest is None:
        return None
    for name in listed:  # each record the job wrote is held to its rule, though only the latest is read on resume
        directory = os.path.join(run, name)
        if name != snapshot.latest and os.path.lexists(os.path.join(directory, STEP_FILE)):
            try:
                read_record(directory)
            except RecordCutOff:
                continue  # cut off while copied, and never read on resume
    latest = os.path.join(run, snapshot.latest)
    if not os.path.lexists(os.path.join(latest, STEP_FILE)):
        raise CheckpointRefused(f"{latest}, the checkpoint Ray Train would resume from, is not a complete checkpoint "
                                f"(no {STEP_FILE}: cut off while copied, or not one this job wrote)")
    return read_record(latest)["step"], latest


def check_resumed(checkpoint: str) -> None:
    """The checkpoint a run resumes from passes export's checks of its files (file_checks.check_files)."""
    check_files(checkpoint, checkpoint, named="the checkpoint it resumes from,")


def recorded_flags(run: str) -> dict | None:
    """The flags a local run recorded in run directory `run` (FLAGS_FILE), or None where it recorded none. A file
    there that is not a regular one within its bound, or not a JSON object, is refused (CheckpointRefused), never
    read as no record: it was read with export's rule (no link followed, a FIFO not waited on)."""
    path = os.path.join(run, FLAGS_FILE)
    if not os.path.lexists(path):
        return None
    try:
        recorded = json.loads(user_files.read_bytes(path, MAX_JSON_BYTES, follow_links=False))
    except user_files.Refused as error:
        raise CheckpointRefused(f"run file {error}") from None
    except (ValueError, RecursionError) as error:  # json's scanner counts its depth against the recursion limit
        raise CheckpointRefused(f"run file {path} is not JSON: {error}") from None
    if not isinstance(recorded, dict):
        raise CheckpointRefused(f"run file {path} holds a {type(recorded).__name__}, not the JSON object of the flags "
                                "the run recorded")
    return recorded
