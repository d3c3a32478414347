"""Every image the stack runs, each as a repository, a tag and a digest, and where the tag comes from (issue 31, item
5). A pod pulls `repository:tag@sha256:...` once a digest is filled in; until then `repository:tag`.

Why the digests are empty. A digest must be read from the registry (`crane digest IMAGE`, `docker buildx imagetools
inspect IMAGE`), and this program is developed where no registry can be reached: a digest typed here from memory would
be a guess that pins nothing real, or an image that does not exist. So the table is the mechanism and the list;
`python -m tools.pin_images` prints the command that reads each digest and the line to fill in, and the preview warns
for a user-given dlcImage without one (raycluster.unpinned_image_warning). Filling them is an operator's step with
registry access, reviewed like any pin change.

How a digest reaches a chart's pods: through the chart's own digest value where it has one, else appended to the tag
(`tag@sha256:...`), which the chart's `repository:tag` template then renders as a digest reference (dcgm-exporter, the
device plugin). The digest values do not all take the same form, and a wrong one renders a reference no registry
resolves (`...@sha256:sha256:...`, or `...@<hex>`); each pin says which its chart's template takes (SlotForm), and
tests/program/test_image_digest_slots.py renders each slot with its chart's template logic:
- the hex alone where the template writes `@sha256:` itself: kube-prometheus-stack's own images (templates/prometheus/
  prometheus.yaml, templates/prometheus-operator/deployment.yaml for the operator and --prometheus-config-reloader,
  templates/prometheus-operator/admission-webhooks/job-patch/job-createSecret.yaml and job-patchWebhook.yaml for the
  certgen hooks) and the grafana subchart's (grafana-community/helm-charts charts/grafana/templates/_pod.tpl, the
  grafana and k8s-sidecar containers);
- `sha256:<hex>` where it writes only `@`: kube-state-metrics' `image.sha` (templates/_helpers.tpl,
  "kube-state-metrics.image": printf "%s/%s:%s@%s") and prometheus-node-exporter's `image.digest` (templates/
  _helpers.tpl, "prometheus-node-exporter.image": printf "%s/%s:%s%s@%s").
The tag a chart renders when none is set (its appVersion, with a `v` where its template adds one) is each pin's
`chart_tag`, so every image has a reference to read a digest for (`python -m tools.pin_images`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class SlotForm(Enum):
    """What a chart's digest value holds, by how its template writes the reference."""

    HEX = "hex"
    """The 64 hex digits alone: the template writes `...:tag@sha256:{{ sha }}`."""
    DIGEST = "sha256:hex"
    """The whole digest: the template writes `...:tag@{{ sha }}`."""
    TAG = "tag@sha256:hex"
    """No digest value: the digest rides on the tag, the template writing `repository:{{ tag }}`."""


@dataclass(frozen=True)
class ImagePin:
    repository: str
    tag: str
    """The tag the chart or the stack uses; "" where the chart defaults it to its appVersion (then `chart_version`)."""
    source: str
    """Where the tag is set: a chart's values.yaml at its pinned version, or this repository's constant."""
    digest: str = ""
    """sha256:<64 hex>, read from the registry for this tag (`crane digest`); empty until an operator fills it."""
    chart: str = ""
    """The Helm release whose values carry it (empty: not a chart's)."""
    values_path: tuple[str, ...] = ()
    """Where the image's settings sit in the release's values."""
    digest_key: str = ""
    """The chart's digest value under values_path ("sha", "digest"); empty: the digest goes on the tag."""
    form: SlotForm = SlotForm.TAG
    """What the chart's digest value takes (the module's docstring cites each template)."""
    chart_tag: str = ""
    """With `tag` empty: the tag the chart's template renders (its appVersion, `v`-prefixed where it adds one)."""

    def __post_init__(self) -> None:
        assert not self.digest or DIGEST.fullmatch(self.digest), f"{self.repository}: malformed digest {self.digest}"
        assert (self.form is SlotForm.TAG) == (not self.digest_key), f"{self.repository}: a digest value needs its form"

    @property
    def resolved_tag(self) -> str:
        return self.tag or self.chart_tag

    def reference(self) -> str:
        """The reference a pod pulls: repository:tag (the chart's own where the stack sets none), and @digest when the
        digest is known."""
        tagged = f"{self.repository}:{self.resolved_tag}" if self.resolved_tag else self.repository
        return f"{tagged}@{self.digest}" if self.digest else tagged

    def slot_value(self) -> str:
        """The digest as the chart's digest value takes it."""
        return self.digest.removeprefix("sha256:") if self.form is SlotForm.HEX else self.digest


KPS = "kube-prometheus-stack 88.5.3 values.yaml"
# Chart.yaml appVersions at the pinned versions: what a template renders when the stack sets no tag.
KPS_APP_VERSION = "v0.93.1"  # kube-prometheus-stack 88.5.3 (`tag | default .Chart.AppVersion`)
DLC = ImagePin("public.ecr.aws/deep-learning-containers/ray", "train-ml-cuda-v1.1.0",
               "aws/deep-learning-containers docs/ray-train/changelog (Ray Train v1.1, 2026-09-01); Pulumi.yaml dlcImage")
