"""An EKS managed node group as strict as EKS is about the calls the day-two tests make, and the update pulumi-aws makes
of an `aws.eks.NodeGroup` whose scalingConfig changed.

What it holds to, and where from:
- UpdateNodegroupConfig's scalingConfig may name any of the three sizes (the others stay) and the result must agree:
  minSize >= 0, maxSize >= 1, minSize <= desiredSize <= maxSize (EKS API reference, NodegroupScalingConfig: "When
  updating a node group, you can specify any or none of the properties"; the ranges of minSize, maxSize and desiredSize).
  Anything else is an InvalidParameterException, as EKS answers it; moto does not check it.
- While an update runs the group is UPDATING, and EKS refuses another UpdateNodegroupConfig with
  ResourceInUseException; the `nodegroup_active` waiter returns once it is ACTIVE (here: at once, finishing the update).
- pulumi-aws (the Terraform provider's resourceNodeGroupUpdate, hashicorp/terraform-provider-aws
  internal/service/eks/node_group.go) sends, when scaling_config changed, the whole block
  (expandNodegroupScalingConfig: desired, max and min) in one UpdateNodegroupConfig, the ignored properties taking the
  values of the previous deployment's inputs (Pulumi's ignoreChanges).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from botocore.exceptions import ClientError

CREATED = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def _error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class StrictEks:
    """One node group; `calls` records (operation, scalingConfig) in order."""

    def __init__(self, *, desired: int, minimum: int, maximum: int, cluster: str = "ray-train",
                 name: str = "gpu") -> None:
        self.cluster, self.name = cluster, name
        self.nodegroup: dict[str, Any] = {
            "nodegroupName": name, "status": "ACTIVE", "createdAt": CREATED, "modifiedAt": CREATED,
            "scalingConfig": {"minSize": minimum, "maxSize": maximum, "desiredSize": desired}}
        self.calls: list[tuple[str, dict]] = []
        self.now = CREATED + timedelta(days=1)

    def describe_nodegroup(self, *, clusterName: str, nodegroupName: str) -> dict:
        assert (clusterName, nodegroupName) == (self.cluster, self.name), (clusterName, nodegroupName)
        self.calls.append(("DescribeNodegroup", {}))
        return {"nodegroup": {**self.nodegroup, "scalingConfig": dict(self.nodegroup["scalingConfig"])}}

    def update_nodegroup_config(self, *, clusterName: str, nodegroupName: str, scalingConfig: dict) -> dict:
        operation = "UpdateNodegroupConfig"
        assert (clusterName, nodegroupName) == (self.cluster, self.name), (clusterName, nodegroupName)
        self.calls.append((operation, dict(scalingConfig)))
        if self.nodegroup["status"] != "ACTIVE":
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
        self.nodegroup["modifiedAt"] = self.now
        return {"update": {"status": "InProgress"}}

    def get_waiter(self, name: str) -> Any:
        assert name == "nodegroup_active", name
        eks = self

        class Waiter:
            def wait(self, *, clusterName: str, nodegroupName: str) -> None:
                eks.calls.append(("wait ACTIVE", {}))
                eks.nodegroup["status"] = "ACTIVE"

        return Waiter()

    def scaling(self) -> dict:
        return dict(self.nodegroup["scalingConfig"])


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
