"""Charts of numbers from files anyone may have written (tools/svg_chart.py, the one rule): NaN, +-inf and finite
values whose differences overflow are left out of the picture with a note saying how many, the axes span what is
drawn, and no table of extreme floats makes a traceback - for tools.loss_curve's event files and tools.gpu_panel's
recordings alike. Fixed tables, every pair and triple of them, no randomness."""
from __future__ import annotations

import itertools
import json
import math
import re
import sys

import pytest

from tools import gpu_panel, loss_curve, svg_chart
from tools.svg_chart import LARGEST, Box, chart, drawable, nice_ticks, undrawn
from workload import cli

EXTREME = (math.nan, math.inf, -math.inf, sys.float_info.max, -sys.float_info.max, 1e300, -1e300, 1e151, -1e151,
           LARGEST, -LARGEST, 2.0**64, 5e-324, -5e-324, sys.float_info.min, 0.0, -0.0, 1e-200, 3.5, -7.25)
BOX = Box(60, 40, 400, 200)


def _coordinates(elements: list[str]) -> list[float]:
    numbers = []
    for element in elements:
        for attribute in re.findall(r'\b(?:x|y|x1|x2|y1|y2|cx|cy|points)="([^"]*)"', element):
            numbers += [float(number) for number in re.split(r"[ ,]", attribute) if number]
    return numbers


def test_nice_ticks_are_finite_and_few_for_every_pair_of_extreme_bounds():
    for low, high in itertools.product(EXTREME, repeat=2):
        ticks = nice_ticks(low, high)
        assert 2 <= len(ticks) <= 21 and all(math.isfinite(tick) for tick in ticks), (low, high, ticks)
        if drawable(low, high) and high - low >= svg_chart.SMALLEST_SPAN:
            slack = (high - low) * 1e-9  # below a pixel's worth: 1.8e19 beside 1e150 rounds away
            assert ticks[0] <= low + slack and ticks[-1] >= high - slack, (low, high, ticks)


@pytest.mark.parametrize("x_high", [math.inf, math.nan, 1e308, 40.0])
def test_every_triple_of_extreme_values_is_drawn_or_left_out_with_a_note(x_high):
    for values in itertools.combinations(EXTREME, 3):
        points = [(float(step), value) for step, value in enumerate((*values, 2.0), start=1)]
        points.append((1e308, 1.0))  # a step no axis can hold
        elements = chart([("training loss", "#000", points)], x_high, BOX, "run")
        left_out = sum(not drawable(step, value) for step, value in points)
        coordinates = _coordinates(elements)
        assert all(math.isfinite(number) and abs(number) < 1e6 for number in coordinates), (values, coordinates)
        note = [element for element in elements if "not drawn" in element]
        assert len(note) == 1 and f">{left_out:,} point" in note[0], (values, note)
        drawn = re.search(r'points="([^"]*)"', next(e for e in elements if "<polyline" in e)).group(1).split()
        assert len(drawn) == len(points) - left_out, (values, drawn)


def test_a_chart_of_finite_values_has_no_note_and_its_axes_cover_them():
    elements = chart([("loss", "#000", [(0.0, 2.5), (10.0, 1.75), (20.0, 1.5)])], 20.0, BOX, "run")
    assert not [element for element in elements if "not drawn" in element]
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([^<]+)</text>', "".join(elements))]
    assert min(ticks) <= 0 and max(ticks) >= 2.5, ticks


def test_loss_curve_draws_a_run_whose_losses_hold_nan_and_infinities(tmp_path, capsys):
    from workload.metrics import tensorboard as metrics

    run = tmp_path / "run"
    log = metrics.MetricsLog(str(run), start_step=0)
    for step, loss in enumerate((3.25, math.nan, -math.inf, 2.75, math.inf, 1e200, 2.5), start=1):
        log.scalars(step, {"train/loss": loss, "train/learning_rate": 1e-4 if step != 3 else math.nan})
    log.close()
    code = cli.run(loss_curve.main, [str(run), "--out", str(tmp_path / "curve.svg")])
    err = capsys.readouterr().err
    assert code == cli.OK and "Traceback" not in err, err
    # 1e200 as float32 (tensorboard's scalar) is inf: 4 losses and 1 rate left out
    assert "note: 5 points not drawn" in err, err
    picture = (tmp_path / "curve.svg").read_text()
    attributes = " ".join(re.findall(r'="([^"]*)"', picture)).lower()
    assert "nan" not in attributes and "inf" not in attributes and "points not drawn" in picture, attributes


