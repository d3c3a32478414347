"""Issue 31, item 5: every image the stack runs is in one table (infra/kubernetes/image_pins.py) with its tag, its
source and a digest once an operator has read it; a filled digest reaches the pods as `repo:tag@sha256:...` through
each chart's own values; `python -m tools.pin_images` lists what is left to pin. No digest here is real: the tests use
a made-up one to show where it would go, and the table itself holds none (nothing could read one where this was
written: see the module's docstring).
"""
from __future__ import annotations

import dataclasses
import functools

import pytest
import yaml

from infra.kubernetes import image_pins
from tests.support.pulumi_mocks import REFERENCE_DIR, SCHEMA
from tools import pin_images
from workload import cli

MADE_UP = "sha256:" + "0" * 64  # a placeholder for the tests, never a pin
CHART_VALUES = {
    "kube-prometheus-stack": "kube-prometheus-stack-88.5.3-values.yaml",
    "dcgm-exporter": "dcgm-exporter-4.8.2-values.yaml",
    "nvidia-device-plugin": "nvidia-device-plugin-0.20.0-values.yaml",
}
SUBCHARTS = {"grafana": "grafana-12.11.1-values.yaml", "kube-state-metrics": "kube-state-metrics-8.4.0-values.yaml",
             "prometheus-node-exporter": "prometheus-node-exporter-4.56.1-values.yaml"}


@functools.cache
def chart_file(name: str) -> dict:
    return yaml.load((REFERENCE_DIR / "charts" / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def reference_values(pin: image_pins.ImagePin) -> tuple[dict, tuple[str, ...]]:
    """The chart's values.yaml (a subchart's for its own keys) and the path inside it."""
    if pin.chart == "kube-prometheus-stack" and pin.values_path[0] in SUBCHARTS:
        return chart_file(SUBCHARTS[pin.values_path[0]]), pin.values_path[1:]
    return chart_file(CHART_VALUES[pin.chart]), pin.values_path


@pytest.mark.parametrize("pin", image_pins.CHART_IMAGES, ids=lambda pin: pin.repository)
def test_each_chart_image_is_where_the_charts_values_say(pin):
    values, path = reference_values(pin)
    node = values
    for key in path:
        assert key in node, f"{pin.repository}: {pin.chart} has no {'.'.join(pin.values_path)}"
        node = node[key]
    assert pin.repository.endswith(node["repository"]), f"{pin.repository} vs the chart's {node['repository']}"
    assert (node.get("tag") or "") == pin.tag or not node.get("tag"), f"{pin.repository}: tag {node.get('tag')}"
    assert not pin.digest_key or pin.digest_key in node, f"{pin.repository}: the chart has no {pin.digest_key}"


def test_a_filled_digest_reaches_the_chart_and_the_reference():
    pins = tuple(dataclasses.replace(pin, digest=MADE_UP, tag=pin.tag or "v0.0.0") for pin in image_pins.CHART_IMAGES)
    stack = image_pins.chart_values("kube-prometheus-stack", pins)
    # kube-prometheus-stack writes `@sha256:` itself: its slot takes the hex alone (tests/program/test_image_digest_slots.py).
    assert stack["prometheus"]["prometheusSpec"]["image"] == {"sha": MADE_UP.removeprefix("sha256:"),
                                                              "tag": "v3.14.0-distroless"}
    assert stack["prometheus-node-exporter"]["image"]["digest"] == MADE_UP
    assert image_pins.chart_values("dcgm-exporter", pins) == {"image": {"tag": f"4.5.3-4.8.2-distroless@{MADE_UP}"}}
    assert dataclasses.replace(image_pins.DLC, digest=MADE_UP).reference() == \
        f"public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0@{MADE_UP}"
    merged = image_pins.merged({"prometheus": {"prometheusSpec": {"retention": "15d"}}}, stack)
    assert merged["prometheus"]["prometheusSpec"]["retention"] == "15d", "merging keeps the stack's own values"


def test_without_digests_the_charts_values_are_unchanged_and_the_default_image_is_the_table_s():
    assert all(image_pins.chart_values(chart) == {} for chart in CHART_VALUES)
    assert SCHEMA["dlcImage"]["default"] == image_pins.DLC.reference()
    with pytest.raises(AssertionError):
        image_pins.ImagePin("r", "t", "s", digest="sha256:abc")


def test_the_tool_lists_each_image_and_how_to_read_its_digest(capsys):
    assert cli.run(pin_images.main, []) == cli.CHECK_FAILED, "images without a digest are a failed check"
    out = capsys.readouterr()
    assert "crane digest public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0" in out.out
    assert f"{len(image_pins.unpinned())} of {len(image_pins.ALL_IMAGES)} images" in out.err
