"""The train* keys: the training job's settings, checked against the workload's own lists so that a value the
job accepts is never refused here, nor the reverse."""
from __future__ import annotations

import math
import re
from typing import Any

import infra.config.pip_requirements as pip_requirements  # trainPip
from infra.config.env_names import MAX_ENV_ENTRIES, MAX_ENV_VALUE_CHARS, reserved_reason
from infra.config.experiment_tracking import default_tracking_uri, in_cluster_uri, parse_experiment_tracking
from infra.config.rules import ENV_NAME, RUN_ID, check_dataset_location, check_storage_path, require, s3_location
from infra.config.settings import (
    MAX_BATCH_SIZE,
    MAX_TIMEOUT_MINUTES,
    TRAIN_WAITS,
    SecretEnv,
    TrainConfig,
    TrainExamples,
)
from workload.config import (
    CHAT_TEMPLATES,
    DATA_FORMATS,  # trainDataFormat
    EXPORTS,  # trainExport
    LR_SCHEDULES,  # trainLrSchedule
    MODEL_CONFIGS,  # trainModelConfig: architectures built with random weights
    REDUCE_DTYPES,  # trainReduceDtype
    S3_MODEL_DIRECTORY,  # trainModelId in S3: the job's own refusal, word for word
    SHARDINGS,  # trainSharding
    TRUNCATIONS,  # trainTruncation
    is_file_dataset,  # trainDataset: a file (s3://...) rather than a Hugging Face id
    parse_report_to,  # trainReportTo
)
from workload.fabric.transport import EXPECTATIONS as EXPECT_TRANSPORTS  # trainExpectTransport
from workload.model import adapters  # trainMethod and trainLora*: the job's own names and check


