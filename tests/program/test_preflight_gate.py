"""GpuNodesReady: the preflight checks as a gate between the device plugins and the RayCluster.

The poll loop runs on a fake clock (no real sleeping); the resource runs in the whole program under mocks; a bad
RayCluster setting is refused before any resource is registered.
"""
from __future__ import annotations

import pytest

from infra.aws.node_labels import GPU_WORKER_NODE_SELECTOR
from infra.job import preflight
from infra.kubernetes.raycluster import KNOWN_IMAGES
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import is_secret_value, program, stack_settings
from tests.unit.test_preflight import HEALTHY_PLUGINS, daemonset, driver_labels, node

G6 = INSTANCE_FACTS["g6.12xlarge"]
REQUEST = preflight.WorkerRequest.for_instance(G6, 2)
GATE = "pulumi-python:dynamic/raytrain:GpuNodesReady"
RELEASE = "kubernetes:helm.sh/v3:Release"


class FakeCluster:
    """Answers each poll with the next (nodes, daemonsets) state, the last one forever; time moves only by sleep."""

    def __init__(self, *states):
        self.states = list(states)
        self.reads = 0
        self.now = 0.0
        self.slept: list[float] = []
        self.progress: list[str] = []

    def read(self):
        state = self.states[min(self.reads, len(self.states) - 1)]
        self.reads += 1
        return state

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def wait(self, request=REQUEST, timeout_s: float = 60, poll_s: float = 10, image_cuda: str = "") -> None:
        preflight.wait_for_gpu_nodes(self.read, request, timeout_s=timeout_s, poll_s=poll_s,
                                     clock=lambda: self.now, sleep=self.sleep, on_progress=self.progress.append,
                                     image_cuda=image_cuda)


HEALTHY = ([node("gpu-a"), node("gpu-b")], HEALTHY_PLUGINS)
NO_EFA_YET = ([node("gpu-a", efa=None), node("gpu-b", efa=None)], HEALTHY_PLUGINS)


# ---- the poll loop ----------------------------------------------------------------------------------------------

def test_ready_after_three_polls_waits_two_intervals():
    cluster = FakeCluster(NO_EFA_YET, NO_EFA_YET, HEALTHY)
    cluster.wait()
    assert cluster.reads == 3, f"ready on the third poll: expected 3 reads, got {cluster.reads}"
    assert cluster.slept == [10, 10], f"one 10 s interval between polls, got {cluster.slept}"
    assert len(cluster.progress) == 1 and "gpu-a has no vpc.amazonaws.com/efa" in cluster.progress[0], \
        f"the unchanged problem is reported once: {cluster.progress}"


def test_ready_at_once_does_not_sleep():
    cluster = FakeCluster(HEALTHY)
    cluster.wait()
    assert (cluster.reads, cluster.slept) == (1, []), f"one read, no sleep; got {cluster.reads}, {cluster.slept}"


def test_timeout_names_the_missing_resource_and_plugin():
    cluster = FakeCluster(NO_EFA_YET)
    with pytest.raises(preflight.PreflightError) as raised:
        cluster.wait(timeout_s=60, poll_s=10)
    message = str(raised.value)
    for expected in ("gpu-b has no vpc.amazonaws.com/efa", preflight.EFA_DEVICE_PLUGIN_RELEASE, "after 60 s"):
        assert expected in message, f"the timeout error should say {expected!r}: {message}"
    assert cluster.now == 60 and cluster.reads == 7, \
        f"polls at 0, 10, ..., 60 s then gives up: now={cluster.now}, reads={cluster.reads}"


def test_daemonset_with_zero_desired_pods_fails_at_the_timeout():
    zero_efa = [daemonset("nvidia-device-plugin", 2, "nvidia-device-plugin"),
                daemonset("aws-efa-k8s-device-plugin", 0, "aws-efa-k8s-device-plugin")]
    cluster = FakeCluster(([node("gpu-a", efa=None), node("gpu-b", efa=None)], zero_efa))
    with pytest.raises(preflight.PreflightError, match="kube-system/aws-efa-k8s-device-plugin has 0 desired pods"):
        cluster.wait(timeout_s=25, poll_s=10)
    assert cluster.slept == [10, 10, 5], f"the last sleep is cut to the deadline: {cluster.slept}"


def test_missing_nvidia_daemonset_is_named():
    only_efa = [daemonset("aws-efa-k8s-device-plugin", 2, "aws-efa-k8s-device-plugin")]
    cluster = FakeCluster(([node("gpu-a", gpus=None), node("gpu-b", gpus=None)], only_efa))
    with pytest.raises(preflight.PreflightError, match="no DaemonSet of the nvidia-device-plugin release"):
        cluster.wait(timeout_s=10)


def test_device_plugin_releases_are_the_ones_addons_installs():
    from infra.kubernetes import addons

    assert set(preflight.DEVICE_PLUGIN_RELEASES) == {addons.NVIDIA_DEVICE_PLUGIN_RELEASE,
                                                     addons.EFA_DEVICE_PLUGIN_RELEASE}, \
        f"preflight looks for the releases infra/kubernetes/addons.py installs: {preflight.DEVICE_PLUGIN_RELEASES}"


# ---- the NVIDIA driver against the image's CUDA ---------------------------------------------------------------------

def labelled(name: str, driver: str, cuda: str):
    return node(name, labels={**GPU_WORKER_NODE_SELECTOR, **driver_labels(driver, cuda)})


