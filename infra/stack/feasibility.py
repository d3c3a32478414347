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

from infra.kubernetes import addons
from infra.aws import capacity_reservation
from infra.stack import config
from infra.stack import instance_facts
from infra.stack import model_config
from infra.aws import network
from infra.job import ray_job
from infra.kubernetes import raycluster
from infra.stack.config import AwsIdentity, InstanceFacts, StackConfig, arn_parts
from infra.aws.gpu_nodes import placement_group_name, use_placement_group
from workload.model import memory
from workload.model import memory_plan
from workload.config import CHAT_TEMPLATES, is_local_dataset
from workload.data.chat import KNOWN_CHAT_TEMPLATES

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


@config.hides_secret_values
def check(cfg: StackConfig) -> StackPlan:
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
        None if config.WORLD_CIDR in cfg.api_public_access_cidrs else network.deployer_public_ip())
    if config.WORLD_CIDR in public_cidrs:
        pulumi.log.warn("apiPublicAccessCidrs includes 0.0.0.0/0: the API server's endpoint answers the whole internet "
                        "(a stolen credential works from anywhere)")
    region = network.aws_region()
    zone_ids = network.region_availability_zones()
    vpc_azs = network.choose_vpc_azs(cfg.vpc_availability_zones, zone_ids)
    candidate_azs = network.reservation_candidate_azs(cfg, vpc_azs) if cfg.capacity_reserve else ()
    network.check_gpu_azs(vpc_azs, gpu_az=cfg.gpu_availability_zone, candidate_azs=candidate_azs)
    gpu = instance_facts.gpu_instance_facts(cfg.gpu_instance_type)
    check_system_instance(instance_facts.lookup(cfg.system_instance_type, config_key="systemInstanceType"))
    addons.check_efa_allowlist(cfg.gpu_instance_type)
    image = raycluster.check_config(cfg, gpu)
    job_memory = check_job(cfg, gpu, identity=identity, region=region) if cfg.train.enabled else None
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
                     account_id=caller.account_id, partition=arn_parts(caller.arn)[0], memory_plan=job_memory)


# ---- AWS identity --------------------------------------------------------------------------------------------

def aws_identity(aws_config: Any) -> AwsIdentity:
    """aws:profile and the role of aws:assumeRoles, which the kubeconfig and the dynamic providers must use too;
    refused where they cannot (pulumi-eks writes one `--role` into the kubeconfig's `aws eks get-token`)."""
    if aws_config.get("assumeRole"):
        raise ValueError(
            "config key 'aws:assumeRole' is pulumi-aws 6's; this project's pulumi-aws 7 reads only aws:assumeRoles "
            "(a list), so the stack would run as the ambient identity. Allowed: aws:assumeRoles with one role, "
            "e.g. [{roleArn: arn:aws:iam::123456789012:role/deployer}]")
    roles = aws_config.get_object("assumeRoles") or []
    profile = aws_config.get("profile") or None
    if not roles:
        return AwsIdentity(profile=profile)
    if len(roles) > 1:
        raise ValueError(
            f"config key 'aws:assumeRoles': a chain of {len(roles)} roles cannot reach the kubeconfig, whose "
            "`aws eks get-token --role` assumes one role from the ambient credentials, so Helm and the RayCluster "
            "would get 401. Allowed: one role, or an aws:profile whose own AWS config chains the roles")
    role = roles[0]
    if not role.get("roleArn"):
        raise ValueError("config key 'aws:assumeRoles': the role has no roleArn; "
                         "allowed: [{roleArn: arn:aws:iam::...}]")
    if role.get("externalId"):
        raise ValueError(
            "config key 'aws:assumeRoles': `aws eks get-token` in the kubeconfig cannot pass the role's externalId, "
            "so Helm and the RayCluster would get 401. Allowed: a role without externalId, or an aws:profile that "
            "sets role_arn and external_id in its AWS config")
    return AwsIdentity(profile=profile, role_arn=role["roleArn"])


