"""A Hub dataset split whose files disagree on columns, found before anything bills: load_dataset builds the split
from all its files with the columns of the first (datasets/packaged_modules/json/json.py _split_generators: the
features are the schema of the first table of the first split, its first 10 MiB chunk, JsonConfig.chunksize;
packaged_modules/parquet/parquet.py: the first file's parquet schema), and casts every later table to them
(table.py cast_table_to_schema, from the builders' _cast_table or the writer): a table with a column the first lacks
raises CastError "column names don't match", which builder.py raises as DatasetGenerationError (this venv's datasets
5.2, the cast in the builder) or DatasetGenerationCastError ("All the data files must have the same columns", the cast
in the writer) in the data stage, on the cluster. A later file with fewer columns is filled with nulls and loads.

What is read: each later file's columns with one bounded ranged GET (a .jsonl/.jsonl.gz file's first record, within
FIRST_RECORD_BYTES; a .parquet file's schema from its footer: its size from an 8-byte read, then its last
FOOTER_PROBE bytes, the footer itself when longer, up to MAX_FOOTER_BYTES); the first file's from the bytes
hub_dataset already read (a .jsonl's first chunk: the keys of every record in it). A file not read within those
bounds, or of another format (.json, .csv: their first record does not bound their columns), is not judged. At most
MAX_FILES later files, spread evenly over the split in datasets' (sorted) order, the last included, PARALLEL at a
time: the Hub lists a split of 200,000 shards, and a look at each would be minutes of preview; a split of more files
is sampled, not proven. Standard library at import (pyarrow for a parquet footer).
"""
from __future__ import annotations

import io
import json
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

MAX_FILES = 32  # later files looked at: 32 ranged GETs, 8 at a time, are four round trips to the Hub (~0.2 s)
PARALLEL = 8
JSON_CHUNK = 10 << 20  # datasets' JsonConfig.chunksize: the first table, whose columns every later one must fit
FIRST_RECORD_BYTES = 1 << 20
FOOTER_PROBE = 64 << 10
MAX_FOOTER_BYTES = 16 << 20
JUDGED = (".parquet", ".jsonl", ".jsonl.gz")

# (file name, start, length) -> (those bytes, the file's size): one ranged GET (hub_dataset._read)
Reader = Callable[[str, int, int], "tuple[bytes, int]"]


def judged(name: str) -> bool:
    return name.endswith(JUDGED)


def sampled(later: list[str]) -> list[str]:
    """At most MAX_FILES of `later`, evenly spread, the first and the last included."""
    if len(later) <= MAX_FILES:
        return later
    step = (len(later) - 1) / (MAX_FILES - 1)
    return [later[round(i * step)] for i in range(MAX_FILES)]


def drifted(files: list[str], first_body: bytes, first_size: int, read: Reader
            ) -> tuple[str, list[str], list[str]] | None:
    """(a later file, the columns it has that the first lacks, the first's columns) for the split's `files` (sorted,
    the first read already: `first_body` of `first_size` bytes), or None: all judged files fit, or not judged."""
    first = files[0]
    kind = _kind(first)
    if kind is None or any(_kind(name) != kind for name in files[1:]):
        return None  # a mix of formats is datasets' other error ("Couldn't infer the same data file format")
    reference = _first_columns(first, first_body, first_size, read)
    if reference is None:
        return None
    with ThreadPoolExecutor(PARALLEL) as pool:
        for name, columns in zip(picked := sampled(files[1:]), pool.map(lambda n: _columns(n, read), picked)):
            if columns is not None and (extra := sorted(set(columns) - reference)):
                return name, extra, sorted(reference)
    return None


def _kind(name: str) -> str | None:
    return ".parquet" if name.endswith(".parquet") else ".jsonl" if name.endswith((".jsonl", ".jsonl.gz")) else None


def _first_columns(name: str, body: bytes, size: int, read: Reader) -> set[str] | None:
    if name.endswith(".parquet"):
        return set(_footer(name, read, body if len(body) >= size else None) or ()) or None
    text = _text(name, body, complete=len(body) >= size)
    if text is None:
        return None
    chunk = text[:JSON_CHUNK]
    if len(text) > JSON_CHUNK or len(body) < size:  # the chunk, then the rest of its last line (json.py's readline)
        if b"\n" not in text[JSON_CHUNK:]:
            return None  # the chunk or its last line runs past what was read
        chunk += text[JSON_CHUNK:].split(b"\n", 1)[0]
    chunk = chunk.removeprefix(b"\xef\xbb\xbf")
    if chunk.lstrip().startswith(b"["):
        return None  # a JSON array: datasets reads it whole, another path
    columns: set[str] = set()
    for line in chunk.splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError:
                return None  # a line cut by the read or not JSON: hub_dataset's validator says so
            if not isinstance(record, dict):
                return None
            columns.update(record)
    return columns or None


def _columns(name: str, read: Reader) -> list[str] | None:
    if name.endswith(".parquet"):
        return _footer(name, read, None)
    body, size = read(name, 0, FIRST_RECORD_BYTES)
    text = _text(name, body, complete=len(body) >= size)
    if text is None or b"\n" not in text.lstrip() and len(body) < size:
        return None
    record = first_object(text)
    return None if record is None else list(record)


def first_object(text: bytes) -> dict | None:
    """The JSON object on the first line of a JSON Lines file's text (a UTF-8 byte order mark and leading space
    dropped, as datasets' reader drops them), or None: not JSON, or not an object."""
    line = text.removeprefix(b"\xef\xbb\xbf").lstrip().split(b"\n", 1)[0]
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _text(name: str, body: bytes, complete: bool) -> bytes | None:
    """The file's text as datasets reads it (a .gz decompressed on the fly), as far as `body` goes."""
    if not name.endswith(".gz"):
        return body
    try:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return inflater.decompress(body, JSON_CHUNK + FIRST_RECORD_BYTES)
    except zlib.error:
        return None


def _footer(name: str, read: Reader, whole: bytes | None) -> list[str] | None:
    """A parquet file's column names from its footer (the thrift FileMetaData before the last 8 bytes: its length,
    then b"PAR1"), read by pyarrow from the footer alone."""
    if whole is None:
        _, size = read(name, 0, 8)
        if size < 12:
            return None
        start = max(0, size - FOOTER_PROBE)
        tail, _ = read(name, start, size - start)
    else:
        size, tail = len(whole), whole
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        return None
    length = struct.unpack("<I", tail[-8:-4])[0]
    if length + 8 > len(tail):
        if length > MAX_FOOTER_BYTES or whole is not None or length + 8 > size:
            return None
        tail, _ = read(name, size - length - 8, length + 8)
    import pyarrow.parquet

    try:
        return pyarrow.parquet.ParquetFile(io.BytesIO(b"PAR1" + tail[-(length + 8):])).schema_arrow.names
    except Exception:  # noqa: BLE001 - a footer pyarrow cannot read: the validator or datasets says why
        return None