def test_a_driver_too_old_for_the_image_fails_at_once_naming_both_versions():
    old_driver = ([labelled("gpu-a", "570.172.08", "12.8"), labelled("gpu-b", "580.95.05", "13.0")], HEALTHY_PLUGINS)
    cluster = FakeCluster(old_driver)
    with pytest.raises(preflight.PreflightError) as excinfo:
        cluster.wait(image_cuda="13.0")
    message = str(excinfo.value)
    for words in ("gpu-a", "570.172.08", "CUDA up to 12.8", "needs CUDA 13.0", "imageCudaVersion"):
        assert words in message, f"the refusal must name {words!r}: {message}"
    assert "gpu-b" not in message, f"a node whose driver supports CUDA 13.0 is not at fault: {message}"
    assert cluster.slept == [], f"no wait fixes an old driver: it must fail on the first poll, slept {cluster.slept}"


def test_nodes_wait_for_their_driver_labels_then_pass():
    unlabelled = ([node("gpu-a"), node("gpu-b")], HEALTHY_PLUGINS)
    ready = ([labelled("gpu-a", "580.95.05", "13.0"), labelled("gpu-b", "590.10.01", "13.1")], HEALTHY_PLUGINS)
    cluster = FakeCluster(unlabelled, ready)
    cluster.wait(image_cuda="13.0")
    assert cluster.reads == 2, f"ready once gpu-feature-discovery labelled both nodes: {cluster.reads} reads"
    assert preflight.DRIVER_CUDA_LABEL in cluster.progress[0], \
        f"the wait says which label is missing: {cluster.progress}"


def test_without_an_image_cuda_the_driver_is_not_checked():
    cluster = FakeCluster(HEALTHY)
    cluster.wait()
    assert cluster.reads == 1, "no image CUDA given (a TrainingJob's preflight): the labels are not waited for"


# ---- the provider -----------------------------------------------------------------------------------------------

def test_create_reads_the_cluster_and_keeps_the_kubeconfig_out_of_its_outputs(monkeypatch):
    clients = []
    monkeypatch.setattr(preflight, "kubernetes_client", lambda kubeconfig: clients.append(kubeconfig) or "api")
    monkeypatch.setattr(preflight, "read_cluster", lambda api: (
        [labelled("gpu-a", "580.95.05", "13.0"), labelled("gpu-b", "580.95.05", "13.0")], HEALTHY_PLUGINS))
    props = {"kubeconfig": "apiVersion: v1\nkind: Config\n", "gpus_per_worker": 4, "efa_per_worker": 1, "workers": 2,
             "gpu_node_group": "arn:ng-1", "image_cuda_version": "13.0"}
    result = preflight.GpuNodesReadyProvider().create(props)
    assert clients == [props["kubeconfig"]], "create builds its client from the kubeconfig input"
    assert result.outs == {"gpus_per_worker": 4, "efa_per_worker": 1, "workers": 2, "gpu_node_group": "arn:ng-1",
                           "image_cuda_version": "13.0"}, \
        f"outputs are the request only, never the kubeconfig: {result.outs}"


def test_diff_replaces_on_a_new_request_or_new_gpu_nodes_only():
    provider = preflight.GpuNodesReadyProvider()
    olds = {"gpus_per_worker": 4, "efa_per_worker": 1, "workers": 2}
    same = provider.diff("id", olds, {**olds, "kubeconfig": "another"})
    assert not same.changes and not same.replaces, "a new kubeconfig alone does not check again"
    more = provider.diff("id", olds, {**olds, "workers": 3, "kubeconfig": "k"})
    assert more.changes and more.replaces == ["workers"], f"a new worker count replaces: {more.replaces}"
    new_nodes = provider.diff("id", {**olds, "gpu_node_group": "arn:ng-1"}, {**olds, "gpu_node_group": "arn:ng-2"})
    assert new_nodes.replaces == ["gpu_node_group"], "a replaced GPU node group brings new nodes to check"


# ---- in the program, under mocks --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dev():
    return program("dev")


def test_gate_waits_for_both_device_plugins_with_the_instance_request(dev):
    gate = dev.one(GATE)
    releases = {r.inputs["name"]: r for r in dev.of_type(RELEASE)}
    for release in (preflight.NVIDIA_DEVICE_PLUGIN_RELEASE, preflight.EFA_DEVICE_PLUGIN_RELEASE):
        assert releases[release].urn in gate.dependencies, f"GpuNodesReady must depend on the {release} release"
    # Pulumi.dev.yaml: 2 x g6.12xlarge, 4 GPUs and 1 EFA interface each.
    assert (gate.inputs["gpus_per_worker"], gate.inputs["efa_per_worker"], gate.inputs["workers"]) == \
        (G6.gpus, G6.efa_interfaces, 2), f"GpuNodesReady request from the instance facts: {gate.inputs}"
    assert gate.inputs["image_cuda_version"] == KNOWN_IMAGES[stack_settings("dev")["dlcImage"]].cuda_version, \
        f"the gate checks the drivers against the image's CUDA: {gate.inputs}"
    assert is_secret_value(gate.inputs["kubeconfig"]), "GpuNodesReady's kubeconfig must be a Pulumi secret"


def test_raycluster_waits_for_the_gate(dev):
    gate = dev.one(GATE)
    ray_cluster = dev.one("kubernetes:ray.io/v1:RayCluster")
    assert gate.urn in ray_cluster.dependencies, "the RayCluster must be created after GpuNodesReady"

