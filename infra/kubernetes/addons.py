"""What runs in the cluster before any Ray pod: the NVIDIA and EFA device plugins and the KubeRay operator.

Three Helm releases on the provider made from the cluster's kubeconfig. The Helm values are pure functions, so
tests read exactly what the releases are given. `check_efa_allowlist` runs at preview, before any resource.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import yaml

from infra.aws.node_labels import GPU_PRESENT_LABEL, GPU_TOLERATION, SYSTEM_NODE_SELECTOR
from infra.config import config_error
from infra.kubernetes import admission, image_pins, ray_security
from workload.config.fields import shown_value

# 0.20.0 is the release whose values we checked (its default affinity already includes
# nvidia.com/gpu.present=true, which our GPU nodes carry); older charts predate that term.
NVIDIA_DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_DEVICE_PLUGIN_VERSION = "0.20.0"
# The chart names its DaemonSet after the release, which is how infra/job/preflight.py finds it.
NVIDIA_DEVICE_PLUGIN_RELEASE = "nvidia-device-plugin"

# The EFA chart schedules only onto the instance types in its own supportedInstanceLabels list, and a type
# missing there gives 0 desired pods with no error. The allowlist check reads the copy of this exact version's
# values committed next to this module, so bumping the pin without copying the new values fails loudly.
EFA_DEVICE_PLUGIN_CHART = "aws-efa-k8s-device-plugin"
EFA_DEVICE_PLUGIN_REPO = "https://aws.github.io/eks-charts"
EFA_DEVICE_PLUGIN_VERSION = "v0.5.30"  # eks-charts versions this chart with a leading "v"
EFA_DEVICE_PLUGIN_VALUES_FILE = (
    Path(__file__).parent / "charts" / f"{EFA_DEVICE_PLUGIN_CHART}-{EFA_DEVICE_PLUGIN_VERSION}-values.yaml"
)
EFA_DEVICE_PLUGIN_RELEASE = "aws-efa-k8s-device-plugin"  # also its DaemonSet's name (infra/job/preflight.py)
# Both device plugins run in kube-system, next to the other node agents (aws-node, kube-proxy).
DEVICE_PLUGIN_NAMESPACE = "kube-system"

# 1.7.0 serves the ray.io/v1 RayCluster with authOptions (token auth), which infra/kubernetes/raycluster.py relies on;
# the chart also installs the CRDs. Helm installs CRDs only on first install and never upgrades them, so bumping this
# pin on a live stack also needs the new CRDs applied by hand (KubeRay's upgrade guide).
KUBERAY_OPERATOR_CHART = "kuberay-operator"
KUBERAY_OPERATOR_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_OPERATOR_VERSION = "1.7.0"
KUBERAY_OPERATOR_NAMESPACE = "kuberay-system"
KUBERAY_OPERATOR_RELEASE = "kuberay-operator"

# The NVIDIA chart's own default toleration; it is kept because Helm replaces a list value instead of merging it.
_CRITICAL_ADDONS_TOLERATION = {"key": "CriticalAddonsOnly", "operator": "Exists"}


@functools.cache
def efa_supported_instance_types() -> tuple[str, ...]:
    """The instance types the pinned EFA chart schedules onto (its supportedInstanceLabels.values)."""
    values = yaml.safe_load(EFA_DEVICE_PLUGIN_VALUES_FILE.read_text())
    return tuple(values["supportedInstanceLabels"]["values"])


def check_efa_allowlist(instance_type: str) -> None:
    """Refuse a GPU type the pinned EFA chart would silently skip (its DaemonSet would get 0 desired pods)."""
    allowed = efa_supported_instance_types()
    if instance_type in allowed:
        return
    gpu_types = ", ".join(t for t in allowed if t[0] in "gp")
    raise config_error(
        "gpuInstanceType", f"{shown_value(instance_type)} is not on the allowlist of the {EFA_DEVICE_PLUGIN_CHART} "
        "chart "
        f"{EFA_DEVICE_PLUGIN_VERSION} (supportedInstanceLabels.values), so the EFA device plugin would run on no "
        f"GPU node and NCCL would fall back to TCP. Allowed GPU types: {gpu_types}."
    )


def nvidia_device_plugin_values() -> dict:
    """Only GPU nodes: a CPU node has no driver, and the plugin would crash-loop there.

    The chart's gpu-feature-discovery labels each GPU node with its driver's version and the newest CUDA that
    driver supports, which infra/job/preflight.py checks against the image's CUDA. It publishes them through the
    chart's node-feature-discovery, whose worker must then run on the tainted GPU nodes too.
    """
    return {
        "nodeSelector": {GPU_PRESENT_LABEL: "true"},
        "tolerations": [_CRITICAL_ADDONS_TOLERATION, GPU_TOLERATION],
        "gfd": {"enabled": True},
        "nfd": {"worker": {"tolerations": [GPU_TOLERATION]}},
    }


def efa_device_plugin_values() -> dict:
    """The chart's own allowlist already keeps it off non-EFA nodes; it only needs to tolerate the GPU taint."""
    return {"tolerations": [GPU_TOLERATION]}


