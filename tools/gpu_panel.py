"""The training dashboard's panels as one SVG picture, drawn from a recording of them: what docs/metrics.md's picture of
a healthy run is.

    python -m tools.gpu_panel bench/results/gpu_panel-h200-2026-12-01.json --out docs/gpu-panel.svg

RECORDING is a JSON file holding, for each panel title of the dashboard (infra/monitoring.TRAINING_PANELS), the
metric its query reads and the `result` list of a Prometheus range query of type matrix:
    {"panels": {"GPU utilization": {"metric": "DCGM_FI_DEV_GPU_UTIL",
                                    "result": [{"metric": {"node": "ip-10-0-1-5", "gpu": "0"},
                                                "values": [[1796151147.7, "0"], [1796151148.7, "97"]]}]}}}
bench/record/gpu_record.py writes one on a GPU machine; the `result` of
`curl 'localhost:9090/api/v1/query_range?query=...&start=...&end=...&step=15'` against a stack's Prometheus is the
same shape. Panels are drawn in the dashboard's order and units, one line per series; time runs from the
recording's start (its `started`, else its first sample).
"""
from __future__ import annotations

import json
import math
import sys
from typing import Sequence

from tools.svg_chart import Box, chart, check_out, document, drawable, text, undrawn_note, write
from workload import cli, user_files

COLUMNS, CHART_WIDTH, CHART_HEIGHT, LEFT, GUTTER, RIGHT = 2, 380, 110, 60, 80, 20
TOP, ROW = 62, 170
# A recording is some KiB per panel and sample; a bound on what json reads.
MAX_RECORDING_BYTES = 64 << 20
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
# Grafana's unit ids in TRAINING_PANELS, as the picture shows them: (factor, suffix for the chart's title).
UNITS = {"percent": (1, "%"), "percentunit": (100, "%"), "bytes": (2**-30, "GiB"), "watt": (1, "W"),
         "rotmhz": (1, "MHz"), "none": (1, ""), "s": (1, "s"), "Bps": (2**-20, "MiB/s")}


def dashboard_panels() -> dict[str, str]:
    """Panel title -> Grafana unit, in the dashboard's order."""
    from infra.kubernetes.monitoring import TRAINING_PANELS

    return {title: unit for title, _, unit, _ in TRAINING_PANELS}


def read_recording(path: str) -> dict:
    """The recording, checked as untrusted input: each panel one of the dashboard's, each value a finite number."""
    try:
        recording = json.loads(user_files.read_bytes(path, MAX_RECORDING_BYTES))  # a FIFO is refused, not waited on
    except user_files.Refused as error:
        raise cli.UsageError(f"RECORDING {error}") from None
    except OSError as error:
        raise cli.UsageError(f"RECORDING {path} cannot be read: {error.strerror}") from None
    except ValueError as error:
        raise cli.UsageError(f"RECORDING {path} is not JSON: {error}") from None
    except RecursionError:  # json's decoder recurses once per level of [ or {
        raise cli.UsageError(f"RECORDING {path}: nested too deeply; a recording is {{\"panels\": {{title: "
                             "{\"result\": [...]}}}, a few levels deep") from None
    panels = recording.get("panels") if isinstance(recording, dict) else None
    if not isinstance(panels, dict) or not panels:
        raise cli.UsageError(f"RECORDING {path} holds no panels: expected {{\"panels\": {{title: {{\"result\": "
                             f"[...]}}}}}}, as bench/record/gpu_record.py writes")
    if "started" in recording and not _finite(recording["started"]):
        raise cli.UsageError(f"RECORDING {path}: \"started\" is not a finite number of seconds (Unix time)")
    known = dashboard_panels()
    for title, panel in panels.items():
        if title not in known:
            raise cli.UsageError(f"RECORDING {path}: panel {title!r} is not on the training dashboard",
                                 hint=f"its panels: {', '.join(known)}")
        result = panel.get("result") if isinstance(panel, dict) else None
        if not isinstance(result, list) or not result:
            raise cli.UsageError(f"RECORDING {path}: panel {title!r} has no result list of series")
        for series in result:
            values = series.get("values") if isinstance(series, dict) else None
            labels = series.get("metric", {}) if isinstance(series, dict) else None
            if not isinstance(values, list) or not values or not isinstance(labels, dict):
                raise cli.UsageError(f"RECORDING {path}: a series of panel {title!r} is not "
                                     f"{{\"metric\": {{labels}}, \"values\": [[time, \"value\"], ...]}}")
            for sample in values:
                if not (isinstance(sample, list) and len(sample) == 2 and _finite(sample[0]) and _finite(sample[1])):
                    raise cli.UsageError(f"RECORDING {path}: panel {title!r} has a sample {str(sample)[:60]} that "
                                         f"is not [time, value] with finite numbers")
    return recording


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value)) and not isinstance(value, bool)
    except (TypeError, ValueError):
        return False


