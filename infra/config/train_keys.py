"""The train* keys. Each one that sets a job flag is declared once, beside its flag (workload/config/fields.py), and
translated and checked here through that declaration and the job's own rules between flags (workload/config/rules.py),
so that a value the job accepts is never refused here, nor the reverse. The keys only the stack has are checked here:
trainEnabled, trainRunId, trainPip, trainEnv, trainSecretEnv, trainTimeoutMinutes, trainWait, trainExpectTransport,
and the S3 locations, trackers and tokens the cluster must reach."""
from __future__ import annotations

from typing import Any

import infra.config.pip_requirements as pip_requirements  # trainPip
from infra.config.env_names import (
    MAX_ENV_ENTRIES,
    MAX_ENV_VALUE_CHARS,
    carries_credential_header,
    holds_credential,
    pseudo_directory_reason,
    refers_to_variable,
    reserved_reason,
    unpassable_reason,
)
from infra.config.experiment_tracking import (
    default_tracking_uri,
    in_cluster_uri,
    parse_experiment_tracking,
    tracking_uri_problem,
)
from infra.config.rules import (
    ENV_NAME,
    RUN_ID,
    check_dataset_location,
    check_source_scheme,
    check_storage_path,
    config_error,
    require,
    require_choice,
    s3_location,
)
from infra.config.settings import MAX_TIMEOUT_MINUTES, TRAIN_WAITS, JobSettings, SecretEnv
from workload.config import (
    CHAT_TEMPLATES,  # trainChatTemplate: only the shipped ones, a .jinja file is not on the cluster
    DECLARED,  # every train* key that sets a job flag, declared once beside its flag
    S3_MODEL_DIRECTORY,  # trainModelId in S3: the job's own refusal, word for word
    STACK_KEYS,
    parse_report_to,  # trainReportTo
    rules,
    stack_message,
)
from workload.config.fields import (
    NAME_MAX_LENGTH,
    hidden_character,
    looks_like_token,
    rename_flags,
    shown_choice,
    shown_items,
    shown_value,
)
from workload.config.secret_text import holds_token
from workload.fabric.transport import EXPECTATIONS as EXPECT_TRANSPORTS  # trainExpectTransport
from workload.model import adapters, architectures, model_source, structure  # trainMethod, trainLora*, trainModelId
from workload.run import variable_values  # trainEnv's values, as the local run checks the environment

# The train* keys only the stack has (no job flag), read here and nowhere else; every other train* key is declared
# beside its flag (workload.config.STACK_KEYS). tests/program/test_stack_keys.py holds the two to Pulumi.yaml's train* keys.
STACK_ONLY_KEYS = ("trainEnabled", "trainRunId", "trainPip", "trainEnv", "trainSecretEnv", "trainTimeoutMinutes",
                   "trainWait", "trainExpectTransport")


def parse_train(raw: dict[str, Any]) -> JobSettings:
    flags = job_flags(raw)
    require(raw["trainTimeoutMinutes"] >= 1, "trainTimeoutMinutes", f"must be at least 1, got {raw['trainTimeoutMinutes']}")
    require(raw["trainTimeoutMinutes"] <= MAX_TIMEOUT_MINUTES, "trainTimeoutMinutes",
             f"{raw['trainTimeoutMinutes']} minutes: allowed 1 to {MAX_TIMEOUT_MINUTES} (30 days); a longer training "
             "is several jobs, each resuming from the last one's checkpoints")
    require(bool(RUN_ID.fullmatch(raw["trainRunId"])), "trainRunId",
             f"{shown_value(raw['trainRunId'])} must be 1-32 letters, digits, '.', '_' or '-' (it names the Ray job)")
    require_choice(raw["trainExpectTransport"], EXPECT_TRANSPORTS, "trainExpectTransport")
    require_choice(raw["trainWait"], TRAIN_WAITS, "trainWait")
    env = _parse_env("trainEnv", raw["trainEnv"])
    secret_env = SecretEnv(_parse_env("trainSecretEnv", raw["trainSecretEnv"]))
    clash = sorted(set(env) & set(secret_env.names))
    if clash:  # the first one named: the names are bounded by count, not by length
        more = f" (and {len(clash) - 1} more)" if len(clash) > 1 else ""
        raise ValueError(f"config key 'trainSecretEnv': {_shown_name('trainEnv', clash[0])}{more} is set in trainEnv "
                         "too; set each variable in one key")
    _check_tracking(raw, env, secret_env)
    _check_offline(raw, env)
    _check_data_storage(raw)
    # experimentTracking mlflow: the stack's own server when trainMlflowTrackingUri is unset.
    flags["mlflow_tracking_uri"] = default_tracking_uri(raw, parse_report_to(raw["trainReportTo"]))
    return JobSettings(
        enabled=raw["trainEnabled"],
        run_id=raw["trainRunId"],
        flags=flags,
        pip=pip_requirements.check_requirements(raw["trainPip"]),
        env=env,
        timeout_minutes=raw["trainTimeoutMinutes"],
        expect_transport=raw["trainExpectTransport"],
        secret_env=secret_env,
        wait=raw["trainWait"],
    )


