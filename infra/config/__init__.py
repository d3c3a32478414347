"""The stack's configuration: every key Pulumi.yaml declares, read into one frozen dataclass and validated before any
resource is registered. Imports the standard library, pulumi, yaml and workload/'s lists of choices; nothing of infra/.

    settings.py          StackConfig and its parts (frozen dataclasses), the bounds and choices keys are checked against
    schema.py            Pulumi.yaml's keys, the stack's raw values, unknown keys and secrets
    rules.py             the rules single values follow: names, ARNs, AZs, S3 locations
    train_keys.py        the train* keys: the training job's settings
    experiment_tracking.py  experimentTracking: the stack's own MLflow server's names and checks
    env_names.py         the environment names trainEnv and trainSecretEnv may not set, and their bounds
    parse.py             load() and parse(): the whole config, validated
    naming.py            the stack's default cluster name
    pip_requirements.py  trainPip's requirement specifiers
    pip_satisfiable.py   trainPip: one project's specifiers that no version satisfies
    storage_bounds.py    trainStoragePath's lengths (S3 keys, NAME_MAX, PATH_MAX) and /proc, /sys, /dev
    gpu_cuda.py          the image's CUDA against the GPU's architecture (the first CUDA that builds for each)

The names the rest of the program uses are imported here, so `from infra.config import StackConfig` and
`config.load()` read the same wherever they are written.
"""
from infra.config.parse import load, parse  # noqa: F401
from infra.config.rules import (  # noqa: F401
    AZ_NAME,
    CLUSTER_NAME,
    CUDA_VERSION,
    ENV_NAME,
    INSTANCE_TYPE,
    K8S_VERSION,
    PLUGIN_WORD,
    PRINCIPAL_ARN,
    RAY_VERSION,
    REFUSAL_FORM,
    RESERVATION_ID,
    RUN_ID,
    S3_BUCKET,
    SOCKET_IFNAME,
    STORAGE_ALLOWED,
    arn_parts,
    check_dataset_location,
    check_storage_path,
    config_error,
    s3_location,
)
from infra.config.schema import (  # noqa: F401
    PROJECT_FILE,
    check_secret_keys,
    check_unknown_keys,
    hides_secret_values,
    is_stack_secret,
    project_name,
    read_raw_config,
    schema,
    secret_fragments,
    stack_config_keys,
)
from infra.config.settings import (  # noqa: F401
    GPU_PLACEMENTS,
    IDLE_STOP_MAXIMUM_MINUTES,
    IDLE_STOP_MINIMUM_MINUTES,
    LOG_RETENTION_DAYS,
    MAX_BATCH_SIZE,
    MAX_RESERVATION_HOURS,
    MAX_TIMEOUT_MINUTES,
    MONITORING_BACKENDS,
    NCCL_DEBUG_LEVELS,
    SECRET_KEYS,
    SECRET_VALUED_KEYS,
    TRAIN_WAITS,
    WORLD_CIDR,
    AwsIdentity,
    InstanceFacts,
    JobSettings,
    SecretEnv,
    StackConfig,
    check_efa_gpu,
)
