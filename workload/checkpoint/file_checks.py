"""A checkpoint's files measured before any is read, and before torch or transformers are imported: whoever can write
the storage prefix decides what each name is. Each file export reads must be a regular file (not a symbolic link,
which could name /dev/urandom or a file outside the checkpoint; not a FIFO, on which a read waits forever; not a
device), store what it claims (no holes: workload/sparse_files.py), and be within its bound (a 2 GiB config.json or
.metadata would be read whole, and `.metadata` unpickled). So a crafted checkpoint is refused in milliseconds, not
after the 6 to 12 seconds of imports, with one line naming CHECKPOINT's file: a CheckpointRefused, exit 2.

Standard library only (workload.checkpoint.export calls it before its heavy imports); reader.py reads `.metadata`
through `read_regular` on every path (the resume's workers too).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from workload import user_files
from workload.checkpoint import metadata_globals
from workload.model.model_source import MAX_CONFIG_BYTES

METADATA_FILE = ".metadata"  # torch/distributed/checkpoint/filesystem.py's _metadata_fn
SHARD_SUFFIX = ".distcp"
_SHARD_NAME = re.compile(rb"__[0-9]{1,6}_[0-9]{1,6}\.distcp")  # DCP's file names, __<rank>_<n>.distcp
# DCP's .metadata holds one small record per chunk of each tensor (about 250 bytes pickled): a 70B model's weights
# and AdamW state saved by 64 ranks is some 150,000 chunks, 40 MB; 256 MiB leaves room for 6 times that, and bounds
# what the unpickler is asked to build.
MAX_METADATA_BYTES = 256 << 20
# The JSON files a checkpoint (or the run directory above it) holds that export reads: the model's config, its
# generation config, the record rank 0 writes (train_step.json: step, tokenizer, chat template), the adapter config,
# the local run's flags. A model's config.json is a few KiB; the record's chat template a few more.
JSON_FILES = ("config.json", "generation_config.json", "train_step.json", "adapter_config.json",
              "local_run_flags.json")
MAX_JSON_BYTES = MAX_CONFIG_BYTES
SHARD_BOUND = 2**63 - 1  # off_t's largest: a shard is bounded by what .metadata claims of it, not here


class CheckpointRefused(ValueError):
    """A checkpoint file holds something other than DCP's own metadata or plain data; nothing of it was run."""



def bound(name: str) -> int | None:
    """The most bytes export reads of the checkpoint's file `name`; None for a file it does not read. Shard files have
    no bound of their own: `.metadata`'s claims are checked against what they store (reader.check_storage)."""
    if name == METADATA_FILE:
        return MAX_METADATA_BYTES
    if name in JSON_FILES:
        return MAX_JSON_BYTES
    if name.endswith(SHARD_SUFFIX):
        return SHARD_BOUND
    return None


def file_problem(path: str, max_bytes: int) -> str | None:
    """Why the file at `path` is not read (the words after its name), or None: workload/user_files.py's rule, with a
    symbolic link refused too (measured with lstat: a link could name /dev/urandom or a file outside the checkpoint)."""
    return user_files.problem(path, max_bytes, follow_links=False)


def check_files(checkpoint: str, directory: str, named: str = "CHECKPOINT") -> None:
    """Every file of `directory` (the local copy of CHECKPOINT) that export reads passes `file_problem`; the refusal
    names CHECKPOINT (or what `named` calls the checkpoint: the one a run resumes from) and the file."""
    for name in sorted(os.listdir(directory)):
        limit = bound(name)
        if limit is not None and (problem := file_problem(os.path.join(directory, name), limit)):
            raise CheckpointRefused(f"{named} {checkpoint}: its file {name} {problem}")
    # A shard file .metadata names and the directory lacks (a copy cut short): said now, from the names' bytes in the
    # pickle, not after seconds of torch's imports and the unpickling (reader.check_storage, which checks it again).
    if os.path.isfile(metadata := os.path.join(directory, METADATA_FILE)):
        data = read_regular(metadata, MAX_METADATA_BYTES)
        # A global the restricted Unpickler would refuse, named from the pickle's opcodes (metadata_globals.py): in
        # the Unpickler's words, before torch's imports.
        if (refused := metadata_globals.refused_global(data)) is not None:
            raise CheckpointRefused(metadata_globals.refusal(metadata, refused))
        listed = {match.decode() for match in _SHARD_NAME.findall(data)}
        if missing := sorted(name for name in listed if not os.path.lexists(os.path.join(directory, name))):
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise CheckpointRefused(f"{named} {checkpoint}: {missing[0]}{more}, which its {METADATA_FILE} lists, "
                                    "is missing (an incomplete copy?)")
        # Where it places each item, read with stand-ins for DCP's classes (metadata_claims.py): a shard cut short,
        # or a claim past its file, said now in reader.check_storage's words; what the stand-ins cannot read, later.
        from workload.checkpoint.metadata_claims import stored_items

        if (items := stored_items(data)) is not None:
            check_items(directory, items)