def parse_train(raw: dict[str, Any]) -> TrainConfig:
    try:
        learning_rate = float(raw["trainLearningRate"])
    except ValueError as e:
        raise ValueError(f"config key 'trainLearningRate': {raw['trainLearningRate']!r} is not a number") from e
    require(0 < learning_rate < 1, "trainLearningRate", f"must be between 0 and 1, got {learning_rate}")
    for key in ("trainSteps", "trainBatchSize", "trainSeqLen", "trainTimeoutMinutes"):
        require(raw[key] >= 1, key, f"must be at least 1, got {raw[key]}")
    require(raw["trainBatchSize"] <= MAX_BATCH_SIZE, "trainBatchSize",
             f"{raw['trainBatchSize']} sequences per GPU per step: allowed 1 to {MAX_BATCH_SIZE} (for a larger "
             "effective batch, add GPUs)")
    require(raw["trainTimeoutMinutes"] <= MAX_TIMEOUT_MINUTES, "trainTimeoutMinutes",
             f"{raw['trainTimeoutMinutes']} minutes: allowed 1 to {MAX_TIMEOUT_MINUTES} (30 days); a longer training "
             "is several jobs, each resuming from the last one's checkpoints")
    require(raw["trainNumWorkers"] >= 0, "trainNumWorkers",
             f"must be 0 (one worker per GPU) or more, got {raw['trainNumWorkers']}")
    require(raw["trainMaxFailures"] >= -1, "trainMaxFailures",
             f"must be -1 (retry forever), 0 or more, got {raw['trainMaxFailures']}")
    require(raw["trainModelConfig"] in ("", *MODEL_CONFIGS), "trainModelConfig",
             f"{raw['trainModelConfig']!r} is not empty or one of {list(MODEL_CONFIGS)}")
    require(bool(raw["trainModelId"]), "trainModelId", "must name a Hugging Face model")
    require(bool(RUN_ID.fullmatch(raw["trainRunId"])), "trainRunId",
             f"{raw['trainRunId']!r} must be 1-32 letters, digits, '.', '_' or '-' (it names the Ray job)")
    require(raw["trainExpectTransport"] in EXPECT_TRANSPORTS, "trainExpectTransport",
             f"{raw['trainExpectTransport']!r} is not one of {list(EXPECT_TRANSPORTS)}")
    require(raw["trainWait"] in TRAIN_WAITS, "trainWait", f"{raw['trainWait']!r} is not one of {list(TRAIN_WAITS)}")
    require(raw["trainCheckpointEvery"] >= 0, "trainCheckpointEvery",
             f"must be 0 (only after the last step) or more, got {raw['trainCheckpointEvery']}")
    for key, allowed in (("trainSharding", SHARDINGS), ("trainReduceDtype", REDUCE_DTYPES)):
        require(raw[key] in allowed, key, f"{raw[key]!r} is not one of {list(allowed)}")
    require(raw["trainGradAccumSteps"] >= 1 and raw["trainBatchSize"] % raw["trainGradAccumSteps"] == 0,
             "trainGradAccumSteps", f"must be at least 1 and divide trainBatchSize {raw['trainBatchSize']} (each "
             f"micro-batch takes an equal share of it), got {raw['trainGradAccumSteps']}")
    try:
        min_bus = float(raw["trainMinBusBandwidthGBps"])
    except ValueError as e:
        raise ValueError(f"config key 'trainMinBusBandwidthGBps': {raw['trainMinBusBandwidthGBps']!r} is not a "
                         "number") from e
    require(min_bus >= 0 and math.isfinite(min_bus), "trainMinBusBandwidthGBps",
             f"must be 0 (no minimum) or a bus bandwidth in GB/s, got {raw['trainMinBusBandwidthGBps']}")
    storage = raw["trainStoragePath"]
    check_storage_path(storage)
    for key, allowed in (("trainLrSchedule", LR_SCHEDULES), ("trainExport", EXPORTS)):
        require(raw[key] in allowed, key, f"{raw[key]!r} is not one of {list(allowed)}")
    for key in ("trainWarmupSteps", "trainEvalEvery"):
        require(raw[key] >= 0, key, f"must be 0 or more, got {raw[key]}")
    require(raw["trainWarmupSteps"] <= raw["trainSteps"], "trainWarmupSteps",
             f"{raw['trainWarmupSteps']} must be at most trainSteps {raw['trainSteps']}")
    try:
        eval_fraction = float(raw["trainEvalFraction"])
    except ValueError as e:
        raise ValueError(f"config key 'trainEvalFraction': {raw['trainEvalFraction']!r} is not a number") from e
    require(0 <= eval_fraction < 1, "trainEvalFraction",
             f"must be 0 (none) or a fraction below 1 such as 0.05, got {raw['trainEvalFraction']}")
    require(not (eval_fraction and raw["trainEvalSplit"]), "trainEvalFraction",
             "and trainEvalSplit both choose the evaluation set: set one")
    dataset = raw["trainDataset"]
    require(bool(dataset) or not (eval_fraction or raw["trainEvalSplit"] or raw["trainEvalEvery"]), "trainDataset",
             "is empty (random tokens), so there is nothing to evaluate: set it, or leave trainEvalFraction, "
             "trainEvalSplit and trainEvalEvery unset")
    require(not (raw["trainEvalSplit"] and is_file_dataset(dataset)), "trainEvalSplit",
             f"names a split of a Hugging Face trainDataset; the file {dataset} has none: use trainEvalFraction")
    require(raw["trainExport"] != "checkpoints" or raw["trainCheckpointEvery"] > 0, "trainExport",
             "checkpoints writes a model at every checkpoint, and trainCheckpointEvery is 0 (only the last step's): "
             "set trainCheckpointEvery, or use final")
    check_dataset_location(dataset)
    if (model_location := s3_location(raw["trainModelId"], "trainModelId")) is not None:
        require(bool(model_location[1]), "trainModelId", f"{raw['trainModelId']!r}: {S3_MODEL_DIRECTORY}")
    env = _parse_env("trainEnv", raw["trainEnv"])
    secret_env = SecretEnv(_parse_env("trainSecretEnv", raw["trainSecretEnv"]))
    clash = sorted(set(env) & set(secret_env.names))
    require(not clash, "trainSecretEnv", f"{clash} are set in trainEnv too; set each variable in one key")
    _check_tracking(raw, env, secret_env)
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
        report_to=raw["trainReportTo"],
        # experimentTracking mlflow: the stack's own server when trainMlflowTrackingUri is unset.
        mlflow_tracking_uri=default_tracking_uri(raw, parse_report_to(raw["trainReportTo"])),
        wandb_project=raw["trainWandbProject"],
        push_to_hub=raw["trainPushToHub"],
        **_parse_method(raw),
    )


