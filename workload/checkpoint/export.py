"""`python -m workload.export CHECKPOINT OUT`: a sharded training checkpoint as a Hugging Face model directory.

CHECKPOINT is a checkpoint the job saved (`checkpoint_<step>/` under its storage path: a local directory or
s3://...). OUT receives config.json, generation_config.json, model.safetensors and, when the checkpoint names one,
the tokenizer: `AutoModelForCausalLM.from_pretrained(OUT)` loads it, and so does any server that reads Hugging
Face directories.

One process, no GPU, no process group, and one full copy of the weights in host memory: the model is built once
from the checkpoint's own config.json, and DCP reads each rank's shards straight into its parameters (it reshards
on read, so the world size the checkpoint was written with does not matter). An s3:// checkpoint is copied to a
temporary directory first (disk, not memory).
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Sequence

from workload import cli
from workload.checkpoint.adapter_config import check_adapter_config
from workload.checkpoint.export_room import base_parameters, check_room
from workload.checkpoint.file_checks import check_files, check_metadata_stream, read_record
from workload.checkpoint.generation_config import check_generation_config
from workload.checkpoint.model_config import MODEL_PREFIX, check_against_claims, check_config_values
from workload.checkpoint.untrusted_values import REMOTE_CODE_KEYS, drop_remote_code, source_problem, tokenizer_note
from workload.output_paths import check_output
from workload.storage import unwritable_directory

DTYPES = ("float32", "bfloat16")
# Whose warnings, and whose log records, are kept out of the export's output (quiet_imports).
WARNING_MODULES = ("torchao", "torch", "transformers", "peft", "safetensors", "huggingface_hub")
QUIET_LOGGERS = ("torchao", "transformers", "peft")
# The longest CHECKPOINT or OUT taken: Linux's PATH_MAX. A longer one is no path, and a refusal that echoed it whole
# (a megabyte) would bury the message.
ARGUMENT_MAX_LENGTH = 4096
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def export(checkpoint: str, out: str, *, dtype: str = "float32", merge: bool = False) -> list[str]:
    """Write the checkpoint's model (and tokenizer) to `out` as a Hugging Face directory; returns notes for the user
    (a tokenizer that could not be saved). `float32` keeps the trained master weights exactly; `bfloat16` halves the
    size as most published checkpoints are, at the cost of updates smaller than half a bf16 step. A --method
    lora/qlora checkpoint gives a PEFT adapter directory, or with `merge` the base with the adapters merged in
    (workload/checkpoint/adapter_export.py)."""
    from workload.s3_access import check_s3_locations
    from workload.storage import local_copy

    if checkpoint.startswith("s3://"):  # no credentials, no answer: exit 3 in seconds, not the copy's retries
        check_s3_locations([(f"CHECKPOINT {checkpoint}", checkpoint, "read it from", "directory")])
    with local_copy(checkpoint) as directory:  # a missing local CHECKPOINT is refused before the seconds of imports
        # Each file to be read a regular file within its bound, refused in milliseconds: before torch and transformers.
        check_files(checkpoint, directory)
        check_is_checkpoint(checkpoint, directory)
        if os.path.isfile(os.path.join(directory, "config.json")):  # its values too: model_type a plain identifier
            check_config_values(directory)
            _check_config_claims(checkpoint, directory)
        if os.path.lexists(os.path.join(directory, "train_step.json")):  # the record's values: what the job writes
            read_record(directory)
        adapters = os.path.isfile(os.path.join(directory, "adapter_config.json"))
        if merge and not adapters:  # a file's presence: said before the seconds of imports
            raise cli.UsageError(f"--merge: CHECKPOINT {checkpoint} holds a whole model (--method full), not "
                                 "adapters; export it without --merge")
        if adapters:  # its values by the job's flags' rules, before the seconds of imports
            check_adapter_config(checkpoint, directory)
        check_metadata_stream(checkpoint, directory)  # 0 bytes, a copy cut short: said before torch unpickles it
        check_generation_config(checkpoint, directory)  # values transformers refuses at load or at generate()
        quiet_imports()
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from workload.checkpoint import reader as checkpoint_reader
        from workload.checkpoint.model_config import check_against_metadata, read_config_file
        from workload.checkpoint.sharded import MODEL_KEY
        from workload.model.loss import LM_PREFIX

        if adapters:
            return _export_adapters(directory, out, dtype=dtype, merged=merge, checkpoint=checkpoint)
        # Untrusted input, checked before anything is built from it: `.metadata` (restricted unpickling, and its
        # claims against the shard files), then config.json against the metadata (workload/checkpoint/model_config.py).
        metadata = checkpoint_reader.read_metadata(directory)
        read_config_file(directory)
        config = AutoConfig.from_pretrained(directory)
        parameters = check_against_metadata(directory, config, metadata, prefix=f"{MODEL_KEY}.{LM_PREFIX}")
        # a 70B model's 140 GB in bfloat16 (280 in float32): said before a byte is allocated
        check_room(parameters, dtype, out, largest=checkpoint_reader.largest_tensor_bytes(metadata, MODEL_KEY + "."))
        # Built at --dtype: the load casts each float32 master weight as it copies it in (round to nearest even, as
        # .to(dtype) would after), so a bfloat16 export never holds the float32 model.
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
        state = {MODEL_KEY: {LM_PREFIX + name: tensor for name, tensor in model.state_dict().items()}}
        # In place, into the model's parameters; the checkpoint is untrusted input (a crafted one is refused).
        checkpoint_reader.load(state, directory, no_dist=True)
        record = read_record(directory)
        generation = os.path.join(directory, "generation_config.json")
        if os.path.isfile(generation):
            from transformers import GenerationConfig

            model.generation_config = GenerationConfig.from_pretrained(directory)
    return save_model_directory(model, out, tokenizer=record.get("tokenizer", ""),
                                chat_template=record.get("chat_template", ""))


def _check_config_claims(checkpoint: str, directory: str) -> None:
    """config.json's vocab_size and layer count against the shapes `.metadata` lists (read without torch), when it
    can be read so: a config that is not the checkpoint's own refused before the imports (model_config.py)."""
    from workload.checkpoint.file_checks import MAX_METADATA_BYTES, read_regular
    from workload.checkpoint.metadata_claims import tensor_shapes

    if not os.path.isfile(path := os.path.join(directory, ".metadata")):
        return
    if (shapes := tensor_shapes(read_regular(path, MAX_METADATA_BYTES))) is not None:
        check_against_claims(checkpoint, check_config_values(directory), shapes, MODEL_PREFIX)


