"""The stack's configuration: one frozen dataclass, read from the keys that Pulumi.yaml declares.

Every key has its type, default and description in Pulumi.yaml. `load()` reads them and validates each one
with a ValueError that names the key and the allowed values, before any resource is registered.
"""
from __future__ import annotations

import copy
import difflib
import functools
import ipaddress
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pulumi
import yaml

from infra.stack.naming import default_cluster_name

# The workload's own lists (both modules import nothing but the standard library), so a name the job accepts is
# never refused here, nor the reverse.
from workload.config import CHAT_TEMPLATES  # trainChatTemplate: the published templates the workload ships
from workload.config import DATA_FORMATS  # trainDataFormat
from workload.config import EXPORTS  # trainExport
from workload.config import TRUNCATIONS  # trainTruncation
from workload.config import LR_SCHEDULES  # trainLrSchedule
from workload.config import MODEL_CONFIGS  # trainModelConfig: architectures built with random weights
from workload.config import REDUCE_DTYPES  # trainReduceDtype
from workload.config import SHARDINGS  # trainSharding
from workload.config import is_file_dataset  # trainDataset: a file (s3://...) rather than a Hugging Face id
from workload.config import S3_MODEL_DIRECTORY  # trainModelId in S3: the job's own refusal, word for word
from workload.fabric.transport import EXPECTATIONS as EXPECT_TRANSPORTS  # trainExpectTransport

from infra.job import pip_requirements  # trainPip

PROJECT_FILE = Path(__file__).resolve().parents[2] / "Pulumi.yaml"

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
# Upper bounds, so that nothing downstream overflows or searches for long: the preview's memory check looks for the
# largest batch that fits, a per-GPU batch beyond 65536 sequences fits no GPU at any trainSeqLen a model has, the
# job's deadline is a SIGALRM timer (workload/train.py) and a reservation's end a datetime.
MAX_BATCH_SIZE = 65536
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
    """EC2's GPU name (L4, L40S, A100, H100), matched against workload.model.causal_lm.PEAK_BF16_FLOPS."""
    network_gbps: float = 0.0
    """A node's network bandwidth in Gbit/s: the sum of its network cards' peak bandwidth; 0 when EC2 gives none."""

    @property
    def efa_interfaces(self) -> int:
        """EFA interfaces a node gets: one per network card, as far as the type allows (p5: 32, g6: 1)."""
        return min(self.network_cards, self.maximum_efa_interfaces) if self.efa_supported else 0


@dataclass(frozen=True)
class AwsIdentity:
    """Who the stack acts as in AWS: aws:profile (else the environment's credentials), then aws:assumeRoles' role.
    The AWS provider applies both itself; the kubeconfig and the dynamic providers are given them explicitly."""

    profile: str | None = None
    role_arn: str | None = None
    account_id: str | None = None
    """The account they reach, as the AWS provider says at preview (aws.get_caller_identity); the dynamic providers
    refuse to act in any other. None where nothing needed it."""


def check_efa_gpu(facts: InstanceFacts, *, config_key: str = "gpuInstanceType") -> InstanceFacts:
    """Refuse a type that cannot carry the job: without GPUs nothing trains, without EFA NCCL falls back to TCP."""
    if facts.gpus < 1:
        raise ValueError(
            f"config key {config_key!r}: {facts.instance_type} has no GPUs; choose an EFA-capable GPU type "
            "such as g6.12xlarge, g6e.12xlarge, p4d.24xlarge or p5.48xlarge")
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
class TrainExamples:
    """trainDataFormat and the keys of chat and prompt-completion data (workload/data/)."""

    data_format: str = "text"
    messages_field: str = "messages"
    prompt_field: str = "prompt"
    completion_field: str = "completion"
    train_on_prompt: bool = False
    chat_template: str = ""
    truncation: str = "truncate"


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
    checkpoint_every: int
    storage_path: str
    pip: tuple[str, ...]
    env: dict[str, str]
    timeout_minutes: int
    expect_transport: str
    sharding: str
    reduce_dtype: str
    grad_accum_steps: int
    fp8: bool
    min_bus_gbytes_per_s: float
    lr_schedule: str
    warmup_steps: int
    dataset: str
    dataset_config: str
    dataset_split: str
    text_field: str
    tokenizer: str
    eval_split: str
    eval_fraction: float
    eval_every: int
    export: str
    examples: "TrainExamples" = field(default_factory=lambda: TrainExamples())
    """trainDataFormat and its keys: how trainDataset's records are trained on."""
    secret_env: SecretEnv = field(default_factory=SecretEnv)
    """trainSecretEnv: delivered to the Ray pods from a Kubernetes Secret, never through the job's inputs."""
    wait: str = "finish"
    """trainWait: what `pulumi up` waits for, the job's end or only its verified transport."""


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
    train: TrainConfig | None = None
    api_public_access_cidrs: tuple[str, ...] = ()
    """As configured; the deployer's own address is added at preview (feasibility.check)."""
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


