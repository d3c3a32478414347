"""Before a job is submitted: can every Ray worker pod be scheduled on a GPU node with its GPUs and EFA interfaces?

A device plugin that never started leaves `nvidia.com/gpu` or `vpc.amazonaws.com/efa` off a node's allocatable,
and the worker pod then stays Pending until some timeout, with no word of why. These checks say it at once.
The checks are pure functions of Kubernetes objects (client model objects or plain API dicts); `read_cluster`
and `run_preflight` are the part that talks to the API server.

`GpuNodesReady` runs the same checks inside `pulumi up`, between the device-plugin releases and the RayCluster:
its create polls until every GPU node advertises what a worker pod requests, or fails after
GPU_NODES_READY_TIMEOUT_SECONDS with the reasons, instead of the RayCluster's 30-minute wait ending in a bare
timeout. It also checks each node's NVIDIA driver against the image's CUDA, and fails at once on a driver too old:
KubeRay sets the Ray container's command to `ulimit ...; ray start ...` (BuildPod in ray-operator/controllers/ray/
common/pod.go), which replaces the image's entrypoint, so the image's CUDA forward-compatibility shim never runs
and PyTorch would fail on the first CUDA call of every rank. Like the other dynamic providers it is unpickled by
reference (`infra.job.preflight`) in Pulumi's provider process, holds no client, and reports progress on stderr.
"""
from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

import pulumi
import pulumi.dynamic

from infra.aws.node_labels import GPU_WORKER_NODE_SELECTOR
from infra.config import InstanceFacts
from infra.kubernetes.addons import DEVICE_PLUGIN_NAMESPACE, EFA_DEVICE_PLUGIN_RELEASE, NVIDIA_DEVICE_PLUGIN_RELEASE
from infra.kubernetes.devices import EFA_RESOURCE, GPU_RESOURCE, worker_resources

# Each chart names its DaemonSet after the release (infra/kubernetes/addons.py), and this is the resource it advertises.
DEVICE_PLUGIN_RELEASES = {
    NVIDIA_DEVICE_PLUGIN_RELEASE: GPU_RESOURCE,
    EFA_DEVICE_PLUGIN_RELEASE: EFA_RESOURCE,
}
# GpuNodesReady runs once the node groups are up and both Helm releases are deployed; a healthy device plugin then
# starts and registers its resource within a minute or two. Ten minutes leaves room for a slow image pull and
# still fails well before the RayCluster's 30-minute wait would.
GPU_NODES_READY_TIMEOUT_SECONDS = 600
# Each poll is two list calls; every 10 s is negligible load on the API server.
GPU_NODES_POLL_SECONDS = 10
# The NVIDIA chart also ships DaemonSets that select no node unless their feature is on (MPS, feature
# discovery); 0 desired pods is right for them.
_OPTIONAL_COMPANIONS = ("mps-control-daemon", "gpu-feature-discovery", "node-feature-discovery")
# gpu-feature-discovery's labels (infra/kubernetes/addons.py turns it on): the driver's version and the newest CUDA it
# supports, which NVML reports as the "CUDA driver version" (NVIDIA/k8s-device-plugin internal/lm/nvml.go).
DRIVER_VERSION_LABEL = "nvidia.com/cuda.driver-version.full"
DRIVER_CUDA_LABEL = "nvidia.com/cuda.runtime-version.full"


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
        # The same figures the RayCluster's worker resources are built from.
        resources = worker_resources(facts)
        return cls(gpus=int(resources[GPU_RESOURCE]), efa_interfaces=int(resources[EFA_RESOURCE]), workers=workers)

    def as_props(self) -> dict[str, int]:
        """The request as dynamic-resource inputs (GpuNodesReady's, RayTrainJob's)."""
        return {"gpus_per_worker": self.gpus, "efa_per_worker": self.efa_interfaces, "workers": self.workers}

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> "WorkerRequest":
        return cls(int(props["gpus_per_worker"]), int(props["efa_per_worker"]), int(props["workers"]))