# The flags of trainMethod and its keys, as workload.model.adapters.check names them.
METHOD_KEYS = {"--method": "trainMethod", "--lora_rank": "trainLoraRank", "--lora_alpha": "trainLoraAlpha",
               "--lora_dropout": "trainLoraDropout", "--lora_targets": "trainLoraTargets"}


def _parse_method(raw: dict[str, Any]) -> dict[str, Any]:
    """trainMethod and the trainLora* keys, checked by the job's own workload.model.adapters.check (so the stack and
    the job accept the same values), its refusal naming the key instead of the flag."""
    require(raw["trainMethod"] in adapters.METHODS, "trainMethod",
             f"{raw['trainMethod']!r} is not one of {list(adapters.METHODS)}")
    numbers = {}
    for key, field in (("trainLoraAlpha", "lora_alpha"), ("trainLoraDropout", "lora_dropout")):
        try:
            numbers[field] = float(raw[key])
        except (TypeError, ValueError):
            raise ValueError(f"config key {key!r}: {raw[key]!r} is not a number") from None
    settings = {"method": raw["trainMethod"], "lora_rank": raw["trainLoraRank"], **numbers,
                "lora_targets": raw["trainLoraTargets"]}
    try:
        adapters.check(settings["method"], settings["lora_rank"], settings["lora_alpha"], settings["lora_dropout"],
                       settings["lora_targets"])
    except ValueError as error:
        flag, _, rest = str(error).partition(" ")
        raise ValueError(f"config key {METHOD_KEYS.get(flag, flag)!r}: {rest}") from None
    return settings


# The tokens the trackers and the Hub read from the job's environment: never in trainEnv (Ray's dashboard shows a
# job's runtime_env), only in trainSecretEnv. (wandb reads WANDB_API_KEY; huggingface_hub HF_TOKEN.)
WANDB_KEY = "WANDB_API_KEY"
HUB_TOKEN = "HF_TOKEN"
TOKEN_VARIABLES = (WANDB_KEY, HUB_TOKEN, "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
# https on 443: the Ray pods' NetworkPolicy lets them out to public addresses on 443 only (infra/kubernetes/
# ray_security.py), and a policy cannot name a host to let a team server on another port or address through.
_TRACKING_URI = re.compile(r"https://[A-Za-z0-9.-]+(:443)?(/[\w./-]*)?")
_HUB_REPO = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}")


def _check_tracking(raw: dict[str, Any], env: dict[str, str], secret_env: SecretEnv) -> None:
    """trainReportTo and its keys, trainPushToHub, and the tokens they need, in trainSecretEnv only."""
    try:
        trackers = parse_report_to(raw["trainReportTo"])
    except ValueError:
        raise ValueError(f"config key 'trainReportTo': {raw['trainReportTo']!r} is not a comma list of tensorboard, "
                         "mlflow, wandb, or none") from None
    leaked = [name for name in TOKEN_VARIABLES if name in env]
    require(not leaked, "trainEnv", f"sets {', '.join(leaked)}: a token goes in trainSecretEnv (`pulumi config set "
            "--secret --path 'trainSecretEnv[0]' NAME=...`), never in trainEnv, which Ray's dashboard shows")
    uri = raw["trainMlflowTrackingUri"]
    # The stack's own server (experimentTracking mlflow) is plain http inside the cluster, and the Ray pods' egress to
    # it is a NetworkPolicy of its own (infra/kubernetes/mlflow_server.py): that one URI is allowed besides https.
    own_server = parse_experiment_tracking(raw) == "mlflow"
    in_cluster = own_server and uri == in_cluster_uri(raw["rayNamespace"])
    require(not uri or bool(_TRACKING_URI.fullmatch(uri)) or in_cluster, "trainMlflowTrackingUri",
             "must be https://host[/path] on port 443, the only way out the Ray pods' NetworkPolicy allows (to public "
             "addresses), with no user:password@ (credentials go in trainSecretEnv as MLFLOW_TRACKING_USERNAME and "
             f"MLFLOW_TRACKING_PASSWORD), got {'a URI with credentials' if '@' in uri else repr(uri)}")
    require("mlflow" not in trackers or bool(uri) or own_server, "trainReportTo",
             "mlflow needs trainMlflowTrackingUri: a job's pods keep no local MLflow store (set the team's server, "
             "https://host, or experimentTracking mlflow for the stack's own)")
    require("wandb" not in trackers or WANDB_KEY in secret_env.names, "trainReportTo",
             f"wandb needs {WANDB_KEY} in trainSecretEnv: `pulumi config set --secret --path 'trainSecretEnv[0]' "
             f"{WANDB_KEY}=...` (a Pulumi secret, never in plain config)")
    repo = raw["trainPushToHub"]
    if repo:
        require(bool(_HUB_REPO.fullmatch(repo)), "trainPushToHub", f"must be a Hub repo as owner/name, got {repo!r}")
        require(HUB_TOKEN in secret_env.names, "trainPushToHub",
                 f"uploads with {HUB_TOKEN}, which trainSecretEnv does not set: `pulumi config set --secret --path "
                 f"'trainSecretEnv[0]' {HUB_TOKEN}=hf_...` (a write token)")
        require(bool(raw["trainStoragePath"]) and raw["trainExport"] != "none", "trainPushToHub",
                 "uploads the exported model: it needs trainStoragePath and trainExport final or checkpoints")