def job_flags(raw: dict[str, Any]) -> dict[str, Any]:
    """The job's flags from the train* keys that set them, each translated and checked by its one declaration
    (workload/config/fields.py), then the job's own rules between them (workload/config/rules.py), every refusal
    naming the stack keys."""
    values = {declared.name: declared.default for declared in DECLARED}
    for declared in DECLARED:
        if declared.stack_key is None:
            continue
        value = declared.from_stack(raw[declared.stack_key])
        if (why := declared.problem(value)) is not None:
            raise ValueError(f"config key {declared.stack_key!r}: {rename_flags(why, STACK_KEYS)}")
        values[declared.name] = declared.canonical(value)  # TRL's keep_start as the job's truncate, as the job takes it
    # The stack's own choices of trainChatTemplate (a .jinja file is not on the cluster), before the rules between
    # settings: a rule quotes the values it compares, and an unknown one is quoted only as a choice is.
    require(values["chat_template"] in ("", *CHAT_TEMPLATES), "trainChatTemplate",
            f"{shown_choice(values['chat_template'])} is not empty (the tokenizer's own) or one of {list(CHAT_TEMPLATES)}")
    # The stack's typo guard, which the job does not have: a peak rate of 1 or more is 1e-5 mistyped far more often than
    # meant (the job takes any positive rate: tests/runs/test_workload_runs.py makes a run diverge on purpose with one).
    require(values["learning_rate"] < 1, "trainLearningRate",
            f"must be above 0 and below 1, got {values['learning_rate']}")
    # Where S3 allows the job to read and write: the stack's own rules (the Ray pods' role is granted these).
    check_storage_path(values["storage_path"])
    check_dataset_location(values["dataset"])
    # The job's own rule for what a model id may name (the Hub's repo-id rule among them), with the job off too.
    if not values["model_config"] and values["model_id"] and (wrong := model_source.problem(values["model_id"])):
        raise ValueError(stack_message(f"--model_id {shown_value(values['model_id'])} is {wrong}"))
    check_source_scheme("trainModelId", "" if values["model_config"] else values["model_id"])
    check_source_scheme("trainTokenizer", values["tokenizer"])
    if (model_location := s3_location(values["model_id"], "trainModelId")) is not None:
        require(bool(model_location[1]), "trainModelId", f"{shown_value(values['model_id'])}: {S3_MODEL_DIRECTORY}")
    try:
        adapters.check_settings(values["method"], values["lora_rank"], values["lora_alpha"], values["lora_dropout"],
                       values["lora_targets"])
        shipped = architectures.published(values["model_id"])
        if values["method"] != "full" and shipped:  # the model's own linear layers, known without a download
            adapters.resolve(values["lora_targets"], structure.linear_names(shipped))
    except ValueError as error:
        raise ValueError(stack_message(str(error))) from None
    if (broken := rules.first_broken(values)) is not None:
        raise ValueError(stack_message(broken))
    # The job's argv holds the flags whose value is not the default (TrainConfig.to_args), and the job refuses one
    # that the others make do nothing (trainMaxFailures without trainStoragePath): said here, before any GPU bills.
    defaults = {declared.name: declared.default for declared in DECLARED}
    given = {name for name in STACK_KEYS if values[name] != defaults[name]}
    if (inert := rules.typed_without_effect(values, given)) is not None:
        raise ValueError(stack_message(inert))
    return {name: values[name] for name in STACK_KEYS}


# The tokens the trackers and the Hub read from the job's environment: never in trainEnv (Ray's dashboard shows a
# job's runtime_env), only in trainSecretEnv. (wandb reads WANDB_API_KEY; huggingface_hub HF_TOKEN.)
WANDB_KEY = "WANDB_API_KEY"
HUB_TOKEN = "HF_TOKEN"
TOKEN_VARIABLES = (WANDB_KEY, HUB_TOKEN, "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")

