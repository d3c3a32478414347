"""Where rank 0 reports a run: `--report_to`, transformers' names for the same thing (`tensorboard`, `mlflow`, `wandb`, a
comma list of them, or `none`).

Every tracker gets the same calls: the run's flags as parameters when it starts, the memory plan and sharding choice
once they are known, each step's metrics (the progress line's loss, learning rate, tokens/s and MFU, and the eval
loss), and at the end the summary and where the model was exported. The trackers are workload/metrics/tensorboard.py
(event files under the run directory), mlflow_tracker.py and wandb_tracker.py, each behind tracking.Tracker.

A tracker that fails (a server that does not answer, a missing client, a bad key) never fails the training: its first
failure prints one `warning: ` line naming it, and the run goes on without it.

Ray Train has its own integrations (ray.air.integrations.mlflow's setup_mlflow, .wandb's setup_wandb), but they only
configure the client in each worker (setup_wandb also needs the key in the workers' env or a file): the logging calls,
what is logged and how a failure is contained would still be ours, and importing them pulls ray.tune. So the trackers'
own clients are called here directly.
"""
from __future__ import annotations

import sys
from typing import Any

from workload.config import parse_report_to
from workload.metrics.tensorboard import MetricsLog
from workload.metrics.tracking import Tracker, flat_params


def _say(line: str) -> None:
    # Straight to stdout, as the trainer's progress: Ray Train's patched print() writes each line twice into the log.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _TensorBoard:
    """MetricsLog as a Tracker: its curves only (TensorBoard has no parameters worth the event files)."""

    name = "tensorboard"

    def __init__(self, run_directory: str | None, start_step: int) -> None:
        self.log = MetricsLog(run_directory, start_step)

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.log.scalars(step, values)

    def finish(self, summary: dict[str, Any] | None) -> None:
        self.log.close()


class RunLog:
    """Rank 0's trackers for one run, each call made on every tracker still working."""

    def __init__(self, trackers: list[Tracker], tensorboard: MetricsLog | None = None,
                 say=None) -> None:
        self.trackers, self.tensorboard, self.say = list(trackers), tensorboard, say or _say
        self.destination = tensorboard.destination if tensorboard is not None else None

    def _each(self, call: str, *args: Any) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, call)(*args)
            except Exception as error:  # whatever a tracker raises, the training goes on
                self.trackers.remove(tracker)
                reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
                self.say(f"warning: --report_to {tracker.name} failed ({reason}); the run goes on without it")

    def params(self, params: dict[str, Any]) -> None:
        self._each("log_params", flat_params(params))

    def scalars(self, step: int, values: dict[str, float | None]) -> None:
        self._each("log_metrics", step, {key: value for key, value in values.items() if value is not None})

    def sync(self) -> None:
        """At a checkpoint: TensorBoard's event file completed and copied up (the other trackers send as they go)."""
        if self.tensorboard is not None and self.tensorboard in (getattr(t, "log", None) for t in self.trackers):
            try:
                self.tensorboard.sync()
            except Exception as error:
                self.say(f"warning: --report_to tensorboard could not write its event files ({error})")

    def close(self, summary: dict[str, Any] | None = None) -> None:
        """The run's end: `summary` (rank 0's final metrics, the exported model's location) to each tracker."""
        self._each("finish", summary)
        self.trackers = []


def for_run(cfg, run_directory: str | None, start_step: int, say=None) -> RunLog:
    """Rank 0's RunLog for `cfg.report_to`. A tracker that cannot start is left out with its warning line."""
    say = say or _say
    trackers: list[Tracker] = []
    tensorboard = None
    for name in parse_report_to(cfg.report_to):
        try:
            if name == "tensorboard":
                tracker = _TensorBoard(run_directory, start_step)
                tensorboard = tracker.log
            elif name == "mlflow":
                from workload.metrics.mlflow_tracker import MlflowTracker

                tracker = MlflowTracker(cfg, run_directory, say)
            else:
                from workload.metrics.wandb_tracker import WandbTracker

                tracker = WandbTracker(cfg, run_directory, say)
            trackers.append(tracker)
        except Exception as error:  # a tracker that cannot start never stops the training
            reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
            say(f"warning: --report_to {name} could not start ({reason}); the run goes on without it")
    return RunLog(trackers, tensorboard, say)
