"""A run's curves as one SVG picture, drawn from its TensorBoard event files: training and held-out loss above, the
learning rate below.

    python -m tools.loss_curve runs/local/local-20261201-053626 --out docs/local-run.svg
    python -m tools.loss_curve s3://bucket/prefix/ray-train-fsdp-llm-1-0a1b2c3d --out run.svg

RUN is a run directory (what the job's summary calls `tensorboard`, less `/tensorboard`), local or s3://. The
README's picture is this command's output for a local run. SVG, not PNG: lines and text need no plotting library
and no font rasterizer, and the committed picture diffs as text.
"""
from __future__ import annotations

import math
import sys
from html import escape
from typing import Sequence

from workload import cli

WIDTH, LEFT, RIGHT = 720, 70, 20
LOSS_TOP, LOSS_HEIGHT = 40, 230
RATE_TOP, RATE_HEIGHT = 320, 80
HEIGHT = RATE_TOP + RATE_HEIGHT + 45
TRAIN_COLOR, EVAL_COLOR, RATE_COLOR = "#1f77b4", "#d62728", "#2ca02c"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(factor * magnitude for factor in (1, 2, 5, 10) if factor * magnitude >= raw)
    first = math.floor(low / step) * step
    return [first + index * step for index in range(int(math.ceil((high - first) / step - 1e-9)) + 1)]


def panel(series: list[tuple[str, str, list[tuple[int, float]]]], last_step: int, top: int, height: int,
          title: str) -> list[str]:
    """One chart: axes with ticks, and each (name, color, points) as a line (with dots when there are few)."""
    values = [value for _, _, points in series for _, value in points]
    y_ticks = nice_ticks(min(0.0, min(values)), max(values))
    x_ticks = nice_ticks(0, last_step)
    x_span, y_span = x_ticks[-1] - x_ticks[0], y_ticks[-1] - y_ticks[0]

    def x(step: float) -> float:
        return LEFT + (step - x_ticks[0]) / x_span * (WIDTH - LEFT - RIGHT)

    def y(value: float) -> float:
        return top + height - (value - y_ticks[0]) / y_span * height

    out = [f'<text x="{LEFT}" y="{top - 12}" font-weight="bold">{escape(title)}</text>',
           f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{height}" fill="none" stroke="#999"/>']
    for tick in y_ticks:
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for tick in x_ticks:
        out.append(f'<text x="{x(tick):.1f}" y="{top + height + 16}" text-anchor="middle">{tick:g}</text>')
    for index, (name, color, points) in enumerate(series):
        path = " ".join(f"{x(step):.1f},{y(value):.1f}" for step, value in points)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"><title>{escape(name)}'
                   f'</title></polyline>')
        if len(points) <= 12:
            out += [f'<circle cx="{x(step):.1f}" cy="{y(value):.1f}" r="3.5" fill="{color}"/>'
                    for step, value in points]
        legend_y = top + 18 + 18 * index
        out.append(f'<line x1="{WIDTH - RIGHT - 190}" x2="{WIDTH - RIGHT - 166}" y1="{legend_y - 4}" '
                   f'y2="{legend_y - 4}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{WIDTH - RIGHT - 160}" y="{legend_y}">{escape(name)}</text>')
    return out


def render(scalars: dict[str, list[tuple[int, float]]], title: str) -> str:
    """The SVG document for a run's scalars (workload.metrics.read_scalars)."""
    if not scalars.get("train/loss"):
        raise cli.UsageError("the run's event files hold no train/loss: is RUN a run directory of this job?")
    last_step = max(step for points in scalars.values() for step, _ in points)
    losses = [("training loss", TRAIN_COLOR, scalars["train/loss"])]
    if scalars.get("eval/loss"):
        losses.append(("held-out loss", EVAL_COLOR, scalars["eval/loss"]))
    body = panel(losses, last_step, LOSS_TOP, LOSS_HEIGHT, title)
    if scalars.get("train/learning_rate"):
        body += panel([("learning rate", RATE_COLOR, scalars["train/learning_rate"])], last_step, RATE_TOP,
                      RATE_HEIGHT, "learning rate")
    body.append(f'<text x="{(WIDTH + LEFT - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">step</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">\n'
            f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("python -m tools.loss_curve", __doc__, check_failed="(not used)")
    parser.add_argument("run", metavar="RUN", help="the run directory: its tensorboard/ holds the event files")
    parser.add_argument("--out", required=True, help="the SVG file to write")
    parser.add_argument("--title", default="", help="the picture's title; empty: the run's name")
    args = parser.parse_args(argv)
    if not args.out.lower().endswith(".svg"):
        raise cli.UsageError(f"--out {args.out}: the picture is SVG; give a file name ending in .svg",
                             hint="a browser or any SVG viewer shows it; `rsvg-convert` or Inkscape makes a PNG of it")
    from workload import metrics, storage

    run = args.run.rstrip("/")
    # The job's summary names the event files' directory itself (`tensorboard`): take that too.
    if run.rsplit("/", 1)[-1] == metrics.DIRECTORY:
        run = run.rsplit("/", 1)[0]
    with storage.local_copy(storage.join(run, metrics.DIRECTORY), what="RUN") as directory:
        scalars = metrics.read_scalars(directory)
    picture = render(scalars, args.title or run.rsplit("/", 1)[-1])
    try:
        with open(args.out, "w") as file:
            file.write(picture)
    except OSError as error:
        raise cli.UsageError(f"--out {args.out} cannot be written: {error.strerror}") from None
    print(f"wrote {args.out}: {len(scalars.get('train/loss', []))} steps")
    return cli.OK


if __name__ == "__main__":
    sys.exit(cli.run(main))
