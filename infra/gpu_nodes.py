"""The EFA GPU node group, on its own launch template.

pulumi-eks's built-in EFA support refuses a custom launch template, and only a custom launch template can
target a capacity reservation; so the template is declared here, with one EFA interface per network card.
What can be computed without the cloud (interfaces, labels, taint, placement) is a pure function.
"""
from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.addons import GPU_PRESENT_LABEL, GPU_WORKER_NODE_SELECTOR
from infra.cluster import node_role
from infra.config import InstanceFacts

GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
# Without nvidia.com/gpu.present=true the NVIDIA device plugin's DaemonSet matches zero nodes, silently.
GPU_NODE_LABELS = {**GPU_WORKER_NODE_SELECTOR, GPU_PRESENT_LABEL: "true"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
ROOT_DEVICE_NAME = "/dev/xvda"  # the AL2023 EKS AMIs' root device
# 2, not 1: pods that are not on the host network (Ray workers writing checkpoints to S3 with the node role)
# reach IMDS through one extra hop.
IMDS_HOP_LIMIT = 2


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


def use_placement_group(gpu_placement: str, *, reservation_targeted: bool) -> bool:
    """A cluster placement group keeps EFA latency low, but a reservation's own placement must govern."""
    if gpu_placement == "cluster":
        assert not reservation_targeted, "config.parse refuses gpuPlacement=cluster with a reservation"
        return True
    if gpu_placement == "none":
        return False
    return not reservation_targeted


class GpuNodeGroup(pulumi.ComponentResource):
    """EFA security group, placement group, launch template and the managed node group, all in one AZ."""

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
        gpu_placement: str,
        capacity_reservation_id: pulumi.Input[str] | None,
        tags: dict[str, str],
        storage_policy: str | None = None,
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

        placement = None
        self.placement_group: aws.ec2.PlacementGroup | None = None
        if use_placement_group(gpu_placement, reservation_targeted=capacity_reservation_id is not None):
            self.placement_group = aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", tags=tags, opts=child)
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=self.placement_group.name)

        reservation = None
        if capacity_reservation_id is not None:
            # A targeted reservation has no fallback: nodes launch into it or not at all
            # (the effect of capacity-reservations-only; EC2 refuses a preference next to a target).
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=capacity_reservation_id))

        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"EFA GPU nodes ({facts.instance_type}, {facts.efa_interfaces} EFA interfaces)",
            network_interfaces=efa_network_interfaces(
                facts, [cluster_security_group_id, self.efa_security_group.id]),
            placement=placement,
            capacity_reservation_specification=reservation,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=IMDS_HOP_LIMIT),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE_NAME,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=root_volume_gib, volume_type="gp3", encrypted="true", delete_on_termination="true"),
            )],
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags={**tags, "Name": name})
                for kind in ("instance", "volume", "network-interface")
            ],
            update_default_version=True,
            tags=tags,
            opts=child,
        )

        role, role_policies = node_role(f"{name}-node", tags=tags, parent=self, storage_policy=storage_policy)
        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=cluster_name,
            node_role_arn=role.arn,
            subnet_ids=[subnet_id],
            instance_types=[facts.instance_type],
            ami_type=GPU_AMI_TYPE,
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=node_count, min_size=node_count, max_size=node_count),
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
                max_unavailable=1, update_strategy="MINIMAL" if capacity_reservation_id is not None else None),
            version=kubernetes_version,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=role_policies),
        )
        self.node_group_name: pulumi.Output[str] = self.node_group.node_group_name
        self.register_outputs({
            "node_group_name": self.node_group_name,
            "availability_zone": self.availability_zone,
            "launch_template_id": self.launch_template.id,
        })


def existing_reservation_id(
    name: str,
    reservation_id: str,
    *,
    instance_type: str,
    availability_zone: str,
    node_count: int,
    opts: pulumi.ResourceOptions | None = None,
) -> pulumi.Output[str]:
    """Read a reservation made outside the stack and refuse one the GPU nodes could not launch into.

    A read, not a resource: the stack never owns (or cancels) it. The check runs at preview, since reads do.
    """
    reservation = aws.ec2.CapacityReservation.get(name, reservation_id, opts=opts)

    def check(found: list) -> str:
        az, found_type, count = found
        problems = []
        if az != availability_zone:
            problems.append(f"it is in {az}, but gpuAvailabilityZone is {availability_zone}")
        if found_type != instance_type:
            problems.append(f"it holds {found_type}, but gpuInstanceType is {instance_type}")
        if count < node_count:
            problems.append(f"it holds {count} instances, but gpuNodeCount is {node_count}")
        if problems:
            raise ValueError(f"config key 'capacityReservationId': {reservation_id}: " + "; ".join(problems))
        return reservation_id

    return pulumi.Output.all(
        reservation.availability_zone, reservation.instance_type, reservation.instance_count).apply(check)