def _check_tracking(raw: dict[str, Any], env: dict[str, str], secret_env: SecretEnv) -> None:
    """trainReportTo and its keys, trainPushToHub, and the tokens they need, in trainSecretEnv only."""
    try:
        trackers = parse_report_to(raw["trainReportTo"])
    except ValueError:
        raise ValueError(f"config key 'trainReportTo': {shown_items(raw['trainReportTo'].split(','))} is not a comma "
                         "list of tensorboard, mlflow, wandb, or none") from None
    leaked = [name for name in env if name in TOKEN_VARIABLES or holds_credential(name)]
    require(not leaked, "trainEnv", f"sets {', '.join(leaked)}, which holds a credential by its name: put it in "
            "trainSecretEnv (`pulumi config set --secret --path 'trainSecretEnv[0]' NAME=...`), never in trainEnv, "
            "which Ray's dashboard shows (its value is not shown)")
    uri = raw["trainMlflowTrackingUri"]
    # The stack's own server (experimentTracking mlflow) is plain http inside the cluster, and the Ray pods' egress to
    # it is a NetworkPolicy of its own (infra/kubernetes/mlflow_server.py): that one URI is allowed besides https.
    own_server = parse_experiment_tracking(raw) == "mlflow"
    why = tracking_uri_problem(uri, in_cluster_uri(raw["rayNamespace"]) if own_server else None)
    require(why is None, "trainMlflowTrackingUri", f"must be reachable from the Ray pods: {why}")
    require("mlflow" not in trackers or bool(uri) or own_server, "trainReportTo",
             "mlflow needs trainMlflowTrackingUri: a job's pods keep no local MLflow store (set the team's server, "
             "https://host, or experimentTracking mlflow for the stack's own)")
    require("wandb" not in trackers or WANDB_KEY in secret_env.names, "trainReportTo",
             f"wandb needs {WANDB_KEY} in trainSecretEnv: `pulumi config set --secret --path 'trainSecretEnv[0]' "
             f"{WANDB_KEY}=...` (a Pulumi secret, never in plain config)")
    repo = raw["trainPushToHub"]
    if repo:
        require(HUB_TOKEN in secret_env.names, "trainPushToHub",
                 f"uploads with {HUB_TOKEN}, which trainSecretEnv does not set: `pulumi config set --secret --path "
                 f"'trainSecretEnv[0]' {HUB_TOKEN}=hf_...` (a write token)")


# The switches that keep a library off the Hub, and what each keeps off it (huggingface_hub's constants.py reads
# HF_HUB_OFFLINE; transformers TRANSFORMERS_OFFLINE, for the model and tokenizer; datasets HF_DATASETS_OFFLINE), with
# huggingface_hub's true values (constants._is_true).
OFFLINE_SWITCHES = {"HF_HUB_OFFLINE": ("trainModelId", "trainTokenizer", "trainDataset", "trainPushToHub"),
                    "TRANSFORMERS_OFFLINE": ("trainModelId", "trainTokenizer"), "HF_DATASETS_OFFLINE": ("trainDataset",)}
TRUE_VALUES = ("1", "ON", "YES", "TRUE")


def hub_sources(raw: dict[str, Any]) -> dict[str, str]:
    """The train* keys whose value the job reads from (or writes to) the Hugging Face Hub, by key."""
    def on_hub(value: str) -> bool:
        return bool(value) and "://" not in value and not value.startswith(("/", "./", "../", "~"))

    sources = {}
    if not raw["trainModelConfig"] and on_hub(raw["trainModelId"]):
        sources["trainModelId"] = raw["trainModelId"]
    if raw["trainDataset"]:
        tokenizer_key = "trainTokenizer" if raw["trainTokenizer"] else "trainModelId"
        if on_hub(raw[tokenizer_key]):
            sources.setdefault(tokenizer_key, raw[tokenizer_key])
        if on_hub(raw["trainDataset"]) and not raw["trainDataset"].endswith(rules.DATASET_FILE_SUFFIXES):
            sources["trainDataset"] = raw["trainDataset"]
    if raw["trainPushToHub"]:
        sources["trainPushToHub"] = raw["trainPushToHub"]
    return sources