def check_is_checkpoint(checkpoint: str, directory: str) -> None:
    """CHECKPOINT is one checkpoint_<step>/ the job saved, not the run directory above it nor a model it exported:
    said in those words, with the checkpoint to give, before any heavy import."""
    entries = sorted(os.listdir(directory))
    exported = [name for name in ("adapter_model.safetensors", "model.safetensors") if name in entries]
    if exported and ".metadata" not in entries:
        loader = "PeftModel.from_pretrained(base, ...)" if exported[0].startswith("adapter") else \
            "AutoModelForCausalLM.from_pretrained"
        raise cli.UsageError(f"CHECKPOINT {checkpoint} is a model exported already ({exported[0]}), not a checkpoint: "
                             f"{loader} loads it as it is; a checkpoint is a run's checkpoint_<step>/ directory")
    if os.path.isfile(os.path.join(directory, "config.json")):
        return
    checkpoints = [name for name in entries if name.startswith("checkpoint_")
                   and os.path.isdir(os.path.join(directory, name))]
    if checkpoints:
        latest = checkpoint.rstrip("/") + "/" + checkpoints[-1]
        raise cli.UsageError(f"CHECKPOINT {checkpoint} is a run directory, not a checkpoint; give one of its "
                             f"{len(checkpoints)} checkpoint_<step>/ directories, the latest: {latest}")
    if any(name.startswith("model_") for name in entries):
        raise cli.UsageError(f"CHECKPOINT {checkpoint} is a run directory without checkpoints; its model_<step>/ "
                             "directories are exported already: AutoModelForCausalLM.from_pretrained loads them")
    if ".metadata" in entries:  # DCP's shards without the config.json the job writes beside them
        raise cli.UsageError(f"CHECKPOINT {checkpoint}: no config.json beside its shards; only checkpoints "
                             "saved by this version of the job (workload/checkpoint/sharded.py) can be exported")
    raise cli.UsageError(f"CHECKPOINT {checkpoint} holds no checkpoint (no checkpoint_<step>/ directory, no "
                         f".metadata): {_first_save(directory)}",
                         hint="give a run's checkpoint_<step>/ directory: python -m workload.export "
                              "STORAGE_PATH/RUN_NAME/checkpoint_<step> OUT")


