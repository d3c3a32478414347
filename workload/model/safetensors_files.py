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
        twice: list[str] = []

        def mapping(pairs: list) -> dict:
            seen: set = set()
            twice.extend(name for name, _ in pairs if name in seen or seen.add(name))
            return dict(pairs)
        try:
            header = json.loads(file.read(header_bytes), object_pairs_hook=mapping)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return "has a header that is not JSON: not a safetensors file"
    if not isinstance(header, dict):
        return "has a header that is not a JSON object: not a safetensors file"
    if twice:
        # safetensors serializes a map, so no writer names a key twice; a reader keeps one of the two entries
        # (JSON parsers the last), so which bytes are the tensor is up to the parser.
        return f"names {_name(twice[0])} twice in its header: not a file safetensors wrote"
    return _layout_problem(header, size - 8 - header_bytes)


# safetensors' dtypes and their bits (safetensors/src/tensor.rs Dtype::bitsize; the library's own list in its error for
# an unknown one, 0.8): a header naming another is refused by the loader ("unknown variant").
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
              "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}


def _layout_problem(header: dict, data_bytes: int) -> str | None:
    """What safetensors' own validation refuses of a header (safetensors/src/tensor.rs Metadata::validate and
    read_metadata): tensors ordered by their offsets must follow one another from byte 0 with no gap or overlap, each
    exactly as long as its dtype and shape make it, and together cover the data to its last byte. A name given twice
    is read as JSON reads it (the last entry wins), as the library's parser does, and then fails these checks where
    its offsets do."""
    entries = []
    for name, entry in header.items():
        if name == "__metadata__":
            # safetensors' Metadata: `__metadata__` is Option<HashMap<String, String>> (tensor.rs): a number there is
            # "invalid type: integer, expected a string" when the file is opened
            if entry is not None and not (isinstance(entry, dict) and all(
                    isinstance(value, str) for value in entry.values())):
                return "has a __metadata__ that is not a map of strings to strings: not a safetensors file"
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_count(x) for x in offsets)
                and offsets[0] <= offsets[1] and isinstance(shape, list) and all(_count(x) for x in shape)):
            return "has a tensor without valid data_offsets and shape: not a safetensors file"
        if entry.get("dtype") not in DTYPE_BITS:
            return f"gives {_name(name)} a dtype safetensors does not know: not a safetensors file"
        entries.append((offsets[0], offsets[1], name, shape, DTYPE_BITS[entry["dtype"]]))
    end = 0
    for begin, stop, name, shape, bits in sorted(entries, key=lambda entry: entry[:2]):
        if begin != end:
            return (f"places {_name(name)} at byte {begin:,} of its data where the tensor before it ends at {end:,} "
                    "(safetensors: invalid offset): not the file its header describes")
        elements = 1
        for length in shape:
            elements *= length
        if elements * bits != (stop - begin) * 8:
            return (f"gives {_name(name)} {stop - begin:,} bytes, not the {elements * bits // 8:,} its dtype and "
                    "shape take (safetensors: invalid shape, data type, or offset)")
        end = stop
    if end != data_bytes:
        return (f"places its tensors in {end:,} bytes of data, and the file holds {data_bytes:,}: cut off, or not "
                "the file its header describes")
    return None


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _name(name: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in name[:100])


def tensor_entries(path: str) -> dict[str, tuple[str, tuple]]:
    """Each tensor's (dtype, shape) as the header of `path` gives them (a file file_problem passed): what the loader
    would find, read without the tensors' bytes."""
    with open(path, "rb") as file:
        (header_bytes,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_bytes))
    return {name: (str(entry.get("dtype")), tuple(entry.get("shape") or ()))
            for name, entry in header.items() if name != "__metadata__" and isinstance(entry, dict)}
