"""Whether the stack can work: one place, run at preview before any resource is registered.

A GPU node group takes 20-30 minutes and bills from its first minute, so a config that cannot end in a working
job is refused here, with a ValueError that names the config key and what it allows. `check` is fed by the
config, EC2's facts about the instance types, the region's AZs, the account's quotas (when they can be read) and
an existing capacity reservation, and returns the plan the program builds. Each rule is a plain function of plain
values.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pulumi
import pulumi_aws as aws
from botocore.exceptions import BotoCoreError, ClientError

from infra import config
from infra.aws import capacity_reservation, network, offerings
from infra.aws.gpu_nodes import placement_group_name, use_placement_group
from infra.config import AwsIdentity, InstanceFacts, StackConfig, arn_parts
from infra.config.schema import warn
from infra.config.settings import GPU_ARCHITECTURE
from infra.kubernetes import addons, image_contents, images, raycluster
from infra.preview import endpoint_access, instance_facts, object_names, pip_index
from infra.preview.access import aws_identity, check_access_entries, creator_of
from infra.preview.job_plan import check_job
from workload.model import memory_plan

# The versions EKS creates clusters on, as of EKS_VERSIONS_DATE (the EKS release calendar: 1.31's extended support
# ended 2026-11-26; 1.35 is the newest EKS had released). Add a version here when EKS releases it.
EKS_VERSIONS = ("1.32", "1.33", "1.34", "1.35")
EKS_VERSIONS_DATE = "2026-12-01"

# EKS's "Nodes per managed node group" quota (adjustable; 450 unless raised), read from Service Quotas.
NODES_PER_NODE_GROUP_QUOTA = ("eks", "L-BD136A63")
NODES_PER_NODE_GROUP_DEFAULT = 450

# Beside the Ray head (raycluster.HEAD_CPU / HEAD_MEMORY, Guaranteed) a system node runs kube-system (CoreDNS,
# kube-proxy, aws-node), the KubeRay operator, node-feature-discovery, and keeps kubelet's reservation.
SYSTEM_ADDONS_CPU = 2
SYSTEM_ADDONS_MEMORY_GIB = 8
SYSTEM_ARCHITECTURE = "x86_64"  # infra/aws/cluster.py's SYSTEM_AMI_TYPE, AL2023_x86_64_STANDARD

# EC2 terminates a Capacity Block's instances 30 minutes before its end time (EC2 Auto Scaling user guide, "Use
# Capacity Blocks for machine learning workloads"); before that, nodes joining, the device plugins and the image
# pull take most of an hour.
CAPACITY_BLOCK_TERMINATION_LEAD = timedelta(minutes=30)
CAPACITY_BLOCK_SETUP = timedelta(hours=1)


@dataclass(frozen=True)
class ExistingReservation:
    """capacityReservationId, as EC2 describes it, once it passed every check."""

    reservation_id: str
    availability_zone: str
    capacity_block: bool
    placement_group: str | None
    """The name of the cluster placement group it reserves in: the GPU nodes must launch into it."""


@dataclass(frozen=True)
class StackPlan:
    """What the checks established and the program builds from."""

    region: str
    zone_ids: dict[str, str]
    vpc_azs: tuple[str, ...]
    candidate_azs: tuple[str, ...]
    gpu: InstanceFacts
    image: raycluster.ImageFacts
    identity: AwsIdentity
    reservation: ExistingReservation | None
    own_placement_group: bool
    """The stack makes a cluster placement group for its GPU nodes (and its own reservation)."""
    api_public_access_cidrs: tuple[str, ...] = ()
    """apiPublicAccessCidrs plus the deployer's own address: who may reach the API server's public endpoint."""
    # Issue 22 (trust and admins): who runs `pulumi up`, and where, for the trust and key policies and the
    # clusterAdmins output.
    creator: str = ""
    """The IAM principal that creates the cluster (creator_of the caller): EKS's bootstrap cluster admin."""
    account_id: str = ""
    partition: str = "aws"
    memory_plan: memory_plan.MemoryPlan | None = None
    """The job's memory plan (workload.model.memory_plan), when its architecture is known at preview: the jobMemoryPlan
    output."""
    layout_plan: dict | None = None
    """The layout the job would choose with the instance's nominal network (infra.preview.job_layout), when its
    architecture is known at preview: the jobLayoutPlan output."""
    checkpoint_plan: dict | None = None
    """A checkpoint's size and seconds at the nodes' disk and network (infra.preview.checkpoint_cost), when its
    architecture is known at preview: the jobCheckpointPlan output."""
    data_plan: dict | None = None
    """trainDataset's data stage: its tokens, token shards and seconds (infra.preview.data_cost), when its size can be
    read at preview: the jobDataPlan output."""