def _looks_like_a_checkpoint(path: str) -> bool:
    """A local directory holding what the job's checkpoint_<step>/ holds (its step record, or DCP's .metadata)."""
    return "://" not in path and any(os.path.lexists(os.path.join(path, name)) for name in ("train_step.json",
                                                                                            ".metadata"))


def _first_save(directory: str) -> str:
    """Why a run directory may hold no checkpoint, with the run's own --checkpoint_every when it recorded its flags
    (run_directory.FLAGS_FILE, which the local run writes)."""
    from workload.checkpoint.run_directory import recorded_flags

    try:
        every = int((recorded_flags(directory) or {})["checkpoint_every"])
    except (ValueError, KeyError, TypeError):
        return "a run that stopped before its first save (every --checkpoint_every steps) leaves none"
    if not every:
        return "its run saved none (--checkpoint_every 0)"
    return f"its run may have stopped before its first save, at step {every} (--checkpoint_every {every})"


def quiet_imports() -> None:
    """Before torch, transformers, PEFT and torchao load: their import-time noise (torchao's "Failed to load ... .so"
    for its CUDA-only extensions on a CPU machine, deprecation and FutureWarnings, transformers' notices) kept out
    of the command's output, which is the export's own lines. TRANSFORMERS_VERBOSITY is a default only: a user's
    own setting wins."""
    import logging
    import warnings

    from workload.model.adapters.nf4 import import_torchao_quietly

    for module in WARNING_MODULES:
        warnings.filterwarnings("ignore", module=module)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    import_torchao_quietly()


