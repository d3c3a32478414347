"""Loading a checkpoint as untrusted input: whoever can write the storage prefix must not run code where it loads.

torch.distributed.checkpoint keeps a checkpoint's index in `.metadata`, a pickle (FileSystemWriter.finish writes it
with `pickle.dump`, FileSystemReader.read_metadata reads it with `pickle.load`), and restores every value of the
state that is not a tensor (AdamW's param_groups) with `torch.load(weights_only=False)`
(DefaultLoadPlanner.load_bytes): both run whatever a crafted file asks, on every resuming worker and on the
machine that runs `workload.export`. Here DCP's own reader and planner are kept (torch 2.11's and 2.13's
torch/distributed/checkpoint/filesystem.py and default_planner.py are the same in these methods), with two changes:

- `.metadata` is unpickled by an Unpickler that admits only what DCP's metadata is made of: the dataclasses and the
  enum of torch/distributed/checkpoint/metadata.py, filesystem.py's _StorageInfo, torch.Size, torch's dtypes and
  layouts (pickled by name; layouts through torch.serialization._get_layout), and the pathlib path that
  StorageMeta.checkpoint_id holds. Anything else (os.system, builtins.eval, any other class) is refused unloaded;
- values that are not tensors are loaded with `torch.load(weights_only=True)`, as DCP already loads the tensors.

A refusal is a CheckpointRefused (a ValueError, so the commands exit 2) of one line naming the file.
"""
from __future__ import annotations

import io
import math
import os
import pickle
import warnings
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from workload.checkpoint.file_checks import (
    MAX_METADATA_BYTES,
    METADATA_FILE,
    CheckpointRefused,
    check_items,
    read_regular,
)
from workload.checkpoint.metadata_globals import ALLOWED_GLOBALS, refusal, stream_problem

# The (module, name) pairs `.metadata` may name, besides torch's dtypes: one list with the scan that refuses the others
# before torch is imported (workload/checkpoint/metadata_globals.py).


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, path: str) -> None:
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED_GLOBALS or (module == "torch" and isinstance(getattr(torch, name, None),
                                                                                  torch.dtype)):
            return super().find_class(module, name)
        raise CheckpointRefused(refusal(self._path, f"{module}.{name}"))

    def persistent_load(self, pid: Any) -> Any:
        raise CheckpointRefused(f"checkpoint file {self._path} holds a persistent reference, which a DCP "
                                "checkpoint's metadata never holds; refused without loading it")


def read_metadata(directory: str | os.PathLike) -> Metadata:
    """A checkpoint's `.metadata`, unpickled with only DCP's metadata classes admitted: a regular file of at most
    MAX_METADATA_BYTES (workload/checkpoint/file_checks.py), read whole before the unpickler sees a byte."""
    path = os.path.join(directory, METADATA_FILE)
    try:
        data = read_regular(path, MAX_METADATA_BYTES)
        if (problem := stream_problem(data)) is not None:  # empty, cut short: the words export says before torch
            raise CheckpointRefused(f"checkpoint file {path} {problem}")
        metadata = _MetadataUnpickler(io.BytesIO(data), path).load()
    except FileNotFoundError:
        raise CheckpointRefused(f"checkpoint {directory}: no {METADATA_FILE} (not a DCP checkpoint, or an "
                                "incomplete one)") from None
    except CheckpointRefused:
        raise
    except Exception as error:  # noqa: BLE001 - a truncated or garbled pickle fails in many ways
        raise CheckpointRefused(f"checkpoint file {path} is not a DCP metadata file: "
                                f"{type(error).__name__}: {error}") from None
    if not isinstance(metadata, Metadata):
        raise CheckpointRefused(f"checkpoint file {path} holds a {type(metadata).__name__}, not DCP's Metadata")
    check_storage(directory, metadata)
    return metadata


def tensor_bytes(metadata: Metadata, prefix: str = "") -> int:
    """What the tensors the metadata lists (those whose name starts with `prefix`) take in memory, whole."""
    return sum(_sizes(metadata, prefix))


def largest_tensor_bytes(metadata: Metadata, prefix: str = "") -> int:
    """The largest of those tensors, as stored: the most a load holds read and not yet copied into its target."""
    return max(_sizes(metadata, prefix), default=0)


def _sizes(metadata: Metadata, prefix: str) -> list[int]:
    return [math.prod(item.size) * _element_size(item.properties.dtype)
            for name, item in metadata.state_dict_metadata.items()
            if name.startswith(prefix) and isinstance(item, dcp_metadata.TensorStorageMetadata)]


def _element_size(dtype: Any) -> int:
    return torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 8


def check_storage(directory: str | os.PathLike, metadata: Metadata) -> None:
    """What `.metadata` claims, against the files beside it, before anything is allocated from it: each shard file it
    names is a plain file of this directory (no path into another), each item's bytes lie within its file, and its
    tensors are no larger in memory than the bytes the shard files hold for them (DCP writes each tensor whole, with
    torch.save, uncompressed: FileSystemWriter's _write_item). A crafted `.metadata` claiming a terabyte tensor would
    otherwise be allocated by whoever reads it (read_model_state, workload.export)."""
    path = os.path.join(directory, METADATA_FILE)
    items = [(getattr(info, "relative_path", None), info.offset, info.length)
             for info in (metadata.storage_data or {}).values()]
    stored = check_items(directory, items)
    claimed = tensor_bytes(metadata)
    if claimed > stored:
        raise CheckpointRefused(f"checkpoint file {path} lists tensors of {claimed:,} bytes, more than the "
                                f"{stored:,} its shard files hold; refused before allocating them")


class _VerifiedReader(FileSystemReader):
    """FileSystemReader with metadata already read through the restricted Unpickler: DCP's loader asks for it again,
    and on a failure would fall back to per-rank metadata files (state_dict_loader._load_state_dict)."""

    def __init__(self, directory: str | os.PathLike, metadata: Metadata) -> None:
        super().__init__(directory)
        self._metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # As FileSystemReader.read_metadata does with the metadata it has read.
        if getattr(self._metadata, "storage_meta", None) is None:
            self._metadata.storage_meta = StorageMeta()
        self._metadata.storage_meta.load_id = self.load_id
        return self._metadata


class _PlainDataPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner, except that values that are not tensors are loaded with weights_only=True."""

    def __init__(self, directory: str | os.PathLike) -> None:
        super().__init__()
        self._directory = directory

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as error:
            reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            raise CheckpointRefused(
                f"checkpoint {self._directory}: the value of {fqn!r} in its shard files (__*.distcp) is not plain "
                f"data (tensors, numbers, strings, lists, dicts), refused without loading it: {reason}") from None
        # As DefaultLoadPlanner.load_bytes places it.
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


def load(state: dict, directory: str | os.PathLike, *, no_dist: bool = False) -> None:
    """dcp.load(state, directory) in place, with the checkpoint read as untrusted input. Every rank reads the
    metadata itself first, so a crafted one is refused with the same one line on each rank, before any collective."""
    reader = _VerifiedReader(directory, read_metadata(directory))
    try:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": with no_dist it is
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, storage_reader=reader, planner=_PlainDataPlanner(directory), no_dist=no_dist)
    except CheckpointException as error:
        # DCP gathers every rank's failure into one exception whose text is their tracebacks; a refusal is one line.
        refused = [failure for failure, _ in error.failures.values() if isinstance(failure, CheckpointRefused)]
        if refused:
            raise refused[0] from None
        raise
