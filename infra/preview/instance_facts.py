"""Instance facts, read once from EC2 at preview: the only place GPUs, EFA interfaces and sizes come from.

Every other module takes the `InstanceFacts` built here, so no figure about the hardware is typed twice.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

import pulumi_aws as aws

from infra.config import InstanceFacts, check_efa_gpu, config_error


# The GPU instance types of the project's stacks (Pulumi.<stack>.yaml): GPUs per node and each GPU's memory in MiB,
# EC2 DescribeInstanceTypes' figures (and its GPU name) (tests/support/instance_facts.py holds the same, and a test keeps the two
# equal). A refusal of the job's memory names which of them would fit without an EC2 call per type; the stack's own type
# is always read live.
class KnownGpuInstance(NamedTuple):
    gpus: int
    gpu_memory_mib: int
    gpu_name: str


KNOWN_GPU_INSTANCE_TYPES = {
    "g6.12xlarge": KnownGpuInstance(4, 22888, "L4"),
    "g6e.12xlarge": KnownGpuInstance(4, 46068, "L40S"),
    "p4d.24xlarge": KnownGpuInstance(8, 40960, "A100"),  # A100 40 GB
    "p5.48xlarge": KnownGpuInstance(8, 81920, "H100"),
}


def known_gpu_facts(instance_type: str) -> InstanceFacts | None:
    """The project's figures for one of KNOWN_GPU_INSTANCE_TYPES as InstanceFacts (GPUs, their memory and name; the
    EFA and host fields unknown, as 0), for a tool that runs without Pulumi's EC2 look-up; None for another type."""
    known = KNOWN_GPU_INSTANCE_TYPES.get(instance_type)
    if known is None:
        return None
    return InstanceFacts(instance_type=instance_type, gpus=known.gpus, gpu_memory_mib=known.gpu_memory_mib,
                         efa_supported=True, maximum_efa_interfaces=0, network_cards=1, vcpus=0, memory_mib=0,
                         gpu_name=known.gpu_name)


def lookup(instance_type: str, *, config_key: str) -> InstanceFacts:
    """Describe `instance_type` through EC2 (a synchronous invoke, so it runs before any resource exists)."""
    try:
        described = aws.ec2.get_instance_type(instance_type=instance_type)
    except Exception as e:  # the provider reports an unknown type (or missing credentials) as a generic error
        raise ValueError(
            f"config key {config_key!r}: EC2 cannot describe instance type {instance_type!r} in this region: {e}"
        ) from e
    gpus = described.gpuses or []
    return InstanceFacts(
        instance_type=instance_type,
        gpus=sum(gpu.count for gpu in gpus),
        gpu_memory_mib=max((gpu.memory_size for gpu in gpus), default=0),
        efa_supported=bool(described.efa_supported),
        maximum_efa_interfaces=described.efa_maximum_interfaces or 0,
        network_cards=described.maximum_network_cards or 1,
        vcpus=described.default_vcpus,
        memory_mib=described.memory_size,
        architectures=tuple(described.supported_architectures or ()),
        gpu_name=gpus[0].name if gpus else "",
        # Per card, so p5's 32 cards add up to its 3200 Gbit/s; EFA traffic shares these cards' bandwidth.
        network_gbps=sum(card.peak_bandwidth or 0.0 for card in described.network_cards or []),
        instance_store_gb=described.total_instance_storage or 0,
        instance_store_disks=sum(disk.count for disk in described.instance_disks or []),
    )


def gpu_instance_facts(instance_type: str) -> InstanceFacts:
    """The GPU node type's facts, refused unless it has GPUs and EFA."""
    return check_efa_gpu(lookup(instance_type, config_key="gpuInstanceType"))


# On-Demand vCPU quotas (service code ec2) by the letters that open the instance family. Codes as Service
# Quotas names them; L-1216C47A is the Standard (A, C, D, H, I, M, R, T, Z) quota, not Inf.
ON_DEMAND_QUOTAS: dict[str, tuple[str, str]] = {
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "gr": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "vt": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
    "dl": ("L-6E869C2A", "Running On-Demand DL instances"),
}
_FAMILY_LETTERS = re.compile(r"^([a-z]+)\d")


@dataclass(frozen=True)
class OnDemandQuota:
    """The On-Demand vCPU quota that an instance family draws on."""

    code: str
    name: str


def on_demand_quota(instance_type: str, setting: str = "--instance-type") -> OnDemandQuota:
    """The quota of `instance_type`'s family: "g6e.12xlarge" -> G and VT, "trn1n.32xlarge" -> Trn. `setting` names
    where the type came from, for the error (the finder's flag, or a config key)."""
    match = _FAMILY_LETTERS.match(instance_type.split(".", 1)[0])
    letters = match.group(1) if match else ""
    if letters not in ON_DEMAND_QUOTAS:
        problem = (f"not an accelerated instance family with a known On-Demand quota; allowed families start with "
                   f"one of {sorted(ON_DEMAND_QUOTAS)} (G and VT, P, Trn, Inf, DL)")
        # A flag of the finder's is named as flags are; a stack key in the preview's one form.
        raise (ValueError(f"{setting} {instance_type}: {problem}") if setting.startswith("--")
               else config_error(setting, f"{instance_type}: {problem}"))
    return OnDemandQuota(*ON_DEMAND_QUOTAS[letters])