def kuberay_operator_values() -> dict:
    """On the system nodes, so it keeps reconciling (and can run the RayCluster's finalizers) while GPU nodes churn."""
    return {"nodeSelector": dict(SYSTEM_NODE_SELECTOR)}


class ClusterAddons(pulumi.ComponentResource):
    """The device plugins and the KubeRay operator, each a Helm release that waits for the node groups."""

    def __init__(
        self,
        name: str,
        *,
        provider: k8s.Provider,
        gpu_instance_type: str,
        vpc_cidr: str,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        check_efa_allowlist(gpu_instance_type)
        super().__init__("raytrain:infra:ClusterAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on))

        def release(suffix: str, release_name: str, chart: str, version: str, repo: str, namespace: str,
                    values: dict, **extra) -> k8s.helm.v3.Release:
            return k8s.helm.v3.Release(
                f"{name}-{suffix}",
                k8s.helm.v3.ReleaseArgs(
                    name=release_name,
                    chart=chart,
                    version=version,
                    repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo),
                    namespace=namespace,
                    values=values,
                    **extra,
                ),
                opts=child,
            )

        self.nvidia_device_plugin = release(
            "nvidia-device-plugin", NVIDIA_DEVICE_PLUGIN_RELEASE, NVIDIA_DEVICE_PLUGIN_CHART,
            NVIDIA_DEVICE_PLUGIN_VERSION, NVIDIA_DEVICE_PLUGIN_REPO, DEVICE_PLUGIN_NAMESPACE,
            image_pins.merged(nvidia_device_plugin_values(), image_pins.chart_values(NVIDIA_DEVICE_PLUGIN_RELEASE)),
        )
        self.efa_device_plugin = release(
            "efa-device-plugin", EFA_DEVICE_PLUGIN_RELEASE, EFA_DEVICE_PLUGIN_CHART, EFA_DEVICE_PLUGIN_VERSION,
            EFA_DEVICE_PLUGIN_REPO, DEVICE_PLUGIN_NAMESPACE, efa_device_plugin_values(),
        )
        self.kuberay_operator = release(
            "kuberay-operator", KUBERAY_OPERATOR_RELEASE, KUBERAY_OPERATOR_CHART, KUBERAY_OPERATOR_VERSION,
            KUBERAY_OPERATOR_REPO, KUBERAY_OPERATOR_NAMESPACE, kuberay_operator_values(), create_namespace=True,
        )
        # The operator's namespace (Helm creates it): Pod Security labels and default-deny NetworkPolicies (infra/
        # admission.py, infra/kubernetes/ray_security.py). A patch, not a Namespace, so that live stacks, whose
        # namespace Helm made, take the labels without a conflict.
        after_operator = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[self.kuberay_operator])
        self.operator_namespace = k8s.core.v1.NamespacePatch(
            f"{name}-kuberay-namespace",
            metadata={"name": KUBERAY_OPERATOR_NAMESPACE, "labels": admission.operator_namespace_labels()},
            opts=after_operator)
        self.operator_network_policies = [
            k8s.networking.v1.NetworkPolicy(f"{name}-kuberay-{policy['metadata']['name']}",
                                            metadata=policy["metadata"], spec=policy["spec"], opts=after_operator)
            for policy in ray_security.operator_network_policies(namespace=KUBERAY_OPERATOR_NAMESPACE,
                                                                 vpc_cidr=vpc_cidr)]
        self.register_outputs({
            "nvidia_device_plugin": self.nvidia_device_plugin.status,
            "efa_device_plugin": self.efa_device_plugin.status,
            "kuberay_operator": self.kuberay_operator.status,
        })
