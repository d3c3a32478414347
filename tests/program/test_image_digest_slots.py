"""Issue 44, item 6: a filled digest slot renders, through each chart's own template, as one digest reference a registry
resolves: `registry/repository:tag@sha256:<64 hex>`, never `@sha256:sha256:` or `@<hex>`.

helm is not run here; each chart's image line is quoted below from its template at the pinned version (the chart
sources: prometheus-community/helm-charts, grafana-community/helm-charts, NVIDIA/dcgm-exporter, NVIDIA/k8s-device-
plugin) and transcribed as a function of the image's values and the chart's appVersion. The values are the chart's
own values.yaml (tests/reference/charts/) with what the program passes (image_pins.chart_values) merged over them.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

import pytest

from infra.kubernetes import image_pins
from tests.program.test_image_pins import CHART_VALUES, reference_values

HEX = "0123456789abcdef" * 4  # made up, never a pin
MADE_UP = f"sha256:{HEX}"
# A reference by tag and digest (the distribution spec's grammar, reduced to what these images use).
DIGEST_REFERENCE = re.compile(r"[a-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9._-]+)+:[\w][\w.-]{0,127}@sha256:[0-9a-f]{64}")
APP_VERSIONS = {  # Chart.yaml's appVersion at each pinned version
    "kube-prometheus-stack": "v0.93.1", "grafana": "13.2.0", "kube-state-metrics": "2.20.0",
    "prometheus-node-exporter": "1.12.1", "dcgm-exporter": "4.8.2", "nvidia-device-plugin": "0.20.0",
}


def _or(value: str, default: str) -> str:  # Go template `value | default x`: empty is unset
    return value or default


def kps_prometheus(v: dict, app: str) -> str:
    """kube-prometheus-stack 88.5.3 templates/prometheus/prometheus.yaml:
    {{- $tag := (...image.tag | empty | not) | ternary (printf ":%s" ...image.tag) "" -}}
    {{- $sha := (...image.sha | empty | not) | ternary (printf "@sha256:%s" ...image.sha) "" }}
    image: "{{ printf "%s/%s%s%s" $registry ...image.repository $tag $sha }}" """
    return (f"{v['registry']}/{v['repository']}" + (f":{v['tag']}" if v.get("tag") else "")
            + (f"@sha256:{v['sha']}" if v.get("sha") else ""))


def kps_operator(v: dict, app: str) -> str:
    """kube-prometheus-stack 88.5.3 templates/prometheus-operator/deployment.yaml (the operator, line 54, and
    --prometheus-config-reloader, line 97):
    {{ $registry }}/{{ ...image.repository }}:{{ ...image.tag | default .Chart.AppVersion
    }}@sha256:{{ ...image.sha }}"""
    return f"{v['registry']}/{v['repository']}:{_or(v.get('tag'), app)}" + (f"@sha256:{v['sha']}" if v.get("sha")
                                                                              else "")


def kps_certgen(v: dict, app: str) -> str:
    """kube-prometheus-stack 88.5.3 templates/prometheus-operator/admission-webhooks/job-patch/job-createSecret.yaml
    and job-patchWebhook.yaml:
    image: {{ $registry }}/{{ ...patch.image.repository }}:{{ ...patch.image.tag }}@sha256:{{ ...patch.image.sha }}"""
    return f"{v['registry']}/{v['repository']}:{v['tag']}" + (f"@sha256:{v['sha']}" if v.get("sha") else "")


def grafana(v: dict, app: str) -> str:
    """grafana 12.11.1 (grafana-community/helm-charts) charts/grafana/templates/_pod.tpl, the grafana container (line
    1248) and, with `.Values.sidecar.image.tag`, the k8s-sidecar ones (line 122 and on):
    image: "{{ $registry }}/{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion
    }}@sha256:{{ .Values.image.sha }}" """
    return f"{v['registry']}/{v['repository']}:{_or(v.get('tag'), app)}" + (f"@sha256:{v['sha']}" if v.get("sha")
                                                                              else "")


def kube_state_metrics(v: dict, app: str) -> str:
    """kube-state-metrics 8.4.0 templates/_helpers.tpl, "kube-state-metrics.image":
    {{- printf "%s/%s:%s@%s" .Values.image.registry .Values.image.repository (default (printf "v%s"
    .Chart.AppVersion) .Values.image.tag) .Values.image.sha }}"""
    tagged = f"{v['registry']}/{v['repository']}:{_or(v.get('tag'), 'v' + app)}"
    return f"{tagged}@{v['sha']}" if v.get("sha") else tagged


def node_exporter(v: dict, app: str) -> str:
    """prometheus-node-exporter 4.56.1 templates/_helpers.tpl, "prometheus-node-exporter.image" (image.sha is refused
    there: `fail "image.sha forbidden. Use image.digest instead"`):
    {{- printf "%s/%s:%s%s@%s" .Values.image.registry .Values.image.repository (default (printf "v%s"
    .Chart.AppVersion) .Values.image.tag) (ternary "-distroless" "" .Values.image.distroless) .Values.image.digest }}"""
    assert not v.get("sha"), "image.sha forbidden. Use image.digest instead"
    tagged = (f"{v['registry']}/{v['repository']}:{_or(v.get('tag'), 'v' + app)}"
              + ("-distroless" if v.get("distroless") else ""))
    return f"{tagged}@{v['digest']}" if v.get("digest") else tagged


