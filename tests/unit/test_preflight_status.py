"""The status command's view of the cluster, built from Kubernetes objects as the API returns them."""
from __future__ import annotations

from kubernetes import client

from infra.aws.node_labels import GPU_WORKER_NODE_SELECTOR, SYSTEM_NODE_SELECTOR
from tools import stack, status


def node(name: str, labels: dict, allocatable: dict, ready: bool = True) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={
            **labels, status.INSTANCE_TYPE_LABEL: "g6.12xlarge" if "gpu" in name else "m7i.xlarge",
            status.ZONE_LABEL: "us-west-2b"}),
        status=client.V1NodeStatus(allocatable=allocatable, conditions=[
            client.V1NodeCondition(type="Ready", status="True" if ready else "False")]),
    )


def pod(name: str, role: str, node_name: str | None, phase: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"ray.io/cluster": "ray-train", "ray.io/node-type": role}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="ray")], node_name=node_name),
        status=client.V1PodStatus(phase=phase),
    )


NODES = [
    node("system-1", SYSTEM_NODE_SELECTOR, {"cpu": "4"}),
    node("gpu-1", GPU_WORKER_NODE_SELECTOR, {"nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"}),
    node("gpu-2", GPU_WORKER_NODE_SELECTOR, {"nvidia.com/gpu": "4"}, ready=False),
]
PODS = [
    pod("ray-train-head-x", "head", "system-1", "Running"),
    pod("ray-train-gpu-workers-worker-a", "worker", "gpu-1", "Running"),
    pod("ray-train-gpu-workers-worker-b", "worker", None, "Pending"),
]
RAYCLUSTER = {
    "metadata": {"name": "ray-train", "namespace": "ray"},
    "status": {"state": "ready", "readyWorkerReplicas": 1, "desiredWorkerReplicas": 2,
               "conditions": [{"type": "RayClusterProvisioned", "status": "False"}]},
}


def test_collect_status_joins_pods_to_their_nodes_instance_type():
    result = status.collect_status(RAYCLUSTER, PODS, NODES)
    assert result["raycluster"]["state"] == "ready" and result["raycluster"]["ready_workers"] == 1, result
    by_name = {p["name"]: p for p in result["pods"]}
    assert by_name["ray-train-head-x"]["instance_type"] == "m7i.xlarge", "head runs on the m7i.xlarge system node"
    assert by_name["ray-train-gpu-workers-worker-a"]["node"] == "gpu-1" \
        and by_name["ray-train-gpu-workers-worker-a"]["instance_type"] == "g6.12xlarge", by_name
    assert by_name["ray-train-gpu-workers-worker-b"]["node"] == "(unscheduled)", "a Pending pod has no node"


def test_gpu_nodes_show_gpu_and_efa_allocatable_and_missing_efa_as_zero():
    result = status.collect_status(RAYCLUSTER, PODS, NODES)
    gpu_nodes = {n["name"]: n for n in result["gpu_nodes"]}
    assert set(gpu_nodes) == {"gpu-1", "gpu-2"}, "only nodes labelled role=gpu-worker are GPU nodes"
    assert (gpu_nodes["gpu-1"]["gpu"], gpu_nodes["gpu-1"]["efa"]) == ("4", "1"), gpu_nodes["gpu-1"]
    assert gpu_nodes["gpu-2"]["efa"] == "0" and gpu_nodes["gpu-2"]["ready"] is False, gpu_nodes["gpu-2"]


def test_render_status_prints_every_section():
    text = status.render_status(status.collect_status(RAYCLUSTER, PODS, NODES))
    assert "RayCluster ray/ray-train: ready (1/2 workers ready; conditions: RayClusterProvisioned=False)" in text
    worker_line = next(line for line in text.splitlines() if line.startswith("ray-train-gpu-workers-worker-a"))
    assert "gpu-1" in worker_line and "g6.12xlarge" in worker_line, worker_line
    gpu_line = next(line for line in text.splitlines() if line.startswith("gpu-2 "))
    assert gpu_line.split()[-3:] == ["no", "4", "0"], f"gpu-2: not ready, 4 GPUs, 0 EFA: {gpu_line}"
    assert "RayCluster: not found" in status.render_status(status.collect_status(None, [], []))


def test_stack_settings_default_to_pulumi_yaml():
    assert stack.stack_settings(None) == ("ray", "ray-train"), "Pulumi.yaml defaults: namespace ray, ray-train"
