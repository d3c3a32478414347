"""The stack's configuration: one frozen dataclass, read from the keys that Pulumi.yaml declares.

Every key has its type, default and description in Pulumi.yaml. `load()` reads them and validates each one
with a ValueError that names the key and the allowed values, before any resource is registered.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class InstanceFacts:
    """What EC2 says about an instance type: the one source of GPU, EFA and size figures (never typed twice)."""

    instance_type: str
    gpus: int
    gpu_memory_mib: int
    efa_supported: bool
    maximum_efa_interfaces: int
    network_cards: int
    vcpus: int
    memory_mib: int


@dataclass(frozen=True)
class TrainConfig:
    """The training job that `pulumi up` runs when enabled (keys train*)."""

    enabled: bool
    run_id: str
    model_id: str
    model_config: str
    steps: int
    batch_size: int
    seq_len: int
    learning_rate: float
    num_workers: int
    max_failures: int
    storage_path: str
    pip: tuple[str, ...]
    env: dict[str, str]
    timeout_minutes: int
    expect_transport: str


@dataclass(frozen=True)
class StackConfig:
    """Every setting of the stack, validated."""

    cluster_name: str
    kubernetes_version: str
    vpc_cidr: str
    vpc_availability_zones: tuple[str, ...]
    system_instance_type: str
    system_node_count: int
    gpu_instance_type: str
    gpu_node_count: int
    gpu_availability_zone: str
    gpu_root_volume_gib: int
    gpu_placement: str
    capacity_reservation_id: str
    capacity_reserve: bool
    capacity_candidate_azs: tuple[str, ...]
    dlc_image: str
    ray_namespace: str
    ray_cluster_name: str
    transport_env: dict[str, str] = field(default_factory=dict)
    """NCCL_DEBUG, NCCL_SOCKET_IFNAME, FI_PROVIDER and NCCL_NET_PLUGIN for the Ray workers."""
    train: TrainConfig | None = None