# ----------------------------------------------------------------------------------------------------------
# Reading and validating the stack's config

def schema() -> dict[str, dict[str, Any]]:
    """The `config:` section of Pulumi.yaml: every key with its type, default and description."""
    return copy.deepcopy(_project_document(PROJECT_FILE.stat().st_mtime_ns)["config"])


def project_name() -> str:
    return _project_document(PROJECT_FILE.stat().st_mtime_ns)["name"]


@functools.lru_cache(maxsize=1)
def _project_document(_modified_ns: int) -> dict[str, Any]:
    """Pulumi.yaml, parsed once per version of the file: a preview reads it several times, and PyYAML's pure-Python
    parser takes tens of milliseconds for its some 80 keys."""
    with PROJECT_FILE.open() as f:
        return yaml.safe_load(f)


def _read_raw(config: Any, key: str, spec: dict[str, Any], hidden: bool = False) -> Any:
    """One key through pulumi.Config, typed by the schema; an unset key takes the schema's default. A refusal of a
    `hidden` key (a secret's) does not quote its value.

    The Pulumi CLI already applies the schema's defaults; reading them here as well keeps a program run
    without the CLI (the unit tests) on the same values, from the same one place.
    """
    readers: dict[str, Callable[[str], Any]] = {
        "string": config.get,
        "integer": config.get_int,
        "boolean": config.get_bool,
        "array": config.get_object,
    }
    kind = spec["type"]
    if kind not in readers:
        raise ValueError(f"Pulumi.yaml: config key {key!r} has type {kind!r}; supported: {sorted(readers)}")
    try:
        value = readers[kind](key)
    except pulumi.ConfigTypeError as e:
        if hidden or key in SECRET_VALUED_KEYS:  # Pulumi's message quotes the value
            raise ValueError(f"config key {key!r} must be of type {kind} (its value is not shown)") from None
        raise ValueError(f"config key {key!r} must be of type {kind}: {e}") from e
    if value is None:
        value = spec["default"]
    if kind == "array":
        if isinstance(value, str):  # get_object returns JSON already parsed; a raw default may be text
            value = json.loads(value)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            # `pulumi config set --secret --path 'trainSecretEnv.HF_TOKEN' ...` makes an object of the token.
            got = (f"a {type(value).__name__} (its value is not shown)" if hidden or key in SECRET_VALUED_KEYS
                   else repr(value))
            raise ValueError(f"config key {key!r} must be a list of strings, got {got}")
    return value