@pytest.mark.parametrize("times", [(1e308, -1e308), (-sys.float_info.max, 0.0), (1.7e9, 1e300)])
def test_gpu_panel_draws_a_recording_whose_times_overflow_a_span(times, tmp_path, capsys):
    title = next(iter(gpu_panel.dashboard_panels()))
    samples = [[times[0], "50"], [times[1], "60"], [1.7e9 + 5, "1e308"], [1.7e9 + 10, "70"]]
    (tmp_path / "rec.json").write_text(json.dumps({"panels": {title: {"result": [
        {"metric": {"node": "ip-10-0-1-7", "gpu": "0"}, "values": samples}]}}}))
    code = cli.run(gpu_panel.main, [str(tmp_path / "rec.json"), "--out", str(tmp_path / "gpu.svg")])
    err = capsys.readouterr().err
    assert code == cli.OK and "Traceback" not in err and "not drawn" in err, err
    picture = (tmp_path / "gpu.svg").read_text()
    attributes = " ".join(re.findall(r'="([^"]*)"', picture)).lower()
    assert "inf" not in attributes and "nan" not in attributes and "not drawn" in picture, attributes
    assert undrawn([("s", "", [(math.inf, 1.0), (1.0, 1.0)])]) == 1


def test_a_recordings_start_that_is_no_number_is_refused_naming_it(tmp_path, capsys):
    title = next(iter(gpu_panel.dashboard_panels()))
    (tmp_path / "rec.json").write_text(json.dumps({"started": "yesterday", "panels": {title: {"result": [
        {"metric": {"node": "n"}, "values": [[1.0, "2"]]}]}}}))
    code = cli.run(gpu_panel.main, [str(tmp_path / "rec.json"), "--out", str(tmp_path / "gpu.svg")])
    err = capsys.readouterr().err.splitlines()
    assert code == cli.USAGE and err[0].startswith("error: RECORDING") and '"started"' in err[0], err


# Labels from files anyone may have written: every C0 control (XML 1.0 forbids all but tab, LF and CR, even as
# character references), DEL and C1, U+FFFE/U+FFFF, a lone surrogate, markup and entities, quotes, RTL and emoji.
HOSTILE_LABELS = ("".join(map(chr, range(32))), "gpu\x7f\x85\x9b", "a\ufffe\uffffb", "half \ud800 pair",
                  "</text><script>x</script>", "&amp; &#1; &#x0; ]]>", "\"quoted\" 'single'", "\u202eevil\u202c 🚀",
                  "tab\there\r\nline")


@pytest.mark.parametrize("label", HOSTILE_LABELS, ids=range(len(HOSTILE_LABELS)))
def test_every_svg_written_with_a_hostile_label_parses_as_xml(label, tmp_path, capsys):
    import xml.etree.ElementTree as ElementTree

    titles = list(gpu_panel.dashboard_panels())[:2]
    series = [{"metric": {"node": label, "gpu": label}, "values": [[1.0, "50"], [2.0, "60"]]},
              {"metric": {"node": "ip-10-0-1-8" + label}, "values": [[1.0, "5"], [2.0, "6"]]}]
    (tmp_path / "rec.json").write_text(json.dumps({"gpu": label, "what": label,
                                                   "panels": {title: {"result": series} for title in titles}}))
    assert cli.run(gpu_panel.main, [str(tmp_path / "rec.json"), "--out", str(tmp_path / "gpu.svg")]) == cli.OK
    pictures = [tmp_path / "gpu.svg"]
    elements = chart([(label, "#000", [(1.0, 2.0), (2.0, 1.0)])], 2.0, BOX, label)
    pictures.append(tmp_path / "chart.svg")
    pictures[-1].write_text(svg_chart.document(600, 300, elements), encoding="utf-8")
    capsys.readouterr()
    for picture in pictures:
        root = ElementTree.parse(picture).getroot()  # raises ParseError on a character XML forbids
        words = "".join(root.itertext())
        # What a reader sees: each forbidden character as U+FFFD, and line ends as XML normalizes them (section 2.11).
        legal = "".join(char if char in "\t\n\r" or " " <= char <= "\ud7ff" or "\ue000" <= char <= "\ufffd"
                        or char > "\uffff" else "\ufffd" for char in label)
        assert legal.replace("\r\n", "\n").replace("\r", "\n") in words, (picture.name, words)
