"""The model a resumed local run will build, held against the checkpoint it resumes from, before Ray starts.

A run directory copied from a cluster run, or an older local one, has no local_run_flags.json, so nothing compared its
--model_id with the run's own (workload/run/checks.py resume_step compares the recorded flags where they exist). A
model of another vocabulary or depth then failed on every worker inside torch's distributed checkpoint load (torch/
distributed/checkpoint/default_planner.py create_default_local_load_plan: "Size mismatch" for another vocabulary,
"Missing key" for more layers), or, with fewer layers, resumed silently: the planner reads only the keys the model
asks for, and the checkpoint's last layers were never read. So the model's config.json, as the run resolves it
before Ray (--model_config's architecture, the config the project ships for a --model_id, a --model_id directory's
file, a Hub model's config.json in one request), is held to the latest checkpoint's `.metadata` shapes by export's
rule (workload/checkpoint/model_config.py claims_problem): one refusal naming the flag, exit 2. The local run checks
it in resume_step; the job's driver (`python -m workload.train` beside a cluster) where --storage_path is a local
directory. An s3:// run directory is
left to the job: its checkpoint is read on the nodes.

Standard library only (huggingface_hub for a Hub model's one request): nothing heavy has loaded when this runs.
"""
from __future__ import annotations

import os
import shutil
from typing import Any

from workload import cli
from workload.checkpoint import run_directory
from workload.checkpoint.file_checks import MAX_METADATA_BYTES, METADATA_FILE, CheckpointRefused, read_regular
from workload.checkpoint.metadata_claims import tensor_shapes
from workload.checkpoint.model_config import MODEL_PREFIX, claims_problem
from workload.config import TrainConfig
from workload.model import config_json, model_source


def model_config(cfg: TrainConfig) -> tuple[str, dict[str, Any]] | None:
    """(the flag naming the model and its config, config.json as a dict) of the model the run builds, or None where
    it cannot be read before Ray: left to the checks after this one (preflight.check_local_files for a directory's
    unreadable config.json, local.check_model_source for the Hub's answer) and, where none reads it, to the job."""
    if (known := cfg.architecture) is not None:  # --model_config's, or the config shipped for a --model_id
        return (f"--model_config {cfg.model_config}: its architecture" if cfg.model_config
                else f"--model_id {cfg.model_id}: its config.json"), known
    if "://" in cfg.model_id:
        return None  # s3://: read on the cluster's nodes (workload.model.files); left to the job
    what = f"--model_id {cfg.model_id}"
    directory = os.path.expanduser(cfg.model_id)
    if model_source.is_path(cfg.model_id) or os.path.isdir(directory):
        try:
            return f"{what}: its config.json", config_json.load_model_config(directory, what)
        except ValueError:
            return None
    # A Hub id: one request, no retries (offline, the machine's Hub cache only). A Hub that cannot be asked, a gated
    # repo without a token, a cache without the model: left to the job; check_model_source says why right after.
    try:
        hub_directory = model_source.hub_config_directory(cfg.model_id)
    except (model_source.Unreachable, model_source.NeedsToken, ValueError):
        return None
    try:
        return f"{what}: its config.json", config_json.load_model_config(hub_directory, what)
    except ValueError:
        return None
    finally:
        shutil.rmtree(hub_directory, ignore_errors=True)


def check(cfg: TrainConfig, checkpoint: str) -> None:
    """cli.UsageError when the run's model cannot be the one `checkpoint` (the latest of --storage_path/--run_name,
    its files already checked by run_directory.check_resumed) holds: another vocab_size, other decoder layers."""
    path = os.path.join(checkpoint, METADATA_FILE)
    if not os.path.isfile(path):
        return
    shapes = tensor_shapes(read_regular(path, MAX_METADATA_BYTES))
    if shapes is None or (resolved := model_config(cfg)) is None:
        return  # a `.metadata` these stand-ins cannot read is reader.py's to refuse, on the workers
    what, raw = resolved
    where = (f"the checkpoint under --storage_path {cfg.storage_path} --run_name {cfg.run_name} "
             f"({os.path.basename(checkpoint)})")
    if (why := claims_problem(raw, shapes, MODEL_PREFIX, checkpoint=where)) is not None:
        raise cli.UsageError(f"{what} {why}: the model is not the run's own",
                             hint="allowed: the model the run was trained with (its --model_id or --model_config) "
                                  "to resume it, or a new --run_name for a new run")


def refusal(cfg: TrainConfig, error: CheckpointRefused | OSError) -> cli.UsageError:
    """The one refusal of what a run resumes from: a checkpoint Ray Train's snapshot does not list (named with
    --run_name), or a run file refused as untrusted input or unreadable (named with --storage_path --run_name)."""
    if isinstance(error, run_directory.NotRecorded):  # the run was asked to resume, and would not resume from it
        return cli.UsageError(f"--run_name {cfg.run_name}: {error}",
                              hint=f"remove {error.directory} (Ray Train would save over it), or give a new "
                                   "--run_name")
    why = f"{error.filename} cannot be read ({error.strerror})" if isinstance(error, OSError) else error
    return cli.UsageError(f"--storage_path {cfg.storage_path} --run_name {cfg.run_name}: {why}",
                          hint="the run's files are read as untrusted input: restore or remove that file (or "
                               "checkpoint), or give a new --run_name")


def checked_resume(cfg: TrainConfig, run: str) -> tuple[int, str] | None:
    """(step, directory) of the checkpoint Ray Train resumes run directory `run` from (run_directory.resumed: by its
    own snapshot), its files held to export's checks (run_directory.check_resumed); None for a new run; `refusal`
    where either refuses. OSError: no permission, a dangling link's loop."""
    try:
        resumed = run_directory.resumed(run)
        if resumed is not None:
            run_directory.check_resumed(resumed[1])
    except (CheckpointRefused, OSError) as error:
        raise refusal(cfg, error) from None
    return resumed


def check_job(cfg: TrainConfig) -> None:
    """The job's driver: `check` on the checkpoint a local --storage_path's run resumes from, as the local run's
    resume_step holds it (checked_resume)."""
    run = os.path.join(cfg.storage_path, cfg.run_name)
    if not cfg.storage_path or "://" in cfg.storage_path or not os.path.isdir(run):
        return
    if (resumed := checked_resume(cfg, run)) is not None:
        check(cfg, resumed[1])