def read_raw_config(config: Any | None = None, hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every key of Pulumi.yaml, read from the stack's config (or its default), by its schema name; refusals of the
    `hidden` keys do not quote their values."""
    config = config if config is not None else pulumi.Config()
    return {key: _read_raw(config, key, spec, key in hidden) for key, spec in schema().items()}


def stack_config_keys() -> set[str]:
    """Every key the stack sets, namespaced (`raytrain-eks:gpuNodeCount`, `aws:region`).

    pulumi.Config reads one key at a time and has no listing; the runtime's own config map (filled by the language
    host, or by set_all_config) and PULUMI_CONFIG (its older channel) together hold all of them.
    """
    return set(pulumi.runtime.config.CONFIG.get()) | set(pulumi.runtime.config.get_config_env())


def check_unknown_keys(keys: set[str], project: str, declared: set[str]) -> None:
    """Refuse a key of the project's namespace that Pulumi.yaml does not declare: Pulumi ignores it silently, so a
    typo (`gpuNodeCout`) would run the stack on the default."""
    unknown = sorted(key.partition(":")[2] for key in keys if key.partition(":")[0] == project
                     and key.partition(":")[2] not in declared)
    if not unknown:
        return
    hints, unmatched = [], False
    for key in unknown:
        nearest = difflib.get_close_matches(key, declared, n=1)
        hints.append(f"{key!r} (did you mean {nearest[0]!r}?)" if nearest else repr(key))
        unmatched |= not nearest
    # The whole list would be one very long line (some 60 keys); their prefixes say where to look.
    families = sorted({re.match(r"[a-z]+", key).group(0) for key in declared})
    allowed = (f"a key Pulumi.yaml declares (they start {', '.join(families)}; each with its meaning there)"
               if unmatched else "the key it means")
    raise ValueError(
        f"config keys {', '.join(hints)} are not declared in Pulumi.yaml, so Pulumi would ignore them; "
        f"`pulumi config rm {project}:{unknown[0]}`, and use {allowed}")


def check_secret_keys(raw: dict[str, Any], project: str, is_secret: Callable[[str], bool]) -> None:
    """Refuse a SECRET_KEYS value stored in plain text: it would sit readable in the committed stack file."""
    for key in SECRET_KEYS:
        if raw[key] and not is_secret(f"{project}:{key}"):
            raise ValueError(
                f"config key {key!r} is stored in plain text in the stack file; set it as a secret: "
                f"`pulumi config rm {key}`, then `pulumi config set --secret --path '{key}[0]' NAME=VALUE`")


def is_stack_secret(key: str) -> bool:
    """Whether the stack holds a namespaced key as a secret, by either channel the CLI passes that by."""
    return pulumi.runtime.is_config_secret(key) or key in pulumi.runtime.get_config_secret_keys_env()


def secret_fragments() -> list[str]:
    """What a message must not quote: the values of every key the stack holds as a secret (and of SECRET_KEYS, which
    must be one), as each string in them and each VALUE of a KEY=VALUE, from the config as the CLI passed it. A plain
    trainEnv is in the committed stack file already; its refusals name its entries without their values anyway."""
    project = project_name()
    fragments: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, str):
            fragments.extend([value, value.partition("=")[2]])

    for key in schema():
        namespaced = f"{project}:{key}"
        text = pulumi.runtime.get_config(namespaced)
        if text is None or not (key in SECRET_KEYS or is_stack_secret(namespaced)):
            continue
        try:
            collect(json.loads(text))
        except ValueError:
            collect(text)
    # Three characters at least: a shorter "secret" would blank out ordinary words of the message.
    return sorted({fragment for fragment in fragments if len(fragment) >= 3}, key=len, reverse=True)


def hides_secret_values(check: Callable[..., Any]) -> Callable[..., Any]:
    """A preview check whose refusals never quote a secret's value: any that would is re-raised with it blanked
    out (and without the exception it came from, whose text may quote it too)."""

    @functools.wraps(check)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return check(*args, **kwargs)
        except ValueError as error:
            message = str(error)
            for fragment in secret_fragments():
                message = message.replace(fragment, "[secret]")
            if message == str(error):
                raise
            raise ValueError(message) from None

    return checked


@hides_secret_values
def load(config: Any | None = None) -> StackConfig:
    """Read the stack's config per Pulumi.yaml and validate it. Touches no cloud resource."""
    check_unknown_keys(stack_config_keys(), project_name(), set(schema()))
    project = project_name()
    raw = read_raw_config(config, frozenset(key for key in schema() if is_stack_secret(f"{project}:{key}")))
    check_secret_keys(raw, project, is_stack_secret)
    # Unique names per stack: an empty clusterName (the default) is `ray-train-<stack>` (infra/stack/naming.py).
    raw["clusterName"] = raw["clusterName"] or default_cluster_name(pulumi.get_stack())
    return parse(raw)


# 39 at most: IAM role names are <clusterName>-system-node-role plus Pulumi's 8-character suffix, 64 at most.
_CLUSTER_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,38}$")
_K8S_VERSION = re.compile(r"^1\.[0-9]{2}$")
_AZ_NAME = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,32}$")
_RAY_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
_CUDA_VERSION = re.compile(r"^[0-9]+\.[0-9]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# An IAM user or role (optionally with a path): what an EKS access entry's principal can be.
_PRINCIPAL_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]{1,512}$")
# NCCL_SOCKET_IFNAME: interface name prefixes (Linux names are at most 15 characters), comma-separated, optionally
# led by ^ (exclude) or = (exact match), as NCCL's environment variable documentation gives them.
_SOCKET_IFNAME = re.compile(r"[\^=]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*")
# FI_PROVIDER and NCCL_NET_PLUGIN: a name (libfabric's layered providers join theirs with ';', lists with ',').
_PLUGIN_WORD = re.compile(r"[\^]?[A-Za-z0-9_.;,+-]{1,64}")
# Every pattern here is applied with fullmatch: `re.match` with `$` would take a trailing newline.
# S3's bucket naming rules (general purpose buckets): 3-63 lowercase letters, digits, dots and hyphens, starting and
# ending with a letter or digit. Anything else (a wildcard above all) is not one bucket.
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def arn_parts(arn: str) -> tuple[str, str, str]:
    """(partition, account, resource) of an ARN: arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE."""
    fields = arn.split(":", 5)
    return fields[1], fields[4], fields[5]


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ValueError(f"config key {key!r}: {message}")


def _check_az_list(key: str, azs: list[str]) -> tuple[str, ...]:
    for az in azs:
        _require(bool(_AZ_NAME.fullmatch(az)), key, f"{az!r} is not an availability zone name (like us-west-2a)")
    _require(len(set(azs)) == len(azs), key, f"lists an AZ twice: {azs}")
    return tuple(azs)