CHART_IMAGES = (
    ImagePin("quay.io/prometheus/prometheus", "v3.14.0-distroless", KPS, chart="kube-prometheus-stack",
             values_path=("prometheus", "prometheusSpec", "image"), digest_key="sha", form=SlotForm.HEX),
    ImagePin("quay.io/prometheus-operator/prometheus-operator", "", KPS + " (the chart's appVersion)",
             chart="kube-prometheus-stack", values_path=("prometheusOperator", "image"), digest_key="sha",
             form=SlotForm.HEX, chart_tag=KPS_APP_VERSION),
    ImagePin("quay.io/prometheus-operator/prometheus-config-reloader", "", KPS + " (the chart's appVersion)",
             chart="kube-prometheus-stack", values_path=("prometheusOperator", "prometheusConfigReloader", "image"),
             digest_key="sha", form=SlotForm.HEX, chart_tag=KPS_APP_VERSION),
    ImagePin("ghcr.io/jkroepke/kube-webhook-certgen", "1.8.7", KPS, chart="kube-prometheus-stack",
             values_path=("prometheusOperator", "admissionWebhooks", "patch", "image"), digest_key="sha",
             form=SlotForm.HEX),
    ImagePin("docker.io/grafana/grafana", "", "grafana 12.11.1 values.yaml (the chart's appVersion)",
             chart="kube-prometheus-stack", values_path=("grafana", "image"), digest_key="sha", form=SlotForm.HEX,
             chart_tag="13.2.0"),  # grafana 12.11.1's appVersion (`tag | default .Chart.AppVersion`)
    ImagePin("quay.io/kiwigrid/k8s-sidecar", "2.10.1", "grafana 12.11.1 values.yaml", chart="kube-prometheus-stack",
             values_path=("grafana", "sidecar", "image"), digest_key="sha", form=SlotForm.HEX),
    ImagePin("registry.k8s.io/kube-state-metrics/kube-state-metrics", "",
             "kube-state-metrics 8.4.0 values.yaml (the chart's appVersion)", chart="kube-prometheus-stack",
             values_path=("kube-state-metrics", "image"), digest_key="sha", form=SlotForm.DIGEST,
             chart_tag="v2.20.0"),  # kube-state-metrics 8.4.0: `default (printf "v%s" .Chart.AppVersion)`
    ImagePin("quay.io/prometheus/node-exporter", "", "prometheus-node-exporter 4.56.1 values.yaml (the chart's "
             "appVersion)", chart="kube-prometheus-stack", values_path=("prometheus-node-exporter", "image"),
             digest_key="digest", form=SlotForm.DIGEST,
             chart_tag="v1.12.1"),  # prometheus-node-exporter 4.56.1: `default (printf "v%s" .Chart.AppVersion)`
    # dcgm-exporter 4.8.2 deployment/templates/daemonset.yaml: `image: "{{ repository }}:{{ tag }}"`.
    ImagePin("nvcr.io/nvidia/k8s/dcgm-exporter", "4.5.3-4.8.2-distroless", "dcgm-exporter 4.8.2 values.yaml",
             chart="dcgm-exporter", values_path=("image",)),
    # nvidia-device-plugin 0.20.0 templates/_helpers.tpl "nvidia-device-plugin.fullimage":
    # `{{ repository }}:{{ tag | default (printf "v%s" .Chart.AppVersion) }}`.
    ImagePin("nvcr.io/nvidia/k8s-device-plugin", "", "nvidia-device-plugin 0.20.0 values.yaml (the chart's "
             "appVersion)", chart="nvidia-device-plugin", values_path=("image",), chart_tag="v0.20.0"),
)
# The stack's MLflow server (experimentTracking mlflow, infra/kubernetes/mlflow_server.py): the official image at the
# version of the job's client, requirements.txt's mlflow-skinny, so server and client speak the same API; the -full
# variant (MLflow 3.9 and later) carries boto3 for the S3 artifact store.
MLFLOW = ImagePin("ghcr.io/mlflow/mlflow", "v3.17.2-full",
                  "mlflow/mlflow docker/README.md (VERSION-full) and docker/Dockerfile.full; requirements.txt "
                  "mlflow-skinny==3.17.2")
ALL_IMAGES = (DLC, *CHART_IMAGES, MLFLOW)


def chart_values(chart: str, pins: tuple[ImagePin, ...] = CHART_IMAGES) -> dict:
    """The values that pin `chart`'s images by digest: nothing for an image whose digest is not filled in (the chart's
    own tag stays), the digest value or a `tag@digest` for one that is."""
    values: dict = {}
    for pin in pins:
        if pin.chart != chart or not pin.digest:
            continue
        node = values
        for key in pin.values_path:
            node = node.setdefault(key, {})
        if pin.digest_key:
            node[pin.digest_key] = pin.slot_value()
            if pin.tag:
                node["tag"] = pin.tag
        else:
            assert pin.resolved_tag, f"{pin.repository}: a digest on the tag needs the tag"
            node["tag"] = f"{pin.resolved_tag}@{pin.digest}"
    return values


def merged(values: dict, extra: dict) -> dict:
    """`values` with `extra` merged in, key by key (neither is changed)."""
    result = dict(values)
    for key, value in extra.items():
        result[key] = merged(result[key], value) if isinstance(value, dict) and isinstance(result.get(key), dict) \
            else value
    return result


def unpinned() -> list[ImagePin]:
    return [pin for pin in ALL_IMAGES if not pin.digest]
