"""`--report_to wandb`: the run as a Weights & Biases run, through W&B's own client (wandb.init, run.log).

The key is $WANDB_API_KEY, which a stack sets only through trainSecretEnv (a Pulumi secret, delivered from a
Kubernetes Secret, never in the job's plain inputs); WANDB_MODE=offline writes the run to files only (`wandb sync`
uploads them later), which is how the tests run it. The project is --wandb_project, else $WANDB_PROJECT, else
PROJECT; the run's W&B id is derived from its storage path and --run_name, so a resumed attempt goes on in the same
W&B run. Its files go to the run directory (wandb/), or, for a run directory in S3, to a local temporary directory.

The client's console capture is off: the job's log is Ray's, and a second copy of every line in W&B is noise.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any

from workload import storage
from workload.metrics.tracking import summary_values

PROJECT = "ray-train-fsdp-llm"


def run_id(cfg) -> str:
    """A W&B run id (letters and digits) that is the same for every attempt of one run."""
    return hashlib.sha256(f"{cfg.storage_path}/{cfg.run_name}".encode()).hexdigest()[:16]


class WandbTracker:
    name = "wandb"

    def __init__(self, cfg, run_directory: str | None, say) -> None:
        import wandb

        # WANDB_DIR where the user set it (wandb's own meaning: where its files go; dir= would override it silently),
        # checked before Ray by workload/run/writable.py; else the run directory, else a temporary one.
        directory = os.environ.get("WANDB_DIR") or (run_directory if run_directory and not storage.is_remote(
            run_directory) else tempfile.mkdtemp(prefix="wandb-"))
        os.makedirs(directory, exist_ok=True)
        self.run = wandb.init(
            project=cfg.wandb_project or os.environ.get("WANDB_PROJECT") or PROJECT, name=cfg.run_name,
            id=run_id(cfg), resume="allow", dir=directory,
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        offline = self.run.settings.mode == "offline" if hasattr(self.run.settings, "mode") else False
        where = f"offline in {self.run.dir}; upload it: wandb sync {os.path.dirname(self.run.dir)}" if offline \
            else self.run.url
        say(f"tracking: wandb run {self.run.id} {where}")

    def log_params(self, params: dict[str, Any]) -> None:
        self.run.config.update(params, allow_val_change=True)

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def finish(self, summary: dict[str, Any] | None) -> None:
        if summary is not None:
            self.run.summary.update(summary_values(summary))
        self.run.finish(exit_code=1 if summary and summary.get("diverged_at_step") is not None else 0)
