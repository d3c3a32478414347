"""An EKS managed node group, and the Kubernetes nodes it brings, as strict as EKS is about the calls the day-two tests
make and the update pulumi-aws makes of an `aws.eks.NodeGroup` whose scalingConfig changed. Time is the fake's own
(`clock()`, `sleep()`; `time` stands in for the module where code under test reads its clock), so a test plays
minutes of EKS in microseconds.

What it holds to, and where from (Amazon EKS API reference, https://docs.aws.amazon.com/eks/latest/APIReference/):
- UpdateNodegroupConfig (API_UpdateNodegroupConfig.html): scalingConfig may name any of the three sizes (the others
  stay) and the result must agree: minSize >= 0, maxSize >= 1, minSize <= desiredSize <= maxSize (API_NodegroupScaling
  Config.html: "When updating a node group, you can specify any or none of the properties"; the sizes' ranges).
  Anything else is an InvalidParameterException, as EKS answers it; moto does not check it.
- Update conflicts (API_UpdateNodegroupConfig.html, Errors: ResourceInUseException, "The specified resource is in
  use"): while an update runs the group is UPDATING, and another UpdateNodegroupConfig is refused; so is one while the
  group is CREATING or DELETING.
- ACTIVE before the nodes (API_Nodegroup.html, status): the update ends, and the group is ACTIVE again, once the Auto
  Scaling group has the new size (UPDATE_SECONDS here); the instances then launch, and each registers with Kubernetes
  as a NotReady node JOIN_SECONDS later, is Ready READY_SECONDS after that, and advertises nvidia.com/gpu and
  vpc.amazonaws.com/efa once the device plugins have started on it, ADVERTISE_SECONDS later still. desiredSize is what
  was asked, never a count of nodes.
- DEGRADED with health issues (API_Nodegroup.html status DEGRADED; API_NodegroupHealth.html `issues`; API_Issue.html
  `code`, `message`, `resourceIds`): `fail_launches(code, message)` makes every later launch fail, as an
  InsufficientInstanceCapacity ends in AsgInstanceLaunchFailures, or a full subnet in InsufficientFreeAddresses; the
  group turns DEGRADED with that issue when its update ends, and no node joins.
- botocore's `nodegroup_active` waiter (botocore/data/eks/2017-11-01/waiters-2.json): DescribeNodegroup every 30 s,
  at most 80 times; success on ACTIVE, failure on CREATE_FAILED; a DEGRADED group is polled to the end (40 minutes).
- pulumi-aws (the Terraform provider's resourceNodeGroupUpdate, hashicorp/terraform-provider-aws
  internal/service/eks/node_group.go) sends, when scaling_config changed, the whole block
  (expandNodegroupScalingConfig: desired, max and min) in one UpdateNodegroupConfig, the ignored properties taking the
  values of the previous deployment's inputs (Pulumi's ignoreChanges).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError, WaiterError

CREATED = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
# Seconds, of the order EKS and a p5 take: the Auto Scaling group's resize, an instance's boot to registration, the
# kubelet's Ready, the device plugins' pods started and registered.
UPDATE_SECONDS, JOIN_SECONDS, READY_SECONDS, ADVERTISE_SECONDS = 45.0, 240.0, 30.0, 60.0
GPUS, EFA_INTERFACES = 8, 32  # a p5.48xlarge's, what its device plugins advertise
GPU_WORKER_LABELS = {"role": "gpu-worker"}  # infra/aws/node_labels.py GPU_WORKER_NODE_SELECTOR
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


def _error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


@dataclass
class _Instance:
    name: str
    launched: float


class StrictEks:
    """One node group and its nodes; `calls` records (operation, scalingConfig or the status seen) in order."""

    def __init__(self, *, desired: int, minimum: int, maximum: int, cluster: str = "ray-train",
                 name: str = "gpu", gpus: int = GPUS, efa_interfaces: int = EFA_INTERFACES) -> None:
        self.cluster, self.name = cluster, name
        self.gpus, self.efa_interfaces = gpus, efa_interfaces
        self.nodegroup: dict[str, Any] = {
            "nodegroupName": name, "status": "ACTIVE", "createdAt": CREATED, "modifiedAt": CREATED,
            "scalingConfig": {"minSize": minimum, "maxSize": maximum, "desiredSize": desired},
            "health": {"issues": []}}
        self.calls: list[tuple[str, dict]] = []
        self.now = CREATED + timedelta(days=1)
        self.seconds = 0.0
        self._update_ends: float | None = None
        self._launch_failure: dict | None = None
        self._serial = 0
        # The group as created: its instances long since joined.
        self.instances = [self._instance(-3600.0) for _ in range(int(desired))]
        self.time = SimpleNamespace(monotonic=self.clock, sleep=self.sleep, time=self.clock)

    # ---- time --------------------------------------------------------------------------------------------------
    def clock(self) -> float:
        return self.seconds

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.seconds += seconds
        self._settle()

    def _instance(self, launched: float) -> _Instance:
        self._serial += 1
        return _Instance(f"ip-10-0-{self._serial // 250}-{self._serial % 250}.ec2.internal", launched)

    def _settle(self) -> None:
        """The update ends UPDATE_SECONDS after it began: the Auto Scaling group takes the new size."""
        if self._update_ends is None or self.seconds < self._update_ends:
            return
        self._update_ends = None
        desired = int(self.nodegroup["scalingConfig"]["desiredSize"])
        self.instances = self.instances[:desired]
        missing = desired - len(self.instances)
        if missing and self._launch_failure:
            self.nodegroup["status"] = "DEGRADED"
            self.nodegroup["health"] = {"issues": [{**self._launch_failure,
                                                    "resourceIds": [f"eks-{self.name}-asg"]}]}
            return
        self.instances += [self._instance(self.seconds) for _ in range(missing)]
        self.nodegroup["status"] = "ACTIVE"
        self.nodegroup["health"] = {"issues": []}

    def fail_launches(self, code: str, message: str) -> None:
        """Every later launch fails as EKS reports it (API_Issue.html codes: AsgInstanceLaunchFailures,
        InsufficientFreeAddresses, ...)."""
        self._launch_failure = {"code": code, "message": message}

    # ---- EKS -----------------------------------------------------------------------------------------------------
    def describe_nodegroup(self, *, clusterName: str, nodegroupName: str) -> dict:
        assert (clusterName, nodegroupName) == (self.cluster, self.name), (clusterName, nodegroupName)
        self._settle()
        self.calls.append(("DescribeNodegroup", {"status": self.nodegroup["status"]}))
        return {"nodegroup": {**self.nodegroup, "scalingConfig": dict(self.nodegroup["scalingConfig"]),
                              "health": {"issues": [dict(i) for i in self.nodegroup["health"]["issues"]]}}}

    def update_nodegroup_config(self, *, clusterName: str, nodegroupName: str, scalingConfig: dict) -> dict:
        operation = "UpdateNodegroupConfig"
        assert (clusterName, nodegroupName) == (self.cluster, self.name), (clusterName, nodegroupName)
        self._settle()
        self.calls.append((operation, dict(scalingConfig)))
        if self.nodegroup["status"] in ("CREATING", "UPDATING", "DELETING"):
            raise _error("ResourceInUseException", f"Nodegroup {nodegroupName} is currently {self.nodegroup['status']}",
                         operation)
        # Pulumi's mocks hand numbers over as floats; EKS takes integers.
        merged = {key: int(value) for key, value in {**self.nodegroup["scalingConfig"], **scalingConfig}.items()}
        low, high, desired = merged["minSize"], merged["maxSize"], merged["desiredSize"]
        if low < 0 or high < 1 or desired < 0:
            raise _error("InvalidParameterException", f"invalid scaling config {merged}", operation)
        if low > desired:
            raise _error("InvalidParameterException",
                         f"Minimum capacity {low} can't be greater than desired size {desired}", operation)
        if desired > high:
            raise _error("InvalidParameterException",
                         f"Desired capacity {desired} can't be greater than max size {high}", operation)
        self.nodegroup["scalingConfig"] = merged
        self.nodegroup["status"] = "UPDATING"
        self.nodegroup["modifiedAt"] = self.now + timedelta(seconds=self.seconds)
        self._update_ends = self.seconds + UPDATE_SECONDS
        return {"update": {"status": "InProgress", "type": "ConfigUpdate"}}

    def get_waiter(self, name: str) -> Any:
        assert name == "nodegroup_active", name
        eks = self

        class Waiter:
            def wait(self, *, clusterName: str, nodegroupName: str) -> None:
                eks.calls.append(("wait ACTIVE", {}))
                for _ in range(80):
                    status = eks.describe_nodegroup(clusterName=clusterName, nodegroupName=nodegroupName)[
                        "nodegroup"]["status"]
                    if status == "ACTIVE":
                        return
                    if status == "CREATE_FAILED":
                        raise WaiterError("NodegroupActive", "Waiter encountered a terminal failure state", {})
                    eks.sleep(30)
                raise WaiterError("NodegroupActive", "Max attempts exceeded", {})

        return Waiter()

    def scaling(self) -> dict:
        return dict(self.nodegroup["scalingConfig"])

    # ---- Kubernetes --------------------------------------------------------------------------------------------
    def nodes(self) -> list[dict]:
        """The group's Kubernetes nodes now, as the API server lists them: joined, then Ready, then advertising."""
        self._settle()
        listed = []
        for instance in self.instances:
            age = self.seconds - instance.launched
            if age < JOIN_SECONDS:
                continue
            ready = age >= JOIN_SECONDS + READY_SECONDS
            allocatable = {"cpu": "191450m", "memory": "2002Gi", "pods": "100"}
            if age >= JOIN_SECONDS + READY_SECONDS + ADVERTISE_SECONDS:
                allocatable.update({"nvidia.com/gpu": str(self.gpus),
                                    "vpc.amazonaws.com/efa": str(self.efa_interfaces)})
            listed.append({
                "metadata": {"name": instance.name, "labels": {**GPU_WORKER_LABELS, NODEGROUP_LABEL: self.name}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                           "allocatable": allocatable}})
        return listed

    def usable_nodes(self) -> int:
        """Nodes a Ray worker pod could run on now: Ready, with GPUs and EFA interfaces advertised."""
        return sum(node["status"]["conditions"][0]["status"] == "True" and "nvidia.com/gpu" in
                   node["status"]["allocatable"] for node in self.nodes())


def pulumi_aws_node_group_update(eks: StrictEks, old_inputs: dict, new_inputs: dict,
                                 ignore_changes: list[str]) -> bool:
    """What `pulumi up` makes pulumi-aws do to the node group's scaling: ignored paths keep the old inputs' values,
    and a changed scalingConfig goes out whole in one call. Returns whether a call was made."""
    old, new = dict(old_inputs["scalingConfig"]), dict(new_inputs["scalingConfig"])
    if "scalingConfig" in ignore_changes:
        new = old
    for path in ignore_changes:
        if path.startswith("scalingConfig."):
            key = path.split(".", 1)[1]
            new[key] = old[key]
    if new == old:
        return False
    eks.update_nodegroup_config(clusterName=eks.cluster, nodegroupName=eks.name, scalingConfig=new)
    eks.get_waiter("nodegroup_active").wait(clusterName=eks.cluster, nodegroupName=eks.name)
    return True
