"""The stack's config, loaded and validated: `load()` reads the keys Pulumi.yaml declares (schema.py) and
`parse()` checks each one with a ValueError that names the key and the allowed values, before any resource is
registered."""
from __future__ import annotations

import ipaddress
from typing import Any

import pulumi

from infra.config.experiment_tracking import parse_experiment_tracking
from infra.config.naming import default_cluster_name
from infra.config.rules import (
    CLUSTER_NAME,
    CUDA_VERSION,
    EKS_PUBLIC_ACCESS_CIDRS_MAX,
    INSTANCE_TYPE,
    K8S_VERSION,
    MAX_VPC_AZS,
    PLUGIN_WORD,
    POD_INTERFACE,
    POD_INTERFACES,
    PRINCIPAL_ARN,
    RAY_VERSION,
    RESERVATION_ID,
    SOCKET_IFNAME,
    check_az_list,
    check_vpc_range,
    require,
    require_choice,
    require_unique,
    socket_ifname_matches,
)
from infra.config.schema import (
    check_secret_keys,
    check_text_bounds,
    check_unknown_keys,
    hides_secret_values,
    is_stack_secret,
    project_name,
    read_raw_config,
    schema,
    stack_config_keys,
)
from infra.config.secret_placement import check_secret_placement
from infra.config.settings import (
    GPU_PLACEMENTS,
    IDLE_STOP_MAXIMUM_MINUTES,
    IDLE_STOP_MINIMUM_MINUTES,
    LOG_RETENTION_DAYS,
    MAX_RESERVATION_HOURS,
    MONITORING_BACKENDS,
    NCCL_DEBUG_LEVELS,
    WORLD_CIDR,
    StackConfig,
)
from infra.config.train_keys import parse_train
from workload.config.fields import quotable, shown_value


@hides_secret_values
def load(config: Any | None = None) -> StackConfig:
    """Read the stack's config per Pulumi.yaml and validate it. Touches no cloud resource."""
    check_unknown_keys(stack_config_keys(), project_name(), set(schema()))
    project = project_name()
    raw = read_raw_config(config, frozenset(key for key in schema() if is_stack_secret(f"{project}:{key}")))
    check_secret_placement(raw, project, is_stack_secret)
    check_secret_keys(raw, project, is_stack_secret)
    # Unique names per stack: an empty clusterName (the default) is `ray-train-<stack>` (infra/config/naming.py).
    raw["clusterName"] = raw["clusterName"] or default_cluster_name(pulumi.get_stack())
    return parse(raw)


