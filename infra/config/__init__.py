"""The stack's configuration: every key Pulumi.yaml declares, read into one frozen dataclass and validated before any
resource is registered. Imports the standard library, pulumi, yaml and workload/'s lists of choices; nothing of infra/.

    settings.py          StackConfig and its parts (frozen dataclasses), the bounds and choices keys are checked against
    schema.py            Pulumi.yaml's keys, the stack's raw values, unknown keys and secrets
    rules.py             the rules single values follow: names, ARNs, AZs, S3 locations
    train_keys.py        the train* keys: the training job's settings
    parse.py             load() and parse(): the whole config, validated
    naming.py            the stack's default cluster name
    pip_requirements.py  trainPip's requirement specifiers

The names the rest of the program uses are imported here, so `from infra.config import StackConfig` and
`config.load()` read the same wherever they are written.
"""
from infra.config.settings import (  # noqa: F401
    GPU_PLACEMENTS, TRAIN_WAITS, NCCL_DEBUG_LEVELS, LOG_RETENTION_DAYS, WORLD_CIDR, SECRET_KEYS, SECRET_VALUED_KEYS,
    MAX_BATCH_SIZE, MAX_TIMEOUT_MINUTES, MAX_RESERVATION_HOURS, InstanceFacts, AwsIdentity, check_efa_gpu, SecretEnv,
    TrainExamples, TrainConfig, StackConfig, MONITORING_BACKENDS, IDLE_STOP_MINIMUM_MINUTES,
    IDLE_STOP_MAXIMUM_MINUTES,
)
from infra.config.schema import (  # noqa: F401
    PROJECT_FILE, schema, project_name, read_raw_config, stack_config_keys, check_unknown_keys, check_secret_keys,
    is_stack_secret, secret_fragments, hides_secret_values,
)
from infra.config.rules import (  # noqa: F401
    CLUSTER_NAME, K8S_VERSION, AZ_NAME, INSTANCE_TYPE, RESERVATION_ID, RUN_ID, RAY_VERSION, CUDA_VERSION, ENV_NAME,
    PRINCIPAL_ARN, SOCKET_IFNAME, PLUGIN_WORD, S3_BUCKET, arn_parts, s3_location, STORAGE_ALLOWED,
    check_storage_path, check_dataset_location,
)
from infra.config.parse import (  # noqa: F401
    load, parse,
)
