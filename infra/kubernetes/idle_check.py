"""The idle stop's check (issue 24), run every few minutes in the cluster by infra/kubernetes/idle_stop.py's CronJob:
when no Ray job has run for `IDLE_MINUTES`, scale the GPU node group to zero. `python3 idle_check.py` in the training
image (it has Ray and boto3); this file is the CronJob's script as it is, mounted from a ConfigMap, so it imports
nothing of the repository: only the standard library, boto3 and Ray's job client.

Idle since when. No state is kept between runs: idle starts at the latest of the last job's end, the node group's
last change (EKS's modifiedAt: a scale-up by `pulumi up`, a repair, an update) and its creation. So a node group that
was just brought back gets the full idle period before it is stopped again, even if no job has started yet.

The scaling call sets desiredSize and minSize to 0 and keeps maxSize: EKS refuses a desired size below the minimum
(UpdateNodegroupConfig: "Minimum capacity can't be greater than desired size"), and the program declares minSize 0
whenever the idle stop is on, so `pulumi up` and this script agree. Waking sets desiredSize back (`wake`).
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


def decide(jobs: Iterable[Any], nodegroup: dict, *, now: datetime, idle_minutes: int) -> Decision:
    """Whether to stop the GPU nodes now. `jobs` as Ray's JobSubmissionClient.list_jobs returns them (status,
    end_time in epoch milliseconds), `nodegroup` as EKS DescribeNodegroup's "nodegroup"."""
    assert idle_minutes > 0, "the CronJob exists only when gpuIdleStopMinutes is set"
    if nodegroup["scalingConfig"]["desiredSize"] == 0:
        return Decision(False, "the GPU node group is already at 0 nodes")
    jobs = list(jobs)
    running = [job for job in jobs if _status(job) not in TERMINAL_STATUSES]
    if running:
        return Decision(False, f"job {running[0].submission_id or running[0].job_id} is {_status(running[0])}")
    moments = [nodegroup["createdAt"], nodegroup.get("modifiedAt") or nodegroup["createdAt"]]
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


def wake(eks: Any, cluster: str, nodegroup_name: str, node_count: int) -> bool:
    """Bring the node group back to `node_count` nodes; False when it already has them (nothing called)."""
    current = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup_name)["nodegroup"]
    if current["scalingConfig"]["desiredSize"] >= node_count:
        return False
    eks.update_nodegroup_config(clusterName=cluster, nodegroupName=nodegroup_name, scalingConfig={
        "minSize": 0, "desiredSize": node_count, "maxSize": max(node_count, current["scalingConfig"]["maxSize"])})
    return True


def check_once(jobs: Iterable[Any], eks: Any, *, cluster: str, nodegroup_name: str, idle_minutes: int,
               now: datetime | None = None) -> Decision:
    nodegroup = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup_name)["nodegroup"]
    decision = decide(jobs, nodegroup, now=now or datetime.now(timezone.utc), idle_minutes=idle_minutes)
    if decision.stop:
        stop(eks, cluster, nodegroup)
    return decision


def main() -> int:
    import boto3
    from ray.job_submission import JobSubmissionClient

    token = os.environ.get("RAY_AUTH_TOKEN")
    client = JobSubmissionClient(os.environ["RAY_JOB_SERVER"],
                                 headers={"Authorization": f"Bearer {token}"} if token else None)
    eks = boto3.client("eks", region_name=os.environ["AWS_REGION"])
    decision = check_once(client.list_jobs(), eks, cluster=os.environ["EKS_CLUSTER"],
                          nodegroup_name=os.environ["GPU_NODEGROUP"], idle_minutes=int(os.environ["IDLE_MINUTES"]))
    print(("stopping the GPU nodes: " if decision.stop else "keeping the GPU nodes: ") + decision.reason, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
