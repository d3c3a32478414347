"""`python -m workload.train [flags]`: the training job's command. A Ray job runs it on the cluster's head (the
Pulumi job resource and `python -m workload.local` submit it); `--help` lists every flag.

It checks the flags before torch, transformers and Ray load (so a typo or `--help` answers at once), joins the
running Ray cluster, runs the TorchTrainer (workload/trainer.py) and ends by printing one line,
`TRAIN_SUMMARY {json}`, that workload/run/submit.py parses. The line is strict JSON: a value that is not a number is
null. A loss that turns NaN or infinite stops the run at that step and fails the job (exit 1).

`--time_limit_s` is the job's own deadline (the stack's trainTimeoutMinutes): the Ray Jobs API has no time limit
of its own, and the job must stop even when nobody is watching it. It counts from the driver's start; when it
passes, the driver stops training and exits 1, and Ray ends the job's workers with it.
"""
from __future__ import annotations

import json
import math
import signal
import sys
from typing import Sequence

from workload import cli, config_file
from workload.config import SUMMARY_PREFIX, TrainConfig, build_parser, rules
from workload.run import in_job, preflight, resumed_model

REPEAT_S = 10.0


class Deadline:
    """Interrupts the main thread once `seconds` have passed (None: never), through SIGALRM, and again every REPEAT_S
    until the block is left.

    It raises KeyboardInterrupt because that is what Ray's blocking calls let through: they check for signals and
    turn a pending KeyboardInterrupt into one raised in the caller, while another exception raised by a signal
    handler inside them would be dropped. `reached` tells a time limit from a real Ctrl-C or SIGTERM.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.reached = False

    def _expire(self, _signum, _frame) -> None:
        self.reached = True
        raise KeyboardInterrupt(f"time limit of {self.seconds:.0f} s reached")

    def __enter__(self) -> Deadline:
        if self.seconds:
            self._previous = signal.signal(signal.SIGALRM, self._expire)
            # Again every REPEAT_S after the first: an interrupt that lands where a library swallows it (a bare
            # `except BaseException` in an import or a client's retry loop) is followed by another.
            signal.setitimer(signal.ITIMER_REAL, self.seconds, min(self.seconds, REPEAT_S))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)


# The longest --time_limit_s: the stack's trainTimeoutMinutes bound (infra/config/settings.py MAX_TIMEOUT_MINUTES, 30
# days), which sets this flag; tests/unit/test_tool_input_bounds.py holds the two equal. Past time_t, setitimer raises
# OverflowError ("timestamp out of range for platform time_t"): 1e300 was a traceback, not a refusal.
MAX_TIME_LIMIT_S = 30 * 24 * 3600


def parse_args(argv: Sequence[str] | None = None) -> tuple[TrainConfig, float | None, bool]:
    """The training flags (TrainConfig's, 1:1, over --config's file), the job's time limit, which belongs to the job,
    not to the training run: it is not in the run's name, so a retry with a new limit still resumes from the
    checkpoints; and --print_config."""
    parser = build_parser()
    parser.add_argument("--time_limit_s", type=float, default=None,
                        help="Stop the job after this many seconds from its start; unset: no limit.")
    config_file.add_options(parser)
    args, print_config = config_file.parse(parser, argv)
    time_limit_s = args.pop("time_limit_s")
    if time_limit_s is not None and not (0 < time_limit_s <= MAX_TIME_LIMIT_S and math.isfinite(time_limit_s)):
        raise cli.UsageError(f"--time_limit_s must be a positive number of seconds, at most {MAX_TIME_LIMIT_S:,} (30 "
                             f"days), got {time_limit_s:g}")
    cfg = TrainConfig(**args)
    if (inert := rules.typed_without_effect(vars(cfg), config_file.command_line(sys.argv[1:] if argv is None
                                                                                 else list(argv)))) is not None:
        raise cli.UsageError(inert)
    return cfg, time_limit_s, print_config


def main(argv: Sequence[str] | None = None) -> int:
    cfg, time_limit_s, print_config = parse_args(argv)
    if print_config:
        print(config_file.render(cfg, **({"time_limit_s": time_limit_s} if time_limit_s else {})), end="", flush=True)
        return cli.OK
    deadline = Deadline(time_limit_s)
    try:
        with deadline:
            in_job.check_started_as_job()  # by hand, without a cluster: name workload.local before the Hub's checks
            resumed_model.check_job(cfg)  # a model that is not the checkpoint's, before the workers fail to load it
            preflight.validate(cfg)  # what needs no heavy import first, then torch and transformers
            from workload import trainer  # Ray Train: seconds more of imports, once the job can start

            trainer.connect_to_cluster()
            summary = trainer.run(cfg)
            push_failed = push_model(cfg, summary)
    except KeyboardInterrupt:
        if not deadline.reached:
            raise
        raise cli.CheckFailed(
            f"the job's time limit of {time_limit_s:.0f} s (trainTimeoutMinutes) was reached; training stopped",
            hint="its last checkpoint, if any, is where a retry with the same trainRunId resumes") from None
    print(SUMMARY_PREFIX + json.dumps(summary, allow_nan=False), flush=True)
    if summary["diverged_at_step"] is not None:
        raise cli.CheckFailed(
            f"training diverged: the loss was not finite at step {summary['diverged_at_step']}; "
            f"lower --learning_rate (now {cfg.learning_rate}) or keep --max_grad_norm on")
    if push_failed:
        raise cli.CheckFailed(f"--push_to_hub {cfg.push_to_hub}: the upload failed ({push_failed}); the model is at "
                              f"{summary['model']}")
    return cli.OK


def push_model(cfg: TrainConfig, summary: dict) -> str | None:
    """--push_to_hub: the exported model uploaded once training is done (workload/checkpoint/hub.py); the summary
    gets its URL as "hub". Returns why the upload failed, or None: the run's summary is printed either way."""
    if not cfg.push_to_hub:
        return None
    summary["hub"] = None
    if summary["model"] is None or summary["diverged_at_step"] is not None:
        return None if summary["diverged_at_step"] is not None else "the run exported no model"
    from workload.checkpoint import hub

    try:
        summary["hub"] = hub.push(summary["model"], cfg.push_to_hub, cfg.run_name)
    except Exception as error:  # any failure of the upload is reported the same way, after the summary
        return " ".join(f"{type(error).__name__}: {error}".split())[:400]
    print(f"pushed {summary['model']} to {summary['hub']}", flush=True)
    return None


if __name__ == "__main__":
    sys.exit(cli.run(main))
