"""A run's curves as one SVG picture, drawn from its TensorBoard event files: training and held-out loss above, the
learning rate below.

    python -m tools.loss_curve runs/local/local-20261201-053626 --out docs/local-run.svg
    python -m tools.loss_curve s3://bucket/prefix/ray-train-fsdp-llm-1-0a1b2c3d --out run.svg

RUN is a run directory (what the job's summary calls `tensorboard`, less `/tensorboard`), local or s3://. The
README's picture is this command's output for a local run. SVG, not PNG: lines and text need no plotting library
and no font rasterizer, and the committed picture diffs as text.
"""
from __future__ import annotations

import sys
from typing import Sequence

from tools.svg_chart import Box, chart, check_out, document, undrawn, undrawn_note, write
from workload import cli

WIDTH, LEFT, RIGHT = 720, 70, 20
LOSS_TOP, LOSS_HEIGHT = 40, 230
RATE_TOP, RATE_HEIGHT = 320, 80
HEIGHT = RATE_TOP + RATE_HEIGHT + 45
TRAIN_COLOR, EVAL_COLOR, RATE_COLOR = "#1f77b4", "#d62728", "#2ca02c"
DRAWN = ("train/loss", "eval/loss", "train/learning_rate")


def render(scalars: dict[str, list[tuple[int, float]]], title: str) -> str:
    """The SVG document for a run's scalars (workload.metrics.tensorboard.read_scalars)."""
    if not scalars.get("train/loss"):
        raise cli.UsageError("the run's event files hold no train/loss: is RUN a run directory of this job?")
    last_step = max(step for points in scalars.values() for step, _ in points)
    losses = [("training loss", TRAIN_COLOR, scalars["train/loss"])]
    if scalars.get("eval/loss"):
        losses.append(("held-out loss", EVAL_COLOR, scalars["eval/loss"]))
    body = chart(losses, last_step, Box(LEFT, LOSS_TOP, WIDTH - LEFT - RIGHT, LOSS_HEIGHT), title)
    if scalars.get("train/learning_rate"):
        body += chart([("learning rate", RATE_COLOR, scalars["train/learning_rate"])], last_step,
                      Box(LEFT, RATE_TOP, WIDTH - LEFT - RIGHT, RATE_HEIGHT), "learning rate")
    body.append(f'<text x="{(WIDTH + LEFT - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">step</text>')
    return document(WIDTH, HEIGHT, body)


def runs_inside(folder: str, events: str) -> list[str]:
    """The run directories (each with its `events` folder) one or two levels under a local `folder` that is none
    itself (`runs/`, `runs/local/`), by path below it, the newest name last; [] for a run directory, or s3://."""
    from pathlib import Path

    root = Path(folder).expanduser()
    if "://" in folder or not root.is_dir() or (root / events).exists():
        return []
    found = [*root.glob(f"*/{events}"), *root.glob(f"*/*/{events}")]
    return sorted(str(path.parent.relative_to(root)) for path in found if path.is_dir())


def run_above(path: str, events: str) -> str | None:
    """The run directory a local `path` inside it belongs to (its checkpoint_<step>/ or model_<step>/, or a folder
    below one: the parent or grandparent holding `events`), or None for a run directory itself, or s3://."""
    from pathlib import Path

    here = Path(path).expanduser()
    if "://" in path or not here.is_dir() or (here / events).exists():
        return None
    return next((str(above) for above in list(here.parents)[:2] if (above / events).is_dir()), None)


# A title is one line above the chart.
TITLE_MAX_CHARS = 200


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("python -m tools.loss_curve", __doc__, check_failed="(not used)")
    parser.add_argument("run", metavar="RUN", type=cli.user_path,
                        help="the run directory: its tensorboard/ holds the event files")
    parser.add_argument("--out", required=True, type=cli.user_path, help="the SVG file to write")
    parser.add_argument("--title", default="", help="the picture's title; empty: the run's name")
    args = parser.parse_args(argv)
    check_out(args.out)
    if len(args.title) > TITLE_MAX_CHARS or not args.title.isprintable():
        raise cli.UsageError(f"--title must be at most {TITLE_MAX_CHARS} printable characters (a picture's title), got "
                             f"{len(args.title):,} characters (not shown)")
    from workload import storage

    storage.check_remote(args.run, "RUN")  # before the event files' reader is imported and before any request
    from workload.config.s3_uri import refusal

    if (refused := refusal("RUN", args.run)) is not None:  # S3's and pyarrow's form, before credentials or a request
        raise cli.UsageError(refused)
    from workload.metrics import tensorboard as metrics

    run = args.run.rstrip("/")
    # The job's summary names the event files' directory itself (`tensorboard`): take that too.
    if run.rsplit("/", 1)[-1] == metrics.DIRECTORY:
        run = run.rsplit("/", 1)[0]
    if inside := runs_inside(run, metrics.DIRECTORY):
        more = f" and {len(inside) - 5} more" if len(inside) > 5 else ""
        raise cli.UsageError(f"RUN {run} is a folder of run directories, not one: {', '.join(inside[:5])}{more}; give "
                             f"one, e.g. {run}/{inside[-1]}")
    if above := run_above(run, metrics.DIRECTORY):
        raise cli.UsageError(f"RUN {run} is inside the run {above}, not a run directory; give the run: "
                             f"python -m tools.loss_curve {above} --out {args.out}")
    with storage.local_copy(storage.join(run, metrics.DIRECTORY), what="RUN") as directory:
        scalars = metrics.read_scalars(directory)
    # The title is the run's name unless given: what a picture shows of a path is masked as a refusal would quote it
    # (a run named after a token, s3://key:secret@bucket/...).
    from workload.config.secret_text import masked

    picture = render(scalars, masked(args.title or run.rsplit("/", 1)[-1]))
    write(args.out, picture)
    if dropped := undrawn([(key, "", scalars.get(key) or []) for key in DRAWN]):  # the picture says it too
        print(f"note: {undrawn_note(dropped)}", file=sys.stderr)
    print(f"wrote {args.out}: {len(scalars.get('train/loss', []))} steps")
    return cli.OK


if __name__ == "__main__":
    sys.exit(cli.run(main))
