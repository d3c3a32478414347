"""The stack's settings as the program uses them: frozen, typed dataclasses, and the bounds and choices
the keys are checked against."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from workload.config import MAX_BATCH_SIZE  # noqa: F401  (trainBatchSize's bound, declared with its flag)

GPU_PLACEMENTS = ("auto", "cluster", "none")
TRAIN_WAITS = ("finish", "transport")
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
# What CloudWatch Logs accepts for a log group's retention (PutRetentionPolicy); 0 means never expire.
LOG_RETENTION_DAYS = (0, 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
                      3288, 3653)
WORLD_CIDR = "0.0.0.0/0"
# Keys whose values must be Pulumi secrets (`pulumi config set --secret`): a plain value sits in Pulumi.<stack>.yaml,
# which is committed.
SECRET_KEYS = ("trainSecretEnv",)
# Keys whose values may hold a token: no refusal quotes them (nor any key the stack holds as a secret).
SECRET_VALUED_KEYS = (*SECRET_KEYS, "trainEnv")
# The only keys `pulumi config set --secret` may hold: their values reach the job's arguments, its env or the pods'
# image whole, where infra/config/secret_inputs.py keeps them secret. Every other key names or shapes cloud resources
# (clusterName and rayNamespace in resource names and ARNs, trainStoragePath in the pods' IAM policy, counts and sizes
# in plain inputs), and Pulumi shows names, URNs and values derived from a secret in plain text: refused as secrets
# (infra/config/secret_placement.py).
SECRET_CAPABLE_KEYS = frozenset({
    *SECRET_VALUED_KEYS, "dlcImage", "trainModelId", "trainModelConfig", "trainDataset", "trainDatasetConfig",
    "trainDatasetSplit", "trainTextField", "trainTokenizer", "trainMessagesField", "trainPromptField",
    "trainCompletionField", "trainChatTemplate", "trainEvalSplit", "trainMlflowTrackingUri", "trainWandbProject",
    "trainPushToHub", "trainPip", "trainLoraTargets"})
# Of those, the keys whose s3:// form goes into the Ray pods' IAM policy as ARNs (infra/aws/pod_identity.py): secret
# only while they are not on S3.
SECRET_UNLESS_S3_KEYS = ("trainModelId", "trainDataset")
# Upper bounds, so that nothing downstream overflows or searches for long (trainBatchSize's is declared with its flag):
# the job's deadline is a SIGALRM timer (workload/train.py) and a reservation's end a datetime.
MAX_TIMEOUT_MINUTES = 30 * 24 * 60  # 30 days; a longer run is several runs resuming from their checkpoints
MAX_RESERVATION_HOURS = 366 * 24  # a year: a hard stop meant to be one


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
    architectures: tuple[str, ...] = ("x86_64",)
    """What the type's processors run (x86_64, arm64): a node group's AMI must match."""
    gpu_name: str = ""
    """EC2's GPU name (L4, L40S, A100, H100), matched against workload.model.gpu_peaks.PEAK_BF16_FLOPS."""
    network_gbps: float = 0.0
    """A node's network bandwidth in Gbit/s: the sum of its network cards' peak bandwidth; 0 when EC2 gives none."""
    instance_store_gb: int = 0
    """The instance store's total size in GB (EC2's TotalSizeInGB); 0 for a type with none (EBS only)."""
    instance_store_disks: int = 0
    """How many disks make it up: nodeadm stripes them into one RAID0 volume (infra/aws/node_storage.py)."""

    @property
    def efa_interfaces(self) -> int:
        """EFA interfaces a node gets: one per network card, as far as the type allows (p5: 32, g6: 1)."""
        return min(self.network_cards, self.maximum_efa_interfaces) if self.efa_supported else 0

    @property
    def family(self) -> str:
        return self.instance_type.partition(".")[0]

    @property
    def nvlink_sharp(self) -> bool:
        """Whether its GPUs meet through third-generation NVSwitch with NVLink SHARP, which NCCL's NVLS algorithms
        need (HGX H100/H200/B200: p5, p5e, p5en, p6); p4d's A100s meet through an NVSwitch without it, G types over
        PCIe."""
        return self.family in NVLINK_SHARP_FAMILIES

    @property
    def efa_rdma_read(self) -> bool:
        """Whether its EFA devices do RDMA read (GPUDirect RDMA): the P and Trn families; not the G families."""
        return self.efa_supported and self.family in EFA_RDMA_READ_FAMILIES


