"""The names a TRL, transformers or axolotl user already knows, in one table: a flag (`--max_steps`) or a --config key
(axolotl's `base_model`) with the same meaning as one of ours is taken as ours; one whose meaning differs is refused
in one line that names ours and how to get the same run; anything else unknown is answered with the nearest name
("did you mean"). Dash forms (`--max-steps`, `--batch-size`) are taken as the underscore ones.

docs/names.md shows the table; tests/runs/test_flag_names.py holds it to the parser. Standard library only.
"""
from __future__ import annotations

import difflib
import re
from typing import Iterable, Mapping, Sequence

# Their name -> ours, where the meaning is the same; (whose name it is) for the docs' table.
ALIASES: Mapping[str, tuple[str, str]] = {
    "max_steps": ("steps", "transformers, TRL, axolotl"),
    "per_device_train_batch_size": ("batch_size", "transformers, TRL"),
    "micro_batch_size": ("batch_size", "axolotl"),
    "num_train_epochs": ("epochs", "transformers, TRL"),
    "num_epochs": ("epochs", "axolotl"),
    "base_model": ("model_id", "axolotl"),
    "model_name_or_path": ("model_id", "TRL"),
    "max_seq_length": ("seq_len", "TRL (before 0.20)"),
    "max_length": ("seq_len", "TRL"),
    "sequence_len": ("seq_len", "axolotl"),
    "lr_scheduler_type": ("lr_schedule", "transformers, TRL, axolotl (lr_scheduler)"),
    "lr_scheduler": ("lr_schedule", "axolotl"),
    "gradient_checkpointing": ("activation_checkpointing", "transformers, TRL, axolotl"),
    "save_steps": ("checkpoint_every", "transformers, TRL, axolotl"),
    "eval_steps": ("eval_every", "transformers, TRL, axolotl"),
    "logging_steps": ("log_every", "transformers, TRL, axolotl"),
    "val_set_size": ("eval_fraction", "axolotl"),
    "dataset_name": ("dataset", "TRL"),
    "dataset_train_split": ("dataset_split", "TRL"),
    "dataset_test_split": ("eval_split", "TRL"),
    "dataset_text_field": ("text_field", "TRL"),
    "chat_template_path": ("chat_template", "TRL"),
    "adapter": ("method", "axolotl (lora, qlora)"),
    "lora_r": ("lora_rank", "TRL, PEFT, axolotl"),
    "lora_target_modules": ("lora_targets", "TRL, PEFT, axolotl"),
    "hub_model_id": ("push_to_hub", "transformers, TRL, axolotl"),
    "truncation_mode": ("truncation", "TRL (keep_start is truncate)"),
    "block_size": ("seq_len", "transformers' run_clm (the packed block's tokens)"),
}

_BF16 = "the job computes in bf16 always (FSDP2's mixed precision over fp32 master weights): nothing to set"
_PACKING = ("packing is always on: text and examples are packed into --seq_len blocks (an example attends to itself "
            "alone)")
