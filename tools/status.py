"""Where the cluster stands: the RayCluster's state, each Ray pod with its node and instance type, the GPU and EFA
allocatable of every GPU node, the training job running on it (through the head's job server, as
`python -m tools.job` reaches it), and how to open the metrics (the stack's `monitoring`: Grafana's port-forward).

    pulumi stack output kubeconfig --show-secrets > kubeconfig.json   # once per cluster
    python -m tools.status --kubeconfig kubeconfig.json --stack dev [--json]

The RayCluster's name and namespace come from the stack file (--stack), else from Pulumi.yaml's defaults.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from infra.aws.node_labels import GPU_WORKER_NODE_SELECTOR
from infra.job.preflight import is_gpu_worker, is_ready, plain
from infra.job.ray_job import RUN_METADATA
from infra.kubernetes import monitoring
from infra.kubernetes.devices import EFA_RESOURCE, GPU_RESOURCE
from infra.kubernetes.portforward import CLUSTER_LABEL, NODE_TYPE_LABEL
from infra.kubernetes.raycluster import RAYCLUSTER_API_VERSION
from tools.kube import REQUEST_TIMEOUT_S, api_client, talking_to
from tools.stack import stack_key, stack_settings
from tools.stack_name import add_stack_flag
from workload import cli
from workload.run import credential_files

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"


def collect_status(raycluster: dict | None, pods: Iterable[Any], nodes: Iterable[Any]) -> dict:
    """The status as plain data, from the RayCluster object (None when absent), its pods and every node."""
    nodes_by_name = {}
    for node in map(plain, nodes):
        nodes_by_name[node["metadata"]["name"]] = node
    cluster = plain(raycluster)
    cluster_status = cluster.get("status") or {}
    result: dict[str, Any] = {
        "raycluster": None if not cluster else {
            "name": cluster["metadata"]["name"],
            "namespace": cluster["metadata"].get("namespace", ""),
            "state": cluster_status.get("state", "unknown"),
            "ready_workers": cluster_status.get("readyWorkerReplicas", 0),
            "desired_workers": cluster_status.get("desiredWorkerReplicas", 0),
            "conditions": {c["type"]: c["status"] for c in cluster_status.get("conditions") or []},
        },
        "pods": [],
        "gpu_nodes": [],
    }
    for pod in sorted(map(plain, pods), key=lambda p: p["metadata"]["name"]):
        labels = pod["metadata"].get("labels") or {}
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        node_labels = (nodes_by_name.get(node_name, {}).get("metadata") or {}).get("labels") or {}
        result["pods"].append({
            "name": pod["metadata"]["name"],
            "role": labels.get(NODE_TYPE_LABEL, "?"),
            "phase": (pod.get("status") or {}).get("phase", "?"),
            "node": node_name or "(unscheduled)",
            "instance_type": node_labels.get(INSTANCE_TYPE_LABEL, ""),
            "zone": node_labels.get(ZONE_LABEL, ""),
        })
    for name, node in sorted(nodes_by_name.items()):
        if not is_gpu_worker(node):
            continue
        labels = node["metadata"].get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        result["gpu_nodes"].append({
            "name": name,
            "instance_type": labels.get(INSTANCE_TYPE_LABEL, ""),
            "zone": labels.get(ZONE_LABEL, ""),
            "ready": is_ready(node),
            "gpu": allocatable.get(GPU_RESOURCE, "0"),
            "efa": allocatable.get(EFA_RESOURCE, "0"),
        })
    return result


def render_status(status: dict) -> str:
    lines = []
    cluster = status["raycluster"]
    if cluster is None:
        lines.append("RayCluster: not found")
    else:
        conditions = ", ".join(f"{k}={v}" for k, v in sorted(cluster["conditions"].items())) or "none"
        lines.append(f"RayCluster {cluster['namespace']}/{cluster['name']}: {cluster['state']} "
                     f"({cluster['ready_workers']}/{cluster['desired_workers']} workers ready; "
                     f"conditions: {conditions})")
    lines.append("")
    if status["pods"]:
        lines += cli.table([["POD", "ROLE", "PHASE", "NODE", "INSTANCE TYPE", "ZONE"]]
                        + [[p["name"], p["role"], p["phase"], p["node"], p["instance_type"], p["zone"]]
                           for p in status["pods"]])
    else:
        lines.append("No Ray pods.")
    lines.append("")
    if status["gpu_nodes"]:
        lines += cli.table([["GPU NODE", "INSTANCE TYPE", "ZONE", "READY", GPU_RESOURCE, EFA_RESOURCE]]
                        + [[n["name"], n["instance_type"], n["zone"], "yes" if n["ready"] else "no", n["gpu"], n["efa"]]
                           for n in status["gpu_nodes"]])
    else:
        labels = ", ".join(f"{k}={v}" for k, v in GPU_WORKER_NODE_SELECTOR.items())
        lines.append(f"No GPU nodes (label {labels}).")
    return "\n".join(lines)


def read_status(api_client: Any, namespace: str, cluster_name: str) -> dict:
    from kubernetes import client

    group, version = RAYCLUSTER_API_VERSION.split("/")
    timeout = {"_request_timeout": REQUEST_TIMEOUT_S}
    with talking_to(f"the RayCluster {namespace}/{cluster_name}"):
        try:
            raycluster = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                group, version, namespace, "rayclusters", cluster_name, **timeout)
        except client.ApiException as e:
            if e.status != 404:
                raise
            raycluster = None
        core = client.CoreV1Api(api_client)
        pods = core.list_namespaced_pod(namespace, label_selector=f"{CLUSTER_LABEL}={cluster_name}", **timeout).items
        nodes = core.list_node(**timeout).items
    return collect_status(raycluster, pods, nodes)


def is_up(status: dict) -> bool:
    """The RayCluster exists, is ready, and every desired worker is ready."""
    cluster = status["raycluster"]
    return bool(cluster) and cluster["state"] == "ready" and cluster["ready_workers"] == cluster["desired_workers"]


def dashboard_lines(stack: str | None, kubeconfig: Path | None, gpu_nodes: int) -> list[str]:
    """How to open the metrics, and why there may be no GPU nodes (issue 24)."""
    lines = []
    if stack_key(stack, "monitoring") == "prometheus":
        lines.append(f"Metrics (Grafana; the Ray dashboard's Metrics view embeds it): "
                     f"{monitoring.dashboard_command(str(kubeconfig or 'kubeconfig.json'))}")
    if not gpu_nodes and int(stack_key(stack, "gpuIdleStopMinutes")):
        lines.append(f"No GPU nodes: the idle stop scales them to 0 after {stack_key(stack, 'gpuIdleStopMinutes')} "
                     "minutes without a Ray job; `pulumi stack output gpuWakeCommand` brings them back "
                     "(so does the next `pulumi up` that changes what runs on them, such as a new trainRunId)")
    return lines


def idle_stop_line(pods: Iterable[Any]) -> str | None:
    """The idle stop's last check (issue 31), from the newest of its pods: what it decided, or that it failed and the
    GPU nodes are not being stopped, with the one line it wrote as its termination message. None without a check."""
    pods = sorted(map(plain, pods), key=lambda p: p["metadata"].get("creationTimestamp") or "")
    if not pods:
        return None
    pod = pods[-1]
    name = pod["metadata"]["name"]
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    finished = (statuses[0].get("state") or {}).get("terminated")
    if not finished:
        return f"Idle stop: a check is running (pod {name})"
    message = (finished.get("message") or finished.get("reason") or "").strip().splitlines()
    line = message[-1] if message else "no message"
    if finished.get("exitCode", 0) != 0:
        namespace = pod["metadata"].get("namespace", "")
        return (f"Idle stop: the last check FAILED at {finished.get('finishedAt', '?')}, so the GPU nodes are not being "
                f"stopped: {line} (kubectl -n {namespace} logs pod/{name})")
    return f"Idle stop: last check at {finished.get('finishedAt', '?')}: {line}"


def read_idle_stop(api_client: Any, namespace: str) -> str | None:
    from kubernetes import client

    from infra.kubernetes.idle_stop import IDLE_STOP_LABEL

    selector = ",".join(f"{key}={value}" for key, value in IDLE_STOP_LABEL.items())
    with talking_to(f"the idle stop's pods in {namespace}"):
        pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector,
                                                                _request_timeout=REQUEST_TIMEOUT_S).items
    return idle_stop_line(pods)


def read_jobs(api_client: Any, namespace: str, cluster_name: str, stack: str | None) -> dict:
    """The stack's jobs that run now, or why they could not be read: the job server is a second way in (a
    port-forward to the head pod), and a cluster without one is still worth its status."""
    from tools.job_server import connect, job_server, stack_jobs
    from workload.run.submit import TERMINAL

    try:
        with job_server(api_client, namespace, cluster_name) as server:
            jobs = stack_jobs(connect(server), stack)
    except cli.CommandError as error:
        return {"running": [], "error": str(error)}
    return {"running": [{"job_id": job.submission_id, "status": job.status.value,
                         "run_id": (job.metadata or {}).get(RUN_METADATA), "started_ms": job.start_time}
                        for job in jobs if job.status not in TERMINAL], "error": None}


def render_jobs(jobs: dict, stack: str | None, kubeconfig: Path | None) -> str:
    if jobs["error"]:
        return f"Jobs: not read ({jobs['error']})"
    if not jobs["running"]:
        return "No training job running."
    follow = "python -m tools.job logs --follow" + (f" --stack {stack}" if stack else "") + (
        f" --kubeconfig {kubeconfig}" if kubeconfig else "")
    return "\n".join(f"Job {job['job_id']} {job['status']} (run {job['run_id']}); follow it: {follow}"
                     for job in jobs["running"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("python -m tools.status", __doc__,
                        check_failed="the RayCluster is missing, not ready, or short of ready workers")
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig file; unset: $KUBECONFIG or ~/.kube/config")
    add_stack_flag(parser, help="read the RayCluster's name and namespace from Pulumi.<stack>.yaml")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    credential_files.check()  # the job client's requests read $NETRC (workload/run/credential_files.py): before the API
    namespace, cluster = stack_settings(args.stack)
    api = api_client(args.kubeconfig)  # runs the kubeconfig's `aws eks get-token`: once for both reads
    status = read_status(api, namespace, cluster)
    if status["raycluster"] is not None:
        status["jobs"] = read_jobs(api, namespace, cluster, args.stack)
    notes = dashboard_lines(args.stack, args.kubeconfig, len(status["gpu_nodes"]))
    if int(stack_key(args.stack, "gpuIdleStopMinutes")) and (idle := read_idle_stop(api, namespace)):
        notes.append(idle)
    if args.json:
        status["notes"] = notes
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    if not args.json and "jobs" in status:
        print("\n" + render_jobs(status["jobs"], args.stack, args.kubeconfig))
    if not args.json and notes:
        print("\n" + "\n".join(notes))
    return cli.OK if is_up(status) else cli.CHECK_FAILED


if __name__ == "__main__":
    sys.exit(cli.run(main))