def parse(raw: dict[str, Any]) -> StackConfig:
    """Validate raw config values (named as in Pulumi.yaml) into a StackConfig.

    Each mistake is a ValueError naming the key and what it allows. Checks that need EC2 (the instance
    type's facts, the region's AZs) come later, in infra.stack.instance_facts and infra.aws.network, still before any
    resource is registered.
    """
    _require(bool(_CLUSTER_NAME.fullmatch(raw["clusterName"])), "clusterName",
             f"{raw['clusterName']!r} must start with a letter and hold 1-39 letters, digits or hyphens "
             "(it prefixes every AWS name, some of which are capped at 64 characters)")
    _require(bool(_K8S_VERSION.fullmatch(raw["kubernetesVersion"])), "kubernetesVersion",
             f"{raw['kubernetesVersion']!r} must be an EKS minor version like 1.34")
    try:
        vpc = ipaddress.IPv4Network(raw["vpcCidr"])
    except ValueError as e:
        raise ValueError(f"config key 'vpcCidr': {raw['vpcCidr']!r} is not an IPv4 CIDR: {e}") from e
    _require(16 <= vpc.prefixlen <= 20, "vpcCidr",
             f"{raw['vpcCidr']} must be a /16 to /20 (private subnets get an eighth of it per AZ)")

    vpc_azs = _check_az_list("vpcAvailabilityZones", raw["vpcAvailabilityZones"])
    _require(not vpc_azs or len(vpc_azs) >= 2, "vpcAvailabilityZones",
             f"EKS needs subnets in at least two AZs; got {list(vpc_azs)} (or leave it empty for all of them)")
    _require(len(vpc_azs) <= 7, "vpcAvailabilityZones", "at most 7 AZs (the VPC is split in eighths)")

    for key in ("systemInstanceType", "gpuInstanceType"):
        _require(bool(_INSTANCE_TYPE.fullmatch(raw[key])), key, f"{raw[key]!r} is not an EC2 instance type name")
    _require(raw["systemNodeCount"] >= 1, "systemNodeCount",
             f"must be at least 1 (the KubeRay operator and the Ray head run there), got {raw['systemNodeCount']}")
    _require(raw["gpuNodeCount"] >= 1, "gpuNodeCount", f"must be at least 1, got {raw['gpuNodeCount']}")
    _require(100 <= raw["gpuRootVolumeGiB"] <= 16384, "gpuRootVolumeGiB",
             f"must be 100 to 16384 GiB (the training image alone needs tens of GiB), got {raw['gpuRootVolumeGiB']}")

    placement = raw["gpuPlacement"]
    _require(placement in GPU_PLACEMENTS, "gpuPlacement", f"{placement!r} is not one of {list(GPU_PLACEMENTS)}")
    reservation_id = raw["capacityReservationId"]
    _require(reservation_id == "" or bool(_RESERVATION_ID.fullmatch(reservation_id)), "capacityReservationId",
             f"{reservation_id!r} must be empty or a reservation id like cr-0123456789abcdef0")
    reserve = raw["capacityReserve"]
    _require(not (reserve and reservation_id), "capacityReserve",
             "cannot be true while capacityReservationId is set: target the existing reservation or create one")

    gpu_az = raw["gpuAvailabilityZone"]
    if gpu_az:
        _check_az_list("gpuAvailabilityZone", [gpu_az])
    _require(bool(gpu_az) or reserve, "gpuAvailabilityZone",
             "is required (every GPU node sits in this one AZ, EFA does not cross AZs) unless capacityReserve "
             "picks it; with capacityReservationId, set it to the reservation's AZ")
    candidates = _check_az_list("capacityCandidateAzs", raw["capacityCandidateAzs"])
    _require(not candidates or reserve, "capacityCandidateAzs", "is only used with capacityReserve=true")

    # dlcImage, rayNamespace and rayClusterName are checked by raycluster.check_config, which the program runs
    # before any resource: KubeRay's own limits on them live beside the manifest they end up in. rayVersion and
    # imageCudaVersion are checked against the image there too; here only their form.
    _require(raw["rayVersion"] == "" or bool(_RAY_VERSION.fullmatch(raw["rayVersion"])), "rayVersion",
             f"{raw['rayVersion']!r} must be empty (the known image's) or a Ray release like 2.58.0")
    _require(raw["imageCudaVersion"] == "" or bool(_CUDA_VERSION.fullmatch(raw["imageCudaVersion"])), "imageCudaVersion",
             f"{raw['imageCudaVersion']!r} must be empty (the known image's) or a CUDA major.minor like 13.0")
    _require(raw["ncclDebug"] in NCCL_DEBUG_LEVELS, "ncclDebug",
             f"{raw['ncclDebug']!r} is not one of {list(NCCL_DEBUG_LEVELS)}")
    _require(bool(_SOCKET_IFNAME.fullmatch(raw["ncclSocketIfname"])), "ncclSocketIfname",
             f"{raw['ncclSocketIfname']!r} must be interface name prefixes as NCCL takes them: like eth0, eth or "
             "^docker,lo (comma-separated, led by ^ to exclude or = to match exactly; letters, digits, '_.:-')")
    for key in ("fiProvider", "ncclNetPlugin"):
        _require(bool(_PLUGIN_WORD.fullmatch(raw[key])), key,
                 f"{raw[key]!r} must be a single non-empty word (letters, digits and '_.;,+-'), like efa or aws-ofi")

    retention = raw["controlPlaneLogRetentionDays"]
    _require(retention in LOG_RETENTION_DAYS, "controlPlaneLogRetentionDays",
             f"{retention} is not one of CloudWatch's retention periods {list(LOG_RETENTION_DAYS)} (0: never expire)")
    admins = _check_principals("clusterAdmins", raw["clusterAdmins"])
    viewers = _check_principals("clusterViewers", raw["clusterViewers"])
    both = sorted(set(admins) & set(viewers))
    _require(not both, "clusterViewers",
             f"{both} are in clusterAdmins too; EKS allows one access entry per principal, so list each in one key")

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
        train=_parse_train(raw),
        api_public_access_cidrs=_check_public_cidrs(raw["apiPublicAccessCidrs"]),
        control_plane_log_retention_days=retention,
        cluster_admins=admins,
        cluster_viewers=viewers,
        capacity_reservation_hours=_parse_reservation_hours(raw),
        **_parse_operations(raw),
    )