def merge(adapter_directory: str, out: str, *, base: str | None = None, dtype: str = "float32") -> list[str]:
    """The base (`base`, else the adapter config's base_model_name_or_path) with the adapters of
    `adapter_directory` merged in, saved to `out` as a Hugging Face model with the adapter directory's tokenizer."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    from workload.checkpoint import adapter_export

    transformers_logging.disable_progress_bar()
    with open(os.path.join(adapter_directory, adapter_export.ADAPTER_CONFIG)) as file:
        base = base or json.load(file)["base_model_name_or_path"]
    if (parameters := base_parameters(base)) is not None:  # a 70B base's 140 GB in bfloat16: said before its load
        check_room(parameters, dtype, out)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype))
    merged = PeftModel.from_pretrained(model, adapter_directory).merge_and_unload()
    tokenizer = adapter_directory if os.path.isfile(os.path.join(adapter_directory, "tokenizer_config.json")) else ""
    return save_model_directory(merged, out, tokenizer=tokenizer)


def write_model(model, destination: str, run_directory: str, keep: bool, *, tokenizer: str = "",
                chat_template: str = "") -> list[str]:
    """The job's export, on every rank (collectives): the whole model as a Hugging Face directory, or with
    --method lora/qlora the adapter directory (and a random-weight base in base_model/ beside it, the same at every
    export). The rank
    that `keep`s writes to `destination` (local or s3://); returns its notes for the user."""
    from workload import storage
    from workload.checkpoint import adapter_export
    from workload.checkpoint.sharded import gather_full_weights

    adapter_config = getattr(model, "adapter_config", None)
    if not adapter_config:
        weights = gather_full_weights(model, keep=keep)
        if not keep:
            return []
        with storage.writing(destination) as directory:
            return save_model_directory(model.lm, directory, state_dict=weights, tokenizer=tokenizer,
                                        chat_template=chat_template)
    adapter_config = dict(adapter_config)
    if not adapter_config.get("base_model_name_or_path"):
        base_destination = storage.join(run_directory, adapter_export.BASE_MODEL_DIRECTORY)
        base = adapter_export.gather_base(model, keep)
        if keep:
            with storage.writing(base_destination) as directory:
                save_model_directory(model.lm, directory, state_dict=base)
        adapter_config["base_model_name_or_path"] = base_destination
    weights = adapter_export.gather_adapters(model, keep)
    if not keep:
        return []
    with storage.writing(destination) as directory:
        return adapter_export.save_adapter_directory(adapter_config, weights, directory, tokenizer=tokenizer,
                                                     chat_template=chat_template)


def _export_adapters(directory: str, out: str, *, dtype: str, merged: bool, checkpoint: str) -> list[str]:
    """A lora/qlora checkpoint (`directory`, the local copy of `checkpoint`) as a PEFT adapter directory in `out`, or
    `merged` into its base. A random-weight base is the base_model/ the job exported beside the checkpoints."""
    import tempfile

    from workload.checkpoint import adapter_export
    from workload.checkpoint.sharded import read_record

    config, weights = adapter_export.read_adapter_checkpoint(directory)
    record = read_record(directory)
    base = config.get("base_model_name_or_path", "")
    beside = os.path.join(os.path.dirname(os.path.abspath(checkpoint.rstrip("/"))), adapter_export.BASE_MODEL_DIRECTORY)
    if not base and os.path.isdir(beside):
        base = config["base_model_name_or_path"] = beside
    if not merged:
        return adapter_export.save_adapter_directory(config, weights, out, tokenizer=record.get("tokenizer", ""),
                                                     chat_template=record.get("chat_template", ""))
    if not base:
        raise cli.UsageError(f"--merge: the checkpoint's adapters are on a random-weight --model_config base, and no "
                             f"{adapter_export.BASE_MODEL_DIRECTORY}/ (which the job's export writes) is beside it")
    import contextlib

    from workload.storage import is_remote, local_copy

    # A Hub id is from_pretrained's to fetch; a directory or s3:// is read as the job read it.
    source = local_copy(base, "its base model") if is_remote(base) or os.path.isabs(base) else (
        contextlib.nullcontext(base))
    with tempfile.TemporaryDirectory() as adapter_directory, source as base_directory:
        notes = adapter_export.save_adapter_directory(config, weights, adapter_directory,
                                                      tokenizer=record.get("tokenizer", ""),
                                                      chat_template=record.get("chat_template", ""))
        return notes + merge(adapter_directory, out, base=base_directory, dtype=dtype)


def save_model_directory(lm, out: str, *, state_dict: dict | None = None, tokenizer: str = "",
                         chat_template: str = "") -> list[str]:
    """`lm.save_pretrained(out)` (model.safetensors, config.json, generation_config.json), with `state_dict` as its
    weights when given (the job's gathered ones: its own parameters are FSDP shards), and the tokenizer named
    `tokenizer` saved beside it. Returns notes for the user: a tokenizer that could not be saved.

    The directory is made for inference: config.json says use_cache (training turns the KV cache off, and
    generate() would otherwise recompute every position at every token), and a generation config without an end
    of text takes the tokenizer's, so generate() stops where the training documents did."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Writing model shards": noise in a job's log
    notes, loaded = [], None
    if tokenizer and source_problem(tokenizer):  # credentials in it, a token, a megabyte: neither loaded nor quoted
        notes.append(tokenizer_note(tokenizer, out))
    elif tokenizer:
        from workload.data.tokenizer import load_tokenizer  # a Hub id, a directory, or an s3:// model's own tokenizer

        try:
            loaded = load_tokenizer(tokenizer)
        except (OSError, ValueError) as error:
            notes.append(tokenizer_note(tokenizer, out, error))
    generation = lm.generation_config
    if loaded is not None and loaded.eos_token_id is not None and generation.eos_token_id is None:
        generation.eos_token_id = loaded.eos_token_id
        generation.pad_token_id = loaded.pad_token_id if loaded.pad_token_id is not None else loaded.eos_token_id
    if loaded is not None:
        _keep_chat_template(loaded, generation, chat_template)
    use_cache, lm.config.use_cache = lm.config.use_cache, True
    attributes = vars(lm.config)  # what config.json is written from (PreTrainedConfig.to_dict)
    remote_code = {key: attributes[key] for key in REMOTE_CODE_KEYS if key in attributes}
    notes += drop_remote_code(attributes, "config.json")
    try:
        lm.save_pretrained(out, state_dict=state_dict, safe_serialization=True)
    finally:
        lm.config.use_cache = use_cache
        attributes.update(remote_code)  # the job's own model keeps its config as it was
    if loaded is not None:
        loaded.save_pretrained(out)
    _as_readable_as_config(out)
    return notes


def _as_readable_as_config(out: str) -> None:
    """safetensors writes model.safetensors owner-only (0600) whatever the umask, while config.json gets the
    umask's mode like any file: give every file config.json's, so whoever may read the directory reads the model
    (a shared runs/ or a group's model store)."""
    mode = os.stat(os.path.join(out, "config.json")).st_mode & 0o777
    for name in os.listdir(out):
        path = os.path.join(out, name)
        if os.path.isfile(path) and os.stat(path).st_mode & 0o777 != mode:
            os.chmod(path, mode)


def _keep_chat_template(tokenizer, generation, chat_template: str) -> None:
    """The template training rendered with goes with the tokenizer (`chat_template` when training named one), and
    generate() stops at the end of an assistant turn as well as at the end of text, as the instruct models'
    generation configs do (Qwen2.5-Instruct: <|im_end|> and <|endoftext|>)."""
    from workload.data.chat import end_of_turn_token

    if chat_template:
        tokenizer.chat_template = chat_template
    try:
        end_of_turn = end_of_turn_token(tokenizer)
    except ValueError:  # a template that cannot render a one-question conversation has no end of turn to find
        return
    if end_of_turn is None:
        return
    stops = generation.eos_token_id if isinstance(generation.eos_token_id, list) else (
        [] if generation.eos_token_id is None else [generation.eos_token_id])
    if end_of_turn not in stops:
        generation.eos_token_id = [end_of_turn, *stops]


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


def check_arguments(checkpoint: str, out: str) -> None:
    """CHECKPOINT and OUT as paths (or CHECKPOINT's s3:// URI) follow the rule of every free-text value
    (workload/config/fields.py text_problem: at most ARGUMENT_MAX_LENGTH characters, no control character, no
    credentials, no token), refused without quoting them; an s3:// CHECKPOINT the one rule of s3:// locations
    (workload/config/s3_uri.py); and OUT is a directory on this machine, not a URI."""
    from workload.config.fields import shown_uri, text_problem
    from workload.config.s3_uri import refusal

    for name, value in (("CHECKPOINT", checkpoint), ("OUT", out)):
        if problem := text_problem(value, ARGUMENT_MAX_LENGTH):
            raise cli.UsageError(f"{name}: {problem}")
    if (refused := refusal("CHECKPOINT", checkpoint)) is not None:  # S3's and pyarrow's form, before credentials
        raise cli.UsageError(refused)
    if _URI.match(out):
        raise cli.UsageError(f"OUT {shown_uri(out)} is a URI; OUT is a directory on this machine (created): write "
                             "the model here, then copy it where it goes (to S3: aws s3 cp --recursive OUT "
                             "s3://BUCKET/PREFIX)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser(
        "python -m workload.export",
        "Turn a sharded checkpoint of the training job into a Hugging Face model directory.\n\n"
        "  python -m workload.export runs/local/local-20261201-042145/checkpoint_000020 model/\n"
        "  python -m workload.export s3://bucket/prefix/ray-train-fsdp-llm-1-0a1b2c3d/checkpoint_000050 model/",
        check_failed="(not used: the export either succeeds or fails on its input or environment)")
    parser.add_argument("checkpoint", metavar="CHECKPOINT", type=cli.user_path,
                        help="checkpoint_<step> directory, local or s3://")
    parser.add_argument("out", metavar="OUT", type=cli.user_path,
                        help="directory to write the model to (created)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="weights' dtype in OUT: float32 keeps the trained weights exactly")
    parser.add_argument("--merge", action="store_true",
                        help="a --method lora/qlora checkpoint: write its base with the adapters merged in (a Hugging "
                        "Face model) instead of the PEFT adapter directory")
    words = list(sys.argv[1:] if argv is None else argv)
    if upload := next((word for word in words if word.split("=")[0] in ("--push_to_hub", "--hub_model_id")), None):
        raise cli.UsageError(f"{upload.split('=')[0]}: workload.export writes OUT only; upload OUT with `hf upload "
                             "OWNER/NAME OUT` (HF_TOKEN set), or give --push_to_hub to the training run")
    args = parser.parse_args(words)
    check_arguments(args.checkpoint, args.out)
    if not args.out.strip():
        raise cli.UsageError("OUT is empty; give the directory to write the model to (created)")
    if "://" not in args.checkpoint and _inside(args.out, args.checkpoint):
        raise cli.UsageError(f"OUT {args.out} is inside CHECKPOINT {args.checkpoint} (the model would be written "
                             "among the files it is read from); give a directory outside it")
    # A file, a FIFO, a device at OUT refused unopened; a name past NAME_MAX or a path past PATH_MAX refused here, not
    # as makedirs' "File name too long" after the checkpoint's load (workload/output_paths.py, the rule of every output).
    check_output("OUT", args.out, directory=True)
    if os.path.isdir(args.out) and os.listdir(args.out):
        if _looks_like_a_checkpoint(args.out) and not _looks_like_a_checkpoint(args.checkpoint):  # the two swapped
            raise cli.UsageError(f"OUT {args.out} is a checkpoint (it holds train_step.json or .metadata), and "
                                 f"CHECKPOINT {args.checkpoint} is not: the checkpoint comes first, `python -m "
                                 f"workload.export {args.out} {args.checkpoint}`")
        raise cli.UsageError(f"OUT {args.out} exists and is not empty; give a new directory")
    if (why := unwritable_directory(args.out)) is not None:  # before the seconds of imports and the checkpoint's load
        raise cli.UsageError(f"OUT {args.out}: {why}; give a directory this user can create")
    for note in export(args.checkpoint, args.out, dtype=args.dtype, merge=args.merge):
        cli.note(note)  # what the checkpoint's files said: untrusted, masked
    if os.path.isfile(os.path.join(args.out, "adapter_config.json")):
        print(f"wrote {args.out}: load it with PeftModel.from_pretrained(base, {args.out!r})")
    else:
        print(f"wrote {args.out}: load it with AutoModelForCausalLM.from_pretrained({args.out!r})")
    return cli.OK

