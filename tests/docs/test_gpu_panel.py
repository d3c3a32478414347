"""The README's picture of a healthy run's GPU panels: it is tools.gpu_panel's drawing of the committed H200
recording, through the command a user types; the recording holds the training dashboard's own panels and metrics;
the figures the README quotes are the recording's; and a malformed recording is refused in one line."""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench.record.gpu_record import PANEL_METRICS
from infra.kubernetes.monitoring import TRAINING_PANELS
from tools import gpu_panel
from workload import cli

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "docs" / "metrics.md").read_text()  # the README's page on metrics, which holds the picture
FLAT_README = " ".join(README.split())


def picture_and_recording() -> tuple[Path, Path]:
    """The README's GPU picture and the recording its command draws it from."""
    (command,) = re.findall(r"`\.venv/bin/python -m tools\.gpu_panel (\S+) --out (\S+\.svg)`", FLAT_README)
    assert f"]({Path(command[1]).relative_to('docs').as_posix()})" in README, (
        f"the page shows the picture its command writes: {command[1]}")
    return REPO / command[1], REPO / command[0]


def recording() -> dict:
    return json.loads(picture_and_recording()[1].read_text())


def test_the_recorder_writes_the_dashboards_own_panels_and_metrics():
    dashboard = {title: expression for title, expression, *_ in TRAINING_PANELS}
    assert list(PANEL_METRICS) == [title for title in dashboard if title in PANEL_METRICS], "the dashboard's order"
    for title, metric in PANEL_METRICS.items():
        assert re.search(rf"\b{metric}\b", dashboard[title]), f"panel {title!r} queries {metric}"
    left_out = set(dashboard) - set(PANEL_METRICS)
    assert left_out == {"Node network (pod network)"}, "only the panel one machine cannot have is not recorded"
    for title, panel in recording()["panels"].items():
        assert panel["metric"] == PANEL_METRICS[title], title


def test_the_readmes_picture_is_the_recording_drawn_by_the_command(tmp_path):
    picture, source = picture_and_recording()
    out = tmp_path / "gpu.svg"
    done = subprocess.run([sys.executable, "-m", "tools.gpu_panel", str(source), "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == cli.OK, done.stderr
    assert out.read_text() == picture.read_text(), (
        f"{picture.name} must be what the README's command draws: rerun it and commit the picture")

    # Each panel recorded is one chart titled as on the dashboard, its line holding every sample.
    panels = recording()["panels"]
    drawn = re.findall(r'<text [^>]*font-weight="bold">([^<]*)</text>', picture.read_text())
    lines = re.findall(r'<polyline [^>]*points="([^"]*)">', picture.read_text())
    assert [re.sub(r" \([^)]*\)$", "", title) for title in drawn] == list(panels), drawn
    assert [len(points.split()) for points in lines] == [len(panel["result"][0]["values"])
                                                         for panel in panels.values()]


def _training(title: str) -> list[float]:
    """A panel's values while the job trained: from its second step (the first compiles) to its last."""
    panels = recording()["panels"]
    steps = panels["Job tokens/s"]["result"][0]["values"]
    first, last = steps[1][0], steps[-1][0]
    return [float(value) for when, value in panels[title]["result"][0]["values"] if first <= when <= last]


def test_the_figures_the_readme_quotes_are_the_recordings():
    tokens = [float(value) for _, value in recording()["panels"]["Job tokens/s"]["result"][0]["values"][1:]]
    step_times = [float(value) for _, value in recording()["panels"]["Job step time"]["result"][0]["values"]]
    quoted = re.search(r"memory rises to ([\d.]+) GiB .* the first step takes (\d+) s.* \(median (\d+) W\).* "
                       r"near (\d+) MHz .* XID 0, a median ([\d,]+) tokens/s at ([\d.]+) s a step; .* (\d+) of the "
                       r"(\d+) steps after the first took about ([\d.]+) s", FLAT_README)
    assert quoted, "the README describes the picture's figures"
    memory, first_step, power, clock, median_tokens, median_step, slow, after_first, slow_step = quoted.groups()
    assert float(memory) == pytest.approx(max(_training("GPU memory used")) / 2**30, abs=0.05)
    assert int(first_step) == round(step_times[0])
    assert int(power) == pytest.approx(statistics.median(_training("GPU power")), abs=1)
    assert int(clock) == pytest.approx(statistics.median(_training("SM clock")), abs=1)
    assert float(median_tokens.replace(",", "")) == pytest.approx(statistics.median(tokens), rel=0.001)
    assert float(median_step) == pytest.approx(statistics.median(step_times[1:]), abs=0.001)
    slow_steps = [seconds for seconds in step_times[1:] if seconds > 2 * statistics.median(step_times[1:])]
    assert (int(slow), int(after_first)) == (len(slow_steps), len(step_times) - 1)
    assert float(slow_step) == pytest.approx(statistics.mean(slow_steps), abs=0.1)
    assert max(_training("XID errors")) == 0, "a healthy run raised no XID"


MALFORMED = [
    ("[1, 2]", "holds no panels"),
    ('{"panels": {"GPU temperature": {"result": []}}}', "'GPU temperature' is not on the training dashboard"),
    ('{"panels": {"GPU power": {"result": []}}}', "'GPU power' has no result list"),
    ('{"panels": {"GPU power": {"result": [{"metric": {}, "values": [[1, "NaN"]]}]}}}', "finite numbers"),
    ('{"panels": {"GPU power": {"result": [{"metric": {}, "values": [[1, "700 W"]]}]}}}', "finite numbers"),
    ('{"panels": {"GPU power": {"result": [{"metric": {}, "values": [[1]]}]}}}', "is not [time, value]"),
    ('{"panels": {"GPU power": {"result": [{"values": "700"}]}}}', "a series of panel 'GPU power' is not"),
]


@pytest.mark.parametrize("text, words", MALFORMED, ids=[words for _, words in MALFORMED])
def test_a_malformed_recording_is_refused_in_one_line(tmp_path, capsys, text, words):
    (tmp_path / "recording.json").write_text(text)
    code = cli.run(gpu_panel.main, [str(tmp_path / "recording.json"), "--out", str(tmp_path / "gpu.svg")])
    error = capsys.readouterr().err
    assert code == cli.USAGE and words in error and "Traceback" not in error, error
    assert len(error.strip().splitlines()) <= 2 and not (tmp_path / "gpu.svg").exists(), error


def test_several_gpus_get_a_line_and_a_legend_each(tmp_path):
    """A cluster's recording: one line per GPU of every node, told apart by the legend."""
    result = [{"metric": {"node": node, "gpu": gpu}, "values": [[10, "0"], [11, "97"], [12, "99"]]}
              for node in ("ip-10-0-1-5", "ip-10-0-2-7") for gpu in ("0", "1")]
    (tmp_path / "cluster.json").write_text(json.dumps({"panels": {"GPU utilization": {"result": result}}}))
    assert gpu_panel.main([str(tmp_path / "cluster.json"), "--out", str(tmp_path / "cluster.svg")]) == cli.OK
    svg = (tmp_path / "cluster.svg").read_text()
    names = re.findall(r"<title>([^<]*)</title>", svg)
    assert names == ["ip-10-0-1-5 gpu 0", "ip-10-0-1-5 gpu 1", "ip-10-0-2-7 gpu 0", "ip-10-0-2-7 gpu 1"], names
    assert all(f">{name}</text>" in svg for name in names), "each line is in the legend"