# ---- issue 24: metrics, node repair, idle stop
MONITORING_BACKENDS = ("prometheus", "cloudwatch", "none")  # infra/kubernetes/monitoring.py builds each
IDLE_STOP_MINIMUM_MINUTES = 10  # nodes take about that long to join and run a job's first step
IDLE_STOP_MAXIMUM_MINUTES = 10080  # a week


def _parse_operations(raw: dict[str, Any]) -> dict[str, Any]:
    _require(raw["monitoring"] in MONITORING_BACKENDS, "monitoring",
             f"{raw['monitoring']!r} is not one of {list(MONITORING_BACKENDS)}")
    minutes = raw["gpuIdleStopMinutes"]
    _require(minutes == 0 or IDLE_STOP_MINIMUM_MINUTES <= minutes <= IDLE_STOP_MAXIMUM_MINUTES, "gpuIdleStopMinutes",
             f"must be 0 (never stop) or {IDLE_STOP_MINIMUM_MINUTES} to {IDLE_STOP_MAXIMUM_MINUTES} minutes, "
             f"got {minutes}")
    return {"monitoring": raw["monitoring"], "gpu_node_repair": raw["gpuNodeRepair"],
            "gpu_idle_stop_minutes": minutes}


def _check_principals(key: str, arns: list[str]) -> tuple[str, ...]:
    for arn in arns:
        _require(bool(_PRINCIPAL_ARN.fullmatch(arn)), key,
                 f"{arn!r} is not an IAM role or user ARN like arn:aws:iam::123456789012:role/NAME")
    _require(len(set(arns)) == len(arns), key, f"lists a principal twice: {arns}")
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
        _require(str(network) == WORLD_CIDR or network.is_global, key,
                 f"{cidr} is not a public address range; the public endpoint only sees public source addresses "
                 f"(allowed: public IPv4 CIDRs, or {WORLD_CIDR} to open it to the world)")
        checked.append(str(network))
    _require(len(set(checked)) == len(checked), key, f"lists a CIDR twice: {cidrs}")
    return tuple(checked)


def _parse_reservation_hours(raw: dict[str, Any]) -> int:
    hours = raw["capacityReservationHours"]
    _require(0 <= hours <= MAX_RESERVATION_HOURS, "capacityReservationHours",
             f"must be 0 (until destroy) or a number of hours up to {MAX_RESERVATION_HOURS} (a year), got {hours}")
    _require(hours == 0 or raw["capacityReserve"], "capacityReservationHours",
             "is only used with capacityReserve=true (it ends the reservation that the stack makes)")
    return hours