# Their name -> why ours differs and what to give instead: refused, never guessed.
DIFFERENT: Mapping[str, str] = {
    "gradient_accumulation_steps": (
        "Hugging Face multiplies the batch by it, --grad_accum_steps splits --batch_size into that many micro-batches: "
        "for per_device_train_batch_size B and gradient_accumulation_steps N give --batch_size B*N --grad_accum_steps N"),
    "use_peft": "give --method lora (or --method qlora for a 4-bit base) and the --lora_* flags",
    "load_in_4bit": "give --method qlora: the base is quantized to NF4 as it loads",
    "output_dir": ("the run writes under --storage_path/--run_name/ (checkpoints and the exported model): give "
                   "--storage_path DIR, and --run_name for the folder"),
    "num_processes": "--num_workers sets the Ray Train workers (0: one per GPU)",
    "nproc_per_node": ("torchrun's processes per node: Ray Train starts the processes, --num_workers sets how many in "
                       "all (0: one per GPU of the cluster)"),
    "nnodes": ("torchrun's node count: Ray Train places the workers over the cluster's nodes, --num_workers sets how "
               "many in all (0: one per GPU of the cluster)"),
    "bf16": _BF16,
    "fp16": "the job computes in bf16 (FSDP2's mixed precision over fp32 master weights); fp16 is not offered",
    "warmup_ratio": "give --warmup_steps, a number of steps (a tenth of --steps 200 is --warmup_steps 20)",
    "packing": _PACKING,
    "weight_decay": "AdamW runs with torch's default weight decay, 0.01; no flag changes it",
    "optim": "the optimizer is torch's AdamW; no flag changes it",
    "optimizer": "the optimizer is torch's AdamW; no flag changes it",
    "adam_beta1": "AdamW runs with torch's default betas, (0.9, 0.999); no flag changes them",
    "adam_beta2": "AdamW runs with torch's default betas, (0.9, 0.999); no flag changes them",
    "adam_epsilon": "AdamW runs with torch's default epsilon, 1e-8; no flag changes it",
    "padding_free": _PACKING,
    "local_rank": ("torch.distributed.launch's flag: Ray Train starts the processes and gives each its rank; run "
                   "python -m workload.local once, and --num_workers sets how many"),
    "wandb_entity": "set WANDB_ENTITY in the environment (on a cluster, trainEnv): W&B reads the team from it",
    "datasets": ("axolotl's list of datasets: give one --dataset (a file or a Hub id) and --data_format (axolotl's "
                 "alpaca is prompt-completion; sharegpt and chat_template are chat)"),
    "hf_token": ("a token is never a flag or a --config key: set HF_TOKEN in the environment (on a cluster, "
                 "trainSecretEnv)"),
    "wandb_api_key": ("a key is never a flag or a --config key: set WANDB_API_KEY in the environment (on a cluster, "
                      "trainSecretEnv)"),
    "hub_token": ("a token is never a flag or a --config key: set HF_TOKEN in the environment (on a cluster, "
                  "trainSecretEnv)"),
    "load_in_8bit": "8-bit loading is not offered: give --method qlora for a base quantized to 4-bit NF4 as it loads",
    "torch_dtype": _BF16,
    "fsdp": ("the job always shards with FSDP2: --sharding chooses how (full, hybrid, two-level, or auto), and "
             "--activation_checkpointing recomputes activations"),
    "fsdp_config": "the job always shards with FSDP2: --sharding chooses how (full, hybrid, two-level, or auto)",
    "deepspeed": ("DeepSpeed is not used: the job shards with FSDP2 (ZeRO-3's counterpart), and --sharding chooses "
                  "how (full, hybrid, two-level, or auto)"),
    "logging_dir": ("the TensorBoard event files go under the run's directory, --storage_path/--run_name/tensorboard/: "
                    "give --storage_path DIR (and --run_name)"),
    "sample_packing": _PACKING,
    "saves_per_epoch": ("give --checkpoint_every, a number of steps (with --epochs the job prints the steps an epoch "
                        "makes)"),
    "resume_from_checkpoint": ("a run resumes by its name: give the same --run_name (and --storage_path) again, and "
                               "it continues from its latest checkpoint_<step>/ with the flags it was started with"),
    "do_eval": ("evaluation is on when there is an evaluation set: give --eval_fraction (held out of --dataset) or "
                "--eval_split, and --eval_every for evaluations before the last step"),
    "data_seed": ("one --seed seeds the random weights and every step's batch (the data's order): give --seed; there "
                  "is no separate data seed"),
    "evals_per_epoch": ("give --eval_every, a number of steps (with --epochs the job prints the steps an epoch "
                        "makes)"),
    "validation_split_percentage": ("give --eval_fraction, a fraction of --dataset held out (5 percent is "
                                    "--eval_fraction 0.05)"),
    "overwrite_output_dir": ("a run of the same --run_name resumes from its latest checkpoint: for a fresh run give "
                             "another --run_name"),
    "bnb_4bit_quant_type": "--method qlora quantizes the base to 4-bit NF4 always; no flag changes the type",
    "bnb_4bit_compute_dtype": _BF16,
    "log_level": "give --verbose for the job's whole log; the libraries' own levels are not a flag",
    "use_rslora": ("rank-stabilized LoRA (scale alpha/sqrt(r)) is not offered: the adapters scale by --lora_alpha / "
                   "--lora_rank, so for the same scale give --lora_alpha alpha*sqrt(r)"),
    "dataset_prepared_path": ("the job keeps its tokens itself, once per dataset and tokenizer, under "
                              "--storage_path/datasets/ (else a cache on the machine): nothing to set"),
    "early_stopping_patience": ("a run trains --steps (or --epochs) to the end; with --eval_every the eval loss is "
                                "logged, and a run is stopped by hand (tools.job stop, or Ctrl-C locally)"),
}

# Their name with a value that means something else there -> what to give instead: refused, as DIFFERENT's names are.
THEIR_VALUES: Mapping[tuple[str, str], str] = {
    ("max_steps", "-1"): ("-1 is transformers' 'train by --num_train_epochs instead': give --epochs N (passes over "
                          "--dataset) instead of --steps"),
}