def parse(raw: dict[str, Any]) -> StackConfig:
    """Validate raw config values (named as in Pulumi.yaml) into a StackConfig.

    Each mistake is a ValueError naming the key and what it allows. Checks that need EC2 (the instance
    type's facts, the region's AZs) come later, in infra.preview.instance_facts and infra.aws.network, still before any
    resource is registered.
    """
    check_text_bounds(raw)
    require(bool(CLUSTER_NAME.fullmatch(raw["clusterName"])), "clusterName",
             f"{shown_value(raw['clusterName'])} must start with a letter and hold 1-39 letters, digits or hyphens "
             "(it prefixes every AWS name, some of which are capped at 64 characters)")
    require(bool(K8S_VERSION.fullmatch(raw["kubernetesVersion"])), "kubernetesVersion",
             f"{shown_value(raw['kubernetesVersion'])} must be an EKS minor version like 1.34")
    try:
        vpc = ipaddress.IPv4Network(raw["vpcCidr"])
    except ValueError as e:
        # ipaddress's own message repeats the value: said only when the value may be quoted.
        why = f": {e}" if quotable(raw["vpcCidr"]) else ""
        raise ValueError(f"config key 'vpcCidr': {shown_value(raw['vpcCidr'])} is not an IPv4 CIDR{why}") from None
    require(16 <= vpc.prefixlen <= 20, "vpcCidr",
             f"{raw['vpcCidr']} must be a /16 to /20 (private subnets get an eighth of it per AZ)")
    check_vpc_range(vpc)

    vpc_azs = check_az_list("vpcAvailabilityZones", raw["vpcAvailabilityZones"])
    require(not vpc_azs or len(vpc_azs) >= 2, "vpcAvailabilityZones",
             f"EKS needs subnets in at least two AZs; got {list(vpc_azs)} (or leave it empty for all of them)")
    require(len(vpc_azs) <= MAX_VPC_AZS, "vpcAvailabilityZones",
            f"at most {MAX_VPC_AZS} AZs (the VPC is split in eighths)")

    for key in ("systemInstanceType", "gpuInstanceType"):
        require(bool(INSTANCE_TYPE.fullmatch(raw[key])), key, f"{shown_value(raw[key])} is not an EC2 instance type "
                                                              "name")
    require(raw["systemNodeCount"] >= 1, "systemNodeCount",
             f"must be at least 1 (the KubeRay operator and the Ray head run there), got {raw['systemNodeCount']}")
    require(raw["gpuNodeCount"] >= 1, "gpuNodeCount", f"must be at least 1, got {raw['gpuNodeCount']}")
    require(100 <= raw["gpuRootVolumeGiB"] <= 16384, "gpuRootVolumeGiB",
             f"must be 100 to 16384 GiB (the training image alone needs tens of GiB), got {raw['gpuRootVolumeGiB']}")

    placement = raw["gpuPlacement"]
    require_choice(placement, GPU_PLACEMENTS, "gpuPlacement")
    reservation_id = raw["capacityReservationId"]
    require(reservation_id == "" or bool(RESERVATION_ID.fullmatch(reservation_id)), "capacityReservationId",
             f"{shown_value(reservation_id)} must be empty or a reservation id like cr-0123456789abcdef0")
    reserve = raw["capacityReserve"]
    require(not (reserve and reservation_id), "capacityReserve",
             "cannot be true while capacityReservationId is set: target the existing reservation or create one")

    gpu_az = raw["gpuAvailabilityZone"]
    if gpu_az:
        check_az_list("gpuAvailabilityZone", [gpu_az])
    require(bool(gpu_az) or reserve, "gpuAvailabilityZone",
             "is required (every GPU node sits in this one AZ, EFA does not cross AZs) unless capacityReserve "
             "picks it; with capacityReservationId, set it to the reservation's AZ")
    candidates = check_az_list("capacityCandidateAzs", raw["capacityCandidateAzs"])
    require(not candidates or reserve, "capacityCandidateAzs", "is only used with capacityReserve=true")

    # dlcImage, rayNamespace and rayClusterName are checked by raycluster.check_config, which the program runs
    # before any resource: KubeRay's own limits on them live beside the manifest they end up in. rayVersion and
    # imageCudaVersion are checked against the image there too; here only their form.
    # A version is a few characters: a longer value is no version, and is not quoted (it may hold anything).
    require(raw["rayVersion"] == "" or bool(RAY_VERSION.fullmatch(raw["rayVersion"])), "rayVersion",
             f"{_version_shown(raw['rayVersion'])} must be empty (the known image's) or a Ray release like 2.58.0")
    require(raw["imageCudaVersion"] == "" or bool(CUDA_VERSION.fullmatch(raw["imageCudaVersion"])), "imageCudaVersion",
             f"{_version_shown(raw['imageCudaVersion'])} must be empty (the known image's) or a CUDA major.minor like "
             "13.0")
    require_choice(raw["ncclDebug"], NCCL_DEBUG_LEVELS, "ncclDebug")
    require(bool(SOCKET_IFNAME.fullmatch(raw["ncclSocketIfname"])), "ncclSocketIfname",
             f"{shown_value(raw['ncclSocketIfname'])} must be interface name prefixes as NCCL takes them: like eth0, "
             "eth or "
             "^docker,lo (comma-separated, led by ^ to exclude or = to match exactly; letters, digits, '_.:-')")
    require(socket_ifname_matches(raw["ncclSocketIfname"], POD_INTERFACE), "ncclSocketIfname",
             f"{shown_value(raw['ncclSocketIfname'])} does not select {POD_INTERFACE}, and a Ray pod on EKS's VPC "
             "CNI has only "
             f"{' and '.join(POD_INTERFACES)} (lo reaches no other node); allowed: a value that selects eth0, such as "
             "eth0, eth, =eth0 or ^lo")
    for key in ("fiProvider", "ncclNetPlugin"):
        require(bool(PLUGIN_WORD.fullmatch(raw[key])), key,
                 f"{shown_value(raw[key])} must be a single non-empty word (letters, digits and '_.;,+-'), like efa "
                 "or aws-ofi")

    retention = raw["controlPlaneLogRetentionDays"]
    require_choice(retention, LOG_RETENTION_DAYS, "controlPlaneLogRetentionDays",
                   " (CloudWatch's retention periods; 0: never expire)")
    admins = _check_principals("clusterAdmins", raw["clusterAdmins"])
    viewers = _check_principals("clusterViewers", raw["clusterViewers"])
    both = sorted(set(admins) & set(viewers))
    if both:
        more = f" (and {len(both) - 1} more)" if len(both) > 1 else ""
        raise ValueError(f"config key 'clusterViewers': {shown_value(both[0])}{more} is in clusterAdmins too; EKS "
                         "allows one "
                         "access entry per principal, so list each in one key")

    return StackConfig(
        cluster_name=raw["clusterName"],
        kubernetes_version=raw["kubernetesVersion"],
        vpc_cidr=str(vpc),
        vpc_availability_zones=vpc_azs,
        system_instance_type=raw["systemInstanceType"],
        system_node_count=raw["systemNodeCount"],
        gpu_instance_type=raw["gpuInstanceType"],
        gpu_node_count=raw["gpuNodeCount"],
        gpu_availability_zone=gpu_az,
        gpu_root_volume_gib=raw["gpuRootVolumeGiB"],
        gpu_placement=placement,
        capacity_reservation_id=reservation_id,
        capacity_reserve=reserve,
        capacity_candidate_azs=candidates,
        dlc_image=raw["dlcImage"],
        ray_version=raw["rayVersion"],
        image_cuda_version=raw["imageCudaVersion"],
        ray_namespace=raw["rayNamespace"],
        ray_cluster_name=raw["rayClusterName"],
        transport_env={
            "NCCL_DEBUG": raw["ncclDebug"],
            "NCCL_SOCKET_IFNAME": raw["ncclSocketIfname"],
            "FI_PROVIDER": raw["fiProvider"],
            "NCCL_NET_PLUGIN": raw["ncclNetPlugin"],
        },
        train=parse_train(raw),
        api_public_access_cidrs=_check_public_cidrs(raw["apiPublicAccessCidrs"]),
        control_plane_log_retention_days=retention,
        cluster_admins=admins,
        cluster_viewers=viewers,
        capacity_reservation_hours=_parse_reservation_hours(raw),
        **_parse_operations(raw),
    )


