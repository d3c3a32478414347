"""The training job's configuration: one dataclass, validated on construction, with CLI flags that map onto it 1:1.
Imports the standard library and workload.model's lists and checks (no torch), so the Pulumi program imports it.

Every field is declared once with `flag(default, help, stack_key=..., bounds or choices)` (fields.py): `parse_args`
turns each field into `--<field>` with that help, the stack's train* key table (STACK_KEYS) and each field's
bounds check are derived from it, and the rules between fields are written once in rules.py, applied here and at
preview. The recipe's flag names (`--model_id`, `--steps`, `--batch_size`, `--seq_len`, `--learning_rate`) are kept.

No Ray and no model download here: a bad flag fails in `TrainConfig.__post_init__`, before anything starts.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from workload import user_files
from workload.config import aliases, fields, rules, s3_uri, values
from workload.config import numeric_bounds as bound  # every numeric setting's upper bound, with its reason
from workload.config.fields import URI_MAX_LENGTH, Declaration, flag, in_stack_terms  # noqa: F401
from workload.config.hub_urls import HUB_ID_FLAGS, hub_url_problem
from workload.config.numeric_bounds import MAX_BATCH_SIZE, MAX_FAILURES, MAX_STEPS  # noqa: F401
from workload.config.rules import DATASET_FILE_SUFFIXES, RULES, Rule, is_file_dataset, is_local_dataset  # noqa: F401
from workload.config.values import (  # noqa: F401
    DATASET_CONFIG,
    WANDB_PROJECT_MAX_LENGTH,
    dataset_id_problem,
    gpu_memory_problem,
    mlflow_uri_problem,
    repo_id_problem,
    split_problem,
    wandb_project_problem,
)
from workload.model import adapters, architectures, model_source

# The published config.json of the architectures known before any download (workload/architectures: Qwen2.5,
# Qwen3, Llama 3.x, Mistral). Qwen/Qwen2.5-1.5B's fields make `qwen2.5-1.5b`, so it benchmarks the real architecture
# without a hub download.
QWEN2_5_1_5B = {key: architectures.published("Qwen/Qwen2.5-1.5B")[key] for key in (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings")}
# The same architecture at a size that trains in milliseconds per step on one CPU core; tied embeddings like the
# real model, so the tied-weight path is what the tests exercise.
TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
# Plain dicts here (no transformers import), so the Pulumi program can judge a job's shape at preview. Both are
# Qwen2Config keyword arguments (workload.model.build builds them), so workload.model.memory counts them as Qwen2.
ARCHITECTURES = {"tiny": TINY, "qwen2.5-1.5b": QWEN2_5_1_5B}
MODEL_CONFIGS = tuple(ARCHITECTURES)
"""Names accepted by --model_config (architectures built with random weights, see workload.model.build)."""
# --num_workers 0 on a cluster without GPUs (the local run's is one): the run still shards across processes, so
# FSDP's collectives are exercised on a laptop.
CPU_WORKERS_WITHOUT_GPUS = 2

# Why an s3:// --model_id (trainModelId) must name a directory under a bucket; the preview refuses with the same words.
S3_MODEL_DIRECTORY = ("a model in S3 is a directory, s3://bucket/prefix/ holding config.json and *.safetensors, not "
                      "a bucket's root")
DATA_FORMATS = ("text", "chat", "prompt-completion")
"""Names accepted by --data_format: raw text packed as today, or supervised fine-tuning records (workload/data/)."""
CHAT_TEMPLATES = ("qwen2.5", "llama3")
"""Names accepted by --chat_template besides a .jinja file: the published templates in workload/data/templates/."""
TRUNCATIONS = ("truncate", "keep_end", "split")
"""Names accepted by --truncation: what happens to a chat or prompt-completion example longer than --seq_len."""
SHARDINGS = ("auto", "full", "hybrid", "two-level")
"""Names accepted by --sharding (workload.model.layout chooses between full and two-level for auto)."""
REDUCE_DTYPES = ("auto", "fp32", "bf16")
"""Names accepted by --reduce_dtype (workload.model.layout resolves auto)."""
LR_SCHEDULES = ("constant", "linear", "cosine")
"""Names accepted by --lr_schedule (workload.model.optimizer.learning_rate_at)."""
CHECKPOINT_MODES = ("async", "sync")
"""Names accepted by --checkpoint_mode (workload/checkpoint/saver.py)."""
EXPORTS = ("final", "checkpoints", "none")
"""Names accepted by --export: when the job writes a Hugging Face model directory."""
REPORT_TO = ("tensorboard", "mlflow", "wandb", "none")
"""Names accepted by --report_to, transformers' names (a comma list, or none alone; workload/metrics/trackers.py)."""