def series_name(labels: dict) -> str:
    """A series' legend: its node, and its GPU where it has one (the dashboard's legend)."""
    node = str(labels.get("node", "")) or "node ?"
    return f"{node} gpu {labels['gpu']}" if "gpu" in labels else node


def start_time(recording: dict) -> float:
    """Where the x axis begins: the recording's start, or its first sample."""
    return float(recording.get("started", min(float(t) for panel in recording["panels"].values()
                                               for series in panel["result"] for t, _ in series["values"])))


def undrawn_samples(recording: dict) -> int:
    """How many samples the charts leave out (tools/svg_chart.py drawable), as render draws them."""
    units, start = dashboard_panels(), start_time(recording)
    return sum(not drawable(float(t) - start, float(v) * UNITS.get(units[title], (1, ""))[0])
               for title, panel in recording["panels"].items() for series in panel["result"]
               for t, v in series["values"])


def render(recording: dict) -> str:
    """The SVG document: the recorded panels in the dashboard's grid and order."""
    units = dashboard_panels()
    titles = [title for title in units if title in recording["panels"]]
    all_times = [float(t) for title in titles for series in recording["panels"][title]["result"]
                 for t, _ in series["values"]]
    start = start_time(recording)
    x_high = max(all_times) - start
    body = []
    # One series in every panel (one GPU): its name goes in the header, in place of a legend in each chart.
    names = {series_name(series.get("metric", {})) for title in titles
             for series in recording["panels"][title]["result"] if "gpu" in series.get("metric", {})}
    alone = all(len(recording["panels"][title]["result"]) == 1 for title in titles) and len(names) == 1
    header = ", ".join(str(recording[key]) for key in ("gpu", "what") if recording.get(key))
    if alone:
        header += f" (series {names.pop()})"
    if header:
        body.append(f'<text x="{LEFT}" y="20" font-size="13">{text(header)}</text>')
    for index, title in enumerate(titles):
        factor, suffix = UNITS.get(units[title], (1, ""))
        lines = [(series_name(series.get("metric", {})), COLORS[number % len(COLORS)],
                  [(float(t) - start, float(v) * factor) for t, v in series["values"]])
                 for number, series in enumerate(recording["panels"][title]["result"])]
        column, row = index % COLUMNS, index // COLUMNS
        box = Box(LEFT + column * (CHART_WIDTH + GUTTER), TOP + row * ROW, CHART_WIDTH, CHART_HEIGHT)
        body += chart(lines, x_high, box, f"{title} ({suffix})" if suffix else title, legend_width=100,
                      legend=len(lines) > 1)
    rows = (len(titles) + COLUMNS - 1) // COLUMNS
    width = LEFT + COLUMNS * CHART_WIDTH + (COLUMNS - 1) * GUTTER + RIGHT
    height = TOP + rows * ROW - 10
    body.append(f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">seconds since the recording began'
                f'</text>')
    return document(width, height, body)


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("python -m tools.gpu_panel", __doc__, check_failed="(not used)")
    parser.add_argument("recording", metavar="RECORDING", help="the recording (JSON) of the dashboard's panels")
    parser.add_argument("--out", required=True, help="the SVG file to write")
    args = parser.parse_args(argv)
    check_out(args.out)
    recording = read_recording(args.recording)
    picture = render(recording)
    write(args.out, picture)
    if dropped := undrawn_samples(recording):  # the picture says it too, in each chart that left some out
        print(f"note: {undrawn_note(dropped)}", file=sys.stderr)
    print(f"wrote {args.out}: {', '.join(title for title in dashboard_panels() if title in recording['panels'])}")
    return cli.OK


if __name__ == "__main__":
    sys.exit(cli.run(main))