def plain(obj: Any) -> dict:
    """A Kubernetes object as the API server's JSON (camelCase keys), from a client model or a dict ({} for None)."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


def _quantity(value: Any) -> Decimal:
    from kubernetes.utils import parse_quantity

    return parse_quantity(value)


def is_ready(node: dict) -> bool:
    """A node (as plain data) whose Ready condition is True."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_gpu_worker(node: dict) -> bool:
    """A node (as plain data) labelled like GPU_WORKER_NODE_SELECTOR: one the Ray worker pods select."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in GPU_WORKER_NODE_SELECTOR.items())


def check_gpu_nodes(nodes: Iterable[Any], request: WorkerRequest) -> list[str]:
    """Why fewer than `request.workers` GPU nodes (labelled like GPU_WORKER_NODE_SELECTOR) can take a worker
    pod; [] when enough can."""
    problems = []
    selector = ", ".join(f"{k}={v}" for k, v in GPU_WORKER_NODE_SELECTOR.items())
    usable = 0
    gpu_nodes = [node for node in map(plain, nodes) if is_gpu_worker(node)]
    for node in gpu_nodes:
        name = (node.get("metadata") or {}).get("name", "?")
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        node_problems = []
        if not is_ready(node):
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


def _cuda(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


def unlabelled_drivers(nodes: Iterable[Any], image_cuda: str) -> list[str]:
    """GPU nodes that gpu-feature-discovery has not labelled yet (it labels within a minute of starting)."""
    if not image_cuda:
        return []
    return [f"node {(node.get('metadata') or {}).get('name', '?')} has no {DRIVER_CUDA_LABEL} label yet (is the "
            f"{NVIDIA_DEVICE_PLUGIN_RELEASE}-gpu-feature-discovery DaemonSet running on it?)"
            for node in map(plain, nodes) if is_gpu_worker(node)
            and DRIVER_CUDA_LABEL not in ((node.get("metadata") or {}).get("labels") or {})]


def driver_mismatches(nodes: Iterable[Any], image_cuda: str) -> list[str]:
    """GPU nodes whose NVIDIA driver is too old for the image's CUDA: no wait fixes that."""
    problems = []
    for node in map(plain, nodes):
        labels = (node.get("metadata") or {}).get("labels") or {}
        if not image_cuda or not is_gpu_worker(node) or DRIVER_CUDA_LABEL not in labels:
            continue
        if _cuda(labels[DRIVER_CUDA_LABEL]) < _cuda(image_cuda):
            problems.append(
                f"node {node['metadata'].get('name', '?')}: NVIDIA driver {labels.get(DRIVER_VERSION_LABEL, '?')} "
                f"supports CUDA up to {labels[DRIVER_CUDA_LABEL]}, but the image needs CUDA {image_cuda} "
                f"(imageCudaVersion); KubeRay skips the image's forward-compatibility entrypoint, so use a GPU AMI "
                f"release whose driver supports CUDA {image_cuda}, or an image built for CUDA "
                f"{labels[DRIVER_CUDA_LABEL]}")
    return problems


def check_device_plugins(daemonsets: Iterable[Any]) -> list[str]:
    """Problems with the device-plugin DaemonSets: missing, or 0 desired pods (their node selector or
    tolerations match no GPU node, so no node will ever advertise the resource)."""
    problems = []
    found: dict[str, list[dict]] = {release: [] for release in DEVICE_PLUGIN_RELEASES}
    for daemonset in map(plain, daemonsets):
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


def cluster_problems(nodes: Iterable[Any], daemonsets: Iterable[Any], request: WorkerRequest,
                     image_cuda: str = "") -> list[str]:
    """Every reason the worker pods could not get their GPUs and EFA interfaces (and, with `image_cuda`, why their
    drivers are not known yet); [] when they can."""
    nodes = list(nodes)
    return check_device_plugins(daemonsets) + check_gpu_nodes(nodes, request) + unlabelled_drivers(nodes, image_cuda)


def _preflight_error(problems: list[str], waited: str = "") -> PreflightError:
    return PreflightError(f"preflight: the Ray worker pods cannot get their GPUs and EFA interfaces{waited}:\n  - "
                          + "\n  - ".join(problems))


def run_preflight(api_client: Any, request: WorkerRequest) -> None:
    """Raise PreflightError naming every reason the worker pods could not be scheduled."""
    problems = cluster_problems(*read_cluster(api_client), request)
    if problems:
        raise _preflight_error(problems)