# ---- the cluster -----------------------------------------------------------------------------------------------

def principal_of(caller_arn: str) -> str:
    """The IAM principal behind a caller: an assumed-role session (arn:aws:sts::A:assumed-role/ROLE/SESSION) is its
    role, arn:aws:iam::A:role/ROLE; a user is itself."""
    partition, account, resource = arn_parts(caller_arn)
    if resource.startswith("assumed-role/"):
        return f"arn:{partition}:iam::{account}:role/{resource.split('/')[1]}"
    return caller_arn


def creator_of(caller_arn: str) -> str:
    """The IAM principal behind the caller with its path (a role's session ARN shows none): what EKS makes the
    bootstrap cluster admin and the key policy names (aws.iam.get_session_context, as terraform-aws-eks does for its
    key administrators)."""
    return aws.iam.get_session_context(arn=caller_arn).issuer_arn or principal_of(caller_arn)


def _same_principal(a: str, b: str) -> bool:
    """Equal but for an IAM path (role/team/ROLE is ROLE to an assumed-role session, which shows no path)."""
    def key(arn: str) -> tuple[str, str, str]:
        _, account, resource = arn_parts(arn)
        kind, _, rest = resource.partition("/")
        return account, kind, rest.rsplit("/", 1)[-1]
    return key(a) == key(b)


def check_access_entries(cfg: StackConfig, caller_arn: str) -> None:
    """EKS gives the principal that creates the cluster an access entry of its own (pulumi-eks always sets
    bootstrapClusterCreatorAdminPermissions), and a second entry for it fails the cluster's creation with
    ResourceInUseException, twenty minutes in."""
    creator = principal_of(caller_arn)
    for key, principals in (("clusterAdmins", cfg.cluster_admins), ("clusterViewers", cfg.cluster_viewers)):
        for arn in principals:
            if _same_principal(arn, creator):
                raise ValueError(
                    f"config key {key!r}: {arn} is the identity that runs `pulumi up` ({creator}), which EKS already "
                    "makes the cluster's admin as its creator, and a second access entry for it fails; allowed: "
                    "other principals")


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
        pulumi.log.warn(f"Service Quotas {service_code}/{quota_code} could not be read, so it is not checked: {error}")
        return None


def _vcpu_quota(gpu: InstanceFacts) -> int | None:
    try:
        quota = instance_facts.on_demand_quota(gpu.instance_type, "gpuInstanceType")
    except ValueError:
        return None  # a family without a quota the finder knows: nothing to compare with
    return _quota("ec2", quota.code)


# ---- an existing reservation ------------------------------------------------------------------------------------

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
            f"config keys 'gpuPlacement' and {key!r}: {reservation_id} is not in a placement group, and EC2 lets "
            "only instances outside any placement group use it, so gpuPlacement=cluster would leave every node "
            "without capacity; allowed: gpuPlacement auto or none")
    if cfg.gpu_placement == "none" and group is not None:
        raise ValueError(
            f"config keys 'gpuPlacement' and {key!r}: {reservation_id} reserves capacity in placement group "
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
            f"gpuAvailabilityZone, {capacity_reservation.PLATFORM}, {capacity_reservation.TENANCY} tenancy")
    return ExistingReservation(reservation_id=reservation_id, availability_zone=found["AvailabilityZone"],
                               capacity_block=capacity_block, placement_group=group)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "?"


# ---- the job -----------------------------------------------------------------------------------------------------