def _check_data_storage(raw: dict[str, Any]) -> None:
    """A dataset needs a storage path on the cluster: the data stage (workload/data/stage.py) runs on the Ray head
    and keeps the token shards under trainStoragePath/datasets, which every GPU node reads; without one they would
    stay on the head's own disk, and every worker would fail to find them after the GPUs started billing."""
    if not raw["trainDataset"]:
        return
    storage = raw["trainStoragePath"]
    require(bool(storage), "trainDataset",
            f"{shown_value(raw['trainDataset'])} needs trainStoragePath (s3://BUCKET/PREFIX): the data stage keeps "
            "its token "
            "shards there, where every GPU node reads them; set trainStoragePath, or leave trainDataset empty for "
            "random tokens")
    # A local path (/mnt/ckpt, file://...) is each node's own disk: the shards the head writes there are not on the
    # GPU nodes.
    if not storage.strip().lower().startswith("s3://"):
        raise config_error(("trainDataset", "trainStoragePath"),
                           "a dataset needs an s3:// trainStoragePath: the data stage writes its token shards on the "
                           "Ray head, and a local path is that node's own disk, which no GPU node reads; allowed: "
                           "trainStoragePath s3://BUCKET/PREFIX, or trainDataset empty for random tokens")


def _check_offline(raw: dict[str, Any], env: dict[str, str]) -> None:
    """An offline switch in trainEnv with a source on the Hub: the GPU nodes start with no Hub cache, so
    the job would fail at its first download (or its upload, after the whole run)."""
    for name, keys in OFFLINE_SWITCHES.items():
        if env.get(name, "").upper() not in TRUE_VALUES:
            continue
        cut_off = {key: value for key, value in hub_sources(raw).items() if key in keys}
        require(not cut_off, "trainEnv", f"sets {name}, which keeps the job off the Hugging Face Hub, and "
                f"{', '.join(f'{k} {v}' for k, v in cut_off.items())} is on the Hub (the GPU nodes start with no Hub "
                "cache); allowed: leave it unset, or s3:// sources for the model, tokenizer and dataset")


# Each key's entries in total, as NAME=VALUE with its terminating NUL (how execve(2) counts them), and why:
# - trainSecretEnv becomes one Kubernetes Secret, and "individual secrets are limited to 1MiB in size"
#   (https://kubernetes.io/docs/concepts/configuration/secret/#restriction-data-size); 16 KiB stay for the object's
#   own metadata.
# - trainEnv reaches every Ray worker process's environment, which execve(2) caps with the arguments at ARG_MAX (a
#   quarter of the stack limit: 2 MiB under the usual 8 MiB; "Limits on size of arguments and environment") and which
#   the image's own variables, Ray's, trainSecretEnv's (up to the 1 MiB above) and the command line share; a single
#   string is capped at MAX_ARG_STRLEN (128 KiB), far above MAX_ENV_VALUE_CHARS. A quarter of ARG_MAX leaves them room.
# execve(2): each argument or environment string is at most MAX_ARG_STRLEN, 32 pages of 4 KiB, its NUL included.
MAX_ARG_STRLEN = 32 * 4096
ENV_TOTAL_BOUNDS = {
    "trainSecretEnv": ((1 << 20) - (16 << 10), "one Kubernetes Secret holds at most 1 MiB, metadata included"),
    "trainEnv": (512 << 10, "every Ray worker's environment, which Linux's execve caps at ARG_MAX, 2 MiB, with the "
                            "arguments, the image's variables and trainSecretEnv's"),
}


