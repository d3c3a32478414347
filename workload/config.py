"""The training job's configuration: one dataclass, validated on construction, with CLI flags that map onto it 1:1.

Every field is declared with `flag(default, help)`; `parse_args` turns each field into `--<field>` with that help,
so the flags, their defaults and their help text have one source. The recipe's flag names
(`--model_id`, `--steps`, `--batch_size`, `--seq_len`, `--learning_rate`) are kept.

No Ray and no model download here: a bad flag fails in `TrainConfig.__post_init__`, before anything starts.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

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

# Why an s3:// --model_id (trainModelId) must name a directory under a bucket; the preview refuses with the same words.
S3_MODEL_DIRECTORY = ("a model in S3 is a directory, s3://bucket/prefix/ holding config.json and *.safetensors, not "
                      "a bucket's root")
# A Hub repo id as huggingface_hub's validate_repo_id accepts it, with the owner the upload needs.
_HUB_REPO = re.compile(r"[\w.-]{1,96}/[\w.-]{1,96}")
# A --dataset with one of these suffixes is a file, local or remote (s3://...), rather than a Hugging Face id.
# Each of the first four may also be gzip-compressed (workload/data/validate.py reads them all).
DATASET_FILE_SUFFIXES = (".txt", ".jsonl", ".json", ".csv", ".parquet", ".txt.gz", ".jsonl.gz", ".json.gz", ".csv.gz")
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


def flag(default, help_text: str):
    """A TrainConfig field with its one-line --help text, kept in the field's metadata.

    Not docstrings under each field read back with ast.parse: CPython 3.11's AST constructor can fail with a
    spurious "recursion depth mismatch" while other threads run (python/cpython#106905), and Ray starts threads.
    """
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class TrainConfig:
    """One training run: model, batch shape, optimizer, data, checkpoints and speed levers."""

    model_id: str = flag(
        "Qwen/Qwen2.5-1.5B",
        "Pretrained model to fine-tune, unless --model_config names a random-weight architecture: a Hugging Face Hub "
        "id, a local directory, or s3://bucket/prefix/ (config.json and *.safetensors); fetched once per node and "
        "loaded sharded.",
    )
    model_config: str = flag(
        "", "Build this architecture with random weights instead of downloading --model_id: tiny or qwen2.5-1.5b."
    )
    steps: int = flag(50, "Optimizer steps.")
    batch_size: int = flag(2, "Sequences per worker per step.")
    seq_len: int = flag(2048, "Tokens per sequence.")
    learning_rate: float = flag(1e-5, "AdamW's peak learning rate (see --lr_schedule).")
    lr_schedule: str = flag(
        "cosine", "Learning rate after the warmup: constant, or a linear or cosine decay to 0 at the last step.")
    warmup_steps: int = flag(0, "Steps of linear warmup to --learning_rate (step k of n takes k/n of it).")
    max_grad_norm: float = flag(1.0, "Clip the global gradient norm to this value; 0 turns clipping off.")
    seed: int = flag(
        0,
        "Seed of the random weights and of every step's batch, so a resumed run repeats an uninterrupted one exactly.",
    )
    num_workers: int = flag(
        0, "Ray Train workers; 0 means one per GPU of the cluster, or 2 CPU workers on a cluster without GPUs."
    )
    max_failures: int = flag(
        0, "FailureConfig.max_failures: restarts of a failed worker group from the last checkpoint; -1 retries forever."
    )
    storage_path: str = flag(
        "", "RunConfig.storage_path for checkpoints, a local directory or s3://...; empty means no checkpoints."
    )
    run_name: str = flag(
        "ray-train-fsdp-llm",
        "RunConfig.name; a run with the same storage_path and name resumes from that run's latest checkpoint.",
    )
    checkpoint_every: int = flag(
        0, "Save a sharded checkpoint every this many steps (needs --storage_path); 0 saves only after the last step."
    )
    dataset: str = flag(
        "", "Empty: random tokens (the recipe's default). A .txt/.jsonl/.json/.csv/.parquet file (the first four also "
        ".gz; local, or s3://...), or a Hugging Face dataset id."
    )
    dataset_config: str = flag("", "Configuration name of a Hugging Face --dataset (e.g. wikitext-2-raw-v1).")
    dataset_split: str = flag("train", "Split of a Hugging Face --dataset.")
    text_field: str = flag("text", "Field holding the text in a .jsonl/.json file or a Hugging Face dataset.")
    tokenizer: str = flag(
        "", "Tokenizer for --dataset (a Hugging Face id or a local directory); empty means --model_id's."
    )
    data_format: str = flag(
        "text", "text: documents packed and trained on every token; chat: a --messages_field of role/content turns "
        "(or ShareGPT's conversations of from/value); prompt-completion: a --prompt_field and a --completion_field "
        "(or Alpaca's instruction, input, output); both rendered with the chat template.")
    messages_field: str = flag("messages", "Field holding a record's list of {role, content} turns (--data_format chat).")
    prompt_field: str = flag("prompt", "Field holding a record's prompt (--data_format prompt-completion).")
    completion_field: str = flag("completion", "Field holding a record's completion (--data_format prompt-completion).")
    train_on_prompt: bool = flag(
        False, "Chat and prompt-completion: train on every token, not only the assistant's (completion) tokens.")
    chat_template: str = flag(
        "", "Chat template to render examples with instead of the tokenizer's own: a shipped one (qwen2.5, llama3) "
        "or a .jinja file; the exported model keeps it.")
    truncation: str = flag(
        "truncate", "A chat or prompt-completion example longer than --seq_len: truncate (keep its first tokens, TRL's "
        "keep_start), keep_end (keep its last tokens) or split (train on each --seq_len piece as an example of its "
        "own). An example left without a trained token is dropped and counted.")
    eval_fraction: float = flag(
        0.0, "Hold out this fraction of --dataset's packed sequences for evaluation (0 to below 1); 0: none.")
    eval_split: str = flag(
        "", "Evaluate on this split of a Hugging Face --dataset (e.g. validation, or validation[:500]) instead.")
    eval_every: int = flag(
        0, "Evaluate every this many steps, and after the last; 0: after the last only (with an evaluation set).")
    export: str = flag(
        "final", "Write a Hugging Face model directory (model_<step>/) beside the checkpoints: final (after the last "
        "step), checkpoints (at every checkpoint too) or none. Without --storage_path nothing is written.")
    report_to: str = flag(
        "tensorboard", "Where rank 0 reports the run (flags, plan, each step's metrics, summary): a comma list of "
        "tensorboard, mlflow, wandb, or none.")
    mlflow_tracking_uri: str = flag(
        "", "--report_to mlflow: the tracking server (http://...); empty: $MLFLOW_TRACKING_URI, else a local store in "
        "the run directory (mlruns/).")
    wandb_project: str = flag("", "--report_to wandb: the W&B project; empty: $WANDB_PROJECT, else ray-train-fsdp-llm.")
    push_to_hub: str = flag(
        "", "After the last step, upload the exported model to this Hugging Face Hub repo (owner/name, created "
        "private), with $HF_TOKEN; empty: no upload.")
    compile: bool | None = flag(
        None, "torch.compile each decoder layer; unset means on for CUDA and off on CPU (slow to compile there)."
    )
    fused_adamw: bool = flag(True, "AdamW(fused=True) on CUDA; ignored on CPU.")
    gc_every: int = flag(
        50, "Python's garbage collector off during training, its young objects collected every this many steps on "
        "every rank at once, everything every 20th time and before checkpoints and evaluations; 0: Python's own "
        "schedule.")
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
        "quantized to NF4 as it loads (workload/model/adapters/).")
    lora_rank: int = flag(16, "--method lora/qlora: the adapters' rank r.")
    lora_alpha: float = flag(32.0, "--method lora/qlora: the adapters' scale is lora_alpha / lora_rank.")
    lora_dropout: float = flag(0.0, "--method lora/qlora: dropout on the adapters' input.")
    lora_targets: str = flag(
        "all-linear", "--method lora/qlora: the decoder blocks' linear layers that get adapters: all-linear, or a comma "
        "list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.")
    fp8: bool = flag(
        False, "fp8 matmuls (torchao float8 training, dynamic scaling) for the decoder layers' linear layers; needs "
        "a GPU with fp8 tensor cores (L4, L40S, H100, H200) and torchao.")
    activation_checkpointing: bool = flag(
        False, "Recompute each decoder layer's activations in backward: less memory, about a third more compute."
    )
    sharding: str = flag(
        "auto",
        "full: FSDP over every rank; hybrid: FSDP inside each node, replicas across nodes (HSDP); two-level: FSDP "
        "over every rank, each gather and reduction split into a step between nodes and one inside each node; auto: "
        "chosen from the cluster's shape and network.",
    )
    reduce_dtype: str = flag(
        "auto",
        "Gradient reduction dtype (the reduce-scatter, and HSDP's all-reduce across nodes): fp32, bf16 (half the "
        "bytes), or auto: bf16 only when fp32 traffic between nodes would outlast the step's compute.",
    )
    grad_accum_steps: int = flag(
        1, "Micro-batches per step: --batch_size is split into this many; gradients are reduced after the last only."
    )
    ranks_per_node: int = flag(
        0, "Ranks that share a node, for the sharding; 0 reads it from Ray. Set it to emulate nodes on one host."
    )
    node_gbits_per_s: float = flag(
        0.0, "A node's network bandwidth in Gbit/s as AWS documents it (the stack passes its instance's); 0: unknown."
    )
    gpu_memory_mib: int = flag(
        0, "Each GPU's memory in MiB as EC2 documents it (the stack passes its instance's), for the memory plan; "
        "0 reads it from the device."
    )
    fabric_check_seconds: float | None = flag(
        None,
        "Seconds of all-reduce/all-gather/reduce-scatter timing before training; unset: 3 on GPU, 0.5 on CPU; "
        "0 skips it.",
    )
    min_bus_gbytes_per_s: float = flag(
        0.0, "Fail before training when the fabric check's bus bandwidth (GB/s, as nccl-tests) is lower; 0: no minimum."
    )

    def __post_init__(self) -> None:
        _positive_int(self, "steps")
        _positive_int(self, "batch_size")
        _positive_int(self, "seq_len")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ValueError(f"--learning_rate must be a positive, finite number, got {self.learning_rate}")
        if not self.max_grad_norm >= 0:
            raise ValueError(f"--max_grad_norm must be 0 (off) or a positive number, got {self.max_grad_norm}")
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ValueError(f"--max_failures must be -1 (retry forever), 0 or more, got {self.max_failures!r}")
        for name in ("num_workers", "checkpoint_every", "warmup_steps", "eval_every", "gpu_memory_mib", "gc_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"--{name} must be an integer >= 0, got {value!r}")
        if self.model_config and self.model_config not in MODEL_CONFIGS:
            raise ValueError(
                f"--model_config must be empty (load --model_id) or one of {', '.join(MODEL_CONFIGS)}, "
                f"got {self.model_config!r}"
            )
        if not self.model_config and not self.model_id:
            raise ValueError("--model_id must name a Hugging Face model when --model_config is empty")
        if not self.model_config and (wrong := model_source.problem(self.model_id)):
            raise ValueError(f"--model_id {self.model_id!r} is {wrong}")
        if self.model_id.startswith("s3://"):
            bucket, _, prefix = self.model_id.removeprefix("s3://").partition("/")
            if not bucket or not prefix.strip("/"):
                raise ValueError(f"--model_id {self.model_id!r}: {S3_MODEL_DIRECTORY}")
        # It names a directory under --storage_path: '.' and '..' would be that directory itself, or its parent.
        if not self.run_name or "/" in self.run_name or self.run_name in (".", ".."):
            raise ValueError(f"--run_name must be a non-empty name without '/', and not '.' or '..', "
                             f"got {self.run_name!r}")
        if is_local_dataset(self.dataset) and os.path.isdir(os.path.expanduser(self.dataset)):
            raise ValueError(f"--dataset {self.dataset!r} is a directory; give one {', '.join(DATASET_FILE_SUFFIXES)} "
                             "file in it")
        if is_local_dataset(self.dataset) and not os.path.isfile(os.path.expanduser(self.dataset)):
            raise ValueError(f"--dataset file {self.dataset!r} does not exist")
        if "://" in self.dataset and not self.dataset.endswith(DATASET_FILE_SUFFIXES):
            raise ValueError(f"--dataset {self.dataset!r}: a remote file must end in one of "
                             f"{', '.join(DATASET_FILE_SUFFIXES)} (its format)")
        if self.checkpoint_every and not self.storage_path:
            raise ValueError("--checkpoint_every needs --storage_path (where the checkpoints go)")
        _one_of(self, "sharding", SHARDINGS)
        _one_of(self, "lr_schedule", LR_SCHEDULES)
        _one_of(self, "export", EXPORTS)
        parse_report_to(self.report_to)
        if self.push_to_hub and (self.export == "none" or not self.storage_path):
            raise ValueError("--push_to_hub uploads the exported model: it needs --storage_path and --export final or "
                             "checkpoints")
        if self.push_to_hub and not _HUB_REPO.fullmatch(self.push_to_hub):
            raise ValueError(f"--push_to_hub must name a Hub repo as owner/name (letters, digits, '-', '_', '.'), got "
                             f"{self.push_to_hub!r}")
        if self.warmup_steps > self.steps:
            raise ValueError(f"--warmup_steps {self.warmup_steps} must be at most --steps {self.steps}")
        self._check_evaluation()
        self._check_data_format()
        if self.export == "checkpoints" and not self.checkpoint_every:
            raise ValueError("--export checkpoints needs --checkpoint_every (and --storage_path): the models are "
                             "written at the checkpoints; final writes one after the last step")
        _one_of(self, "reduce_dtype", REDUCE_DTYPES)
        adapters.check(self.method, self.lora_rank, self.lora_alpha, self.lora_dropout, self.lora_targets)
        if self.fp8 and self.method != "full":  # fp8 trains the linear layers' own weights, which adapters freeze
            raise ValueError(f"--fp8 is for --method full; with --method {self.method} leave it off")
        _positive_int(self, "grad_accum_steps")
        if self.batch_size % self.grad_accum_steps:
            raise ValueError(f"--grad_accum_steps {self.grad_accum_steps} must divide --batch_size {self.batch_size}: "
                             "each micro-batch takes batch_size / grad_accum_steps sequences")
        if not isinstance(self.ranks_per_node, int) or self.ranks_per_node < 0:
            raise ValueError(
                f"--ranks_per_node must be 0 (from Ray) or a positive integer, got {self.ranks_per_node!r}")
        if self.ranks_per_node and self.num_workers % self.ranks_per_node:
            raise ValueError(f"--ranks_per_node {self.ranks_per_node} must divide --num_workers {self.num_workers}")
        for name in ("node_gbits_per_s", "min_bus_gbytes_per_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"--{name} must be 0 or a positive number, got {getattr(self, name)}")
        if self.fabric_check_seconds is not None and not self.fabric_check_seconds >= 0:
            raise ValueError(f"--fabric_check_seconds must be 0 (off) or a positive number of seconds, "
                             f"got {self.fabric_check_seconds}")
        if self.min_bus_gbytes_per_s and self.fabric_check_seconds == 0:
            raise ValueError("--min_bus_gbytes_per_s needs the fabric check: --fabric_check_seconds must not be 0")

    def _check_evaluation(self) -> None:
        if not (0 <= self.eval_fraction < 1):
            raise ValueError(f"--eval_fraction must be at least 0 and below 1, got {self.eval_fraction}")
        if self.eval_fraction and self.eval_split:
            raise ValueError("--eval_fraction and --eval_split are two ways to choose the evaluation set: give one")
        if (self.eval_fraction or self.eval_split) and not self.dataset:
            raise ValueError("--eval_fraction and --eval_split need a --dataset (random tokens have nothing to learn)")
        if self.eval_split and is_file_dataset(self.dataset):
            raise ValueError(f"--eval_split names a split of a Hugging Face --dataset; the file {self.dataset!r} has "
                             "none: use --eval_fraction")
        if self.eval_every and not (self.eval_fraction or self.eval_split):
            raise ValueError("--eval_every needs an evaluation set: --eval_fraction or --eval_split")

    def _check_data_format(self) -> None:
        _one_of(self, "data_format", DATA_FORMATS)
        _one_of(self, "truncation", TRUNCATIONS)
        if self.chat_template and self.chat_template not in CHAT_TEMPLATES and not (
                self.chat_template.endswith(".jinja") and os.path.isfile(os.path.expanduser(self.chat_template))):
            raise ValueError(f"--chat_template must be empty (the tokenizer's own), one of {', '.join(CHAT_TEMPLATES)}, "
                             f"or an existing .jinja file, got {self.chat_template!r}")
        if self.data_format == "text":
            return
        if not self.dataset:
            raise ValueError(f"--data_format {self.data_format} needs a --dataset of records (random tokens are text)")
        if self.dataset.endswith((".txt", ".txt.gz")):
            raise ValueError(f"--data_format {self.data_format}: {self.dataset!r} is plain text; records come from "
                             ".jsonl, .json, .parquet or a Hugging Face dataset")
        names = ("messages_field",) if self.data_format == "chat" else ("prompt_field", "completion_field")
        for name in names:
            if not getattr(self, name):
                raise ValueError(f"--{name} must name the records' field for --data_format {self.data_format}")
        if self.data_format == "prompt-completion" and self.prompt_field == self.completion_field:
            raise ValueError(f"--prompt_field and --completion_field must differ, both are {self.prompt_field!r}")

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
            if value == field.default:
                continue
            if isinstance(value, bool):
                args.append(f"--{field.name}" if value else f"--no-{field.name}")
            else:
                args += [f"--{field.name}", str(value)]
        return args


def is_local_dataset(dataset: str) -> bool:
    """A --dataset that names a file on this machine rather than a Hugging Face id or a remote file: a known suffix
    or an explicit path."""
    return bool(dataset) and "://" not in dataset and (
        dataset.endswith(DATASET_FILE_SUFFIXES) or dataset.startswith(("/", "./", "../", "~"))
    )


def is_file_dataset(dataset: str) -> bool:
    """A --dataset that is a file, on this machine or remote (s3://bucket/key.jsonl), not a Hugging Face id."""
    return is_local_dataset(dataset) or "://" in dataset


def parse_report_to(value: str) -> tuple[str, ...]:
    """--report_to's names, validated (ValueError naming the flag); () for none."""
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    if not names or set(names) - set(REPORT_TO) or ("none" in names and len(names) > 1):
        raise ValueError(f"--report_to must be a comma list of {', '.join(REPORT_TO[:-1])}, or none; got {value!r}")
    return () if names == ("none",) else names


def _positive_int(config: TrainConfig, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"--{name} must be a positive integer, got {value!r}")


def _one_of(config: TrainConfig, name: str, allowed: Sequence[str]) -> None:
    value = getattr(config, name)
    if value not in allowed:
        raise ValueError(f"--{name} must be one of {', '.join(allowed)}, got {value!r}")


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
    for field in dataclasses.fields(TrainConfig):
        option = f"--{field.name}"
        default = defaults.get(field.name, field.default)
        help_text = field.metadata["help"]
        if field.type in ("bool", "bool | None"):
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            parser.add_argument(option, type=_FIELD_PARSERS[field.type], default=default, help=help_text)
    return parser


_FIELD_PARSERS = {"str": str, "int": int, "float": float, "float | None": float}


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """Flags -> TrainConfig. An unparsable value exits with argparse's usage error; a parsable but invalid one
    raises TrainConfig's ValueError, which names the flag."""
    return TrainConfig(**vars(build_parser().parse_args(argv)))
