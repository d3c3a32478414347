"""A managed node group's state as EKS reports it (DescribeNodegroup), read by the wake and by the job's wait for its
nodes, so that a group EKS already knows is broken fails the `pulumi up` at once, in EKS's own words.

What EKS says, and where (Amazon EKS API reference):
- Nodegroup.status (API_Nodegroup.html) is one of CREATING, ACTIVE, UPDATING, DELETING, CREATE_FAILED, DELETE_FAILED,
  DEGRADED. ACTIVE says the group's configuration is applied, not that its instances run: after
  UpdateNodegroupConfig raises desiredSize the group returns to ACTIVE once the Auto Scaling group has the new size,
  and the instances launch, boot and register with Kubernetes after that.
- Nodegroup.health.issues (API_NodegroupHealth.html) lists Issue objects (API_Issue.html): a `code`
  (AsgInstanceLaunchFailures, InsufficientFreeAddresses, Ec2LaunchTemplateNotFound, NodeCreationFailure, ...), a
  `message` and the `resourceIds` concerned. A launch failure puts the group in DEGRADED with such an issue, and no
  wait cures it: botocore's `nodegroup_active` waiter would poll a DEGRADED group for its full 40 minutes (80 x 30 s).
- UpdateNodegroupConfig (API_UpdateNodegroupConfig.html) answers ResourceInUseException while another update of the
  group is in progress, so a wake waits for the group to leave UPDATING first.
"""
from __future__ import annotations

import time
from typing import Any, Callable

# The group changes and will settle: wait.
SETTLING = frozenset({"CREATING", "UPDATING"})
# EKS's own verdict that the group cannot give nodes: fail at once.
FAILED = frozenset({"CREATE_FAILED", "DELETE_FAILED", "DELETING", "DEGRADED"})
# A scaling update takes a minute or two; an update the wake found running (a version or AMI update rolling the
# nodes) can take much longer. As long as botocore's own waiter allowed, but reported as it goes.
ACTIVE_TIMEOUT_SECONDS = 40 * 60
POLL_SECONDS = 15


class NodegroupUnhealthyError(RuntimeError):
    """EKS reports the node group failed or degraded; the message carries EKS's health issues."""


def issues(nodegroup: dict) -> list[str]:
    """The group's health issues as EKS words them: `code: message (resource ids)`."""
    found = ((nodegroup.get("health") or {}).get("issues")) or []
    return [f"{issue.get('code', '?')}: {issue.get('message', '')}"
            + (f" ({', '.join(issue['resourceIds'])})" if issue.get("resourceIds") else "") for issue in found]


def describe(nodegroup: dict) -> str:
    scaling = nodegroup.get("scalingConfig") or {}
    return (f"EKS node group {nodegroup.get('nodegroupName', '?')} is {nodegroup.get('status', '?')} (desired "
            f"{scaling.get('desiredSize', '?')}, min {scaling.get('minSize', '?')}, max {scaling.get('maxSize', '?')})")


def failure(nodegroup: dict) -> str | None:
    """Why the group will give no nodes, from its status and health issues; None while it may."""
    found = issues(nodegroup)
    if nodegroup.get("status") not in FAILED and not found:
        return None
    return describe(nodegroup) + (":\n  - " + "\n  - ".join(found) if found else " (EKS lists no health issue)")


def unhealthy_error(nodegroup: dict, what: str) -> NodegroupUnhealthyError:
    return NodegroupUnhealthyError(
        f"{what}: {failure(nodegroup)}\nFix the cause EKS names (capacity, subnet addresses, launch template, IAM), "
        f"then run `pulumi up` again; `aws eks describe-nodegroup` shows the group's health.")


def wait_until_settled(
    describe_nodegroup: Callable[[], dict],
    *,
    strict: bool,
    timeout_s: float = ACTIVE_TIMEOUT_SECONDS,
    poll_s: float = POLL_SECONDS,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    on_progress: Callable[[str], None] = lambda _: None,
) -> dict:
    """Poll DescribeNodegroup's `nodegroup` until it is neither CREATING nor UPDATING, and return it. `strict`: a
    failed or degraded group (or one with health issues) raises NodegroupUnhealthyError at once; otherwise a DEGRADED
    group is returned with a progress line (the caller may still change it: a scaling update is how a group stopped
    after a launch failure gets another try). After `timeout_s` still settling, NodegroupUnhealthyError too."""
    # Looked up at each call, not bound at import: the tests' fake EKS brings its own clock (tests/support/fake_eks.py).
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline = clock() + timeout_s
    reported = ""
    while True:
        nodegroup = describe_nodegroup()
        status = nodegroup.get("status")
        if status not in SETTLING:
            problem = failure(nodegroup)
            if problem and (strict or status in FAILED - {"DEGRADED"}):
                raise unhealthy_error(nodegroup, "the GPU node group cannot give the job its nodes")
            if problem:
                on_progress(f"{problem}\n  (trying the scaling update anyway)")
            return nodegroup
        remaining = deadline - clock()
        if remaining <= 0:
            raise NodegroupUnhealthyError(f"{describe(nodegroup)} still after {timeout_s:.0f} s; `aws eks "
                                          "list-updates` and `describe-update` show what EKS is doing")
        line = describe(nodegroup)
        if line != reported:
            on_progress(f"waiting: {line}")
            reported = line
        sleep(min(poll_s, remaining))


def reader(eks: Any, cluster: str, nodegroup: str) -> Callable[[], dict]:
    """DescribeNodegroup's `nodegroup` for this group, as a function of nothing."""
    return lambda: eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