def _parse_train(raw: dict[str, Any]) -> TrainConfig:
    try:
        learning_rate = float(raw["trainLearningRate"])
    except ValueError as e:
        raise ValueError(f"config key 'trainLearningRate': {raw['trainLearningRate']!r} is not a number") from e
    _require(0 < learning_rate < 1, "trainLearningRate", f"must be between 0 and 1, got {learning_rate}")
    for key in ("trainSteps", "trainBatchSize", "trainSeqLen", "trainTimeoutMinutes"):
        _require(raw[key] >= 1, key, f"must be at least 1, got {raw[key]}")
    _require(raw["trainBatchSize"] <= MAX_BATCH_SIZE, "trainBatchSize",
             f"{raw['trainBatchSize']} sequences per GPU per step: allowed 1 to {MAX_BATCH_SIZE} (for a larger "
             "effective batch, add GPUs)")
    _require(raw["trainTimeoutMinutes"] <= MAX_TIMEOUT_MINUTES, "trainTimeoutMinutes",
             f"{raw['trainTimeoutMinutes']} minutes: allowed 1 to {MAX_TIMEOUT_MINUTES} (30 days); a longer training "
             "is several jobs, each resuming from the last one's checkpoints")
    _require(raw["trainNumWorkers"] >= 0, "trainNumWorkers",
             f"must be 0 (one worker per GPU) or more, got {raw['trainNumWorkers']}")
    _require(raw["trainMaxFailures"] >= -1, "trainMaxFailures",
             f"must be -1 (retry forever), 0 or more, got {raw['trainMaxFailures']}")
    _require(raw["trainModelConfig"] in ("", *MODEL_CONFIGS), "trainModelConfig",
             f"{raw['trainModelConfig']!r} is not empty or one of {list(MODEL_CONFIGS)}")
    _require(bool(raw["trainModelId"]), "trainModelId", "must name a Hugging Face model")
    _require(bool(_RUN_ID.fullmatch(raw["trainRunId"])), "trainRunId",
             f"{raw['trainRunId']!r} must be 1-32 letters, digits, '.', '_' or '-' (it names the Ray job)")
    _require(raw["trainExpectTransport"] in EXPECT_TRANSPORTS, "trainExpectTransport",
             f"{raw['trainExpectTransport']!r} is not one of {list(EXPECT_TRANSPORTS)}")
    _require(raw["trainWait"] in TRAIN_WAITS, "trainWait", f"{raw['trainWait']!r} is not one of {list(TRAIN_WAITS)}")
    _require(raw["trainCheckpointEvery"] >= 0, "trainCheckpointEvery",
             f"must be 0 (only after the last step) or more, got {raw['trainCheckpointEvery']}")
    for key, allowed in (("trainSharding", SHARDINGS), ("trainReduceDtype", REDUCE_DTYPES)):
        _require(raw[key] in allowed, key, f"{raw[key]!r} is not one of {list(allowed)}")
    _require(raw["trainGradAccumSteps"] >= 1 and raw["trainBatchSize"] % raw["trainGradAccumSteps"] == 0,
             "trainGradAccumSteps", f"must be at least 1 and divide trainBatchSize {raw['trainBatchSize']} (each "
             f"micro-batch takes an equal share of it), got {raw['trainGradAccumSteps']}")
    try:
        min_bus = float(raw["trainMinBusBandwidthGBps"])
    except ValueError as e:
        raise ValueError(f"config key 'trainMinBusBandwidthGBps': {raw['trainMinBusBandwidthGBps']!r} is not a "
                         "number") from e
    _require(min_bus >= 0 and math.isfinite(min_bus), "trainMinBusBandwidthGBps",
             f"must be 0 (no minimum) or a bus bandwidth in GB/s, got {raw['trainMinBusBandwidthGBps']}")
    storage = raw["trainStoragePath"]
    check_storage_path(storage)
    for key, allowed in (("trainLrSchedule", LR_SCHEDULES), ("trainExport", EXPORTS)):
        _require(raw[key] in allowed, key, f"{raw[key]!r} is not one of {list(allowed)}")
    for key in ("trainWarmupSteps", "trainEvalEvery"):
        _require(raw[key] >= 0, key, f"must be 0 or more, got {raw[key]}")
    _require(raw["trainWarmupSteps"] <= raw["trainSteps"], "trainWarmupSteps",
             f"{raw['trainWarmupSteps']} must be at most trainSteps {raw['trainSteps']}")
    try:
        eval_fraction = float(raw["trainEvalFraction"])
    except ValueError as e:
        raise ValueError(f"config key 'trainEvalFraction': {raw['trainEvalFraction']!r} is not a number") from e
    _require(0 <= eval_fraction < 1, "trainEvalFraction",
             f"must be 0 (none) or a fraction below 1 such as 0.05, got {raw['trainEvalFraction']}")
    _require(not (eval_fraction and raw["trainEvalSplit"]), "trainEvalFraction",
             "and trainEvalSplit both choose the evaluation set: set one")
    dataset = raw["trainDataset"]
    _require(bool(dataset) or not (eval_fraction or raw["trainEvalSplit"] or raw["trainEvalEvery"]), "trainDataset",
             "is empty (random tokens), so there is nothing to evaluate: set it, or leave trainEvalFraction, "
             "trainEvalSplit and trainEvalEvery unset")
    _require(not (raw["trainEvalSplit"] and is_file_dataset(dataset)), "trainEvalSplit",
             f"names a split of a Hugging Face trainDataset; the file {dataset} has none: use trainEvalFraction")
    _require(raw["trainExport"] != "checkpoints" or raw["trainCheckpointEvery"] > 0, "trainExport",
             "checkpoints writes a model at every checkpoint, and trainCheckpointEvery is 0 (only the last step's): "
             "set trainCheckpointEvery, or use final")
    check_dataset_location(dataset)
    if (model_location := s3_location(raw["trainModelId"], "trainModelId")) is not None:
        _require(bool(model_location[1]), "trainModelId", f"{raw['trainModelId']!r}: {S3_MODEL_DIRECTORY}")
    env = _parse_env("trainEnv", raw["trainEnv"])
    secret_env = SecretEnv(_parse_env("trainSecretEnv", raw["trainSecretEnv"]))
    clash = sorted(set(env) & set(secret_env.names))
    _require(not clash, "trainSecretEnv", f"{clash} are set in trainEnv too; set each variable in one key")
    return TrainConfig(
        enabled=raw["trainEnabled"],
        run_id=raw["trainRunId"],
        model_id=raw["trainModelId"],
        model_config=raw["trainModelConfig"],
        steps=raw["trainSteps"],
        batch_size=raw["trainBatchSize"],
        seq_len=raw["trainSeqLen"],
        learning_rate=learning_rate,
        num_workers=raw["trainNumWorkers"],
        max_failures=raw["trainMaxFailures"],
        checkpoint_every=raw["trainCheckpointEvery"],
        storage_path=storage,
        pip=pip_requirements.check(raw["trainPip"]),
        env=env,
        timeout_minutes=raw["trainTimeoutMinutes"],
        expect_transport=raw["trainExpectTransport"],
        sharding=raw["trainSharding"],
        reduce_dtype=raw["trainReduceDtype"],
        grad_accum_steps=raw["trainGradAccumSteps"],
        fp8=raw["trainFp8"],
        min_bus_gbytes_per_s=min_bus,
        secret_env=secret_env,
        wait=raw["trainWait"],
        lr_schedule=raw["trainLrSchedule"],
        warmup_steps=raw["trainWarmupSteps"],
        dataset=dataset,
        dataset_config=raw["trainDatasetConfig"],
        dataset_split=raw["trainDatasetSplit"],
        text_field=raw["trainTextField"],
        tokenizer=raw["trainTokenizer"],
        eval_split=raw["trainEvalSplit"],
        eval_fraction=eval_fraction,
        eval_every=raw["trainEvalEvery"],
        export=raw["trainExport"],
        examples=_parse_train_examples(raw),
    )


