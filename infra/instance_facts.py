"""Instance facts, read once from EC2 at preview: the only place GPUs, EFA interfaces and sizes come from.

Every other module takes the `InstanceFacts` built here, so no figure about the hardware is typed twice.
"""
from __future__ import annotations

import pulumi_aws as aws

from infra.config import InstanceFacts, check_efa_gpu


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
        gpu_name=gpus[0].name if gpus else "",
        # Per card, so p5's 32 cards add up to its 3200 Gbit/s; EFA traffic shares these cards' bandwidth.
        network_gbps=sum(card.peak_bandwidth or 0.0 for card in described.network_cards or []),
    )


def gpu_instance_facts(instance_type: str) -> InstanceFacts:
    """The GPU node type's facts, refused unless it has GPUs and EFA."""
    return check_efa_gpu(lookup(instance_type, config_key="gpuInstanceType"))
