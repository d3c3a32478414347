"""Ray Train's checkpoint_manager_snapshot.json for a run directory a test builds, written by Ray's own classes as its
CheckpointManager writes it after each reported checkpoint (ray/train/v2/_internal/execution/checkpoint/
checkpoint_manager.py: _save_state's _CheckpointManagerState(...).json(), _write_state_to_storage), so the resume
checks read the shape Ray writes, not a copy of it. Ray is imported on the first call only."""
from __future__ import annotations

import os
import warnings

SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"  # ray/train/v2/_internal/constants.py


def write(run: str | os.PathLike, steps: list[int], latest: int | None = None) -> str:
    """The snapshot of a run that reported checkpoint_<step>/ for each of `steps`, in that order, the last (or
    `latest`) its latest, as the job reports them (metrics: the step, the loss, the start step)."""
    from ray.train.v2._internal.execution.checkpoint.checkpoint_manager import (
        _CheckpointManagerState,
        _TrainingResultState,
    )

    results = {step: _TrainingResultState(checkpoint_dir_name=f"checkpoint_{step:06d}",
                                          metrics={"step": step, "loss": 5.0, "start_step": 0}) for step in steps}
    latest = steps[-1] if latest is None and steps else latest
    state = _CheckpointManagerState(
        checkpoint_results=list(results.values()), checkpoint_report_indices=list(range(len(steps))),
        latest_checkpoint_result=results.get(latest), pending_training_results=[], pending_validation_specs=[],
        current_report_index=len(steps), validated_checkpoint_dir_names=[],
        timed_out_validation_checkpoint_dir_names=[], failed_validation_checkpoint_dir_names=[])
    path = os.path.join(run, SNAPSHOT_FILE)
    os.makedirs(run, exist_ok=True)
    with open(path, "w") as file:
        with warnings.catch_warnings():  # pydantic 2 deprecates .json(), which Ray's _save_state still calls
            warnings.simplefilter("ignore", DeprecationWarning)
            file.write(state.json())
    return path