def wait_for_gpu_nodes(
    read: Callable[[], tuple[list[Any], list[Any]]],
    request: WorkerRequest,
    *,
    timeout_s: float = GPU_NODES_READY_TIMEOUT_SECONDS,
    poll_s: float = GPU_NODES_POLL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_progress: Callable[[str], None] = lambda _: None,
    image_cuda: str = "",
) -> None:
    """Poll `read()` (GPU nodes, device-plugin DaemonSets) until the worker pods could be scheduled; after
    `timeout_s`, raise PreflightError with the problems of the last poll. A node whose driver cannot run
    `image_cuda` fails at once."""
    deadline = clock() + timeout_s
    reported: list[str] = []
    while True:
        nodes, daemonsets = read()
        nodes = list(nodes)
        mismatches = driver_mismatches(nodes, image_cuda)
        if mismatches:
            raise PreflightError("preflight: the GPU nodes' NVIDIA driver cannot run the image:\n  - "
                                 + "\n  - ".join(mismatches))
        problems = cluster_problems(nodes, daemonsets, request, image_cuda)
        if not problems:
            return
        remaining = deadline - clock()
        if remaining <= 0:
            raise _preflight_error(problems, f" (still so after {timeout_s:.0f} s)")
        if problems != reported:  # once per change, not every poll
            on_progress("waiting for the GPU nodes' device plugins:\n  - " + "\n  - ".join(problems))
            reported = problems
        sleep(min(poll_s, remaining))


def kubernetes_client(kubeconfig: Any) -> Any:
    """An API client from a kubeconfig (YAML/JSON text or a parsed dict), read from memory, never written out."""
    import yaml
    from kubernetes import config

    parsed = kubeconfig if isinstance(kubeconfig, Mapping) else yaml.safe_load(kubeconfig)
    return config.new_client_from_config_dict(dict(parsed))


# ---- GpuNodesReady: the checks as a gate inside `pulumi up` ------------------------------------------------------

@dataclass(frozen=True)
class GpuNodesReadyInputs:
    """The cluster to poll, and what each of the `workers` worker pods requests."""

    kubeconfig: pulumi.Input[Any]
    gpus_per_worker: int
    efa_per_worker: int
    workers: int
    gpu_node_group: pulumi.Input[str] = ""
    """The GPU node group's ARN: a replaced node group (new AZ, new launch template) brings new nodes to check."""
    image_cuda_version: str = ""
    """CUDA major.minor of the image: every GPU node's driver must support it. Empty skips the check."""


# A changed request (instance type or node count), image CUDA or new GPU nodes check again; a new kubeconfig alone
# does not.
_CHECK_FIELDS = ("gpus_per_worker", "efa_per_worker", "workers", "gpu_node_group", "image_cuda_version")


def to_stderr(line: str) -> None:
    """Where a dynamic provider's progress goes: its process's stderr (pulumi.log cannot reach the engine there)."""
    print(line, file=sys.stderr, flush=True)


class GpuNodesReadyProvider(pulumi.dynamic.ResourceProvider):
    """create waits for the GPU nodes; diff replaces on a new request; delete has nothing to undo."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        api_client = kubernetes_client(props["kubeconfig"])
        wait_for_gpu_nodes(lambda: read_cluster(api_client), WorkerRequest.from_props(props), on_progress=to_stderr,
                           image_cuda=props.get("image_cuda_version") or "")
        # The kubeconfig stays out of the outputs: nothing after create needs the cluster.
        outs = {name: props.get(name) for name in _CHECK_FIELDS}
        return pulumi.dynamic.CreateResult(id_=f"gpu-nodes-ready-{uuid.uuid4().hex[:8]}", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = [name for name in _CHECK_FIELDS if olds.get(name) != news.get(name)]
        return pulumi.dynamic.DiffResult(changes=bool(replaces), replaces=replaces)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """The check changed nothing in the cluster."""


class GpuNodesReady(pulumi.dynamic.Resource, module="raytrain", name="GpuNodesReady"):
    """Created once every GPU node advertises the GPUs and EFA interfaces a Ray worker pod requests."""

    def __init__(
        self,
        name: str,
        *,
        kubeconfig: pulumi.Input[Any],
        request: WorkerRequest,
        gpu_node_group: pulumi.Input[str] = "",
        image_cuda_version: str = "",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        inputs = GpuNodesReadyInputs(
            kubeconfig=pulumi.Output.secret(kubeconfig),
            **request.as_props(),
            gpu_node_group=gpu_node_group,
            image_cuda_version=image_cuda_version,
        )
        super().__init__(GpuNodesReadyProvider(), name, dict(vars(inputs)), opts)