def check_job(cfg: StackConfig, gpu: InstanceFacts, *, identity: AwsIdentity | None = None,
              region: str | None = None) -> memory_plan.MemoryPlan | None:
    """A job the cluster can run: its data, its workers, its shape against the model and the GPUs' memory (the
    memory plan it returns), its checkpoints, its transport expectation and its fabric minimum (trainPip is judged
    with the config)."""
    check_job_data(cfg)
    workload = ray_job.workload_config(cfg, gpu)  # the workload's own checks of the flags first
    check_chat_template(cfg)
    train = cfg.train
    gpus = gpu.gpus * cfg.gpu_node_count
    workers = train.num_workers or gpus
    if workers > gpus:
        raise ValueError(f"config key 'trainNumWorkers': {workers} workers need a GPU each, and the cluster has "
                         f"{gpus} ({cfg.gpu_node_count} x {gpu.gpus}); allowed: 0 (one per GPU) to {gpus}")
    architecture = model_config.resolve(train.model_id, train.model_config,
                                        hub_token=train.secret_env.reveal().get(model_config.HUB_TOKEN_VARIABLE),
                                        identity=identity, region=region)
    plan = None
    if isinstance(architecture, model_config.Known):
        plan = check_job_shape(workload, architecture.config, gpu, workers, model=train.model_config or train.model_id,
                               node_count=cfg.gpu_node_count)
    else:
        pulumi.log.warn(f"trainModelId {train.model_id}: {architecture.reason}, so trainSeqLen and the GPU memory of "
                        "the job are checked only on the cluster")
    if train.storage_path and not train.storage_path.startswith("s3://") and cfg.gpu_node_count > 1:
        raise ValueError(
            f"config key 'trainStoragePath': {train.storage_path} is a directory on each node, and Ray Train needs "
            f"one place that the workers on all {cfg.gpu_node_count} GPU nodes and the head share; allowed: "
            "s3://bucket/prefix (the Ray pods' own role gets access to it), or empty for no checkpoints")
    check_transport_expectation(cfg, gpu, workers)
    check_min_bus_bandwidth(cfg, gpu, workers)
    return plan


def check_job_data(cfg: StackConfig) -> None:
    """The job's dataset and tokenizer must be where its pods can read them: the hub or S3. A path on this machine is
    not in the pods, and on a cluster of several nodes a file on one node is not on the others."""
    train = cfg.train
    nodes = f"the job's pods on {cfg.gpu_node_count} GPU node{'s' if cfg.gpu_node_count > 1 else ''}"
    if is_local_dataset(train.dataset):
        raise ValueError(
            f"config key 'trainDataset': {train.dataset} is a path on this machine, which {nodes} cannot read; "
            "allowed: s3://bucket/key.jsonl (or .txt, .json; the Ray pods' role gets read access to it), or a Hugging "
            "Face dataset id")
    if train.tokenizer.startswith(("/", "./", "../", "~")):
        raise ValueError(
            f"config key 'trainTokenizer': {train.tokenizer} is a path on this machine, which {nodes} cannot read; "
            "allowed: a Hugging Face tokenizer or model id, or empty for trainModelId's tokenizer")


def check_chat_template(cfg: StackConfig) -> None:
    """Chat and prompt-completion data are rendered with the tokenizer's chat template: a tokenizer known to have
    none is refused unless trainChatTemplate names one; one not known here is checked by the job before it trains."""
    train = cfg.train
    if train.examples.data_format == "text" or train.examples.chat_template:
        return
    tokenizer = train.tokenizer or train.model_id
    key = "trainTokenizer" if train.tokenizer else "trainModelId"
    known = KNOWN_CHAT_TEMPLATES.get(tokenizer)
    if known is False:
        raise ValueError(
            f"config key '{key}': the tokenizer {tokenizer} has no chat template, so trainDataFormat "
            f"{train.examples.data_format} cannot render its records the way the model will see them; allowed: set "
            f"trainChatTemplate to one of {list(CHAT_TEMPLATES)}, or a tokenizer that has a template")
    if known is None:
        pulumi.log.warn(f"{key} {tokenizer}: whether its tokenizer has a chat template is not known before it is "
                        "downloaded; the job checks it before any worker starts")


