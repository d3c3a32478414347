"""A local model directory's *.safetensors files, checked as untrusted input before anything loads them: each one's
header read (bounded) and its tensors' byte ranges held against what the file holds, and no file whose size is
claimed by holes (workload/sparse_files.py). transformers would otherwise map a 1 TiB sparse file, or a header that
points past the file's end, and fail (or read zeros) inside every Ray worker. Standard library only.

The format (huggingface/safetensors, docs "Format"): 8 bytes, a little-endian u64 N; N bytes of a JSON header mapping
each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows, which
the tensors cover in full), and an optional "__metadata__"; the header is at most 100,000,000 bytes (the library's
own limit, N_LEN's MAX_HEADER_SIZE)."""
from __future__ import annotations

import json
import os
import struct

from workload import user_files

MAX_HEADER_BYTES = 100_000_000


def file_problem(path: str) -> str | None:
    """Why `path` is no safetensors file a loader can read in full (the words after its name), or None."""
    if (why := user_files.problem(path, user_files.UNBOUNDED)) is not None:  # a FIFO, a device, holes: refused unread
        return why
    size = os.path.getsize(path)
    if size < 8:
        return f"holds {size} bytes, less than a safetensors header's length field"
    with open(path, "rb") as file:
        (header_bytes,) = struct.unpack("<Q", file.read(8))
        if header_bytes > min(MAX_HEADER_BYTES, size - 8):
            return (f"claims a header of {header_bytes:,} bytes in a file of {size:,} (at most "
                    f"{MAX_HEADER_BYTES:,}): not a safetensors file, or cut off")
        try:
            header = json.loads(file.read(header_bytes))
        except (UnicodeDecodeError, ValueError):
            return "has a header that is not JSON: not a safetensors file"
    if not isinstance(header, dict):
        return "has a header that is not a JSON object: not a safetensors file"
    data_bytes = size - 8 - header_bytes
    ends = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            return "has a tensor without valid data_offsets: not a safetensors file"
        ends.append(offsets[1])
    if max(ends, default=0) > data_bytes:
        return (f"places its tensors up to byte {max(ends):,} of its data, and the file holds {data_bytes:,}: "
                "cut off, or not the file its header describes")
    return None


def tensor_entries(path: str) -> dict[str, tuple[str, tuple]]:
    """Each tensor's (dtype, shape) as the header of `path` gives them (a file file_problem passed): what the loader
    would find, read without the tensors' bytes."""
    with open(path, "rb") as file:
        (header_bytes,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_bytes))
    return {name: (str(entry.get("dtype")), tuple(entry.get("shape") or ()))
            for name, entry in header.items() if name != "__metadata__" and isinstance(entry, dict)}