# Their switch -> (our flag, its value when theirs is true, when false; None: nothing to set), for the docs' (whose):
# TRL's completion_only_loss (prompt-completion) and assistant_only_loss (chat) true are our default, training on the
# completion or the assistant's turns only; false trains on every token, --train_on_prompt (trl/trainer/sft_config.py).
SWITCH_ALIASES: Mapping[str, tuple[str, object, object, str]] = {
    "completion_only_loss": ("train_on_prompt", False, True, "TRL (prompt-completion)"),
    "assistant_only_loss": ("train_on_prompt", False, True, "TRL (chat)"),
    "train_on_inputs": ("train_on_prompt", True, False, "axolotl"),
    "lora_target_linear": ("lora_targets", "all-linear", None, "axolotl"),
}

# Their name for a value of one of our choices -> ours, by our flag: TRL's truncation_mode keep_start keeps an example's
# first tokens, which --truncation calls truncate (trl/trainer/sft_config.py: "keep_start" or "keep_end").
# FSDP1's sharding strategies FULL_SHARD and HYBRID_SHARD are --sharding full and hybrid (in any letter case, '-' or
# '_', as every choice is read). axolotl's dataset types (sharegpt, alpaca) name a record's shape, not a format: they
# stay refused, --data_format's choices named.
VALUE_ALIASES: Mapping[str, Mapping[str, str]] = {
    "truncation": {"keep_start": "truncate"},
    "sharding": {"full_shard": "full", "hybrid_shard": "hybrid"},
}

# Ours that take a comma list where theirs take several words (`--lora_target_modules q_proj v_proj`).
LIST_FLAGS = ("lora_targets", "report_to")
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def different(name: str) -> str | None:
    """The refusal of one of their names whose meaning differs from ours, or None."""
    why = DIFFERENT.get(name)
    return f"--{name} is not this project's: {why}" if why else None


def canonical(name: str, known: Iterable[str]) -> str:
    """`name` (a flag without its dashes, or a --config key) as ours: dashes read as underscores, an alias as its
    field; unchanged when it is neither (the caller refuses it)."""
    known = set(known)
    plain = name.replace("-", "_")
    if plain in known:
        return plain
    if plain in ALIASES and ALIASES[plain][0] in known:
        return ALIASES[plain][0]
    return name