def _parse_train_examples(raw: dict[str, Any]) -> TrainExamples:
    """The keys of chat and prompt-completion data, each checked against its allowed values."""
    data_format = raw["trainDataFormat"]
    _require(data_format in DATA_FORMATS, "trainDataFormat", f"{data_format!r} is not one of {list(DATA_FORMATS)}")
    _require(raw["trainTruncation"] in TRUNCATIONS, "trainTruncation",
             f"{raw['trainTruncation']!r} is not one of {list(TRUNCATIONS)}")
    _require(raw["trainChatTemplate"] in ("", *CHAT_TEMPLATES), "trainChatTemplate",
             f"{raw['trainChatTemplate']!r} is not empty (the tokenizer's own) or one of {list(CHAT_TEMPLATES)}")
    if data_format != "text":
        _require(bool(raw["trainDataset"]), "trainDataset",
                 f"is empty (random tokens), and trainDataFormat {data_format} needs records to train on")
        _require(not raw["trainDataset"].endswith(".txt"), "trainDataset",
                 f"{raw['trainDataset']} is plain text; trainDataFormat {data_format} reads records from .jsonl, .json, "
                 ".parquet or a Hugging Face dataset")
        keys = ("trainMessagesField",) if data_format == "chat" else ("trainPromptField", "trainCompletionField")
        for key in keys:
            _require(bool(raw[key]), key, f"must name the records' field for trainDataFormat {data_format}")
        _require(data_format != "prompt-completion" or raw["trainPromptField"] != raw["trainCompletionField"],
                 "trainCompletionField", f"must differ from trainPromptField, both are {raw['trainPromptField']!r}")
    return TrainExamples(
        data_format=data_format,
        messages_field=raw["trainMessagesField"],
        prompt_field=raw["trainPromptField"],
        completion_field=raw["trainCompletionField"],
        train_on_prompt=raw["trainOnPrompt"],
        chat_template=raw["trainChatTemplate"],
        truncation=raw["trainTruncation"],
    )


