"""Ray Train's record of a run's checkpoints, `checkpoint_manager_snapshot.json` in the run's directory, read as Ray
Train reads it when a new fit() of the same RunConfig(name) starts, and as untrusted input.

Ray Train resumes from this file alone: its CheckpointManager restores its state from it
(ray/train/v2/_internal/execution/checkpoint/checkpoint_manager.py, _maybe_load_state_from_storage and _load_state:
the bytes decoded as UTF-8, json.loads, _CheckpointManagerState.parse_obj) and hands every worker its
`latest_checkpoint_result` as ray.train.get_checkpoint() (before_init_train_context). A checkpoint_<k>/ the file does
not list is never resumed from, and without the file the run starts at step 0 ("No checkpoint will be available via
`ray.train.get_checkpoint`, so training will start from scratch"). So what a resume announces is read here, not from
the directories' names.

What Ray itself would stop on at the job's start is refused here first (CheckpointRefused naming the file): a latest
checkpoint that is not among those listed (_load_state's lookup), a listed name whose directory is not there
(_assert_checkpoints_exist), report indices that do not pair with the checkpoints (_load_state's assert). A name is
also held to be one directory under the run: Ray joins it to the run's path (storage.py
build_checkpoint_path_from_name), so `../other/checkpoint_000009` would resume another run. The fields Ray reads and
the resume does not (pending validations, report index) are left to Ray's own parse, which names them.

Standard library only: nothing heavy has loaded when this runs.
"""
from __future__ import annotations

import dataclasses
import json
import os

from workload import user_files
from workload.checkpoint.file_checks import CheckpointRefused

# ray/train/v2/_internal/constants.py CHECKPOINT_MANAGER_SNAPSHOT_FILENAME, in the run's directory (storage.py
# checkpoint_manager_snapshot_path).
SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"
# Ray keeps every checkpoint of the job's runs (its CheckpointConfig sets no num_to_keep), each listed with the
# metrics reported beside it: about 100 bytes a checkpoint, 3 KB for the last. 64 MiB is over half a million.
MAX_SNAPSHOT_BYTES = 64 * 2**20
CHECKPOINT_PREFIX = "checkpoint_"  # storage.checkpoint_name: the only names the job gives its checkpoints


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What Ray Train will restore: the checkpoints it lists, by directory name, and the one it resumes from."""
    listed: tuple[str, ...]
    latest: str | None


def read(run: str) -> Snapshot | None:
    """Run directory `run`'s snapshot, or None where Ray Train wrote none (it then starts the run at step 0)."""
    path = os.path.join(run, SNAPSHOT_FILE)
    if not os.path.lexists(path):
        return None
    try:
        state = json.loads(user_files.read_bytes(path, MAX_SNAPSHOT_BYTES, follow_links=False).decode("utf-8"))
    except user_files.Refused as error:
        raise CheckpointRefused(f"run file {error}") from None
    except UnicodeDecodeError:
        raise CheckpointRefused(f"run file {path} is not UTF-8 text, as Ray Train writes it") from None
    except (ValueError, RecursionError) as error:  # json's scanner counts its depth against the recursion limit
        raise CheckpointRefused(f"run file {path} is not JSON: {error}") from None
    if not isinstance(state, dict):
        raise CheckpointRefused(f"run file {path} holds a {type(state).__name__}, not the JSON object Ray Train writes")
    listed = [_name(path, "checkpoint_results", result) for result in _list(path, state, "checkpoint_results")]
    if len(_list(path, state, "checkpoint_report_indices")) != len(listed):
        raise CheckpointRefused(f"run file {path}: checkpoint_report_indices does not pair with checkpoint_results "
                                "(Ray Train's load asserts one index a checkpoint)")
    latest = state.get("latest_checkpoint_result")
    latest = None if latest is None else _name(path, "latest_checkpoint_result", latest)
    if (latest is None and listed) or (latest is not None and latest not in listed):
        raise CheckpointRefused(f"run file {path}: its latest_checkpoint_result ({latest}) is not among its "
                                f"checkpoint_results ({len(listed)}), as Ray Train records them")
    for name in listed:
        if not os.path.isdir(os.path.join(run, name)):
            raise CheckpointRefused(f"run file {path} lists {name}, and {os.path.join(run, name)} is not there: Ray "
                                    "Train refuses such a run directory at the job's start")
    return Snapshot(tuple(listed), latest)


def _list(path: str, state: dict, key: str) -> list:
    if not isinstance(value := state.get(key), list):
        raise CheckpointRefused(f"run file {path}: {key} is {type(value).__name__}, not the list Ray Train writes")
    return value


def _name(path: str, key: str, result: object) -> str:
    """A listed checkpoint's directory name: one directory of the run, named as the job names them."""
    name = result.get("checkpoint_dir_name") if isinstance(result, dict) else None
    if not isinstance(name, str) or not name.startswith(CHECKPOINT_PREFIX) or name != os.path.basename(name):
        shown = repr(name)[:80] if isinstance(name, str) else type(name).__name__
        raise CheckpointRefused(f"run file {path}: {key} names {shown}, not a {CHECKPOINT_PREFIX}<step> directory of "
                                "the run")
    return name