def _parse_env(key: str, items: list[str]) -> dict[str, str]:
    """KEY=VALUE entries. A refusal quotes the entry's position and name only: the value may be a token."""
    require(len(items) <= MAX_ENV_ENTRIES, key, f"{len(items)} entries; allowed: at most {MAX_ENV_ENTRIES} (each is "
                                                  "an environment variable of every Ray container)")
    bound, why = ENV_TOTAL_BOUNDS[key]
    total = sum(len(item.encode("utf-8", "surrogatepass")) + 1 for item in items if isinstance(item, str))
    require(total <= bound, key, f"its entries total {total:,} bytes; allowed: at most {bound:,} in all ({why}; "
                                 "the values are not shown)")
    env: dict[str, str] = {}
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        size = len(item.encode("utf-8", "surrogatepass")) + 1 if isinstance(item, str) else 0
        require(size <= MAX_ARG_STRLEN, key, f"entry {index} is {size:,} bytes; allowed: at most {MAX_ARG_STRLEN:,} "
                                            "(Linux's execve refuses a longer NAME=VALUE string, MAX_ARG_STRLEN; the "
                                            "value is not shown)")
        name, sep, value = item.partition("=")
        require(bool(sep) and bool(ENV_NAME.fullmatch(name)), key,
                 f"entry {index} is not KEY=VALUE with KEY made of letters, digits and '_' (its value is not shown)")
        shown = _shown_name(key, name)
        require(name not in env, key, f"entry {index} sets {shown} again (entry {first_index.get(name)} set it); "
                                      "allowed: each variable once")
        # An empty token is read as none: the tracker or the upload would fail only where it starts using it.
        require(key != "trainSecretEnv" or bool(value.strip()), key,
                f"entry {index} sets {shown} to an empty value, which its library reads as no token at all; allowed: "
                "NAME=the token")
        why = reserved_reason(name)
        require(why is None, key, f"entry {index} sets {shown}, which the job may not set: {why} (its value is not "
                                  "shown)")
        why = unpassable_reason(value)
        require(why is None, key, f"entry {index} ({shown}): the value {why}; allowed: a value without it (the value "
                                  "is not shown)")
        # trainEnv's values meet text_problem's rule (schema.check_text_bounds); a secret's may hold anything else a
        # token holds, but not a control, format or line-separator character: a token's library strips or keeps it
        # (huggingface_hub's _clean_token deletes a newline, so "hf_...\nX=1" becomes another token, refused by the
        # Hub), and a pasted token file's trailing newline reaches the pods' variable.
        if key == "trainSecretEnv" and (hidden := hidden_character(value)) is not None:
            raise config_error(key, f"entry {index} ({shown}): the value holds U+{ord(value[hidden]):04X} "
                             f"at character {hidden}, a control, format or line-separator character no token holds (a "
                             "newline, a tab, a zero-width space); allowed: the token alone, as `pulumi config set "
                             "--secret` of its value, not a file's text (its value is not shown)")
        why = pseudo_directory_reason(name, value)
        require(why is None, key, f"entry {index} ({shown}): {why}")
        require(len(value) <= MAX_ENV_VALUE_CHARS, key,
                 f"entry {index} ({shown}): the value is {len(value)} characters; allowed: at most "
                 f"{MAX_ENV_VALUE_CHARS} (its value is not shown)")
        require(key != "trainEnv" or not refers_to_variable(value), key,
                f"entry {index} ({shown}) refers to another variable ($NAME or ${{NAME}}), which Ray's runtime_env "
                "expands: it would copy a trainSecretEnv token into a plain variable; allowed: a literal value, with "
                "no '$' before a name or '{' (its value is not shown)")
        require(key != "trainEnv" or not carries_credential_header(name, value), key,
                f"entry {index} ({shown}) carries a credential header (Authorization, an API key or a token), which "
                "Ray's dashboard would show: put the variable in trainSecretEnv (`pulumi config set --secret --path "
                "'trainSecretEnv[0]' NAME=...`) (its value is not shown)")
        # A credential under a neutral name (GRAFANA_STACK=glc_..., a vendor's shape not listed yet): the rule that masks
        # tokens in every refusal (workload/config/secret_text.py holds_token), so Ray's dashboard never shows one.
        require(key != "trainEnv" or not holds_token(value), key,
                f"entry {index} ({shown}): the value reads as a credential (a token's shape, or a long random-looking "
                "run of letters and digits), which Ray's dashboard would show: put the variable in trainSecretEnv "
                "(`pulumi config set --secret --path 'trainSecretEnv[0]' NAME=...`) (its value is not shown)")
        # A value the libraries refuse or misread where the job starts (PYTHONHASHSEED=abc, PYTORCH_CUDA_ALLOC_CONF
        # expandable_segments:maybe, HF_HUB_OFFLINE=maybe): the local run's own rules, one table for both sides.
        why = variable_values.problem({name: value}) if key == "trainEnv" else None
        require(why is None, key, f"entry {index}: {why}")
        env[name] = value
        first_index[name] = index
    return env


def _shown_name(key: str, name: str) -> str:
    """A variable's name as a refusal may quote it: a name longer than a name's bound is not (the refusal stays one
    short line), and trainSecretEnv's entries are secrets whole, so one of its names shaped like a token is named by
    its entry's position alone."""
    if len(name) > NAME_MAX_LENGTH:
        return f"a variable (its name is {len(name)} characters, not shown)"
    if key == "trainSecretEnv" and looks_like_token(name):
        return "a variable (its name is not shown: it is shaped like a token)"
    return name