def s3_location(path: str, key: str = "") -> tuple[str, str] | None:
    """(bucket, key or prefix without surrounding slashes) of an s3:// path; None for any other path. The Ray pods'
    IAM policy is written from it (infra/aws/pod_identity.py), so a path that would grant more than one bucket or prefix
    is refused, naming the config `key` it came from."""
    if not path.startswith("s3://"):
        return None
    bucket, _, prefix = path.removeprefix("s3://").partition("/")
    _require(bool(_S3_BUCKET.fullmatch(bucket)) and ".." not in bucket, key,
             f"{path!r} must name one existing bucket (3-63 lowercase letters, digits, '.' and '-'), "
             "like s3://my-bucket/prefix; wildcards are not allowed")
    _require(not any(c in prefix for c in "*?$"), key,
             f"{path!r}: the path after the bucket must not contain '*', '?' or '$' (IAM would read them as "
             "wildcards or policy variables)")
    _check_segments(path, prefix.removesuffix("/"), key)
    return bucket, prefix.strip("/")


def _check_segments(path: str, inner: str, key: str) -> None:
    """No empty, '.' or '..' segment: a file system or an S3 client that normalises them reads or writes elsewhere
    than the prefix the pods' policy grants (and S3 keeps them literally, so the same path means two places)."""
    segments = inner.split("/") if inner else []
    _require(not any(segment in ("", ".", "..") for segment in segments), key,
             f"{path!r} has an empty, '.' or '..' path segment; allowed: a path without '//', '/./' or '/../'")


# Where the Ray pods can keep checkpoints: S3 through their own role (infra/aws/pod_identity.py), or a node's disk.
STORAGE_ALLOWED = ("allowed: s3://bucket/prefix (the Ray pods' role gets access to that prefix only), an absolute path "
                   "or file:///path (a disk of the one GPU node), or empty for no checkpoints")


def check_storage_path(path: str) -> None:
    """trainStoragePath: empty, s3://bucket/prefix with a prefix (a bucket root would give the pods read, write and
    delete on the whole bucket), or a local absolute path (file:///path is one too; infra.stack.feasibility refuses it for
    more than one GPU node)."""
    key = "trainStoragePath"
    if not path:
        return
    scheme, separator, rest = path.partition("://")
    if not separator:
        _require(path.startswith("/"), key, f"{path!r} is neither an absolute path nor a URI; {STORAGE_ALLOWED}")
        _check_segments(path, path[1:].removesuffix("/"), key)
        return
    _require(scheme in ("s3", "file"), key,
             f"{path!r}: {scheme}:// is not a storage the pods can reach (they hold AWS credentials for S3 only)"
             + ("; URI schemes are lowercase" if scheme.lower() in ("s3", "file") else "") + f"; {STORAGE_ALLOWED}")
    if scheme == "file":
        _require(rest.startswith("/"), key, f"{path!r}: a file:// URI takes an absolute path (file:///path); "
                                            f"{STORAGE_ALLOWED}")
        _check_segments(path, rest[1:].removesuffix("/"), key)
        return
    _bucket, prefix = s3_location(path, key)
    _require(bool(prefix), key, f"{path!r} is a bucket root, and the Ray pods' role would get read, write and delete "
                                f"on the whole bucket; {STORAGE_ALLOWED}")


def check_dataset_location(dataset: str) -> None:
    """trainDataset, when remote: s3://bucket/key only. The job reads remote files through pyarrow's S3 file system
    with the Ray pods' role (workload/data/batches.py); an https:// or gs:// file would fail on the cluster after `up` made it."""
    key = "trainDataset"
    scheme, separator, _ = dataset.partition("://")
    if not separator:
        return
    _require(scheme == "s3", key,
             f"{dataset!r}: {scheme}:// is not a location the job can read"
             + ("; URI schemes are lowercase" if scheme.lower() == "s3" else "")
             + "; allowed: s3://bucket/key.jsonl (or .txt, .json; the Ray pods' role gets read access to it), a "
             "Hugging Face dataset id, or empty for random tokens")
    s3_location(dataset, key)


def _parse_env(key: str, items: list[str]) -> dict[str, str]:
    """KEY=VALUE entries. A refusal quotes the entry's position and name only: the value may be a token."""
    env: dict[str, str] = {}
    for index, item in enumerate(items):
        name, sep, value = item.partition("=")
        _require(bool(sep) and bool(_ENV_NAME.fullmatch(name)), key,
                 f"entry {index} is not KEY=VALUE with KEY made of letters, digits and '_' (its value is not shown)")
        _require(name not in env, key, f"sets {name} twice")
        env[name] = value
    return env