@config.hides_secret_values
def plan_stack(cfg: StackConfig) -> StackPlan:
    """Refuse the stack unless it can work; the look-ups are synchronous (invokes, one boto3 read), so all of
    this runs at preview before the program registers anything."""
    identity = aws_identity(pulumi.Config("aws"))
    caller = aws.get_caller_identity()
    if cfg.capacity_reserve or cfg.capacity_reservation_id:
        # The account these credentials reach, through the stack's own AWS provider: the reservation's provider and
        # the look-up below act only there (infra/aws/identity.py).
        identity = dataclasses.replace(identity, account_id=caller.account_id)
    check_kubernetes_version(cfg.kubernetes_version)
    check_access_entries(cfg, caller.arn)
    public_cidrs = network.api_public_access_cidrs(
        cfg.api_public_access_cidrs,
        None if endpoint_access.covers_internet(cfg.api_public_access_cidrs) else network.deployer_public_ip())
    endpoint_access.check_public_access_count(public_cidrs)
    if warning := endpoint_access.public_access_warning(public_cidrs):
        warn(warning)
    region = network.aws_region()
    zone_ids = network.region_availability_zones()
    vpc_azs = network.choose_vpc_azs(cfg.vpc_availability_zones, zone_ids)
    candidate_azs = network.reservation_candidate_azs(cfg, vpc_azs) if cfg.capacity_reserve else ()
    network.check_gpu_azs(vpc_azs, gpu_az=cfg.gpu_availability_zone, candidate_azs=candidate_azs)
    gpu = instance_facts.gpu_instance_facts(cfg.gpu_instance_type)
    offerings.check_gpu_zone(cfg, region=region, identity=identity, warn=warn, candidate_azs=candidate_azs)
    check_system_instance(instance_facts.lookup(cfg.system_instance_type, config_key="systemInstanceType"))
    addons.check_efa_allowlist(cfg.gpu_instance_type)
    image = raycluster.check_config(cfg, gpu)
    for architecture in sorted({SYSTEM_ARCHITECTURE, GPU_ARCHITECTURE}):  # the head's nodes and the workers'
        images.check_architecture(cfg.dlc_image, architecture)
    # What the job needs inside the image (PyTorch; EFA's libraries for efa), where its publisher documents it.
    image_contents.check_contents(cfg.dlc_image, train_enabled=cfg.train.enabled,
                                  expect_transport=cfg.train.expect_transport)
    if warning := image_contents.unknown_contents_warning(cfg.dlc_image, train_enabled=cfg.train.enabled,
                                                          expect_transport=cfg.train.expect_transport):
        warn(warning)
    if cfg.train.enabled and cfg.train.pip:  # wheels judged for an image the stack knows (its Python and glibc)
        pip_index.check(cfg.train.pip, pip_index.Target(image.python_version, image.glibc_version,
                                                        (gpu.architectures or ("x86_64",))[0]), warn=warn)
    object_names.check_names(cfg)
    job_memory, job_layout, job_checkpoint, job_data = (check_job(cfg, gpu, identity=identity, region=region)
                                                        if cfg.train.enabled else (None, None, None, None))
    reservation = None
    if cfg.capacity_reservation_id:
        try:
            found = capacity_reservation.describe_existing(
                cfg.capacity_reservation_id, cluster_name=cfg.cluster_name, region=region, identity=identity)
        except (BotoCoreError, ClientError) as error:
            raise ValueError(
                f"config key 'capacityReservationId': {cfg.capacity_reservation_id} cannot be read at preview "
                f"(ec2:DescribeCapacityReservations and ec2:DescribeInstances, as the stack's identity): {error}"
            ) from error
        reservation = check_existing_reservation(cfg, found, region=region, now=datetime.now(timezone.utc))
    check_node_counts(cfg, gpu, node_group_limit=_quota(*NODES_PER_NODE_GROUP_QUOTA) or NODES_PER_NODE_GROUP_DEFAULT,
                      vcpu_quota=None if reservation and reservation.capacity_block else _vcpu_quota(gpu))
    return StackPlan(region=region, zone_ids=zone_ids, vpc_azs=vpc_azs, candidate_azs=candidate_azs, gpu=gpu,
                     image=image, identity=identity, reservation=reservation,
                     own_placement_group=use_placement_group(cfg.gpu_placement, existing_reservation=bool(reservation)),
                     api_public_access_cidrs=public_cidrs, creator=creator_of(caller.arn),
                     account_id=caller.account_id, partition=arn_parts(caller.arn)[0], memory_plan=job_memory,
                     layout_plan=job_layout, checkpoint_plan=job_checkpoint, data_plan=job_data)


