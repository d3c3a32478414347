"""The idle stop's check (issue 24), run every few minutes in the cluster by infra/kubernetes/idle_stop.py's CronJob:
when no Ray job has run for `IDLE_MINUTES`, scale the GPU node group to zero. `python3 idle_check.py` in the training
image (it has Ray and boto3); this file is the CronJob's script as it is, mounted from a ConfigMap, so it imports
nothing of the repository: only the standard library, boto3 and Ray's job client.

Idle since when. No state is kept between runs: idle starts at the latest of the last Ray job's end, the last `pulumi up`
that woke the GPU nodes or changed what runs on them (AWAKE_SINCE, the time GpuNodesAwake last ran, given to the
CronJob by the program), and the node group's last scaling change (EKS's modifiedAt: a wake by hand, a repair, an
update). Not its creation: the group is created long before a first job can run. A job that has not ended (PENDING,
RUNNING) keeps the nodes whatever the times say.

The scaling calls set desiredSize, minSize and maxSize together, in one UpdateNodegroupConfig whose values agree (min 0
<= desired <= max, max >= 1: EKS API reference, NodegroupScalingConfig), so EKS never sees a maximum below the desired
size: stop keeps maxSize; wake sets all three to (0, gpuNodeCount, gpuNodeCount), up or down.

When the check cannot run (an image without boto3 or Ray, no credentials, the job server unreachable) it exits 1 with
one line on stderr and in its termination message: the CronJob's Job fails (a Kubernetes event, `kubectl get jobs`),
and `python -m tools.status` prints the line, so GPUs that are not being stopped are seen.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

# Ray's JobStatus values that end a job (ray.job_submission.JobStatus.is_terminal).
TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


@dataclass(frozen=True)
class Decision:
    stop: bool
    reason: str
    idle_since: datetime | None = None


def _status(job: Any) -> str:
    status = job.status
    return getattr(status, "value", status)


def decide(jobs: Iterable[Any], nodegroup: dict, *, now: datetime, idle_minutes: int,
           awake_since: datetime | None = None) -> Decision:
    """Whether to stop the GPU nodes now. `jobs` as Ray's JobSubmissionClient.list_jobs returns them (status,
    end_time in epoch milliseconds), `nodegroup` as EKS DescribeNodegroup's "nodegroup", `awake_since` the last
    `pulumi up` that woke the nodes (None: unknown)."""
    assert idle_minutes > 0, "the CronJob exists only when gpuIdleStopMinutes is set"
    if nodegroup["scalingConfig"]["desiredSize"] == 0:
        return Decision(False, "the GPU node group is already at 0 nodes")
    jobs = list(jobs)
    running = [job for job in jobs if _status(job) not in TERMINAL_STATUSES]
    if running:
        return Decision(False, f"job {running[0].submission_id or running[0].job_id} is {_status(running[0])}")
    moments = [nodegroup.get("modifiedAt") or nodegroup["createdAt"], *([awake_since] if awake_since else [])]
    ended = [job.end_time for job in jobs if job.end_time]
    if ended:
        moments.append(datetime.fromtimestamp(max(ended) / 1000, timezone.utc))
    since = max(moments)
    idle = now - since
    if idle < timedelta(minutes=idle_minutes):
        return Decision(False, f"idle for {idle.total_seconds() / 60:.0f} of {idle_minutes} minutes", since)
    return Decision(True, f"no Ray job since {since:%Y-%m-%d %H:%M} UTC ({idle.total_seconds() / 60:.0f} minutes, "
                          f"gpuIdleStopMinutes {idle_minutes})", since)


def stop(eks: Any, cluster: str, nodegroup: dict) -> None:
    """Scale the node group to 0 nodes, keeping its maximum (and so the count a wake restores)."""
    eks.update_nodegroup_config(clusterName=cluster, nodegroupName=nodegroup["nodegroupName"], scalingConfig={
        "minSize": 0, "desiredSize": 0, "maxSize": nodegroup["scalingConfig"]["maxSize"]})


def awake_scaling(node_count: int) -> dict[str, int]:
    """The GPU node group's scaling while the idle stop is on and the nodes are wanted: gpuNodeCount nodes, none
    kept at the minimum (so the check can stop them), and no more than gpuNodeCount (so a changed count is exact)."""
    return {"minSize": 0, "maxSize": node_count, "desiredSize": node_count}


def wake(eks: Any, cluster: str, nodegroup_name: str, node_count: int) -> bool:
    """Set the node group to `node_count` nodes (awake_scaling), whether it is stopped, at the old count, or at a count
    `gpuNodeCount` has since changed: one call with all three sizes, which EKS checks together. False when it is
    there already (nothing called)."""
    current = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup_name)["nodegroup"]
    target = awake_scaling(node_count)
    if {key: current["scalingConfig"].get(key) for key in target} == target:
        return False
    eks.update_nodegroup_config(clusterName=cluster, nodegroupName=nodegroup_name, scalingConfig=target)
    return True


def check_once(jobs: Iterable[Any], eks: Any, *, cluster: str, nodegroup_name: str, idle_minutes: int,
               now: datetime | None = None, awake_since: datetime | None = None) -> Decision:
    nodegroup = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup_name)["nodegroup"]
    decision = decide(jobs, nodegroup, now=now or datetime.now(timezone.utc), idle_minutes=idle_minutes,
                      awake_since=awake_since)
    if decision.stop:
        stop(eks, cluster, nodegroup)
    return decision


TERMINATION_LOG = "/dev/termination-log"  # the container's terminationMessagePath (Kubernetes' default)


def report(line: str, *, failed: bool) -> None:
    """The outcome, on stdout (or stderr) and in the termination message `kubectl describe pod` and tools.status show."""
    print(line, file=sys.stderr if failed else sys.stdout, flush=True)
    try:
        with open(TERMINATION_LOG, "w") as file:
            file.write(line[:4000])  # the kubelet keeps 4096 bytes of it
    except OSError:
        pass  # not in a container: stdout is enough


def main() -> int:
    try:
        import boto3
        from ray.job_submission import JobSubmissionClient

        token = os.environ.get("RAY_AUTH_TOKEN")
        client = JobSubmissionClient(os.environ["RAY_JOB_SERVER"],
                                     headers={"Authorization": f"Bearer {token}"} if token else None)
        eks = boto3.client("eks", region_name=os.environ["AWS_REGION"])
        awake = os.environ.get("AWAKE_SINCE")
        decision = check_once(client.list_jobs(), eks, cluster=os.environ["EKS_CLUSTER"],
                              nodegroup_name=os.environ["GPU_NODEGROUP"], idle_minutes=int(os.environ["IDLE_MINUTES"]),
                              awake_since=datetime.fromisoformat(awake) if awake else None)
    except Exception as error:  # noqa: BLE001 - whatever stops the check, the nodes are not being stopped: say so
        report(f"idle stop cannot run, so the GPU nodes are not stopped: {type(error).__name__}: "
               f"{str(error).splitlines()[0] if str(error) else ''}", failed=True)
        return 1
    report(("stopping the GPU nodes: " if decision.stop else "keeping the GPU nodes: ") + decision.reason,
           failed=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