def _parse_train_examples(raw: dict[str, Any]) -> TrainExamples:
    """The keys of chat and prompt-completion data, each checked against its allowed values."""
    data_format = raw["trainDataFormat"]
    require(data_format in DATA_FORMATS, "trainDataFormat", f"{data_format!r} is not one of {list(DATA_FORMATS)}")
    require(raw["trainTruncation"] in TRUNCATIONS, "trainTruncation",
             f"{raw['trainTruncation']!r} is not one of {list(TRUNCATIONS)}")
    require(raw["trainChatTemplate"] in ("", *CHAT_TEMPLATES), "trainChatTemplate",
             f"{raw['trainChatTemplate']!r} is not empty (the tokenizer's own) or one of {list(CHAT_TEMPLATES)}")
    if data_format != "text":
        require(bool(raw["trainDataset"]), "trainDataset",
                 f"is empty (random tokens), and trainDataFormat {data_format} needs records to train on")
        require(not raw["trainDataset"].endswith((".txt", ".txt.gz")), "trainDataset",
                 f"{raw['trainDataset']} is plain text; trainDataFormat {data_format} reads records from .jsonl, .json, "
                 ".parquet or a Hugging Face dataset")
        keys = ("trainMessagesField",) if data_format == "chat" else ("trainPromptField", "trainCompletionField")
        for key in keys:
            require(bool(raw[key]), key, f"must name the records' field for trainDataFormat {data_format}")
        require(data_format != "prompt-completion" or raw["trainPromptField"] != raw["trainCompletionField"],
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


def _parse_env(key: str, items: list[str]) -> dict[str, str]:
    """KEY=VALUE entries. A refusal quotes the entry's position and name only: the value may be a token."""
    require(len(items) <= MAX_ENV_ENTRIES, key, f"{len(items)} entries; allowed: at most {MAX_ENV_ENTRIES} (each is "
                                                  "an environment variable of every Ray container)")
    env: dict[str, str] = {}
    for index, item in enumerate(items):
        name, sep, value = item.partition("=")
        require(bool(sep) and bool(ENV_NAME.fullmatch(name)), key,
                 f"entry {index} is not KEY=VALUE with KEY made of letters, digits and '_' (its value is not shown)")
        require(name not in env, key, f"sets {name} twice")
        why = reserved_reason(name)
        require(why is None, key, f"entry {index} sets {name}, which the job may not set: {why} (its value is not "
                                  "shown)")
        require(len(value) <= MAX_ENV_VALUE_CHARS, key,
                 f"entry {index} ({name}): the value is {len(value)} characters; allowed: at most "
                 f"{MAX_ENV_VALUE_CHARS} (its value is not shown)")
        env[name] = value
    return env
