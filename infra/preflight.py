"""Before a job is submitted: can every Ray worker pod be scheduled on a GPU node with its GPUs and EFA interfaces?

A device plugin that never started leaves `nvidia.com/gpu` or `vpc.amazonaws.com/efa` off a node's allocatable,
and the worker pod then stays Pending until some timeout, with no word of why. These checks say it at once.
The checks are pure functions of Kubernetes objects (client model objects or plain API dicts); `read_cluster`
and `run_preflight` are the part that talks to the API server.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable, Mapping

from infra.addons import GPU_WORKER_NODE_SELECTOR
from infra.config import InstanceFacts

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
DEVICE_PLUGIN_NAMESPACE = "kube-system"
# The Helm release names infra/addons.py installs the device plugins under; each chart names its DaemonSet after
# the release.
DEVICE_PLUGIN_RELEASES = {
    "nvidia-device-plugin": GPU_RESOURCE,
    "aws-efa-k8s-device-plugin": EFA_RESOURCE,
}
# The NVIDIA chart also ships DaemonSets that select no node unless their feature is on (MPS, feature
# discovery); 0 desired pods is right for them.
_OPTIONAL_COMPANIONS = ("mps-control-daemon", "gpu-feature-discovery", "node-feature-discovery")


class PreflightError(RuntimeError):
    """The cluster cannot run the job's worker pods; the message lists every reason found."""


@dataclass(frozen=True)
class WorkerRequest:
    """What each Ray worker pod asks of its node, and how many such pods there are."""

    gpus: int
    efa_interfaces: int
    workers: int

    @classmethod
    def for_instance(cls, facts: InstanceFacts, workers: int) -> "WorkerRequest":
        # The same figures the RayCluster's worker resources are built from (infra/raycluster.py).
        from infra.raycluster import worker_resources

        resources = worker_resources(facts)
        return cls(gpus=int(resources[GPU_RESOURCE]), efa_interfaces=int(resources[EFA_RESOURCE]), workers=workers)


def _plain(obj: Any) -> dict:
    """A Kubernetes object as the API server's JSON (camelCase keys), from a client model or a dict."""
    if isinstance(obj, Mapping):
        return dict(obj)
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


def _quantity(value: Any) -> Decimal:
    from kubernetes.utils import parse_quantity

    return parse_quantity(value)


def _ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def check_gpu_nodes(nodes: Iterable[Any], request: WorkerRequest) -> list[str]:
    """Why fewer than `request.workers` GPU nodes (labelled like GPU_WORKER_NODE_SELECTOR) can take a worker
    pod; [] when enough can."""
    problems = []
    selector = ", ".join(f"{k}={v}" for k, v in GPU_WORKER_NODE_SELECTOR.items())
    usable = 0
    gpu_nodes = [
        node for node in map(_plain, nodes)
        if all(((node.get("metadata") or {}).get("labels") or {}).get(k) == v
               for k, v in GPU_WORKER_NODE_SELECTOR.items())
    ]
    for node in gpu_nodes:
        name = (node.get("metadata") or {}).get("name", "?")
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        node_problems = []
        if not _ready(node):
            node_problems.append(f"node {name} is not Ready")
        if (node.get("spec") or {}).get("unschedulable"):
            node_problems.append(f"node {name} is cordoned (unschedulable)")
        for release, resource in DEVICE_PLUGIN_RELEASES.items():
            wanted = request.gpus if resource == GPU_RESOURCE else request.efa_interfaces
            if resource not in allocatable:
                node_problems.append(
                    f"node {name} has no {resource} allocatable (is the {release} DaemonSet running on it?); "
                    f"each Ray worker requests {wanted}"
                )
            elif _quantity(allocatable[resource]) < wanted:
                node_problems.append(
                    f"node {name} has {allocatable[resource]} {resource} allocatable; each Ray worker requests {wanted}"
                )
        problems.extend(node_problems)
        usable += not node_problems
    if usable >= request.workers:
        # A spare broken node does not stop the job: the scheduler places the worker pods on the good ones.
        return []
    if len(gpu_nodes) < request.workers:
        problems.append(
            f"found {len(gpu_nodes)} GPU node(s) labelled {selector}; the RayCluster runs {request.workers} "
            f"worker pod(s), one per GPU node"
        )
    return problems


def check_device_plugins(daemonsets: Iterable[Any]) -> list[str]:
    """Problems with the device-plugin DaemonSets: missing, or 0 desired pods (their node selector or
    tolerations match no GPU node, so no node will ever advertise the resource)."""
    problems = []
    found: dict[str, list[dict]] = {release: [] for release in DEVICE_PLUGIN_RELEASES}
    for daemonset in map(_plain, daemonsets):
        metadata = daemonset.get("metadata") or {}
        name = metadata.get("name", "")
        if any(companion in name for companion in _OPTIONAL_COMPANIONS):
            continue
        instance = (metadata.get("labels") or {}).get("app.kubernetes.io/instance")
        for release in DEVICE_PLUGIN_RELEASES:
            if instance == release or name.startswith(release):
                found[release].append(daemonset)
    for release, resource in DEVICE_PLUGIN_RELEASES.items():
        if not found[release]:
            problems.append(f"no DaemonSet of the {release} release in {DEVICE_PLUGIN_NAMESPACE}: nothing will "
                            f"advertise {resource} on the GPU nodes")
        for daemonset in found[release]:
            desired = (daemonset.get("status") or {}).get("desiredNumberScheduled") or 0
            if desired == 0:
                name = daemonset["metadata"]["name"]
                problems.append(
                    f"DaemonSet {DEVICE_PLUGIN_NAMESPACE}/{name} has 0 desired pods: its node selector or "
                    f"tolerations match no GPU node, so no node advertises {resource}"
                )
    return problems


def read_cluster(api_client: Any) -> tuple[list[Any], list[Any]]:
    """(GPU nodes, DaemonSets of the device-plugin namespace) as client model objects."""
    from kubernetes import client

    selector = ",".join(f"{k}={v}" for k, v in GPU_WORKER_NODE_SELECTOR.items())
    nodes = client.CoreV1Api(api_client).list_node(label_selector=selector).items
    daemonsets = client.AppsV1Api(api_client).list_namespaced_daemon_set(DEVICE_PLUGIN_NAMESPACE).items
    return nodes, daemonsets


def run_preflight(api_client: Any, request: WorkerRequest) -> None:
    """Raise PreflightError naming every reason the worker pods could not be scheduled."""
    nodes, daemonsets = read_cluster(api_client)
    problems = check_device_plugins(daemonsets) + check_gpu_nodes(nodes, request)
    if problems:
        raise PreflightError("preflight: the Ray worker pods cannot get their GPUs and EFA interfaces:\n  - "
                             + "\n  - ".join(problems))
