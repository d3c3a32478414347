"""The rules between settings, each written once: a function over the settings' values by flag name that returns the
refusal (naming the flags, `--warmup_steps 11 must be at most --steps 10`) or None.

The job applies every rule in TrainConfig.__post_init__; the preview applies the same rules to the stack's train*
keys (infra/config/train_keys.py), its refusal naming the stack keys through the declarations' table
(`config keys 'trainWarmupSteps', 'trainSteps': trainWarmupSteps 11 must be at most trainSteps 10`). Each rule
carries values that break it, so tests/program/test_stack_keys.py holds both sides to every rule, a new one included.

Standard library only: the Pulumi program imports it at preview.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from workload.config.fields import quotable

# A --dataset with one of these suffixes is a file, local or remote (s3://...), rather than a Hugging Face id.
# Each of the first four may also be gzip-compressed (workload/data/validate.py reads them all).
DATASET_FILE_SUFFIXES = (".txt", ".jsonl", ".json", ".csv", ".parquet", ".txt.gz", ".jsonl.gz", ".json.gz", ".csv.gz")


def is_local_dataset(dataset: str) -> bool:
    """A --dataset that names a file on this machine rather than a Hugging Face id or a remote file: a known suffix
    or an explicit path."""
    return bool(dataset) and "://" not in dataset and (
        dataset.endswith(DATASET_FILE_SUFFIXES) or dataset.startswith(("/", "./", "../", "~"))
    )


def is_file_dataset(dataset: str) -> bool:
    """A --dataset that is a file, on this machine or remote (s3://bucket/key.jsonl), not a Hugging Face id."""
    return is_local_dataset(dataset) or "://" in dataset


Values = Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    """A rule between settings: `check` returns its refusal naming the flags, or None."""

    flags: tuple[str, ...]
    """The settings it reads (field names)."""
    check: Callable[[Values], str | None]
    broken_by: Mapping[str, Any]
    """Values (by flag name, over the defaults) that break it: the tests' case for both sides."""


def _model_named(v: Values) -> str | None:
    if not v["model_config"] and not v["model_id"]:
        return "--model_id must name a Hugging Face model when --model_config is empty"
    return None


def _checkpoints_stored(v: Values) -> str | None:
    if v["checkpoint_every"] and not v["storage_path"]:
        return "--checkpoint_every needs --storage_path (where the checkpoints go)"
    return None


def _push_exported(v: Values) -> str | None:
    if v["push_to_hub"] and (v["export"] == "none" or not v["storage_path"]):
        return ("--push_to_hub uploads the exported model: it needs --storage_path and --export final or "
                "checkpoints")
    return None


def _warmup_within_steps(v: Values) -> str | None:
    # With --epochs the steps are known once the data is packed: the trainer checks warmup against them then.
    if not v.get("epochs") and v["warmup_steps"] > v["steps"]:
        return f"--warmup_steps {v['warmup_steps']} must be at most --steps {v['steps']}"
    return None


def _epochs_of_a_dataset(v: Values) -> str | None:
    if v.get("epochs") and not v["dataset"]:
        return "--epochs counts passes over --dataset, and random tokens (an empty --dataset) have none: give --steps"
    return None


def _tokenizer_of_a_dataset(v: Values) -> str | None:
    # A --model_id's run keeps --tokenizer beside its exported model; a random-weight model on random tokens uses it
    # for nothing (workload/trainer.py tokenizer_of).
    if v["tokenizer"] and not v["dataset"] and v["model_config"]:
        return (f"--tokenizer {v['tokenizer']} has no effect without --dataset: random tokens (an empty --dataset) "
                f"are not tokenized, and the random-weight --model_config {v['model_config']} exports no tokenizer; "
                "give --dataset, or leave --tokenizer unset")
    return None


def _one_evaluation_set(v: Values) -> str | None:
    if v["eval_fraction"] and v["eval_split"]:
        return "--eval_fraction and --eval_split are two ways to choose the evaluation set: give one"
    return None


def _evaluation_has_data(v: Values) -> str | None:
    set_here = [f"--{name}" for name in ("eval_fraction", "eval_split", "eval_every") if v[name]]
    if not v["dataset"] and set_here:
        return (f"--dataset is empty (random tokens), so there is nothing to evaluate: set it, or leave "
                f"{' and '.join(set_here)} unset")
    return None


def _split_of_a_hub_dataset(v: Values) -> str | None:
    if v["eval_split"] and is_file_dataset(v["dataset"]):
        return (f"--eval_split names a split of a Hugging Face --dataset; the file {v['dataset']!r} has none: use "
                "--eval_fraction")
    return None


def _evaluation_is_not_the_training_split(v: Values) -> str | None:
    if v["eval_split"] and v["eval_split"] == v["dataset_split"]:
        return (f"--eval_split {v['eval_split']} is the split --dataset_split trains on: the evaluation would score "
                "the training data itself; give another split (validation, test), or --eval_fraction to hold part "
                "of it out")
    return None


def _evaluation_every_has_a_set(v: Values) -> str | None:
    if v["eval_every"] and not (v["eval_fraction"] or v["eval_split"]):
        return "--eval_every needs an evaluation set: --eval_fraction or --eval_split"
    return None


def _interval_within_steps(name: str, at_zero: str) -> Callable[[Values], str | None]:
    """A step interval longer than the run does nothing (the run ends first: only the last step's save or evaluation
    happens, as with 0). Skipped with --epochs: the steps are known once the data is packed."""
    def check(v: Values) -> str | None:
        if not v.get("epochs") and v[name] > v["steps"]:
            return (f"--{name} {v[name]} is more than --steps {v['steps']}: the run ends before the first; give at "
                    f"most {v['steps']}, or 0 for {at_zero}")
        return None
    check.__name__ = f"_{name}_within_steps"  # the tests' id of the rule
    return check


def _records_have_a_dataset(v: Values) -> str | None:
    if v["data_format"] != "text" and not v["dataset"]:
        return f"--data_format {v['data_format']} needs a --dataset of records (random tokens are text)"
    return None


def _records_are_not_plain_text(v: Values) -> str | None:
    if v["data_format"] != "text" and v["dataset"].endswith((".txt", ".txt.gz")):
        return (f"--data_format {v['data_format']}: {v['dataset']!r} is plain text; records come from .jsonl, .json, "
                ".parquet or a Hugging Face dataset")
    # A CSV cell is a string, and a conversation is a list of turns that workload/data/shapes.py never decodes from
    # one: every record would be refused on the cluster. Prompt-completion's fields are strings, so CSV suits them.
    if v["data_format"] == "chat" and v["dataset"].endswith((".csv", ".csv.gz")):
        return (f"--data_format chat: {v['dataset']!r} is CSV, whose cells are strings, never a list of messages; "
                "conversations come from .jsonl, .json, .parquet or a Hugging Face dataset")
    return None


def _record_fields_named(v: Values) -> str | None:
    names = {"chat": ("messages_field",), "prompt-completion": ("prompt_field", "completion_field")}
    for name in names.get(v["data_format"], ()):
        if not v[name]:
            return f"--{name} must name the records' field for --data_format {v['data_format']}"
    return None


def _prompt_is_not_completion(v: Values) -> str | None:
    if v["data_format"] == "prompt-completion" and v["prompt_field"] == v["completion_field"]:
        return f"--prompt_field and --completion_field must differ, both are {v['prompt_field']!r}"
    return None


# Each record field's flag, its default (TrainConfig declares the fields with them) and the --data_format that reads it:
# another value under another format would be read by nothing.
RECORD_FIELDS = {"messages_field": ("messages", "chat"), "text_field": ("text", "text"),
                 "prompt_field": ("prompt", "prompt-completion"),
                 "completion_field": ("completion", "prompt-completion")}


def _fields_of_the_format(v: Values) -> str | None:
    for name, (default, data_format) in RECORD_FIELDS.items():
        if v[name] != default and v["data_format"] != data_format:
            return (f"--{name} {v[name]} names a field of --data_format {data_format} records, which --data_format "
                    f"{v['data_format']} does not read: add --data_format {data_format}, or leave --{name} unset")
    return None


# What only chat and prompt-completion examples read (the template renders them, truncation cuts them, the prompt's
# tokens are theirs), by their defaults: raw text is packed and trained on every token, whatever these say.
RECORD_SETTINGS = {"chat_template": "", "truncation": "truncate", "train_on_prompt": False}


def _settings_of_records(v: Values) -> str | None:
    if v["data_format"] == "text":
        changed = [name for name, default in RECORD_SETTINGS.items() if v[name] != default]
        if changed:
            return (f"--{changed[0]} {v[changed[0]]} applies to chat and prompt-completion examples; --data_format "
                    "text trains on every token of raw text and never reads it: add --data_format chat (or "
                    f"prompt-completion), or leave --{changed[0]} unset")
    return None


def _configuration_of_a_hub_dataset(v: Values) -> str | None:
    for name, default in (("dataset_config", ""), ("dataset_split", "train")):
        if v[name] != default and (not v["dataset"] or is_file_dataset(v["dataset"])):
            what = f"the file {v['dataset']!r}" if v["dataset"] else "random tokens (an empty --dataset)"
            return (f"--{name} {v[name]} names a {name.removeprefix('dataset_')} of a Hugging Face --dataset, and "
                    f"{what} has none: leave --{name} unset")
    return None


def _checkpoint_mode_unstored(v: Values) -> str:
    return (f"--checkpoint_mode {v['checkpoint_mode']} sets how checkpoints are saved, and without --storage_path "
            "none are: give --storage_path, or leave --checkpoint_mode unset")


def _checkpoint_mode_of_saves(v: Values) -> str | None:
    if v["checkpoint_mode"] != "async" and not v["storage_path"]:
        return _checkpoint_mode_unstored(v)
    return None


def _export_at_checkpoints(v: Values) -> str | None:
    if v["export"] == "checkpoints" and not v["checkpoint_every"]:
        return ("--export checkpoints needs --checkpoint_every (and --storage_path): the models are written at the "
                "checkpoints; final writes one after the last step")
    return None


def _fp8_trains_full(v: Values) -> str | None:
    if v["fp8"] and v["method"] != "full":  # fp8 trains the linear layers' own weights, which adapters freeze
        return f"--fp8 is for --method full; with --method {v['method']} leave it off"
    return None


# The --lora_* flags' defaults (TrainConfig declares its fields with them): a value other than these with --method
# full would train every weight and ignore it.
LORA_DEFAULTS = {"lora_rank": 16, "lora_alpha": 32.0, "lora_dropout": 0.0, "lora_targets": "all-linear"}


def _adapters_without_lora(v: Values, name: str) -> str:
    return (f"--{name} {v[name]} sets the adapters, which --method full has none of: add --method lora (or qlora), or "
            "leave the adapters' settings unset")


def _adapters_need_a_method(v: Values) -> str | None:
    if v["method"] == "full":
        changed = [name for name, default in LORA_DEFAULTS.items() if v[name] != default]
        if changed:
            return _adapters_without_lora(v, changed[0])
    return None


def typed_without_effect(v: Values, typed: set[str]) -> str | None:
    """The rules compare values, so a flag typed at its default looks untyped to them; typed on the command line
    (`--lora_alpha 32` without --method lora) it is a setting the user believes in, which the others make do nothing.
    (Not a --config file's keys: a --print_config file replays every default.)"""
    if v["method"] == "full" and (lora := [name for name in LORA_DEFAULTS if name in typed]):
        return _adapters_without_lora(v, lora[0])
    if "text_field" in typed and (not v["dataset"] or v["dataset"].endswith((".txt", ".txt.gz"))):
        return (f"--text_field {v['text_field']} names a field of records, and "
                + (f"--dataset {v['dataset']} is plain text: each line is a document" if v["dataset"] else
                   "random tokens (an empty --dataset) have none") + "; leave --text_field unset")
    if not v["storage_path"]:
        if "max_failures" in typed and v["max_failures"]:
            return (f"--max_failures {v['max_failures']} restarts the workers from their latest checkpoint, and "
                    "without --storage_path there is none: each restart would train from step 0; give --storage_path")
        if "checkpoint_mode" in typed:
            return _checkpoint_mode_unstored(v)
        if "export" in typed and v["export"] != "none":
            return (f"--export {v['export']} writes the model under --storage_path/--run_name/, and without "
                    "--storage_path none is written: give --storage_path DIR, or --export none")
    return None


def _accumulation_divides_batch(v: Values) -> str | None:
    if v["batch_size"] % v["grad_accum_steps"]:
        return (f"--grad_accum_steps {v['grad_accum_steps']} must divide --batch_size {v['batch_size']}: each "
                "micro-batch takes batch_size / grad_accum_steps sequences")
    return None


def _ranks_divide_workers(v: Values) -> str | None:
    if v["ranks_per_node"] and v["num_workers"] % v["ranks_per_node"]:
        return f"--ranks_per_node {v['ranks_per_node']} must divide --num_workers {v['num_workers']}"
    return None


def _bus_minimum_is_measured(v: Values) -> str | None:
    if v["min_bus_gbytes_per_s"] and v["fabric_check_seconds"] == 0:
        return "--min_bus_gbytes_per_s needs the fabric check: --fabric_check_seconds must not be 0"
    return None


def _reported(v: Values) -> set[str]:
    return {name.strip() for name in str(v["report_to"]).split(",")}


def _tracker_settings_reported(v: Values) -> str | None:
    for tracker, flag in (("mlflow", "mlflow_tracking_uri"), ("wandb", "wandb_project")):
        if v[flag] and tracker not in _reported(v):
            return (f"--{flag} is read only when --report_to names {tracker}: add --report_to {tracker}, or leave "
                    f"--{flag} unset")
    return None


# In the order they are checked; a rule may rely on the ones before it (and on every field's own bounds).
RULES = (
    Rule(("model_id", "model_config"), _model_named, {"model_id": ""}),
    Rule(("checkpoint_every", "storage_path"), _checkpoints_stored, {"checkpoint_every": 5}),
    Rule(("push_to_hub", "storage_path", "export"), _push_exported, {"push_to_hub": "team/model"}),
    Rule(("warmup_steps", "steps"), _warmup_within_steps, {"steps": 10, "warmup_steps": 11}),
    Rule(("epochs", "dataset"), _epochs_of_a_dataset, {"epochs": 1.0}),
    Rule(("tokenizer", "dataset", "model_config"), _tokenizer_of_a_dataset,
         {"model_config": "tiny", "tokenizer": "org/tokenizer"}),
    Rule(("eval_fraction", "eval_split"), _one_evaluation_set,
         {"dataset": "org/corpus", "eval_fraction": 0.1, "eval_split": "validation"}),
    Rule(("dataset", "eval_fraction", "eval_split", "eval_every"), _evaluation_has_data, {"eval_fraction": 0.1}),
    Rule(("eval_split", "dataset"), _split_of_a_hub_dataset,
         {"dataset": "s3://bucket/corpus.jsonl", "eval_split": "validation"}),
    Rule(("eval_split", "dataset_split"), _evaluation_is_not_the_training_split,
         {"dataset": "org/corpus", "eval_split": "train"}),
    Rule(("eval_every", "eval_fraction", "eval_split"), _evaluation_every_has_a_set,
         {"dataset": "org/corpus", "eval_every": 5}),
    Rule(("data_format", "dataset"), _records_have_a_dataset, {"data_format": "chat"}),
    Rule(("data_format", "dataset"), _records_are_not_plain_text,
         {"data_format": "chat", "dataset": "s3://bucket/corpus.txt"}),
    Rule(("data_format", "messages_field", "prompt_field", "completion_field"), _record_fields_named,
         {"data_format": "chat", "dataset": "org/chats", "messages_field": ""}),
    Rule(("prompt_field", "completion_field", "data_format"), _prompt_is_not_completion,
         {"data_format": "prompt-completion", "dataset": "org/pairs", "completion_field": "prompt"}),
    Rule(("messages_field", "text_field", "prompt_field", "completion_field", "data_format"), _fields_of_the_format,
         {"messages_field": "conversation"}),
    Rule(("chat_template", "truncation", "train_on_prompt", "data_format"), _settings_of_records,
         {"chat_template": "llama3"}),
    Rule(("dataset_config", "dataset_split", "dataset"), _configuration_of_a_hub_dataset,
         {"dataset": "s3://bucket/corpus.jsonl", "dataset_config": "wikitext-2-raw-v1"}),
    Rule(("checkpoint_mode", "storage_path"), _checkpoint_mode_of_saves, {"checkpoint_mode": "sync"}),
    Rule(("export", "checkpoint_every"), _export_at_checkpoints, {"export": "checkpoints"}),
    Rule(("fp8", "method"), _fp8_trains_full, {"fp8": True, "method": "lora"}),
    Rule(("method", *LORA_DEFAULTS), _adapters_need_a_method, {"lora_rank": 8}),
    Rule(("checkpoint_every", "steps", "epochs"), _interval_within_steps("checkpoint_every", "the last step's only"),
         {"checkpoint_every": 100, "storage_path": "s3://bucket/runs"}),
    Rule(("eval_every", "steps", "epochs"), _interval_within_steps("eval_every", "after the last step only"),
         {"eval_every": 100, "eval_fraction": 0.1, "dataset": "org/corpus"}),
    Rule(("grad_accum_steps", "batch_size"), _accumulation_divides_batch, {"batch_size": 2, "grad_accum_steps": 3}),
    Rule(("ranks_per_node", "num_workers"), _ranks_divide_workers, {"num_workers": 6, "ranks_per_node": 4}),
    Rule(("min_bus_gbytes_per_s", "fabric_check_seconds"), _bus_minimum_is_measured,
         {"fabric_check_seconds": 0.0, "min_bus_gbytes_per_s": 4.0}),
    Rule(("mlflow_tracking_uri", "wandb_project", "report_to"), _tracker_settings_reported,
         {"mlflow_tracking_uri": "https://mlflow.example.com"}),
)


def first_broken(values: Values) -> str | None:
    """The first rule `values` break, as its refusal naming the flags; None when they keep every rule."""
    for rule in RULES:
        if (why := rule.check(values)) is not None:
            return _values_bounded(why, values, rule.flags)
    return None


def _values_bounded(why: str, values: Values, flags: tuple[str, ...]) -> str:
    """`why` with each of the rule's string values that a refusal may not repeat (fields.quotable: long, unprintable,
    a token or a URI's credentials) replaced by its length: the one place every rule's message passes."""
    for name in flags:
        value = values.get(name)
        if isinstance(value, str) and value and value in why and not quotable(value):
            why = why.replace(value, f"(a value of {len(value):,} characters, not shown)")
    return why
