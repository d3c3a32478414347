"""The add-on Helm releases under Pulumi mocks, their values, and the EFA chart's allowlist check."""
from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from infra.aws import node_labels
from infra.kubernetes import addons
from infra.kubernetes.addons import ClusterAddons, check_efa_allowlist, efa_supported_instance_types
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import REFERENCE_DIR, EchoMocks, EchoMonitor, run_under_mocks

REPO = Path(__file__).resolve().parents[2]
RELEASE = "kubernetes:helm.sh/v3:Release"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def build_addons(gpu_instance_type: str = "g6.12xlarge") -> ClusterAddons:
    provider = k8s.Provider("k8s", kubeconfig=pulumi.Output.secret("apiVersion: v1\nkind: Config\n"))
    node_group = pulumi.CustomResource("test:index:NodeGroup", "gpu-nodes", {})
    return ClusterAddons("addons", provider=provider, gpu_instance_type=gpu_instance_type, vpc_cidr="10.0.0.0/16",
                         depends_on=[node_group])


EXPECTED_RELEASES = {
    # resource name: (release name, chart, version, repository, namespace)
    "addons-nvidia-device-plugin": (
        "nvidia-device-plugin", "nvidia-device-plugin", "0.20.0", "https://nvidia.github.io/k8s-device-plugin",
        "kube-system"),
    "addons-efa-device-plugin": (
        "aws-efa-k8s-device-plugin", "aws-efa-k8s-device-plugin", "v0.5.30", "https://aws.github.io/eks-charts",
        "kube-system"),
    "addons-kuberay-operator": (
        "kuberay-operator", "kuberay-operator", "1.7.0", "https://ray-project.github.io/kuberay-helm/",
        "kuberay-system"),
}


def test_releases_pin_their_charts_and_depend_on_the_node_groups():
    mocks, _ = run_under_mocks(build_addons)
    node_group_urn = mocks.named("gpu-nodes")["urn"]
    component = mocks.named("addons")
    assert component["type"] == "raytrain:infra:ClusterAddons", "the component's type token"
    releases = [r for r in mocks.registered if r["type"] == RELEASE]
    assert {r["name"] for r in releases} == set(EXPECTED_RELEASES), "exactly the three add-on releases"
    for release in releases:
        name, chart, version, repo, namespace = EXPECTED_RELEASES[release["name"]]
        inputs = release["inputs"]
        got = (inputs["name"], inputs["chart"], inputs["version"], inputs["repositoryOpts"]["repo"],
               inputs["namespace"])
        assert got == (name, chart, version, repo, namespace), (
            f"release {release['name']} must be {name}: chart {chart} {version} from {repo} in {namespace}, "
            f"got {got}"
        )
        assert node_group_urn in release["dependencies"], f"release {release['name']} must depend on the node group"
        assert "::raytrain:infra:ClusterAddons$" in release["urn"], f"{release['name']} must be the component's child"


def test_release_values_place_each_addon():
    mocks, _ = run_under_mocks(build_addons)
    nvidia = mocks.named("addons-nvidia-device-plugin")["inputs"]["values"]
    efa = mocks.named("addons-efa-device-plugin")["inputs"]["values"]
    operator = mocks.named("addons-kuberay-operator")["inputs"]["values"]
    assert nvidia["nodeSelector"] == {"nvidia.com/gpu.present": "true"}, "NVIDIA plugin must run only on GPU nodes"
    assert GPU_TOLERATION in nvidia["tolerations"], "NVIDIA plugin must tolerate the GPU taint"
    assert GPU_TOLERATION in efa["tolerations"], "EFA plugin must tolerate the GPU taint"
    # gpu-feature-discovery's driver labels are what the GPU gate checks the image's CUDA against; it publishes them
    # through node-feature-discovery's worker, which must run on the tainted GPU nodes.
    assert nvidia["gfd"] == {"enabled": True}, "gpu-feature-discovery must be on"
    assert GPU_TOLERATION in nvidia["nfd"]["worker"]["tolerations"], "the NFD worker must tolerate the GPU taint"
    assert operator["nodeSelector"] == {"role": "system"}, "KubeRay operator must run on the system nodes"


@pytest.mark.parametrize("stack_type", ["g6.12xlarge", "g6e.12xlarge", "p4d.24xlarge", "p5.48xlarge"])
def test_stack_gpu_types_are_on_the_efa_allowlist(stack_type):
    check_efa_allowlist(stack_type)
    assert stack_type in INSTANCE_FACTS, f"{stack_type} needs facts in tests/support/instance_facts.py"


@pytest.mark.parametrize("instance_type", ["g6.xlarge", "g5.2xlarge", "p3.16xlarge"])
def test_type_missing_from_the_efa_allowlist_is_refused_before_any_resource(instance_type):
    mocks = EchoMocks()
    pulumi.runtime.set_mocks(mocks, project="raytrain-eks", stack="dev", preview=True, monitor=EchoMonitor(mocks))
    provider = k8s.Provider("k8s-refused", kubeconfig="apiVersion: v1")
    with pytest.raises(ValueError, match="gpuInstanceType") as excinfo:
        ClusterAddons("addons", provider=provider, gpu_instance_type=instance_type, vpc_cidr="10.0.0.0/16",
                      depends_on=[])
    message = str(excinfo.value)
    assert instance_type in message and "v0.5.30" in message, f"the error must name {instance_type} and the chart"
    assert "g6.12xlarge" in message, "the error must list allowed GPU types"
    assert not any(r["type"] in (RELEASE, "raytrain:infra:ClusterAddons") for r in mocks.registered), (
        "no add-on resource may be registered for a refused instance type"
    )


def test_efa_allowlist_is_read_from_the_pinned_charts_values():
    assert addons.EFA_DEVICE_PLUGIN_VALUES_FILE.name == (
        f"aws-efa-k8s-device-plugin-{addons.EFA_DEVICE_PLUGIN_VERSION}-values.yaml"), "the values must match the pin"
    values = yaml.safe_load(addons.EFA_DEVICE_PLUGIN_VALUES_FILE.read_text())
    assert list(efa_supported_instance_types()) == values["supportedInstanceLabels"]["values"]


def test_nvidia_charts_default_affinity_accepts_the_gpu_nodes_label():
    """The release sets a nodeSelector but keeps the chart's affinity: both must accept the GPU nodes."""
    values_file = REFERENCE_DIR / "charts" / f"nvidia-device-plugin-{addons.NVIDIA_DEVICE_PLUGIN_VERSION}-values.yaml"
    values = yaml.safe_load(values_file.read_text())
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    accepting = [term for term in terms for expression in term["matchExpressions"]
                 if expression["key"] == node_labels.GPU_PRESENT_LABEL and expression["operator"] == "In"
                 and "true" in expression["values"]]
    assert accepting, (f"NVIDIA chart {addons.NVIDIA_DEVICE_PLUGIN_VERSION}'s default affinity must accept "
                       f"{node_labels.GPU_PRESENT_LABEL}=true (the GPU nodes' label); its terms: {terms}")