def check_job_shape(workload: Any, architecture: dict, gpu: InstanceFacts, workers: int, *, model: str,
                    node_count: int) -> memory_plan.MemoryPlan:
    """Sequence length against the model's positions; the memory plan (workload.model.memory_plan, the function the job
    runs) for the job's flags on `workers` GPUs of `gpu`. Refused when no plan fits, naming the memory the model needs
    per GPU and what would fit: a smaller per-GPU batch, more nodes, or another instance type the project knows."""
    positions = architecture.get("max_position_embeddings")
    if positions and workload.seq_len > positions:
        raise ValueError(f"config key 'trainSeqLen': {workload.seq_len} tokens exceed {model}'s {positions} positions; "
                         f"allowed: 1 to {positions}")
    compiled = workload.compile is not False  # the job compiles on a GPU unless told not to
    plan = memory_plan.for_job(workload, architecture, world_size=workers, ranks_per_node=gpu.gpus,
                               gpu_memory_mib=gpu.gpu_memory_mib, compiled=compiled)
    if plan.fits:
        return plan
    billions = memory.parameter_count(architecture) / 1e9
    raise ValueError(
        f"config keys 'trainModelId', 'trainBatchSize' and 'trainSeqLen': {model} ({billions:.2f} B parameters) needs "
        f"{plan.peak_gib:.1f} GiB on each of the {workers} GPUs of {gpu.instance_type} at {workload.batch_size} x "
        f"{workload.seq_len} tokens per GPU even with {plan.describe().split(':')[0]}, and they leave "
        f"{plan.usable_gib - memory.MARGIN_GIB:.1f} GiB ({memory.MARGIN_GIB:g} GiB kept free); allowed: "
        + "; or ".join(what_would_fit(workload, architecture, gpu, workers, node_count=node_count, compiled=compiled)))