def check_kubernetes_version(version: str) -> None:
    if version not in EKS_VERSIONS:
        raise ValueError(
            f"config key 'kubernetesVersion': EKS does not create clusters on {version}; allowed (as of "
            f"{EKS_VERSIONS_DATE}): {', '.join(EKS_VERSIONS)}")


def check_system_instance(facts: InstanceFacts) -> None:
    """The system node group runs the Ray head and the add-ons on EKS's x86_64 standard AMI."""
    needed_cpu = int(raycluster.HEAD_CPU) + SYSTEM_ADDONS_CPU
    needed_gib = int(raycluster.HEAD_MEMORY.removesuffix("Gi")) + SYSTEM_ADDONS_MEMORY_GIB
    allowed = f"an x86_64 type without GPUs, with {needed_cpu} vCPUs and {needed_gib} GiB or more (e.g. m7i.xlarge)"
    if facts.gpus:
        raise ValueError(f"config key 'systemInstanceType': {facts.instance_type} has {facts.gpus} GPUs, billed for "
                         f"nothing (no Ray rank runs there, and its AMI has no NVIDIA driver); allowed: {allowed}")
    if facts.architectures and SYSTEM_ARCHITECTURE not in facts.architectures:
        raise ValueError(f"config key 'systemInstanceType': {facts.instance_type} is {'/'.join(facts.architectures)}, "
                         f"but the system nodes' AMI is {SYSTEM_ARCHITECTURE}; allowed: {allowed}")
    if facts.vcpus < needed_cpu or facts.memory_mib < needed_gib * 1024:
        raise ValueError(
            f"config key 'systemInstanceType': {facts.instance_type} ({facts.vcpus} vCPUs, "
            f"{facts.memory_mib // 1024} GiB) cannot hold the Ray head ({raycluster.HEAD_CPU} CPU, "
            f"{raycluster.HEAD_MEMORY}) beside the add-ons; allowed: {allowed}")


def check_node_counts(cfg: StackConfig, gpu: InstanceFacts, *, node_group_limit: int, vcpu_quota: int | None) -> None:
    """Managed node groups hold at most `node_group_limit` nodes; the GPU nodes' vCPUs must fit the family's
    On-Demand quota (None: not readable, or a Capacity Block, paid for apart from On-Demand; whether its instances
    count against that quota is not documented where this was written, so it is not checked rather than guessed)."""
    for key, count in (("gpuNodeCount", cfg.gpu_node_count), ("systemNodeCount", cfg.system_node_count)):
        if count > node_group_limit:
            raise ValueError(f"config key {key!r}: {count} nodes exceed EKS's nodes per managed node group in this "
                             f"account and region; allowed: 1 to {node_group_limit}")
    needed = cfg.gpu_node_count * gpu.vcpus
    if vcpu_quota is not None and needed > vcpu_quota:
        quota = instance_facts.on_demand_quota(gpu.instance_type, "gpuInstanceType")
        raise ValueError(
            f"config key 'gpuNodeCount': {cfg.gpu_node_count} x {gpu.instance_type} need {needed} vCPUs, above the "
            f"account's {vcpu_quota}-vCPU '{quota.name}' quota ({quota.code}) in this region; allowed: at most "
            f"{vcpu_quota // gpu.vcpus} nodes, or ask for more (python -m tools.capacity prints the request)")


def _quota(service_code: str, quota_code: str) -> int | None:
    """A Service Quotas value, or None when it cannot be read (no servicequotas:GetServiceQuota permission)."""
    try:
        return int(aws.servicequotas.get_service_quota(service_code=service_code, quota_code=quota_code).value)
    except Exception as error:  # noqa: BLE001 - the provider reports a denied or failed read as a generic error
        warn(f"Service Quotas {service_code}/{quota_code} could not be read, so it is not checked: {error}")
        return None


def _vcpu_quota(gpu: InstanceFacts) -> int | None:
    try:
        quota = instance_facts.on_demand_quota(gpu.instance_type, "gpuInstanceType")
    except ValueError:
        return None  # a family without a quota the finder knows: nothing to compare with
    return _quota("ec2", quota.code)


