"""What `python -m workload.local` prints: the project's own lines by default, everything with --verbose.

A job's log interleaves the project's progress (the trainer's `training ...`, `effective batch ...`, `step ...`,
`fabric check ...`, `note: ...`, `chat data: ...` lines, and the driver's `dataset ...` and `error: ...`) with
Ray's: its INFO records, the controller's scheduling lines, every worker's "Reporting training result ..." dumps of
2 KB and more, and what libraries warn at import. The data stage's `data: ...` lines (workload/data/stage.py) are
the job log's and --verbose's: a first run tokenizes and a later one reads the cache, so the quiet output, which the
README shows whole, stays the same from run to run. Quiet, a line is shown when, Ray's "(RayTrainWorker pid=N)" prefix
and colours taken off, it starts with one of OWN_PREFIXES; the machine-read TRAIN_TRANSPORT line is not shown. After
the run, a short recap for a person comes before the TRAIN_SUMMARY line (which stays the last line, for scripts).
"""
from __future__ import annotations

import logging
import re
from typing import Callable

from workload.config import SUMMARY_PREFIX, TRANSPORT_PREFIX

# Every line the project prints into a job's log starts with one of these (workload/trainer.py's _progress,
# workload/fabric/bandwidth.py, workload/cli.py's errors); tests/unit/test_local_output.py checks the trainer's against it.
OWN_PREFIXES = ("training ", "effective batch ", "step ", "fabric check ", "note: ", "warning: ", "error: ",
                "submitted Ray job ", "log stream of ", "memory plan: ", "loaded ", "downloading ", "copying ",
                "copied ", "dataset ", "text data: ", "chat data: ", "prompt-completion data: ", "tracking: ",
                # The data line of ShareGPT or Alpaca records names the shape first: `chat data (ShareGPT records ...`
                "chat data (", "prompt-completion data (",
                "pushed ", "waiting for workers: ")  # the last: workload.run.submit's heartbeat
# "(RayTrainWorker pid=123)" and, on a terminal, its ANSI colours: Ray's log monitor puts them before a worker's line.
RAY_PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)*\((?P<actor>[A-Za-z]+) pid=\d+(?:, ip=[^)]*)?\)(\x1b\[[0-9;]*m)* ")
# workload.run.submit's heartbeat while the workers start, before the trainer's first line.
HEARTBEAT_PREFIX = "waiting for workers: "
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Of a failed job's log, shown quiet when it printed no error line of its own (a crash in Ray or a library).
FAILURE_TAIL_LINES = 15


def own_line(line: str) -> str | None:
    """The line as the project wrote it, or None for one of Ray's or a library's."""
    text = ANSI.sub("", RAY_PREFIX.sub("", line))
    if text.startswith(TRANSPORT_PREFIX) or text.startswith(SUMMARY_PREFIX):
        return None
    return text if text.startswith(OWN_PREFIXES) else None


class Progress:
    """The job's log lines as they stream in, printed raw (verbose) or filtered; remembers whether the job printed
    an error of its own."""

    def __init__(self, verbose: bool, out: Callable[[str], None] = lambda line: print(line, flush=True)) -> None:
        self.verbose, self.out = verbose, out
        self.saw_error = False

    def __call__(self, line: str) -> None:
        if line.startswith(SUMMARY_PREFIX):
            return  # printed once, last, after the cluster has stopped
        shown = own_line(line)
        self.saw_error = self.saw_error or bool(shown and shown.startswith("error: "))
        if self.verbose:
            self.out(line)
        elif shown is not None:
            self.out(shown)

    def failure_tail(self, log_tail: str) -> list[str]:
        """What to show of a failed job's log after it streamed: nothing when verbose (it is all above) or when it
        said its own error; else its last lines, the cause being in Ray's or a library's words."""
        if self.verbose or self.saw_error:
            return []
        return [ANSI.sub("", line) for line in log_tail.splitlines()[-FAILURE_TAIL_LINES:]]


def first_line(reason: str) -> str:
    """A Ray job's failure reason without the copy of the log tail Ray appends to it ("... failed with exit code
    1, last available logs (truncated to 20,000 chars): ...", ray/dashboard/modules/job/job_manager.py)."""
    return reason.split(", last available logs", 1)[0].splitlines()[0] if reason else reason


def recap(summary: dict, seconds: float) -> list[str]:
    """A few lines for a person, before the summary line for scripts."""
    steps, start = summary.get("steps"), summary.get("start_step") or 0
    lines = [f"done: steps {start + 1}..{steps} on {summary.get('world_size')} x {summary.get('device')} in "
             f"{seconds:.0f} s; loss {_number(summary.get('initial_loss'))} -> {_number(summary.get('final_loss'))}"
             + (f", held-out {_number(summary['eval_loss'])}" if summary.get("eval_loss") is not None else "")
             + (f"; {summary['tokens_per_s']:,.0f} tokens/s" if summary.get("tokens_per_s") else "")]
    if summary.get("model"):
        lines.append(f"model: {summary['model']} (AutoModelForCausalLM.from_pretrained loads it)")
    if summary.get("hub"):
        lines.append(f"hub: {summary['hub']} (from_pretrained loads it by its repo id)")
    if summary.get("checkpoint"):
        lines.append(f"checkpoint: {summary['checkpoint']} (the same --run_name resumes from it)")
    if summary.get("tensorboard"):
        run = summary["tensorboard"].rsplit("/", 1)[0]
        lines.append(f"curves: python -m tools.loss_curve {run} --out run.svg")
    return lines


def _number(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def quiet_ray_logging() -> None:
    """Ray's INFO records in this process (package upload, websocket closed) are for --verbose. Each of Ray's
    job-client modules sets its own logger to INFO at import (ray/dashboard/modules/dashboard_sdk.py,
    job/sdk.py), so the level goes on every `ray.*` logger there is, after those imports."""
    for name in list(logging.root.manager.loggerDict):
        if name == "ray" or name.startswith("ray."):
            logging.getLogger(name).setLevel(logging.WARNING)