def what_would_fit(workload: Any, architecture: dict, gpu: InstanceFacts, workers: int, *, node_count: int,
                   compiled: bool) -> list[str]:
    """A refusal's alternatives, each found in closed form or by binary search: a smaller per-GPU batch on this
    cluster, the node count of this type at which the shards fit, the known instance types that fit at this node
    count (or the node count they need)."""
    options = []
    batch = memory_plan.largest_micro_batch(architecture, seq_len=workload.seq_len, shards=workers,
                                            world_size=workers, gpu_memory_mib=gpu.gpu_memory_mib,
                                            below=workload.batch_size, compiled=compiled)
    if batch:
        options.append(f"a per-GPU batch (trainBatchSize) of {'1' if batch == 1 else f'1 to {batch}'} at trainSeqLen "
                       f"{workload.seq_len}")

    def nodes_for(gpus_per_node: int, gpu_memory_mib: int) -> int | None:
        shards = memory.shards_needed(architecture, usable=memory.usable_gib(gpu_memory_mib),
                                      micro_batch=workload.batch_size, seq_len=workload.seq_len,
                                      activation_checkpointing=True, reshard_after_forward=True, grad_accum_steps=1,
                                      reduce_dtype=workload.reduce_dtype, compiled=compiled)
        return -(-shards // gpus_per_node) if shards else None

    nodes = nodes_for(gpu.gpus, gpu.gpu_memory_mib)
    if nodes and nodes > node_count:
        options.append(f"gpuNodeCount {nodes} or more of {gpu.instance_type} (the state sharded over "
                       f"{nodes * gpu.gpus} GPUs, with full sharding, activation checkpointing and "
                       "reshard_after_forward)")
    for instance_type, (gpus_per_node, gpu_memory_mib, _) in instance_facts.KNOWN_GPU_INSTANCE_TYPES.items():
        if instance_type == gpu.instance_type or gpu_memory_mib <= gpu.gpu_memory_mib:
            continue
        other = memory_plan.for_job(workload, architecture, world_size=gpus_per_node * node_count,
                                    ranks_per_node=gpus_per_node, gpu_memory_mib=gpu_memory_mib, compiled=compiled)
        if other.fits:
            options.append(f"gpuInstanceType {instance_type} ({node_count} nodes: {other.describe().split(':')[0]})")
        elif (needed := nodes_for(gpus_per_node, gpu_memory_mib)) is not None:
            options.append(f"gpuInstanceType {instance_type} with gpuNodeCount {needed} or more")
    return options or [f"a smaller model or a shorter trainSeqLen (nothing the project knows fits {workload.seq_len}"
                       " tokens)"]


def check_transport_expectation(cfg: StackConfig, gpu: InstanceFacts, workers: int) -> None:
    """trainExpectTransport must be what this cluster and the job's env can show: the job fails after it ran
    (and billed) when every rank's NCCL transport differs from it."""
    expect = cfg.train.expect_transport
    env = {**cfg.transport_env, **cfg.train.env}  # what the ranks see: the job's runtime_env wins
    sockets = env.get("NCCL_NET", "").lower() == "socket" or env.get("FI_PROVIDER") != "efa"
    # Ray Train's default placement packs workers onto as few nodes as hold them (ScalingConfig
    # placement_strategy="PACK"): workers that fit on one node's GPUs never cross nodes.
    crosses_nodes = cfg.gpu_node_count > 1 and workers > gpu.gpus
    key = "trainExpectTransport"
    if expect in ("efa", "socket") and not crosses_nodes:
        raise ValueError(
            f"config key {key!r}: {expect} needs ranks on two or more nodes, but the job's {workers} workers "
            f"{'have one GPU node' if cfg.gpu_node_count == 1 else f'fit on one node of {gpu.gpus} GPUs'}, so NCCL "
            "shows intra-node; allowed: intra-node or any (or more gpuNodeCount / trainNumWorkers)")
    if expect == "efa" and sockets:
        # trainEnv's values are never quoted (they may hold a token); fiProvider's may be.
        forced = ("trainEnv NCCL_NET=Socket" if env.get("NCCL_NET", "").lower() == "socket"
                  else "trainEnv's FI_PROVIDER" if "FI_PROVIDER" in cfg.train.env
                  else f"FI_PROVIDER={env.get('FI_PROVIDER')} (fiProvider)")
        raise ValueError(f"config key {key!r}: efa, but {forced} sends NCCL over TCP sockets; allowed: socket or "
                         "any with that env, or efa without it")
    if expect == "socket" and not sockets:
        raise ValueError(f"config key {key!r}: socket, but the workers load aws-ofi-nccl on EFA, so NCCL uses EFA; "
                         "allowed: efa or any, or socket with trainEnv NCCL_NET=Socket")
    if expect == "intra-node" and crosses_nodes:
        raise ValueError(f"config key {key!r}: intra-node, but {workers} workers span more than one node of "
                         f"{gpu.gpus} GPUs; allowed: efa or any, or trainNumWorkers up to {gpu.gpus}")


def check_min_bus_bandwidth(cfg: StackConfig, gpu: InstanceFacts, workers: int) -> None:
    """trainMinBusBandwidthGBps must be one the fabric can reach: across nodes, a collective's bus bandwidth (as
    nccl-tests counts it) is bounded by a node's network, EC2's network_gbps / 8 in GB/s. Within one node the bound is
    NVLink's or PCIe's, which EC2 does not describe, so only the network's is checked."""
    minimum = cfg.train.min_bus_gbytes_per_s
    link = gpu.network_gbps / 8
    if cfg.gpu_node_count > 1 and workers > gpu.gpus and link and minimum > link:
        raise ValueError(
            f"config key 'trainMinBusBandwidthGBps': {minimum:g} GB/s is more than the {gpu.network_gbps:g} Gbit/s "
            f"network of {gpu.instance_type} carries between nodes ({link:g} GB/s), so the job would always fail "
            f"its fabric check; allowed: 0 (no minimum) to {link:g}")
