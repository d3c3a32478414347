"""Preflight on Kubernetes node and DaemonSet objects, as the kubernetes client returns them and as plain dicts."""
from __future__ import annotations

import pytest
from kubernetes import client

from infra.aws.node_labels import GPU_WORKER_NODE_SELECTOR
from infra.job import preflight
from tests.support.instance_facts import INSTANCE_FACTS

G6 = INSTANCE_FACTS["g6.12xlarge"]
P5 = INSTANCE_FACTS["p5.48xlarge"]


def driver_labels(driver: str = "580.95.05", cuda: str = "13.0") -> dict:
    """What gpu-feature-discovery labels a GPU node with: its driver and the newest CUDA that driver runs."""
    return {preflight.DRIVER_VERSION_LABEL: driver, preflight.DRIVER_CUDA_LABEL: cuda}


def node(name: str, *, gpus: str | None = "4", efa: str | None = "1", ready: bool = True,
         labels: dict | None = None, unschedulable: bool = False) -> client.V1Node:
    allocatable = {"cpu": "47810m", "memory": "191000Mi", "pods": "234"}
    if gpus is not None:
        allocatable[preflight.GPU_RESOURCE] = gpus
    if efa is not None:
        allocatable[preflight.EFA_RESOURCE] = efa
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=dict(GPU_WORKER_NODE_SELECTOR) if labels is None else labels),
        spec=client.V1NodeSpec(unschedulable=unschedulable),
        status=client.V1NodeStatus(
            allocatable=allocatable,
            conditions=[client.V1NodeCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def daemonset(name: str, desired: int, release: str | None = None) -> dict:
    labels = {"app.kubernetes.io/instance": release} if release else {}
    return {"metadata": {"name": name, "namespace": "kube-system", "labels": labels},
            "status": {"desiredNumberScheduled": desired, "numberReady": desired}}


HEALTHY_PLUGINS = [
    daemonset("nvidia-device-plugin", 2, "nvidia-device-plugin"),
    daemonset("nvidia-device-plugin-mps-control-daemon", 0, "nvidia-device-plugin"),
    daemonset("aws-efa-k8s-device-plugin", 2, "aws-efa-k8s-device-plugin"),
    daemonset("aws-node", 3),
]


def test_worker_request_comes_from_the_instance_type():
    assert preflight.WorkerRequest.for_instance(G6, 2) == preflight.WorkerRequest(4, 1, 2), \
        "g6.12xlarge worker: 4 GPUs, 1 EFA interface"
    assert preflight.WorkerRequest.for_instance(P5, 2) == preflight.WorkerRequest(8, 32, 2), \
        "p5.48xlarge worker: 8 GPUs, 32 EFA interfaces"


def test_two_healthy_g6_nodes_pass():
    request = preflight.WorkerRequest.for_instance(G6, 2)
    assert preflight.check_gpu_nodes([node("gpu-a"), node("gpu-b")], request) == []
    assert preflight.check_device_plugins(HEALTHY_PLUGINS) == []


def test_missing_efa_allocatable_names_node_and_plugin():
    request = preflight.WorkerRequest.for_instance(G6, 2)
    problems = preflight.check_gpu_nodes([node("gpu-a"), node("gpu-b", efa=None)], request)
    assert len(problems) == 1, f"only gpu-b lacks EFA: {problems}"
    assert "gpu-b" in problems[0] and "vpc.amazonaws.com/efa" in problems[0] \
        and "aws-efa-k8s-device-plugin" in problems[0], problems[0]


def test_gpu_allocatable_below_the_request_fails():
    request = preflight.WorkerRequest.for_instance(G6, 2)
    problems = preflight.check_gpu_nodes([node("gpu-a", gpus="2"), node("gpu-b")], request)
    assert any("gpu-a has 2 nvidia.com/gpu allocatable" in p and "requests 4" in p for p in problems), problems


def test_efa_below_the_request_on_p5():
    request = preflight.WorkerRequest.for_instance(P5, 1)
    problems = preflight.check_gpu_nodes([node("p5-a", gpus="8", efa="16")], request)
    assert any("16 vpc.amazonaws.com/efa" in p and "requests 32" in p for p in problems), problems


def test_too_few_gpu_nodes_and_unlabelled_nodes_do_not_count():
    request = preflight.WorkerRequest.for_instance(G6, 2)
    system = node("system-a", gpus=None, efa=None, labels={"role": "system"})
    problems = preflight.check_gpu_nodes([node("gpu-a"), system], request)
    assert any("found 1 GPU node(s) labelled role=gpu-worker" in p and "2 worker pod(s)" in p for p in problems), \
        problems


def test_not_ready_or_cordoned_node_fails_unless_a_spare_is_healthy():
    request = preflight.WorkerRequest.for_instance(G6, 2)
    problems = preflight.check_gpu_nodes([node("gpu-a", ready=False), node("gpu-b", unschedulable=True)], request)
    assert any("gpu-a is not Ready" in p for p in problems) and any("gpu-b is cordoned" in p for p in problems), \
        problems
    spare = preflight.check_gpu_nodes([node("gpu-a", ready=False), node("gpu-b"), node("gpu-c")], request)
    assert spare == [], f"two healthy nodes can take both worker pods: {spare}"


def test_plain_dict_nodes_are_read_like_client_objects():
    request = preflight.WorkerRequest.for_instance(G6, 1)
    as_dict = client.ApiClient().sanitize_for_serialization(node("gpu-a", gpus=None))
    problems = preflight.check_gpu_nodes([as_dict], request)
    assert problems and "no nvidia.com/gpu allocatable" in problems[0], problems


def test_device_plugin_with_zero_desired_pods_fails():
    broken = [daemonset("nvidia-device-plugin", 2, "nvidia-device-plugin"),
              daemonset("aws-efa-k8s-device-plugin", 0, "aws-efa-k8s-device-plugin")]
    problems = preflight.check_device_plugins(broken)
    assert len(problems) == 1 and "kube-system/aws-efa-k8s-device-plugin has 0 desired pods" in problems[0], problems


def test_missing_device_plugin_daemonset_fails_and_companions_are_ignored():
    only_nvidia = [
        client.V1DaemonSet(
            metadata=client.V1ObjectMeta(name="nvidia-device-plugin",
                                         labels={"app.kubernetes.io/instance": "nvidia-device-plugin"}),
            spec=client.V1DaemonSetSpec(selector=client.V1LabelSelector(), template=client.V1PodTemplateSpec()),
            status=client.V1DaemonSetStatus(desired_number_scheduled=2, current_number_scheduled=2,
                                            number_misscheduled=0, number_ready=2),
        ),
        daemonset("nvidia-device-plugin-mps-control-daemon", 0, "nvidia-device-plugin"),
    ]
    problems = preflight.check_device_plugins(only_nvidia)
    assert len(problems) == 1 and "no DaemonSet of the aws-efa-k8s-device-plugin release" in problems[0], problems


def test_run_preflight_raises_with_every_problem(monkeypatch):
    monkeypatch.setattr(preflight, "read_cluster", lambda api: ([node("gpu-a", efa=None)],
                                                                 [daemonset("nvidia-device-plugin", 0)]))
    with pytest.raises(preflight.PreflightError) as raised:
        preflight.run_preflight(object(), preflight.WorkerRequest.for_instance(G6, 1))
    message = str(raised.value)
    for expected in ("nvidia-device-plugin has 0 desired pods", "no DaemonSet of the aws-efa-k8s-device-plugin",
                     "gpu-a has no vpc.amazonaws.com/efa"):
        assert expected in message, f"preflight error should say {expected!r}: {message}"