# The job's last line: `TRAIN_SUMMARY {json}` (workload/train.py prints it, workload/run/submit.py parses it). Here, in
# a module that imports nothing heavy, so that neither side needs torch to agree on it.
SUMMARY_PREFIX = "TRAIN_SUMMARY "
# A line printed once the first steps of an attempt have run: `TRAIN_TRANSPORT {json}`, every rank's NCCL transport
# lines so far. `pulumi up` with trainWait=transport judges it and returns, leaving the job to run on.
TRANSPORT_PREFIX = "TRAIN_TRANSPORT "


@dataclass(frozen=True)
class TrainConfig:
    """One training run: model, batch shape, optimizer, data, checkpoints and speed levers."""

    model_id: str = flag(
        "Qwen/Qwen2.5-1.5B",
        "Pretrained model to fine-tune, unless --model_config names a random-weight architecture: a Hugging Face Hub "
        "id, a local directory, or s3://bucket/prefix/ (config.json and *.safetensors); fetched once per node and "
        "loaded sharded.", stack_key="trainModelId", max_length=URI_MAX_LENGTH,
    )
    model_config: str = flag(
        "", "Build this architecture with random weights instead of downloading --model_id: tiny or qwen2.5-1.5b.",
        stack_key="trainModelConfig", choices=("", *MODEL_CONFIGS), meaning="empty: load --model_id"
    )
    steps: int = flag(50, "Optimizer steps.", stack_key="trainSteps", at_least=1, at_most=MAX_STEPS)
    epochs: float = flag(
        0.0, "Passes over --dataset's packed training blocks instead of --steps: steps = ceil(epochs x blocks / "
        "(batch_size x workers)), worked out and printed once the data is packed; 0: --steps.",
        at_least=0, at_most=bound.MAX_EPOCHS, meaning="0: train --steps steps")
    batch_size: int = flag(2, "Sequences per worker per step.",
        stack_key="trainBatchSize", at_least=1, at_most=MAX_BATCH_SIZE,
        meaning="for a larger effective batch, add GPUs")
    seq_len: int = flag(2048, "Tokens per sequence.", stack_key="trainSeqLen", at_least=2, at_most=bound.MAX_SEQ_LEN,
        meaning="each token learns to predict the next, so one token leaves nothing to predict")
    learning_rate: float = flag(1e-5, "AdamW's peak learning rate (see --lr_schedule).",
        stack_key="trainLearningRate", above=0, at_most=bound.MAX_LEARNING_RATE)
    lr_schedule: str = flag(
        "cosine", "Learning rate after the warmup: constant, or a linear or cosine decay to 0 at the last step.",
        stack_key="trainLrSchedule", choices=LR_SCHEDULES)
    warmup_steps: int = flag(0, "Steps of linear warmup to --learning_rate (step k of n takes k/n of it).",
        stack_key="trainWarmupSteps", at_least=0, at_most=MAX_STEPS)
    max_grad_norm: float = flag(1.0, "Clip the global gradient norm to this value; 0 turns clipping off.",
        at_least=0, at_most=bound.MAX_GRAD_NORM, meaning="0: no clipping")
    log_every: int = flag(1, "Print every this many steps' training line (and the first and last); the trackers get "
        "every step.", at_least=1, at_most=MAX_STEPS)
    seed: int = flag(
        0,
        "Seed of the random weights and of every step's batch, so a resumed run repeats an uninterrupted one exactly.",
        at_least=0, at_most=bound.MAX_SEED, meaning="torch takes a 64-bit seed, and each step's batch seed puts 40 bits "
        "of step and rank below it")
    num_workers: int = flag(
        0, "Ray Train workers; 0 means one per GPU of the cluster, or 2 CPU workers on a cluster without GPUs.",
        stack_key="trainNumWorkers", at_least=0, at_most=bound.MAX_RANKS, meaning="0: one per GPU"
    )
    max_failures: int = flag(
        0, "FailureConfig.max_failures: restarts of a failed worker group from the last checkpoint; -1 retries forever.",
        stack_key="trainMaxFailures", at_least=-1, at_most=MAX_FAILURES, meaning="-1 retries forever"
    )
    storage_path: str = flag(
        "", "RunConfig.storage_path for checkpoints, a local directory or s3://...; empty means no checkpoints.",
        stack_key="trainStoragePath", max_length=URI_MAX_LENGTH
    )
    run_name: str = flag(
        "ray-train-fsdp-llm",
        "RunConfig.name; a run with the same storage_path and name resumes from that run's latest checkpoint.",
        # A directory name under --storage_path, with Ray's own files' names beside it within NAME_MAX (255 bytes).
        max_length=128,
    )
    checkpoint_every: int = flag(
        0, "Save a sharded checkpoint every this many steps (needs --storage_path); 0 saves only after the last step.",
        stack_key="trainCheckpointEvery", at_least=0, at_most=MAX_STEPS, meaning="0: only after the last step"
    )
    checkpoint_mode: str = flag(
        "async", "async: a save holds the step only while each rank copies its shards to host memory, and they are "
        "written and uploaded beside the next steps (one save in flight; a failure stops the run); sync: the step "
        "waits for the write and the upload. The last save is synchronous in both.",
        stack_key="trainCheckpointMode", choices=CHECKPOINT_MODES)
    dataset: str = flag(
        "", "Empty: random tokens (the recipe's default). A .txt/.jsonl/.json/.csv/.parquet file (the first four also "
        ".gz; local, or s3://...), or a Hugging Face dataset id.", stack_key="trainDataset",
        max_length=URI_MAX_LENGTH, check=dataset_id_problem
    )
    dataset_config: str = flag("", "Configuration name of a Hugging Face --dataset (e.g. wikitext-2-raw-v1).",
        stack_key="trainDatasetConfig", pattern=DATASET_CONFIG)
    dataset_split: str = flag("train", "Split of a Hugging Face --dataset (e.g. train, or train[:5000]).",
        stack_key="trainDatasetSplit", check=split_problem)
    text_field: str = flag("text", "Field holding the text in a .jsonl/.json file or a Hugging Face dataset.",
        stack_key="trainTextField")
    tokenizer: str = flag(
        "", "Tokenizer for --dataset (a Hugging Face id or a local directory); empty means --model_id's.",
        stack_key="trainTokenizer", max_length=URI_MAX_LENGTH, check=repo_id_problem
    )
    data_format: str = flag(
        "text", "text: documents packed and trained on every token; chat: a --messages_field of role/content turns "
        "(or ShareGPT's conversations of from/value); prompt-completion: a --prompt_field and a --completion_field "
        "(or Alpaca's instruction, input, output); both rendered with the chat template.",
        stack_key="trainDataFormat", choices=DATA_FORMATS)
    messages_field: str = flag("messages", "Field holding a record's list of {role, content} turns (--data_format chat).",
        stack_key="trainMessagesField")
    prompt_field: str = flag("prompt", "Field holding a record's prompt (--data_format prompt-completion).",
        stack_key="trainPromptField")
    completion_field: str = flag("completion", "Field holding a record's completion (--data_format prompt-completion).",
        stack_key="trainCompletionField")
    train_on_prompt: bool = flag(
        False, "Chat and prompt-completion: train on every token, not only the assistant's (completion) tokens.",
        stack_key="trainOnPrompt")
    chat_template: str = flag(
        "", "Chat template to render examples with instead of the tokenizer's own: a shipped one (qwen2.5, llama3) "
        "or a .jinja file; the exported model keeps it.", stack_key="trainChatTemplate",
        max_length=URI_MAX_LENGTH)
    truncation: str = flag(
        "truncate", "A chat or prompt-completion example longer than --seq_len: truncate (keep its first tokens, TRL's "
        "keep_start), keep_end (keep its last tokens) or split (train on each --seq_len piece as an example of its "
        "own). An example left without a trained token is dropped and counted.",
        stack_key="trainTruncation", choices=TRUNCATIONS, value_aliases=aliases.VALUE_ALIASES["truncation"])
    eval_fraction: float = flag(
        0.0, "Hold out this fraction of --dataset's packed sequences for evaluation (0 to below 1); 0: none.",
        stack_key="trainEvalFraction", at_least=0, below=1, meaning="0: none")
    eval_split: str = flag(
        "", "Evaluate on this split of a Hugging Face --dataset (e.g. validation, or validation[:500]) instead.",
        stack_key="trainEvalSplit", check=split_problem)
    eval_every: int = flag(
        0, "Evaluate every this many steps, and after the last; 0: after the last only (with an evaluation set).",
        stack_key="trainEvalEvery", at_least=0, at_most=MAX_STEPS)
    export: str = flag(
        "final", "Write a Hugging Face model directory (model_<step>/) beside the checkpoints: final (after the last "
        "step), checkpoints (at every checkpoint too) or none. Without --storage_path nothing is written.",
        stack_key="trainExport", choices=EXPORTS)
    report_to: str = flag(
        "tensorboard", "Where rank 0 reports the run (flags, plan, each step's metrics, summary): a comma list of "
        "tensorboard, mlflow, wandb, or none.", stack_key="trainReportTo", comma_list=True)
    mlflow_tracking_uri: str = flag(
        "", "--report_to mlflow: the tracking server (http://...); empty: $MLFLOW_TRACKING_URI, else a local store in "
        "the run directory (mlflow.db).", stack_key="trainMlflowTrackingUri",
        max_length=URI_MAX_LENGTH, check=mlflow_uri_problem)
    wandb_project: str = flag("", "--report_to wandb: the W&B project; empty: $WANDB_PROJECT, else ray-train-fsdp-llm.",
        stack_key="trainWandbProject", max_length=WANDB_PROJECT_MAX_LENGTH, check=wandb_project_problem)
    push_to_hub: str = flag(
        "", "After the last step, upload the exported model to this Hugging Face Hub repo (owner/name, created "
        "private), with $HF_TOKEN; empty: no upload.", stack_key="trainPushToHub",
        check=functools.partial(model_source.hub_id_problem, owner=True))
    compile: bool | None = flag(
        None, "torch.compile each decoder layer; unset means on for CUDA and off on CPU (slow to compile there)."
    )
    fused_adamw: bool = flag(True, "AdamW(fused=True) on CUDA; ignored on CPU.")
    gc_every: int = flag(
        50, "Python's garbage collector off during training, its young objects collected every this many steps on "
        "every rank at once, everything every 20th time and before checkpoints and evaluations; 0: Python's own "
        "schedule.", at_least=0, at_most=MAX_STEPS)
    chunked_loss: bool = flag(
        True, "Compute lm_head + cross-entropy in chunks of tokens, never holding fp32 logits for the whole batch."
    )
    # Off keeps each layer's gathered bf16 weights from its forward to its backward: one all-gather per layer per
    # step instead of two, for the whole model in bf16 on every GPU (3 GB at 1.5B parameters).
    reshard_after_forward: bool = flag(
        False, "Free each layer's gathered weights after its forward (ZeRO-3) instead of keeping them for its backward."
    )
    method: str = flag(
        "full", "full: train every weight; lora: low-rank adapters on the frozen bf16 base; qlora: the same on a base "
        "quantized to NF4 as it loads (workload/model/adapters/).", stack_key="trainMethod", choices=adapters.METHODS)
    lora_rank: int = flag(rules.LORA_DEFAULTS["lora_rank"], "--method lora/qlora: the adapters' rank r.",
        stack_key="trainLoraRank", at_least=1, at_most=bound.MAX_LORA_RANK)
    lora_alpha: float = flag(rules.LORA_DEFAULTS["lora_alpha"],
        "--method lora/qlora: the adapters' scale is lora_alpha / lora_rank.",
        stack_key="trainLoraAlpha", above=0, at_most=bound.MAX_LORA_ALPHA)
    lora_dropout: float = flag(rules.LORA_DEFAULTS["lora_dropout"],
        "--method lora/qlora: dropout on the adapters' input.",
        stack_key="trainLoraDropout", at_least=0, below=1)
    lora_targets: str = flag(
        rules.LORA_DEFAULTS["lora_targets"],
        "--method lora/qlora: the decoder blocks' linear layers that get adapters: all-linear, or a comma list of "
        "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.", stack_key="trainLoraTargets",
        comma_list=True)
    fp8: bool = flag(
        False, "fp8 matmuls (torchao float8 training, dynamic scaling) for the decoder layers' linear layers; needs "
        "a GPU with fp8 tensor cores (L4, L40S, H100, H200) and torchao.", stack_key="trainFp8")
    activation_checkpointing: bool = flag(
        False, "Recompute each decoder layer's activations in backward: less memory, about a third more compute."
    )
    sharding: str = flag(
        "auto",
        "full: FSDP over every rank; hybrid: FSDP inside each node, replicas across nodes (HSDP); two-level: FSDP "
        "over every rank, each gather and reduction split into a step between nodes and one inside each node; auto: "
        "chosen from the cluster's shape and network.", stack_key="trainSharding", choices=SHARDINGS,
        value_aliases=aliases.VALUE_ALIASES["sharding"])
    reduce_dtype: str = flag(
        "auto",
        "Gradient reduction dtype (the reduce-scatter, and HSDP's all-reduce across nodes): fp32, bf16 (half the "
        "bytes), or auto: bf16 only when fp32 traffic between nodes would outlast the step's compute.",
        stack_key="trainReduceDtype", choices=REDUCE_DTYPES,
    )
    grad_accum_steps: int = flag(
        1, "Micro-batches per step: --batch_size is split into this many; gradients are reduced after the last only.",
        stack_key="trainGradAccumSteps", at_least=1, at_most=MAX_BATCH_SIZE
    )
    ranks_per_node: int = flag(
        0, "Ranks that share a node, for the sharding; 0 reads it from Ray. Set it to emulate nodes on one host.",
        at_least=0, at_most=bound.MAX_RANKS, meaning="0: from Ray"
    )
    node_gbits_per_s: float = flag(
        0.0, "A node's network bandwidth in Gbit/s as AWS documents it (the stack passes its instance's); 0: unknown.",
        at_least=0, at_most=bound.MAX_NODE_GBITS_PER_S, meaning="0: unknown"
    )
    gpu_memory_mib: int = flag(
        0, "Each GPU's memory in MiB as EC2 documents it (the stack passes its instance's), for the memory plan; "
        "0 reads it from the device.", at_least=0, at_most=bound.MAX_GPU_MEMORY_MIB, meaning="0: read from the device",
        check=gpu_memory_problem
    )
    fabric_check_seconds: float | None = flag(
        None,
        "Seconds of all-reduce/all-gather/reduce-scatter timing before training; unset: 3 on GPU, 0.5 on CPU; "
        "0 skips it.", at_least=0, at_most=bound.MAX_FABRIC_CHECK_SECONDS, meaning="0: off",
    )
    min_bus_gbytes_per_s: float = flag(
        0.0, "Fail before training when the fabric check's bus bandwidth (GB/s, as nccl-tests) is lower; 0: no minimum.",
        stack_key="trainMinBusBandwidthGBps", at_least=0, at_most=bound.MAX_BUS_GBYTES_PER_S,
        meaning="a bus bandwidth in GB/s as nccl-tests reports it; 0: no minimum"
    )

    def __post_init__(self) -> None:
        for name in HUB_ID_FLAGS:  # the Hub page's address copied from a browser, for the id it shows
            if (problem := hub_url_problem(name, str(getattr(self, name)))) is not None:
                raise ValueError(problem)
        fields.check_bounds(DECLARED, self)
        s3_uri.check_flags(vars(self))  # S3's and pyarrow's form, before any credentials or request
        for declared in DECLARED:  # another tool's name for a choice (TRL's keep_start, Cosine) is kept as ours
            if declared.choices and (value := getattr(self, declared.name)) != declared.canonical(value):
                object.__setattr__(self, declared.name, declared.canonical(value))
        if not self.model_config and self.model_id.lower() in ARCHITECTURES and not os.path.exists(self.model_id):
            raise ValueError(f"--model_id {self.model_id} is the name of a --model_config (random weights): give "
                             f"--model_config {self.model_id.lower()}, or a model's Hub id (org/name)")
        if not self.model_config and self.model_id and (wrong := model_source.problem(self.model_id)):
            raise ValueError(f"--model_id {self.model_id!r} is {wrong}")
        if self.storage_path.startswith("~"):  # no shell expanded it (a --config file's, or quoted): as cli.user_path
            object.__setattr__(self, "storage_path", os.path.expanduser(self.storage_path))
        if self.tokenizer and os.path.isfile(os.path.expanduser(self.tokenizer)):  # its tokenizer.json: no Hub id
            raise ValueError(f"--tokenizer {self.tokenizer!r} is a file; give {model_source.LOCAL_TOKENIZER}")
        if self.model_id.startswith("s3://"):
            bucket, _, prefix = self.model_id.removeprefix("s3://").partition("/")
            if not bucket or not prefix.strip("/"):
                raise ValueError(f"--model_id {self.model_id!r}: {S3_MODEL_DIRECTORY}")
        # It names a directory under --storage_path: '.' and '..' would be that directory itself, or its parent.
        if not self.run_name or "/" in self.run_name or self.run_name in (".", ".."):
            raise ValueError(f"--run_name must be a non-empty name without '/', and not '.' or '..', "
                             f"got {self.run_name!r}")
        shown = fields.shown_uri(self.dataset) if "://" in self.dataset else repr(self.dataset[-200:])
        if (packed := values.packed_dataset_problem(self.dataset, shown)) is not None:
            raise ValueError(packed)
        if is_local_dataset(self.dataset) and os.path.isdir(os.path.expanduser(self.dataset)):
            raise ValueError(values.directory_dataset_problem(os.path.expanduser(self.dataset), repr(self.dataset)))
        if is_local_dataset(self.dataset) and not os.path.isfile(os.path.expanduser(self.dataset)):
            there = os.path.exists(os.path.expanduser(self.dataset))  # a FIFO or a device: named as such (user_files)
            raise ValueError(f"--dataset file {self.dataset!r} " + (user_files.problem(os.path.expanduser(self.dataset),
                             user_files.UNBOUNDED) or "is not a regular file" if there else "does not exist"))
        if "://" in self.dataset and not self.dataset.endswith(DATASET_FILE_SUFFIXES):
            raise ValueError(f"--dataset {self.dataset!r}: a remote file must end in one of "
                             f"{', '.join(DATASET_FILE_SUFFIXES)} (its format)")
        parse_report_to(self.report_to)
        if self.chat_template and self.chat_template not in CHAT_TEMPLATES and not (
                self.chat_template.endswith(".jinja") and os.path.isfile(os.path.expanduser(self.chat_template))):
            # A name that is no .jinja path was meant as one of the choices, and is quoted as a choice is; a .jinja
            # path that does not exist is quoted as a path.
            shown_template = (fields.shown_value if self.chat_template.endswith(".jinja") else fields.shown_choice)(
                self.chat_template)
            raise ValueError(f"--chat_template must be empty (the tokenizer's own), one of {', '.join(CHAT_TEMPLATES)}, "
                             f"or an existing .jinja file, got {shown_template}"
                             + ("; a template's text goes in a .jinja file, named here by its path"
                                if "{%" in self.chat_template or "{{" in self.chat_template else ""))
        adapters.check_settings(self.method, self.lora_rank, self.lora_alpha, self.lora_dropout, self.lora_targets)
        if (broken := rules.first_broken(vars(self))) is not None:
            raise ValueError(broken)

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer or self.model_id

    @property
    def architecture(self) -> dict | None:
        """The architecture this run trains, when known without the hub: --model_config's, or the published config
        of a --model_id the project ships (workload.model.architectures); None for any other model."""
        if self.model_config:
            return dict(ARCHITECTURES[self.model_config])
        return architectures.published(self.model_id)

    def to_args(self) -> list[str]:
        """The CLI flags that rebuild this config (only those that differ from the defaults)."""
        args: list[str] = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value == field.default or (field.name == "steps" and self.epochs):  # --epochs works out the steps
                continue
            if isinstance(value, bool):
                args.append(f"--{field.name}" if value else f"--no-{field.name}")
            else:
                args += [f"--{field.name}", str(value)]
        return args