def check_metadata_stream(checkpoint: str, directory: str) -> None:
    """`.metadata` a whole pickle (metadata_globals.stream_problem: not empty, not cut short), refused naming CHECKPOINT
    and the file before torch's imports; reader.read_metadata applies the same rule on every path (the resume's)."""
    if os.path.isfile(path := os.path.join(directory, METADATA_FILE)):
        if (problem := metadata_globals.stream_problem(read_regular(path, MAX_METADATA_BYTES))) is not None:
            raise CheckpointRefused(f"CHECKPOINT {checkpoint}: its file {METADATA_FILE} {problem}")


# The shard files FileSystemWriter writes: `__<rank>_<n>.distcp` (filesystem.py: the _StoragePrefix `__{rank}_` and
# gen_file's `{prefix}{file_count}{DEFAULT_SUFFIX}`), in the checkpoint's own directory.
_SHARD_FILE = re.compile(r"[A-Za-z0-9_-]{1,64}\.distcp")


def check_items(directory: str, items: list[tuple[Any, Any, Any]]) -> int:
    """The items `.metadata` places in shard files, as (relative_path, offset, length): each file a plain file of this
    directory (no path into another) that passes `file_problem`, each item's bytes within it, measured by its blocks;
    returns the bytes the items take. The words of every refusal name `.metadata` (reader.check_storage and, before
    torch's imports, check_files)."""
    from workload import cli
    from workload.sparse_files import stored_bytes  # a shard is measured by its blocks

    path = os.path.join(directory, METADATA_FILE)
    sizes: dict[str, int] = {}
    stored = 0
    for name, offset, length in items:
        if not isinstance(name, str) or not _SHARD_FILE.fullmatch(name):
            raise CheckpointRefused(f"checkpoint file {path} names the shard file {cli.shown(name)}; allowed: a file "
                                    "of the checkpoint's own directory named like __0_0.distcp")
        if name not in sizes:
            shard = os.path.join(directory, name)
            if not os.path.lexists(shard):
                raise CheckpointRefused(f"checkpoint {directory}: {name}, which its {METADATA_FILE} lists, is missing "
                                        "(an incomplete copy?)")
            if problem := file_problem(shard, SHARD_BOUND):  # a link, a FIFO, a device: never opened
                raise CheckpointRefused(f"checkpoint file {shard} {problem}")
            sizes[name] = stored_bytes(shard)
        if not (isinstance(offset, int) and isinstance(length, int)
                and 0 <= offset and 0 <= length and offset + length <= sizes[name]):
            raise CheckpointRefused(f"checkpoint file {path} places an item at bytes {offset}+{length} of "
                                    f"{name}, which holds {sizes[name]}")
        stored += length
    return stored


def read_regular(path: str, max_bytes: int) -> bytes:
    """The bytes of the checkpoint file at `path`, read only when `file_problem` passes it; opened without following a
    link and without waiting on a FIFO, and read no further than `max_bytes` whatever it became since."""
    try:
        return user_files.read_bytes(path, max_bytes, follow_links=False)
    except user_files.Refused as error:
        raise CheckpointRefused(f"checkpoint file {error}") from None


# The directory the job saves step k in: Ray Train's checkpoint_dir_name, storage.checkpoint_name(k) =
# checkpoint_{k:06d} (workload/trainer.py, workload/storage.py); its record says the same step.
_CHECKPOINT_NAME = re.compile(r"checkpoint_([0-9]{1,12})")


class RecordCutOff(CheckpointRefused):
    """train_step.json is not JSON (an empty or half-copied file): a checkpoint cut off while it was copied into the
    storage, which Ray Train does not resume from either; still refused by export."""


def read_record(directory: str) -> dict:
    """What rank 0 recorded beside the shards: the step, and the tokenizer (empty when training had none). Untrusted
    input like the rest of the checkpoint: a regular file of at most file_checks.MAX_JSON_BYTES, a JSON object of the
    values the job writes (untrusted_values.record_problem), and in a directory named checkpoint_<k> the step k."""
    path = os.path.join(directory, "train_step.json")  # sharded.STEP_FILE
    try:
        record = json.loads(read_regular(path, MAX_JSON_BYTES))
    except (ValueError, RecursionError) as error:  # json's scanner counts its depth against the recursion limit
        if isinstance(error, CheckpointRefused):
            raise
        raise RecordCutOff(f"checkpoint file {path} is not JSON: {error}") from None
    if not isinstance(record, dict):
        raise CheckpointRefused(f"checkpoint file {path} holds a {type(record).__name__}, not a JSON object")
    from workload.checkpoint.untrusted_values import record_problem

    if (why := record_problem(record)) is None and (named := _CHECKPOINT_NAME.fullmatch(
            os.path.basename(os.path.normpath(directory)))) and int(named.group(1)) != record["step"]:
        why = f"its step {record['step']} is not its directory's, {named.group(0)} (step k is saved as checkpoint_k)"
    if why is not None:
        raise CheckpointRefused(f"checkpoint file {path}: {why}: not a record the job writes")
    return record