# The fabric facts EC2's DescribeInstanceTypes does not give, by instance family. NVLink SHARP: NCCL's NVLS and
# NVLSTree algorithms (NCCL 2.17/2.18) run only on NVSwitch systems that offer it, third-generation NVSwitch on Hopper
# and later (NCCL's user guide, Environment Variables, NCCL_ALGO and NCCL_NVLS_ENABLE; NVIDIA HGX H100 datasheet); p4d's
# HGX A100 has second-generation NVSwitch, without SHARP. EFA RDMA read: the EC2 user guide's "Supported instance
# types" for EFA (RDMA read column) lists the P4, P5 and P6 families and Trn1/Trn2 and not the G families; the
# project's own measurements agree (no GPUDirect RDMA on G instances: aws/aws-ofi-nccl#547, docs/performance.md).
NVLINK_SHARP_FAMILIES = frozenset(("p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200"))
EFA_RDMA_READ_FAMILIES = frozenset(("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200", "trn1",
                                    "trn1n", "trn2"))


@dataclass(frozen=True)
class AwsIdentity:
    """Who the stack acts as in AWS: aws:profile (else the environment's credentials), then aws:assumeRoles' role.
    The AWS provider applies both itself; the kubeconfig and the dynamic providers are given them explicitly."""

    profile: str | None = None
    role_arn: str | None = None
    account_id: str | None = None
    """The account they reach, as the AWS provider says at preview (aws.get_caller_identity); the dynamic providers
    refuse to act in any other. None where nothing needed it."""


# The GPU nodes' AMI (infra/aws/gpu_nodes.py GPU_AMI_TYPE, AL2023_x86_64_NVIDIA) and the training image are x86_64.
GPU_ARCHITECTURE = "x86_64"
# Each EC2 GPU (DescribeInstanceTypes' GpuInfo name) and its CUDA compute capability (NVIDIA's CUDA GPUs list).
GPU_COMPUTE_CAPABILITY = {
    "K80": 3.7, "M60": 5.2, "V100": 7.0, "T4": 7.5, "T4g": 7.5, "A10G": 8.6, "A100": 8.0, "L4": 8.9, "L40S": 8.9,
    "H100": 9.0, "H200": 9.0, "B200": 10.0, "GB200": 10.0, "B300": 10.3,
}
# The oldest GPU the image's PyTorch runs on: its torch is a CUDA 13.0 build (infra/kubernetes/raycluster.py KNOWN
# images), and CUDA 13.0 removed Maxwell, Pascal and Volta (sm_50 to sm_72: CUDA 13.0 release notes, "Deprecated or
# Dropped Architectures"); PyTorch's cu128 and later wheels start at sm_75 (TORCH_CUDA_ARCH_LIST 7.5;8.0;8.6;9.0;10.0;
# 12.0). A V100 (p3, p3dn) would start, then fail at the first kernel: "no kernel image is available".
MIN_COMPUTE_CAPABILITY = 7.5
_GPU_TYPES_HINT = "choose an EFA-capable GPU type such as g6.12xlarge, g6e.12xlarge, p4d.24xlarge or p5.48xlarge"


def check_efa_gpu(facts: InstanceFacts, *, config_key: str = "gpuInstanceType") -> InstanceFacts:
    """Refuse a type that cannot carry the job: without GPUs nothing trains, on another architecture than the AMI's
    nothing boots, on a GPU older than the image's CUDA nothing runs, without EFA NCCL falls back to TCP."""
    if facts.gpus < 1:
        raise ValueError(f"config key {config_key!r}: {facts.instance_type} has no GPUs; {_GPU_TYPES_HINT}")
    if facts.architectures and GPU_ARCHITECTURE not in facts.architectures:
        raise ValueError(
            f"config key {config_key!r}: {facts.instance_type} is {'/'.join(facts.architectures)}, and the GPU nodes' "
            f"AMI and the training image are {GPU_ARCHITECTURE}; {_GPU_TYPES_HINT}")
    capability = GPU_COMPUTE_CAPABILITY.get(facts.gpu_name)
    if capability is not None and capability < MIN_COMPUTE_CAPABILITY:
        raise ValueError(
            f"config key {config_key!r}: {facts.instance_type}'s {facts.gpu_name} is compute capability {capability}, "
            f"and the image's PyTorch (CUDA 13) runs on {MIN_COMPUTE_CAPABILITY} and newer only (CUDA 13 dropped "
            f"Maxwell, Pascal and Volta); {_GPU_TYPES_HINT}")
    if not facts.efa_supported or facts.efa_interfaces < 1:
        raise ValueError(
            f"config key {config_key!r}: {facts.instance_type} does not support EFA, so NCCL would silently fall "
            "back to TCP sockets; choose an EFA-capable GPU type such as g6.12xlarge, g6e.12xlarge, "
            "p4d.24xlarge or p5.48xlarge")
    return facts