def parse_report_to(value: str) -> tuple[str, ...]:
    """--report_to's names, validated (ValueError naming the flag); () for none."""
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    if not names or set(names) - set(REPORT_TO) or ("none" in names and len(names) > 1):
        raise ValueError(f"--report_to must be a comma list of {', '.join(REPORT_TO[:-1])}, or none; got "
                         f"{fields.shown_items(value.split(','))}")
    return () if names == ("none",) else names


DECLARED = fields.declarations(TrainConfig)
"""Every setting's one declaration (workload/config/fields.py), in field order."""
STACK_KEYS = {declared.name: declared.stack_key for declared in DECLARED if declared.stack_key}
"""The flags the stack sets, by field name -> the train* key that sets each (Pulumi.yaml); derived, never typed."""


def stack_message(message: str) -> str:
    """A refusal of the job's, its flags named as the stack keys that set them (`config key 'trainSteps': ...`)."""
    return in_stack_terms(message, STACK_KEYS)


def build_parser(prog: str = "python -m workload.train", description: str = "",
                 defaults: Mapping[str, object] | None = None) -> argparse.ArgumentParser:
    """One flag per TrainConfig field with its help; `defaults` replaces some fields' defaults (workload.local's),
    so each command's --help shows the values it really uses."""
    from workload import cli

    defaults = dict(defaults or {})
    unknown = set(defaults) - {field.name for field in dataclasses.fields(TrainConfig)}
    assert not unknown, f"defaults for fields TrainConfig does not have: {unknown}"
    parser = cli.parser(
        prog,
        description or "Fine-tune a causal LM with Ray Train + PyTorch FSDP2, on the Ray cluster this process runs in.",
        check_failed="the job failed (its loss diverged, or a worker failed beyond --max_failures)",
    )
    # Their names (TRL's, transformers', axolotl's) as ours, and "did you mean" over both (workload/config/aliases.py).
    parser.rewrite = lambda argv: aliases.rewrite_argv(argv, *_flag_names(parser))
    parser.suggest = lambda name: aliases.nearest(name, _flag_names(parser)[0])
    for field in dataclasses.fields(TrainConfig):
        option = f"--{field.name}"
        default = defaults.get(field.name, field.default)
        help_text = field.metadata["help"]
        if field.type in ("bool", "bool | None"):
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            parser.add_argument(option, type=_FIELD_PARSERS[field.type], default=default, help=help_text)
    return parser


def _flag_names(parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """(every flag's name without dashes, those of switches) of `parser`, as the command has added them."""
    names = [option[2:] for action in parser._actions for option in action.option_strings
             if option.startswith("--") and not option.startswith("--no-")]
    switches = [action.dest for action in parser._actions if isinstance(action, argparse.BooleanOptionalAction)]
    return names, switches


_FIELD_PARSERS = {"str": str, "int": int, "float": float, "float | None": float}


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """Flags -> TrainConfig. An unparsable value exits with argparse's usage error; a parsable but invalid one
    raises TrainConfig's ValueError, which names the flag."""
    return TrainConfig(**vars(build_parser().parse_args(argv)))