def check_existing_reservation(cfg: StackConfig, found: dict[str, Any] | None, *, region: str,
                               now: datetime) -> ExistingReservation:
    """capacityReservationId as DescribeCapacityReservations returned it (None: not found), with `ClusterInstances`
    (this cluster's nodes already in it): the GPU node group must be able to launch every node into it."""
    key, reservation_id = "capacityReservationId", cfg.capacity_reservation_id
    if found is None:
        raise ValueError(f"config key {key!r}: {reservation_id} does not exist in {region} for this account; "
                         "allowed: the id of a reservation in aws:region, or empty")
    capacity_block = found.get("ReservationType") == "capacity-block"
    group_arn = found.get("PlacementGroupArn")
    group = placement_group_name(group_arn) if group_arn else None
    if cfg.gpu_placement == "cluster" and group is None:
        raise ValueError(
            f"config keys 'gpuPlacement', {key!r}: {reservation_id} is not in a placement group, and EC2 lets "
            "only instances outside any placement group use it, so gpuPlacement=cluster would leave every node "
            "without capacity; allowed: gpuPlacement auto or none")
    if cfg.gpu_placement == "none" and group is not None:
        raise ValueError(
            f"config keys 'gpuPlacement', {key!r}: {reservation_id} reserves capacity in placement group "
            f"{group}, which only instances launched into that group can use; allowed: gpuPlacement auto or cluster")

    problems = []
    state = found["State"]
    if state == "scheduled":
        problems.append(f"it is a Capacity Block that starts at {_when(found.get('StartDate'))}; run `pulumi up` "
                        "once it is active")
    elif state != "active":
        problems.append(f"its state is {state}")
    if found["AvailabilityZone"] != cfg.gpu_availability_zone:
        problems.append(f"it is in {found['AvailabilityZone']}, but gpuAvailabilityZone is "
                        f"{cfg.gpu_availability_zone} (allowed: {found['AvailabilityZone']})")
    if found["InstanceType"] != cfg.gpu_instance_type:
        problems.append(f"it holds {found['InstanceType']}, but gpuInstanceType is {cfg.gpu_instance_type}")
    if found["InstancePlatform"] != capacity_reservation.PLATFORM:
        problems.append(f"its platform is {found['InstancePlatform']}, but EKS's GPU AMIs run "
                        f"{capacity_reservation.PLATFORM}")
    if found["Tenancy"] != capacity_reservation.TENANCY:
        problems.append(f"its tenancy is {found['Tenancy']}, but the GPU nodes launch with "
                        f"{capacity_reservation.TENANCY} tenancy")
    if found.get("OutpostArn"):
        problems.append("it is on an AWS Outpost, whose reservations only instances launched in that Outpost's "
                        "subnets use (EC2 User Guide, \"Capacity Reservations on AWS Outposts\"), and the GPU nodes "
                        "launch in the region's subnets")
    free = found["AvailableInstanceCount"] + found.get("ClusterInstances", 0)
    if state == "active" and free < cfg.gpu_node_count:
        problems.append(f"{found['AvailableInstanceCount']} of its {found['TotalInstanceCount']} instances are free "
                        f"(and {found.get('ClusterInstances', 0)} are this cluster's nodes), but gpuNodeCount is "
                        f"{cfg.gpu_node_count}")
    end = found.get("EndDate")
    if capacity_block and end is not None:
        needed = CAPACITY_BLOCK_SETUP + (timedelta(minutes=cfg.train.timeout_minutes) if cfg.train.enabled
                                         else timedelta())
        usable = end - CAPACITY_BLOCK_TERMINATION_LEAD - max(now, found.get("StartDate") or now)
        if usable < needed:
            problems.append(f"the Capacity Block ends at {_when(end)} and EC2 stops its instances 30 minutes "
                            f"earlier, which leaves less than {needed} (node setup"
                            f"{' and trainTimeoutMinutes' if cfg.train.enabled else ''})")
    if problems:
        raise ValueError(
            f"config key {key!r}: {reservation_id} cannot hold the GPU nodes: " + "; ".join(problems)
            + f". Allowed: an active reservation with {cfg.gpu_node_count} free {cfg.gpu_instance_type} in "
            f"gpuAvailabilityZone, {capacity_reservation.PLATFORM}, {capacity_reservation.TENANCY} tenancy, "
            "not on an Outpost")
    return ExistingReservation(reservation_id=reservation_id, availability_zone=found["AvailabilityZone"],
                               capacity_block=capacity_block, placement_group=group)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "?"
