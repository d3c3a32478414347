"""Before the job's one-time readiness check: wait, bounded, for the GPU nodes to be there.

On a stack the idle stop has stopped, the `up` that runs a new job wakes the node group first (GpuNodesAwake, whose
triggers include the job's definition), and EKS reports the group ACTIVE long before its instances have booted,
registered with Kubernetes and had their device plugins advertise `nvidia.com/gpu` and `vpc.amazonaws.com/efa`
(a few minutes on a p5: launch, the AMI's boot, the kubelet's registration, then the two DaemonSets' pods). A
readiness check run at once would fail against 0 nodes. So the job's create first waits until gpuNodeCount nodes of
the GPU node group are Ready and advertise both resources (more than 0 of each: the readiness check after it judges
whether the amounts suffice), printing a line whenever what it sees changes, and fails after
NODES_JOIN_TIMEOUT_SECONDS naming what it last saw.

Each poll also reads the node group from EKS (when the job knows it): a group EKS reports DEGRADED or failed, with
health issues (AsgInstanceLaunchFailures, InsufficientFreeAddresses, ...), fails at once in EKS's words
(infra/aws/nodegroup_health.py); one at fewer nodes than the job needs (the idle stop stopped it again, or someone
scaled it) fails at once with the wake command, instead of waiting out the timeout.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable

from infra.aws import nodegroup_health
from infra.job.preflight import WorkerRequest, _quantity, is_gpu_worker, is_ready, plain
from infra.kubernetes.devices import EFA_RESOURCE, GPU_RESOURCE

# Launch and boot of a GPU instance (5-10 minutes for a p5 with its EFA interfaces), registration, and the device
# plugins' image pulls and registration; the idle stop's minimum (infra.config.IDLE_STOP_MINIMUM_MINUTES) covers it.
NODES_JOIN_TIMEOUT_SECONDS = 25 * 60
NODES_JOIN_POLL_SECONDS = 15
# The label EKS puts on every node of a managed node group.
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


class NodesNotJoinedError(RuntimeError):
    """The GPU nodes did not join and advertise their devices in time, or EKS says they will not."""


def _advertises(allocatable: dict, resource: str) -> bool:
    return resource in allocatable and _quantity(allocatable[resource]) > 0


def node_states(nodes: Iterable[Any], request: WorkerRequest, nodegroup: str = "") -> tuple[int, int, int]:
    """(joined, Ready, Ready and advertising the resources the worker pods request) among the GPU group's nodes."""
    joined = ready = usable = 0
    for node in map(plain, nodes):
        labels = (node.get("metadata") or {}).get("labels") or {}
        if not is_gpu_worker(node) or (nodegroup and labels.get(NODEGROUP_LABEL, nodegroup) != nodegroup):
            continue
        joined += 1
        if not is_ready(node):
            continue
        ready += 1
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        wanted = [GPU_RESOURCE] * bool(request.gpus) + [EFA_RESOURCE] * bool(request.efa_interfaces)
        usable += all(_advertises(allocatable, resource) for resource in wanted)
    return joined, ready, usable


def wait_for_joined_nodes(
    read_nodes: Callable[[], Iterable[Any]],
    request: WorkerRequest,
    *,
    read_nodegroup: Callable[[], dict] | None = None,
    nodegroup: str = "",
    wake_hint: str = "",
    timeout_s: float = NODES_JOIN_TIMEOUT_SECONDS,
    poll_s: float = NODES_JOIN_POLL_SECONDS,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    on_progress: Callable[[str], None] = lambda _: None,
) -> None:
    """Return once `request.workers` GPU nodes are Ready and advertise GPUs and EFA interfaces; raise
    NodesNotJoinedError (or NodegroupUnhealthyError, in EKS's words) when they will not be, or after `timeout_s`."""
    # Looked up at each call, not bound at import: the tests' fake EKS brings its own clock (tests/support/fake_eks.py).
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    start = clock()
    deadline = start + timeout_s
    wanted = " and ".join([GPU_RESOURCE] * bool(request.gpus) + [EFA_RESOURCE] * bool(request.efa_interfaces))
    reported = ""
    while True:
        if read_nodegroup is not None:
            group = read_nodegroup()
            if nodegroup_health.failure(group):
                raise nodegroup_health.unhealthy_error(group, "the job's GPU nodes will not join")
            desired = int((group.get("scalingConfig") or {}).get("desiredSize") or 0)
            if group.get("status") == "ACTIVE" and desired < request.workers:
                raise NodesNotJoinedError(
                    f"{nodegroup_health.describe(group)}, but the job needs {request.workers} GPU node(s): the idle "
                    f"stop stopped it, or it was scaled by hand. Wake it ({wake_hint or 'the gpuWakeCommand output'})"
                    f" and run `pulumi up` again.")
        joined, ready, usable = node_states(read_nodes(), request, nodegroup)
        if usable >= request.workers:
            on_progress(f"{usable} GPU node(s) Ready with {wanted} after {clock() - start:.0f} s; the readiness "
                        "check runs now")
            return
        seen = (f"{joined} of {request.workers} GPU node(s) joined, {ready} Ready, {usable} advertising {wanted}")
        remaining = deadline - clock()
        if remaining <= 0:
            raise NodesNotJoinedError(
                f"the job's GPU nodes are not ready after {timeout_s:.0f} s: {seen}. `kubectl get nodes -l "
                f"{NODEGROUP_LABEL}={nodegroup or '<gpu node group>'}` and the device-plugin pods in kube-system say "
                "why; `aws eks describe-nodegroup` shows EKS's side. Nothing was submitted; `pulumi up` again "
                "retries.")
        if seen != reported:
            on_progress(f"waiting for the GPU nodes before the job: {seen} ({clock() - start:.0f} s of "
                        f"{timeout_s:.0f} s)")
            reported = seen
        sleep(min(poll_s, remaining))


def list_gpu_nodes(api_client: Any) -> list[Any]:
    """The nodes the Ray worker pods select, from the API server."""
    from kubernetes import client

    from infra.aws.node_labels import GPU_WORKER_NODE_SELECTOR

    selector = ",".join(f"{k}={v}" for k, v in GPU_WORKER_NODE_SELECTOR.items())
    return client.CoreV1Api(api_client).list_node(label_selector=selector).items


def eks_reader(props: dict[str, Any]) -> Callable[[], dict] | None:
    """DescribeNodegroup for the job's GPU node group with the deployer's credentials; None when the job's inputs do
    not name it (a job created before it did)."""
    if not props.get("gpu_nodegroup") or not props.get("eks_cluster"):
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.aws import identity as aws_identity

    identity = aws_identity.identity_from_props(props)
    describe = nodegroup_health.reader(aws_identity.session(identity, props.get("region") or None).client("eks"),
                                       props["eks_cluster"], props["gpu_nodegroup"])
    said: list[str] = []

    def read() -> dict:
        # EKS's word is a shortcut to a clear failure, not a condition of success: a describe that fails (a
        # throttle, credentials that expired during a long wait) leaves the wait to Kubernetes' nodes alone.
        try:
            return describe()
        except (BotoCoreError, ClientError) as e:
            if not said:
                said.append(str(e))
                print(f"cannot read the GPU node group from EKS ({type(e).__name__}: {e}); waiting on the Kubernetes "
                      "nodes alone", file=sys.stderr, flush=True)
            return {}

    return read