def _parse_operations(raw: dict[str, Any]) -> dict[str, Any]:
    require_choice(raw["monitoring"], MONITORING_BACKENDS, "monitoring")
    minutes = raw["gpuIdleStopMinutes"]
    require(minutes == 0 or IDLE_STOP_MINIMUM_MINUTES <= minutes <= IDLE_STOP_MAXIMUM_MINUTES, "gpuIdleStopMinutes",
             f"must be 0 (never stop) or {IDLE_STOP_MINIMUM_MINUTES} to {IDLE_STOP_MAXIMUM_MINUTES} minutes, "
             f"got {minutes}")
    return {"monitoring": raw["monitoring"], "gpu_node_repair": raw["gpuNodeRepair"],
            "gpu_idle_stop_minutes": minutes, "experiment_tracking": parse_experiment_tracking(raw)}


def _check_principals(key: str, arns: list[str]) -> tuple[str, ...]:
    for arn in arns:
        require(bool(PRINCIPAL_ARN.fullmatch(arn)), key,
                 f"{shown_value(arn)} is not an IAM role or user ARN like arn:aws:iam::123456789012:role/NAME")
    require_unique(key, arns, "a principal")
    return tuple(arns)


def _check_public_cidrs(cidrs: list[str]) -> tuple[str, ...]:
    """apiPublicAccessCidrs: public IPv4 blocks. A private block can never reach the public endpoint (nodes and anything
    inside the VPC use the private one), so it is a mistake rather than a setting."""
    key = "apiPublicAccessCidrs"
    checked = []
    for cidr in cidrs:
        try:
            network = ipaddress.IPv4Network(cidr)
        except ValueError as e:
            raise ValueError(f"config key {key!r}: {cidr!r} is not an IPv4 CIDR like 203.0.113.7/32: {e}") from e
        require(str(network) == WORLD_CIDR or network.is_global, key,
                 f"{cidr} is not a public address range; the public endpoint only sees public source addresses "
                 f"(allowed: public IPv4 CIDRs, or {WORLD_CIDR} to open it to the world)")
        checked.append(str(network))
    require_unique(key, checked, "a CIDR")
    require(len(checked) <= EKS_PUBLIC_ACCESS_CIDRS_MAX, key,
             f"lists {len(checked)} CIDRs; EKS accepts at most {EKS_PUBLIC_ACCESS_CIDRS_MAX} per cluster (and the "
             "preview adds this machine's address when no CIDR covers it); allowed: up to "
             f"{EKS_PUBLIC_ACCESS_CIDRS_MAX} public IPv4 CIDRs (join neighbours into a shorter prefix)")
    return tuple(checked)


def _parse_reservation_hours(raw: dict[str, Any]) -> int:
    hours = raw["capacityReservationHours"]
    require(0 <= hours <= MAX_RESERVATION_HOURS, "capacityReservationHours",
             f"must be 0 (until destroy) or a number of hours up to {MAX_RESERVATION_HOURS} (a year), got {hours}")
    require(hours == 0 or raw["capacityReserve"], "capacityReservationHours",
             "is only used with capacityReserve=true (it ends the reservation that the stack makes)")
    return hours


def _version_shown(value: str) -> str:
    """A version as its refusal quotes it: whole when it is short enough to be one (16 characters), else by length."""
    return repr(value) if len(value) <= 16 and value.isprintable() else f"a value of {len(value)} characters"
