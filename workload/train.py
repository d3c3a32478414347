"""`python -m workload.train [flags]`: the training job's command. A Ray job runs it on the cluster's head (the
Pulumi job resource and `python -m workload.local` submit it); `--help` lists every flag.

It checks the flags before torch, transformers and Ray load (so a typo or `--help` answers at once), joins the
running Ray cluster, runs the TorchTrainer (workload/trainer.py) and ends by printing one line,
`TRAIN_SUMMARY {json}`, that workload/submit.py parses. The line is strict JSON: a value that is not a number is
null. A loss that turns NaN or infinite stops the run at that step and fails the job (exit 1).
"""
from __future__ import annotations

import json
import sys
from typing import Sequence

from workload import cli
from workload.config import SUMMARY_PREFIX, parse_args


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    from workload import trainer  # seconds of imports, only once the flags are known to be good

    trainer.validate(cfg)
    trainer.connect_to_cluster()
    summary = trainer.run(cfg)
    print(SUMMARY_PREFIX + json.dumps(summary, allow_nan=False), flush=True)
    if summary["diverged_at_step"] is not None:
        raise cli.CheckFailed(
            f"training diverged: the loss was not finite at step {summary['diverged_at_step']}; "
            f"lower --learning_rate (now {cfg.learning_rate}) or keep --max_grad_norm on")
    return cli.OK


if __name__ == "__main__":
    sys.exit(cli.run(main))
