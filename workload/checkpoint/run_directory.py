"""A run directory resumed from (--storage_path/--run_name), as untrusted input like a checkpoint workload.export
reads: whoever can write the storage decides what each of its files is, and the resume reads them on every worker.

So before Ray starts, the local run holds what it resumes from to export's rule (file_checks.py): each checkpoint's
train_step.json is a record the job writes (a regular file within its bound; a step of 0..MAX_STEPS, and k in
checkpoint_k), the latest checkpoint's files are regular files within their bounds, not sparse, its `.metadata`
read with the stand-in unpickler and its claims held to the shard files' blocks; and the run's recorded flags are
read, or refused, but never taken for "no record" when the file is there (a resume whose flags cannot be compared
may mix two runs). A refusal is a CheckpointRefused naming the file; the caller names the flags.

Standard library only: nothing heavy has loaded when this runs.
"""
from __future__ import annotations

import glob
import json
import os

from workload import user_files
from workload.checkpoint.file_checks import MAX_JSON_BYTES, CheckpointRefused, RecordCutOff, check_files, read_record

# Beside the run's checkpoints: the flags it was started with, to compare a later run of the same name against
# (workload/run/checks.py record_flags writes it).
FLAGS_FILE = "local_run_flags.json"
STEP_FILE = "train_step.json"  # sharded.STEP_FILE


def checkpoint_steps(run: str) -> dict[int, str]:
    """The step of each checkpoint_*/ of run directory `run` whose record is complete, to its directory. A record
    that is not JSON (cut off while copied) is passed over as Ray Train passes the checkpoint over; one that is not a
    regular file within its bound, or holds values the job never writes, is refused."""
    steps = {}
    for directory in sorted(glob.glob(os.path.join(glob.escape(run), "checkpoint_*" + os.sep))):
        directory = directory.rstrip(os.sep)
        if not os.path.lexists(os.path.join(directory, STEP_FILE)):
            continue  # cut off before its record: not resumed from
        try:
            steps[read_record(directory)["step"]] = directory
        except RecordCutOff:
            continue
    return steps


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