def dcgm_exporter(v: dict, app: str) -> str:
    """dcgm-exporter 4.8.2 (NVIDIA/dcgm-exporter tag 4.5.3-4.8.2) deployment/templates/daemonset.yaml:
    image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}" (else :{{ .Chart.AppVersion }})"""
    return f"{v['repository']}:{_or(v.get('tag'), app)}"


def device_plugin(v: dict, app: str) -> str:
    """nvidia-device-plugin 0.20.0 (NVIDIA/k8s-device-plugin v0.20.0) deployments/helm/nvidia-device-plugin/templates/
    _helpers.tpl, "nvidia-device-plugin.fullimage":
    {{- $tag := printf "v%s" .Chart.AppVersion }}
    {{- .Values.image.repository -}}:{{- .Values.image.tag | default $tag -}}"""
    return f"{v['repository']}:{_or(v.get('tag'), 'v' + app)}"


# Each pin's template and the chart whose appVersion it defaults to.
TEMPLATES: dict[str, tuple[Callable[[dict, str], str], str]] = {
    "quay.io/prometheus/prometheus": (kps_prometheus, "kube-prometheus-stack"),
    "quay.io/prometheus-operator/prometheus-operator": (kps_operator, "kube-prometheus-stack"),
    "quay.io/prometheus-operator/prometheus-config-reloader": (kps_operator, "kube-prometheus-stack"),
    "ghcr.io/jkroepke/kube-webhook-certgen": (kps_certgen, "kube-prometheus-stack"),
    "docker.io/grafana/grafana": (grafana, "grafana"),
    "quay.io/kiwigrid/k8s-sidecar": (grafana, "grafana"),
    "registry.k8s.io/kube-state-metrics/kube-state-metrics": (kube_state_metrics, "kube-state-metrics"),
    "quay.io/prometheus/node-exporter": (node_exporter, "prometheus-node-exporter"),
    "nvcr.io/nvidia/k8s/dcgm-exporter": (dcgm_exporter, "dcgm-exporter"),
    "nvcr.io/nvidia/k8s-device-plugin": (device_plugin, "nvidia-device-plugin"),
}


def rendered(pin: image_pins.ImagePin) -> str:
    """The pin's image line as its chart renders it, with what the program passes merged over the chart's values."""
    values, path = reference_values(pin)
    node = values
    for key in path:
        node = node[key]
    passed = image_pins.chart_values(pin.chart, (pin,))
    for key in pin.values_path:
        passed = passed.get(key, {})
    template, chart = TEMPLATES[pin.repository]
    return template({**node, **passed}, APP_VERSIONS[chart])


def test_every_chart_image_has_its_template_here():
    assert set(TEMPLATES) == {pin.repository for pin in image_pins.CHART_IMAGES}
    assert {pin.chart for pin in image_pins.CHART_IMAGES} == set(CHART_VALUES)


@pytest.mark.parametrize("pin", image_pins.CHART_IMAGES, ids=lambda pin: pin.repository)
def test_a_filled_slot_renders_one_digest_reference(pin):
    filled = dataclasses.replace(pin, digest=MADE_UP)
    image = rendered(filled)
    assert DIGEST_REFERENCE.fullmatch(image), f"{pin.repository}: the chart renders {image!r}"
    assert image.count("sha256:") == 1 and image.endswith(f"@{MADE_UP}"), image
    assert image == filled.reference(), f"the pod pulls {image}, the table says {filled.reference()}"


@pytest.mark.parametrize("pin", image_pins.CHART_IMAGES, ids=lambda pin: pin.repository)
def test_an_empty_slot_renders_the_tag_the_table_names(pin):
    assert rendered(pin) == pin.reference(), "tools.pin_images reads the digest of what the pod pulls"


def test_kube_prometheus_stack_takes_the_hex_alone_and_its_subcharts_the_digest():
    filled = {pin.repository: dataclasses.replace(pin, digest=MADE_UP) for pin in image_pins.CHART_IMAGES}
    stack = image_pins.chart_values("kube-prometheus-stack", tuple(filled.values()))
    assert stack["prometheusOperator"]["image"]["sha"] == HEX
    assert stack["prometheusOperator"]["admissionWebhooks"]["patch"]["image"]["sha"] == HEX
    assert stack["grafana"]["image"]["sha"] == HEX
    assert stack["kube-state-metrics"]["image"]["sha"] == MADE_UP
    assert stack["prometheus-node-exporter"]["image"] == {"digest": MADE_UP}
    assert image_pins.chart_values("nvidia-device-plugin", tuple(filled.values())) == {
        "image": {"tag": f"v0.20.0@{MADE_UP}"}}


def test_the_tool_prints_each_images_resolved_reference_and_its_slot(capsys):
    from tools import pin_images

    filled = dataclasses.replace(image_pins.CHART_IMAGES[1], digest=MADE_UP)
    out = "\n".join(pin_images.lines((*image_pins.ALL_IMAGES, filled)))
    for pin in image_pins.ALL_IMAGES:
        assert f"{pin.repository}:{pin.resolved_tag} " in out, f"{pin.repository}: no resolved reference in\n{out}"
    assert "quay.io/prometheus-operator/prometheus-operator:v0.93.1 " in out, "the chart's appVersion, resolved"
    assert f"quay.io/prometheus-operator/prometheus-operator:v0.93.1@{MADE_UP}" in out
    assert "kube-prometheus-stack prometheusOperator.image.sha (hex only)" in out
    assert "prometheus-node-exporter.image.digest (sha256:hex)" in out
