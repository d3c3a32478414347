"""A model directory's model.safetensors.index.json read as untrusted input: which file holds each tensor.

One reader for the local run's check before Ray starts (workload.run.preflight.check_local_files: every file the index
names is in the directory), the preview's of a Hub repo (infra/preview/model_config.py: every file it names is in the
repo's file list) and the job's sharded loader (workload.model.weights). Bounded before a byte is parsed
(the largest published indexes, a few hundred thousand tensors' names, are a few MiB), then a JSON object whose
weight_map maps tensor names (strings) to file names (strings) in the directory itself, never outside it.

Standard library only (and model_source, which is): the local run reads it before torch loads.
"""
from __future__ import annotations

import json
import os
import posixpath

from workload import user_files
from workload.model.model_source import SAFETENSORS_FILE, SAFETENSORS_INDEX

INDEX_FILE = SAFETENSORS_INDEX  # the names the Hub's file list is judged by too (model_source)
SINGLE_FILE = SAFETENSORS_FILE
# Well above any published index (Llama-3.1-405B's is some 100 KiB), and a bound on what json parses.
MAX_INDEX_BYTES = 64 << 20
NOT_AN_INDEX = ("is not a safetensors index (a JSON object with a 'weight_map' of tensor name -> file name, as "
                "save_pretrained writes it)")


def weight_map(directory: str, what: str) -> dict[str, str] | None:
    """Tensor name -> the path of the file the index puts it in, or None when the directory has no index;
    ValueError("{what}: ...") for an index too large, not such an object, or naming a file outside the directory."""
    index = os.path.join(directory, INDEX_FILE)
    if not os.path.isfile(index):
        return None
    try:
        size = os.path.getsize(index)
        if size > MAX_INDEX_BYTES:
            raise ValueError(f"{what}: {INDEX_FILE} is {size:,} bytes; an index is a few MiB at most (allowed: "
                             f"{MAX_INDEX_BYTES:,})")
        data = user_files.read_bytes(index, MAX_INDEX_BYTES)
    except user_files.Refused as error:
        raise ValueError(f"{what}: {INDEX_FILE} {error.why}") from None
    except OSError:
        raise ValueError(f"{what}: {INDEX_FILE} {NOT_AN_INDEX}") from None
    return {name: os.path.join(directory, file_name) for name, file_name in parse(data, what).items()}


def parse(data: bytes, what: str) -> dict[str, str]:
    """An index's bytes (from a directory or the Hub) as tensor name -> file name, normalised and inside the model's
    directory or repo; ValueError("{what}: ...") otherwise."""
    if len(data) > MAX_INDEX_BYTES:
        raise ValueError(f"{what}: {INDEX_FILE} is larger than {MAX_INDEX_BYTES:,} bytes; an index is a few MiB at "
                         "most")
    try:
        found = json.loads(data)["weight_map"]
    except (RecursionError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{what}: {INDEX_FILE} {NOT_AN_INDEX}") from None
    if not isinstance(found, dict) or not found or not all(
            isinstance(name, str) and isinstance(file_name, str) and file_name for name, file_name in found.items()):
        raise ValueError(f"{what}: {INDEX_FILE} {NOT_AN_INDEX}")
    files = {}
    for name, file_name in found.items():
        # The name, not where a link leads: a Hub cache's snapshot directory links each file to ../../blobs/.
        inside = posixpath.normpath(file_name.replace(os.sep, "/"))
        if posixpath.isabs(inside) or inside in (".", posixpath.pardir) or inside.startswith(posixpath.pardir + "/"):
            raise ValueError(f"{what}: {INDEX_FILE} puts {name[:100]} in {file_name[:200]!r}, outside the model "
                             "directory; allowed: file names in the directory itself")
        files[name] = inside
    return files


def named_files(data: bytes, what: str) -> list[str]:
    """The file names an index's bytes name, each once, sorted."""
    return sorted(set(parse(data, what).values()))


def missing_shards(data: bytes, file_names: list[str], what: str) -> list[str]:
    """The files an index's bytes name that a repo holding `file_names` (the Hub's listing) lacks, sorted:
    from_pretrained fails on every rank at the first of them."""
    held = set(file_names)
    return [name for name in named_files(data, what) if name not in held]


def shown(missing: list[str]) -> str:
    """Missing file names as a refusal quotes them, on one line: the first three, and how many more."""
    printable = ("".join(c if c.isprintable() else "?" for c in name[:200]) for name in missing[:3])
    return ", ".join(printable) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")


def missing_files(directory: str, what: str) -> list[str]:
    """The weight files the loader would open that the directory lacks: the index's (each file name once, sorted),
    or model.safetensors without an index."""
    files = weight_map(directory, what)
    if files is None:
        return [] if os.path.isfile(os.path.join(directory, SINGLE_FILE)) else [SINGLE_FILE]
    return sorted({os.path.relpath(path, directory) for path in files.values() if not os.path.isfile(path)})


def claimed_size_problem(directory: str) -> str | None:
    """Why the index's `metadata.total_size` (the weights' bytes, as save_pretrained writes it) cannot be true of the
    directory's files (the words after "{what}: "), or None (no index, no claim, or a claim the files can hold): a
    claim larger than the named files together hold, or no whole number of bytes. Nothing loads by it, but the index
    is an untrusted file of the model and a claim of a zettabyte says the files are not the model it describes."""
    path = os.path.join(directory, INDEX_FILE)
    try:
        data = user_files.read_bytes(path, MAX_INDEX_BYTES)
        files = set(parse(data, INDEX_FILE).values())
        metadata = json.loads(data).get("metadata")
    except (OSError, ValueError, AttributeError, RecursionError, user_files.Refused):
        return None  # no index, or one weight_map refuses in its own words
    claimed = metadata.get("total_size") if isinstance(metadata, dict) else None
    if claimed is None:
        return None
    held = sum(os.path.getsize(os.path.join(directory, name)) for name in files
               if os.path.isfile(os.path.join(directory, name)))
    if isinstance(claimed, bool) or not isinstance(claimed, (int, float)) or claimed != claimed or claimed < 0:
        return f"{INDEX_FILE}'s metadata.total_size is no number of bytes; save_pretrained writes the weights' bytes"
    if claimed > held:
        return (f"{INDEX_FILE} claims {claimed:,.0f} bytes of weights (metadata.total_size), and the files it names "
                f"hold {held:,}: not the files it describes, or some cut off")
    return None
