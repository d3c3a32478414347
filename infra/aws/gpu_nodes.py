"""The EFA GPU node group, on its own launch template, and the cluster placement group it launches into.

pulumi-eks's built-in EFA support refuses a custom launch template, and only a custom launch template can
target a capacity reservation; so the template is declared here, with one EFA interface per network card.
What can be computed without the cloud (interfaces, labels, taint, placement) is a pure function.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.aws.cluster import instance_metadata, node_role, node_tag_specifications, root_volume
from infra.aws.node_health import node_repair_config
from infra.aws.node_labels import GPU_PRESENT_LABEL, GPU_WORKER_NODE_SELECTOR
from infra.aws.node_storage import root_volume_performance, user_data
from infra.config import InstanceFacts

GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
# Without nvidia.com/gpu.present=true the NVIDIA device plugin's DaemonSet matches zero nodes, silently.
GPU_NODE_LABELS = {**GPU_WORKER_NODE_SELECTOR, GPU_PRESENT_LABEL: "true"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}


@dataclass(frozen=True)
class TargetedReservation:
    """The capacity reservation every GPU node launches into."""

    reservation_id: pulumi.Input[str]
    capacity_block: bool = False
    """A Capacity Block for ML: EKS wants capacity type CAPACITY_BLOCK, and the launch template's market type
    capacity-block and InstanceType (EKS user guide, "Create a managed node group with Capacity Blocks for ML",
    step 1); the node group then names no instance type (EKS API CreateNodegroup, instanceTypes: "If you specify
    launchTemplate, and your launch template uses an instance type, then you can't specify instanceTypes")."""


def efa_network_interfaces(facts: InstanceFacts, security_group_ids: list[pulumi.Input[str]]) -> list[dict]:
    """One EFA interface per network card: the primary (card 0) `efa` with IP, the rest `efa-only`.

    `efa-only` interfaces carry no IP address, so a p5's 31 extra cards do not eat the subnet's addresses
    (the VPC CNI's pod IPs come from the primary). No subnet here: EKS managed node groups set it.
    """
    assert facts.efa_interfaces >= 1, "config.check_efa_gpu refuses types without EFA"
    interfaces = []
    for card in range(facts.efa_interfaces):
        interfaces.append({
            "network_card_index": card,
            "device_index": 0 if card == 0 else 1,
            "interface_type": "efa" if card == 0 else "efa-only",
            "security_groups": security_group_ids,
            "delete_on_termination": "true",
        })
    return interfaces


def use_placement_group(gpu_placement: str, *, existing_reservation: bool) -> bool:
    """Whether the stack makes its own cluster placement group, which keeps EFA latency low. An existing
    reservation's own placement governs instead: EC2 lets only instances inside its placement group (if it has
    one) use it. The reservation the stack makes itself is made inside the stack's group."""
    return gpu_placement != "none" and not existing_reservation


def node_group_name(name: str) -> str:
    """The GPU node group's EKS name: `<clusterName>-gpu-ng`, 46 characters at most (EKS allows 63)."""
    return f"{name}-ng"


def placement_group_name(arn: str) -> str:
    """arn:aws:ec2:<region>:<account>:placement-group/<name> -> <name>: launch templates name the group."""
    return arn.rsplit("/", 1)[-1]


class GpuPlacementGroup(pulumi.ComponentResource):
    """The cluster placement group of the GPU nodes, made before the capacity reservation that is made in it."""

    def __init__(self, name: str, *, node_group_name: str, tags: dict[str, str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("raytrain:infra:GpuPlacementGroup", name, None, opts)
        # The group used to be GpuNodeGroup's child, under this very name: the alias keeps it (and the nodes
        # inside it) instead of replacing it on the first `up` after the move.
        earlier_parent = pulumi.create_urn(node_group_name, "raytrain:infra:GpuNodeGroup")
        self.placement_group = aws.ec2.PlacementGroup(
            name, strategy="cluster", tags=tags,
            opts=pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(parent=earlier_parent)]))
        self.name: pulumi.Output[str] = self.placement_group.name
        self.arn: pulumi.Output[str] = self.placement_group.arn
        self.register_outputs({"name": self.name, "arn": self.arn})


class GpuNodeGroup(pulumi.ComponentResource):
    """EFA security group, launch template and the managed node group, all in one AZ and placement group."""

    def __init__(
        self,
        name: str,
        *,
        cluster_name: pulumi.Input[str],
        kubernetes_version: str,
        facts: InstanceFacts,
        node_count: int,
        vpc_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        availability_zone: pulumi.Input[str],
        cluster_security_group_id: pulumi.Input[str],
        root_volume_gib: int,
        placement_group: pulumi.Input[str] | None,
        reservation: TargetedReservation | None,
        tags: dict[str, str],
        node_repair: bool = True,
        idle_stop: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("raytrain:infra:GpuNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.availability_zone = pulumi.Output.from_input(availability_zone)

        # EFA requires both directions to the group itself; without the egress rule the nodes come up fine and
        # NCCL fails only at run time with error 4126. Internet egress comes from the cluster security group.
        self.efa_security_group = aws.ec2.SecurityGroup(
            f"{name}-efa",
            description="EFA: all traffic to and from the GPU nodes themselves",
            vpc_id=vpc_id,
            ingress=[aws.ec2.SecurityGroupIngressArgs(
                protocol="-1", from_port=0, to_port=0, self=True, description="EFA from the GPU nodes")],
            egress=[aws.ec2.SecurityGroupEgressArgs(
                protocol="-1", from_port=0, to_port=0, self=True, description="EFA to the GPU nodes")],
            tags={**tags, "Name": f"{name}-efa"},
            opts=child,
        )

        target = None
        if reservation is not None:
            # A targeted reservation has no fallback: nodes launch into it or not at all
            # (the effect of capacity-reservations-only; EC2 refuses a preference next to a target).
            target = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=reservation.reservation_id))
        capacity_block = reservation is not None and reservation.capacity_block

        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"EFA GPU nodes ({facts.instance_type}, {facts.efa_interfaces} EFA interfaces)",
            network_interfaces=efa_network_interfaces(
                facts, [cluster_security_group_id, self.efa_security_group.id]),
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=placement_group) if placement_group else None,
            capacity_reservation_specification=target,
            instance_market_options=aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
            if capacity_block else None,
            instance_type=facts.instance_type if capacity_block else None,
            metadata_options=instance_metadata(),
            # With instance store, nodeadm puts kubelet's and containerd's data on it (infra/aws/node_storage.py);
            # without, checkpoints are staged on the root volume, so it gets gp3 throughput a checkpoint needs.
            block_device_mappings=[root_volume(root_volume_gib, root_volume_performance(facts))],
            user_data=user_data(facts),
            tag_specifications=node_tag_specifications(tags, name),
            update_default_version=True,
            tags=tags,
            opts=child,
        )

        role, role_policies = node_role(f"{name}-node", tags=tags, parent=self)
        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            # A fixed name, not pulumi-aws's auto-name: an `up` killed while EKS made the group leaves it unrecorded
            # (a pending create), and the next `up` would then make a second group with a new random suffix beside
            # it, billing twice (and, in a reservation sized to the node count, launching none). With the name
            # fixed EKS refuses the second (ResourceInUseException) and `python -m tools.leftovers` finds the first.
            # Stacks made before keep their auto-name (ignore_changes below): a new name would replace the group.
            node_group_name=node_group_name(name),
            cluster_name=cluster_name,
            node_role_arn=role.arn,
            subnet_ids=[subnet_id],
            # Elsewhere the type stays on the node group (where live stacks have it), not the template.
            instance_types=None if capacity_block else [facts.instance_type],
            ami_type=GPU_AMI_TYPE,
            capacity_type="CAPACITY_BLOCK" if capacity_block else "ON_DEMAND",
            # With the idle stop (infra/kubernetes/idle_stop.py) the group may sit at 0 nodes: its minimum is 0, and
            # after creation its sizes belong to the idle check and GpuNodesAwake (ignore_changes below). Ignoring
            # only desiredSize would not do: the provider sends the state's old desired size with a new maxSize, so
            # lowering gpuNodeCount 3 -> 2 would ask EKS for desired 3 above max 2, which it refuses. GpuNodesAwake
            # sets all three in one call instead.
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=node_count, min_size=0 if idle_stop else node_count, max_size=node_count),
            node_repair_config=node_repair_config(node_repair),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.launch_template.id,
                version=self.launch_template.latest_version.apply(str),
            ),
            labels=GPU_NODE_LABELS,
            taints=[aws.eks.NodeGroupTaintArgs(**GPU_TAINT)],
            # One node at a time on a rolling update, so a multi-node job keeps most of its ranks. In a capacity
            # reservation sized to the node count there is no room for the surge nodes a default update launches
            # first: MINIMAL removes an old node before it launches its replacement.
            update_config=aws.eks.NodeGroupUpdateConfigArgs(
                max_unavailable=1, update_strategy="MINIMAL" if reservation is not None else None),
            version=kubernetes_version,
            tags=tags,
            # A change EKS cannot make in place (AZ, subnet, instance type, capacity type) replaces the group.
            # Create-before-delete would run both groups at once: twice the GPUs, twice the vCPU quota, and no room
            # in a reservation or a full placement group sized to the node count. The old nodes go first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=role_policies, delete_before_replace=True,
                                        ignore_changes=["nodeGroupName", *(["scalingConfig"] if idle_stop else [])]),
        )
        self.node_group_name: pulumi.Output[str] = self.node_group.node_group_name
        self.register_outputs({
            "node_group_name": self.node_group_name,
            "availability_zone": self.availability_zone,
            "launch_template_id": self.launch_template.id,
        })