class SecretEnv:
    """KEY=VALUE pairs that must never be printed: the repr names the keys only, so a traceback, a log line or a test
    failure that shows the config shows no value. The program hands the values on only as a Pulumi secret."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self._values = dict(values or {})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._values)

    def reveal(self) -> dict[str, str]:
        """The values, for pulumi.Output.secret(...) and nothing else."""
        return dict(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretEnv) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return f"SecretEnv(names={list(self._values)})"


@dataclass(frozen=True)
class JobSettings:
    """The training job that `pulumi up` runs when enabled (keys train*): the keys only the stack has, and `flags`, the
    job's own settings (workload.config.TrainConfig's fields by name) as the other train* keys set them, each key
    translated by its one declaration (workload/config/fields.py). `train.dataset` reads `flags["dataset"]`."""

    enabled: bool
    run_id: str
    flags: Mapping[str, Any]
    """The job's flags the stack sets, by field name (every field of workload.config.STACK_KEYS)."""
    pip: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout_minutes: int = 60
    expect_transport: str = "efa"
    secret_env: SecretEnv = field(default_factory=SecretEnv)
    """trainSecretEnv: delivered to the Ray pods from a Kubernetes Secret, never through the job's inputs."""
    wait: str = "finish"
    """trainWait: what `pulumi up` waits for, the job's end or only its verified transport."""

    def __getattr__(self, name: str) -> Any:
        flags = self.__dict__.get("flags", {})
        if name in flags:
            return flags[name]
        raise AttributeError(f"{type(self).__name__} has no {name!r}")


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
    ray_version: str
    """As configured: empty means the version the stack knows for dlc_image (raycluster.image_facts)."""
    image_cuda_version: str
    """As configured: empty means the stack's figure for a known dlc_image (raycluster.image_facts)."""
    ray_namespace: str
    ray_cluster_name: str
    transport_env: dict[str, str] = field(default_factory=dict)
    """NCCL_DEBUG, NCCL_SOCKET_IFNAME, FI_PROVIDER and NCCL_NET_PLUGIN for the Ray workers."""
    train: JobSettings | None = None
    api_public_access_cidrs: tuple[str, ...] = ()
    """As configured; the deployer's own address is added at preview (feasibility.plan_stack)."""
    control_plane_log_retention_days: int = 90
    cluster_admins: tuple[str, ...] = ()
    cluster_viewers: tuple[str, ...] = ()
    capacity_reservation_hours: int = 0
    """With capacity_reserve: the reservation's lifetime in hours (0: until destroy)."""
    # ---- issue 24: metrics, node repair, idle stop
    monitoring: str = "prometheus"
    """monitoring: prometheus, cloudwatch or none (infra/kubernetes/monitoring.py)."""
    gpu_node_repair: bool = True
    """gpuNodeRepair: the node monitoring agent and the GPU node group's automatic repair (infra/aws/node_health.py)."""
    gpu_idle_stop_minutes: int = 0
    """gpuIdleStopMinutes: scale the GPU nodes to 0 after this long without a Ray job; 0 never (infra/kubernetes/idle_stop.py)."""
    experiment_tracking: str = "none"
    """experimentTracking: none, or mlflow for the stack's own MLflow server (infra/kubernetes/mlflow_server.py)."""


# ---- issue 24: metrics, node repair, idle stop
MONITORING_BACKENDS = ("prometheus", "cloudwatch", "none")  # infra/kubernetes/monitoring.py builds each
# At least the longest a `pulumi up` waits for GPU nodes and Ray workers after it wakes the group (GpuNodesAwake's time
# is where idle time starts): preflight.GPU_NODES_READY_TIMEOUT_SECONDS (10 minutes) and the RayCluster's
# READY_TIMEOUT_SECONDS (30), or, when only the job is new, the job's wait for joined nodes
# (nodes_joined.NODES_JOIN_TIMEOUT_SECONDS, 25), so no check stops the nodes while the same `up` still waits for them
# (issue 31; tests hold them together).
IDLE_STOP_MINIMUM_MINUTES = 40
IDLE_STOP_MAXIMUM_MINUTES = 10080  # a week