def ours(name: str) -> str:
    """`name` (no dashes, underscores) as our field's name when it is an alias, else unchanged."""
    if name in SWITCH_ALIASES:
        return SWITCH_ALIASES[name][0]
    return ALIASES[name][0] if name in ALIASES else name


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The closest of `known` names and the aliases to a typo, as ours (difflib's ratio, 0.6 as its default)."""
    known = list(known)
    # A stack key's name (trainLearningRate, in a --config file as in Pulumi.<stack>.yaml): its flag is the name in
    # snake case without "train" (the train* keys are named so: Pulumi.yaml).
    if name.startswith("train") and name[5:6].isupper():
        snake = re.sub(r"(?<!^)([A-Z])", r"_\1", name[5:]).lower()
        if snake in known:
            return snake
    # The start of exactly one flag's name (--print, --activation): suggested before a look-alike, never taken (no
    # flag is abbreviated); two letters are initials' (--lr), not a start.
    starting = [each for each in known if each.startswith(name.replace("-", "_"))]
    if len(starting) == 1 and len(name) >= 4:
        return starting[0]
    names = list(dict.fromkeys([*known, *(theirs for theirs, (ours, _) in ALIASES.items() if ours in known)]))
    match = difflib.get_close_matches(name.replace("-", "_"), names, n=1)
    if not match:
        # A shorthand of a flag's words' initials (`--lr` for --learning_rate): every flag it could stand for.
        initials = [each for each in known if len(name) > 1 and "".join(word[:1] for word in each.split("_"))
                    == name.replace("-", "").replace("_", "")]
        return " or --".join(initials) or None
    return ALIASES[match[0]][0] if match[0] in ALIASES else match[0]


def rewrite_argv(argv: Sequence[str], known: Iterable[str], booleans: Iterable[str]) -> list[str]:
    """argv with their names as ours: `--max-steps 5` -> `--steps 5`, `--gradient_checkpointing true` ->
    `--activation_checkpointing`, `--lora_target_modules q_proj v_proj` -> `--lora_targets q_proj,v_proj`.
    `known` are our flags' names (no dashes), `booleans` those of them that are switches. A name whose meaning
    differs raises ValueError; anything unknown is left for argparse to refuse."""
    known, booleans = set(known), set(booleans)
    out: list[str] = []
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            out += args[index - 1:]
            break
        if not arg.startswith("--") or len(arg) == 2:
            out.append(arg)
            continue
        name, equals, value = arg[2:].partition("=")
        if (plain := name.replace("-", "_")) in SWITCH_ALIASES and plain not in known:
            word = value if equals else (args[index] if index < len(args) and not args[index].startswith("-") else "")
            index += bool(word and not equals)
            out += _switch_as_ours(plain, word)
            continue
        given = value if equals else (args[index] if index < len(args) else "")
        if (why := THEIR_VALUES.get((name.replace("-", "_"), given))) is not None:
            raise ValueError(f"--{name} {given}: {why}")
        negated = name.startswith(("no-", "no_")) and canonical(name[3:], booleans) in booleans
        ours = canonical(name[3:] if negated else name, known)
        if ours not in known:
            if (refusal := different(name.replace("-", "_"))) is not None:
                if name.replace("-", "_") == "gradient_accumulation_steps":
                    refusal += _equivalent_batch(args, known, value if equals else (args[index:index + 1] or [""])[0])
                raise ValueError(refusal)
            out.append(arg)
            continue
        if ours in booleans:
            word = value if equals else (args[index] if index < len(args) and not args[index].startswith("-") else "")
            if word and word.lower() not in _TRUE + _FALSE and (equals or ours != name.replace("-", "_")):
                # Their value form (`--gradient_checkpointing unsloth`): the word is theirs, not a stray argument.
                raise ValueError(f"--{name} {_word(word)}: --{ours} is a switch: give it alone, or true or false "
                                 f"(--no-{ours}); {_word(word)} is not offered")
            if word.lower() not in _TRUE + _FALSE:
                word = ""
            if word and not equals:
                index += 1
            on = (word.lower() not in _FALSE) != negated
            out.append(f"--{ours}" if on else f"--no-{ours}")
            continue
        if equals:
            out.append(f"--{ours}={value}")
            continue
        out.append(f"--{ours}")
        if ours in LIST_FLAGS and index < len(args):
            words = [args[index]]
            index += 1
            while index < len(args) and not args[index].startswith("-"):
                words.append(args[index])
                index += 1
            out.append(",".join(words))
    return out


def _switch_as_ours(name: str, word: str) -> list[str]:
    """Their switch (`--completion_only_loss false`, `--lora_target_linear`) as our flag and value."""
    if word and word.lower() not in _TRUE + _FALSE:
        raise ValueError(f"--{name} {_word(word)}: give true or false")
    field, when_true, when_false, _ = SWITCH_ALIASES[name]
    value = when_false if word.lower() in _FALSE else when_true
    if value is None:
        return []
    if isinstance(value, bool):
        return [f"--{field}" if value else f"--no-{field}"]
    return [f"--{field}", str(value)]


def switch_values(name: str, value: object) -> dict[str, object]:
    """A --config file's key that is their switch (`lora_target_linear: true`), as our field's value ({} for none);
    ValueError for a value that is not true or false."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {_word(str(value))}")
    field, when_true, when_false, _ = SWITCH_ALIASES[name]
    chosen = when_true if value else when_false
    return {} if chosen is None else {field: chosen}


def _word(word: str) -> str:
    """A word the user gave, as a refusal may quote it: never a long one, nor one that may be a token."""
    return word if len(word) <= 40 and word.isprintable() and not re.search(r"[A-Za-z0-9_-]{20,}", word) else \
        f"(a value of {len(word)} characters)"


def _equivalent_batch(args: Sequence[str], known: set[str], steps: str) -> str:
    """`(here: --batch_size 8 --grad_accum_steps 4)` when argv gives the per-device batch and the steps as numbers."""
    batch = ""
    for position, arg in enumerate(args):
        name, equals, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name and canonical(name, known) == "batch_size":
            batch = value if equals else (args[position + 1] if position + 1 < len(args) else "")
    if not (batch.isdigit() and steps.isdigit()):
        return ""
    return f" (here: --batch_size {int(batch) * int(steps)} --grad_accum_steps {steps})"


def table_rows() -> list[tuple[str, str, str]]:
    """(their name, ours or the refusal, whose) for docs/names.md, in the table's order."""
    switches = [(f"{theirs} {word}", " ".join(_switch_as_ours(theirs, word)) or "nothing to set",
                 whose) for theirs, (_, _, _, whose) in SWITCH_ALIASES.items() for word in ("true", "false")]
    return ([(theirs, f"--{ours}", whose) for theirs, (ours, whose) in ALIASES.items()] + switches
            + [(theirs, "refused: " + why, "") for theirs, why in DIFFERENT.items()])
