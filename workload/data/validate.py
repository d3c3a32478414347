"""Every record of a dataset file checked before anything starts, streaming, by one function that three places call:
the local run before Ray starts (workload/run/checks.py), the job's driver before any worker loads the model
(workload.run.preflight.validate), and the preview on the file as the deployer reads it (infra/preview/dataset_records.py).

A refusal is one line: the file, where in it (the 1-based line of a .jsonl, .csv or .txt; the 1-based record of a
.json list; the 1-based row of a .parquet), the field, the bad value and the allowed values (workload.data.shapes).
A file with no record (0 bytes, only blank lines, a header only) is refused too.

Files: .jsonl (one JSON object a line, blank lines skipped), .json (one list of objects), .csv (a header, then one
record a row; every value a string), .parquet, .txt (text only: one document a line), the first four also
gzip-compressed (.jsonl.gz, .json.gz, .csv.gz, .txt.gz); local, or remote through pyarrow's file systems (s3://,
with the job's credentials). Streaming: a .jsonl, .csv or .txt holds one line in memory at a time, a .parquet one
row group, a .json list one record (workload.data.json_list); each line or record within the bound on one
record (workload.data.line_records.MAX_LINE_BYTES).

Standard library only (pyarrow for .parquet and remote files, imported then): the local run calls this before
anything heavy loads.
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import re
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator

from workload import user_files
from workload.config import TrainConfig, is_file_dataset
from workload.data import json_list, shapes
from workload.data.line_records import MAX_LINE_BYTES, DataError, csv_rows, lines, parsed, reason  # noqa: F401

COMPRESSED = ".gz"
LINE_SUFFIXES = (".jsonl", ".csv", ".txt")  # read a line at a time: a prefix of the file can be checked alone


@dataclass(frozen=True)
class Checked:
    """What the check found."""

    path: str
    shape: shapes.Shape
    records: int
    untrained: int
    """Records with no turn to train on (a conversation without an assistant turn): dropped by the job, counted."""
    complete: bool = True
    """False when only a prefix of the file was read (the preview's bound): the job checks the rest."""
    text_bytes: int = -1
    """Text data: the UTF-8 bytes of its documents, all of them (a bound on their tokens); -1: not counted."""

    def describe(self) -> str:
        """The one line that says what the data is (a local file by its path from here, when it is below)."""
        dropped = (f"; {self.untrained} with no assistant turn to train on, dropped" if self.untrained else "")
        shown = self.path
        if "://" not in shown and not os.path.relpath(shown).startswith(".."):
            shown = os.path.relpath(shown)
        what = "documents (one a line)" if suffix(self.path) == ".txt" else self.shape.describe()
        return (f"dataset {shown}: {self.records:,} {what} checked"
                + ("" if self.complete else " (the first part of the file)") + dropped)


_checked: dict[tuple, Checked] = {}


def check_dataset(cfg: TrainConfig, say: Callable[[str], None] = print) -> Checked | None:
    """--dataset's every record, when it is a file (local or remote), as `--dataset PATH line N: ...`; what it found
    said in one line. Once per process for a local file that has not changed: the local run checks before Ray starts,
    then again with the job's own checks; and once per node for a large file (workload.data.cache.checked_before:
    the same size, mtime and first MiB), so a second run on 100 MB does not read it twice more."""
    if not is_file_dataset(cfg.dataset):
        return None
    fields = shapes.Fields.of(cfg)
    key = (cfg.dataset, fields.data_format, fields.text_field, fields.messages_field, fields.prompt_field,
           fields.completion_field)
    if "://" not in cfg.dataset:
        status = os.stat(os.path.expanduser(cfg.dataset))
        key += (status.st_size, status.st_mtime_ns)
        if (why := user_files.problem(os.path.expanduser(cfg.dataset), user_files.UNBOUNDED)) is not None:
            raise DataError(f"--dataset {cfg.dataset} {why}")
    if key not in _checked:
        from workload.data import cache

        earlier = cache.checked_before(cfg, key)  # a large file this node checked whole in an earlier process
        _checked[key] = Checked(**{**earlier, "shape": shapes.Shape(**earlier["shape"])}) if earlier else check_file(
            cfg.dataset, fields, subject="--dataset")
        if not earlier:
            cache.remember_checked(cfg, key, dataclasses.asdict(_checked[key]))
        say(_checked[key].describe())
    return _checked[key]


def suffix(path: str) -> str:
    """The format suffix of a file name, past a .gz: data.jsonl.gz -> .jsonl."""
    name = path.removesuffix(COMPRESSED)
    return os.path.splitext(name)[1]


def open_binary(path: str) -> BinaryIO:
    """A local or remote file, opened for reading bytes (seekable for .parquet)."""
    if "://" not in path:
        return open(os.path.expanduser(path), "rb")
    import pyarrow.fs

    filesystem, inner = pyarrow.fs.FileSystem.from_uri(path)
    file = filesystem.open_input_file(inner)
    # pyarrow's files cannot read a line (NativeFile.readline is unsupported): buffered here, they can.
    return file if suffix(path) == ".parquet" else io.BufferedReader(_Raw(file))


class _Raw(io.RawIOBase):
    """A pyarrow file as Python's raw stream, for io.BufferedReader."""

    def __init__(self, file) -> None:
        self.file = file

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.file.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self.file.close()
        super().close()


def check_file(path: str, fields: shapes.Fields, *, subject: str, opener: Callable[[], BinaryIO] | None = None,
               complete: bool = True) -> Checked:
    """Every record of `path` read as `fields` says, or DataError("{subject} {path} line N: ..."). `opener` gives
    the bytes (default: the file itself); `complete` False says they are only the file's first part (the last line,
    possibly cut, is not read; a .json or .parquet prefix cannot be read at all and is reported unchecked)."""
    where = f"{subject} {path}"
    try:
        with (opener or (lambda: open_binary(path)))() as raw:
            return _walk(path, raw, fields, where, complete)
    except (OSError, EOFError) as error:
        if isinstance(error, FileNotFoundError):
            raise DataError(f"{where} does not exist") from None
        raise DataError(f"{where} cannot be read ({type(error).__name__}: {error})") from None


def records(path: str, raw: BinaryIO, complete: bool = True) -> Iterator[tuple[str, object]]:
    """(where, record) for each record of the file, where being `line N`, `record N` or `row N` (1-based)."""
    kind = suffix(path)
    if path.endswith(COMPRESSED):
        raw = gzip.GzipFile(fileobj=raw)
    if kind == ".parquet":
        yield from _parquet_rows(raw)
    elif kind == ".json":
        yield from _json_records(raw)
    elif kind == ".csv":
        yield from csv_rows(raw, complete)
    else:
        for number, line in lines(raw, complete):
            if kind == ".txt":
                yield f"line {number}", line
                continue
            try:
                record = parsed(line, f"line {number}")
                _check_surrogates(line, f"line {number}")
                yield f"line {number}", record
            except json.JSONDecodeError as error:
                raise DataError(f"line {number} is not JSON ({reason(error)} at column {error.colno}): "
                                f"{shapes.show(line.strip())}{_python_repr(line)}; allowed: one JSON object a line"
                                ) from None


def _walk(path: str, raw: BinaryIO, fields: shapes.Fields, where: str, complete: bool) -> Checked:
    if complete and _empty(raw):
        raise DataError(f"{where} is empty (0 bytes); allowed: a file of records")
    if (other := _other_format(path, _first_bytes(raw))) is not None:
        raise DataError(f"{where} {other}")
    if not complete and suffix(path) not in LINE_SUFFIXES:
        return Checked(path, shapes.Shape("unchecked"), 0, 0, complete=False)
    shape, count, untrained, text_bytes, blank = None, 0, 0, 0, True
    located = records(path, raw, complete)
    while True:
        try:
            place, record = next(located)
        except StopIteration:
            break
        except DataError as error:
            raise DataError(f"{where} {error}") from None
        except (UnicodeDecodeError, gzip.BadGzipFile) as error:
            raise DataError(f"{where} cannot be read as {suffix(path)}{COMPRESSED if path.endswith(COMPRESSED) else ''}"
                            f" ({type(error).__name__}: {error})") from None
        try:
            if fields.data_format == "text" and suffix(path) == ".txt":
                shape = shapes.Shape("text")
                text_bytes += len(str(record).encode("utf-8", "replace"))
                blank = blank and not str(record).strip()
            else:
                shape = shape or shapes.detect(record, fields)
                if shape.name == "text":
                    document = shapes.text(record, shape, fields)
                    text_bytes += len(document.encode("utf-8", "replace"))
                    blank = blank and not document.strip()
                elif not shapes.conversation(record, shape, fields)[1]:
                    untrained += 1
        except shapes.RecordError as error:
            raise DataError(f"{where} {place}: {error}") from None
        count += 1
    if not count:
        raise DataError(f"{where} holds no records (only blank lines or a header); allowed: a file of records")
    if shape.name == "text" and complete and blank:
        raise DataError(f"{where}: none of its {count:,} records holds any text (every {fields.text_field} is empty or "
                        "blank); allowed: records with text to train on")
    if shape.name != "text" and count == untrained:
        raise DataError(f"{where}: none of its {count} records has an assistant turn to train on; allowed: records "
                        "with at least one assistant turn")
    return Checked(path, shape, count, untrained, complete, text_bytes if shape.name == "text" else -1)


# A file's first bytes, where they say its format: what a name's suffix must then be (None: no format read here).
MAGIC_NUMBERS = {b"PAR1": ("a Parquet file", ".parquet"), b"\x1f\x8b": ("gzip-compressed", COMPRESSED),
                 b"PK\x03\x04": ("a zip archive", None), b"\x28\xb5\x2f\xfd": ("zstd-compressed", None),
                 b"BZh": ("bzip2-compressed", None), b"\xfd7zXZ\x00": ("xz-compressed", None)}


def _other_format(path: str, first: bytes) -> str | None:
    """Why a file's first bytes are not of the format its name says (a Parquet file named .jsonl, a gzip stream
    without .gz): read as its suffix says, it was 'not UTF-8 text', which sends one to its encoding. None if they
    are."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    for magic, (what, wanted) in MAGIC_NUMBERS.items():
        if wanted == COMPRESSED and suffix(path) == ".parquet":
            wanted = None  # a gzipped Parquet file is not read
        if not first.startswith(magic) or (wanted is not None and (
                path.endswith(COMPRESSED) if wanted == COMPRESSED else suffix(path) == wanted)):
            continue
        if wanted is None:
            return (f"is {what} (its first bytes say so), which is not read: decompress or unpack it and give the "
                    "data file (.jsonl, .json, .csv, .txt or .parquet; gzip is read, as .jsonl.gz and the like)")
        renamed = (name + COMPRESSED if wanted == COMPRESSED
                   else os.path.splitext(name.removesuffix(COMPRESSED))[0] + wanted)
        return f"is {what} (its first bytes say so), not the {suffix(path)} text its name says: name it {renamed}"
    return None


def _first_bytes(raw: BinaryIO, count: int = 6) -> bytes:
    if hasattr(raw, "peek"):
        return raw.peek(count)[:count]
    position = raw.tell()
    first = raw.read(count)
    raw.seek(position)
    return first


def _empty(raw: BinaryIO) -> bool:
    if hasattr(raw, "peek"):
        return not raw.peek(1)
    position = raw.tell()
    first = raw.read(1)
    raw.seek(position)
    return not first



def _python_repr(text: str) -> str:
    """What to say of records written with str() or print() of a dict (single quotes, True, None): Python's repr,
    which no JSON reader takes."""
    return (" (Python's repr of a dict, not JSON: write each record with json.dumps)"
            if text.lstrip().lstrip("[").lstrip().startswith("{'") else "")


# A \\uD800-\\uDFFF escape without its other half: JSON allows it, Python decodes it to a lone surrogate, and the
# tokenizers refuse the string inside Ray (TextEncodeInput must be Union[...]). A writer that cuts text by UTF-16
# units (JavaScript's substring, a truncation at n characters) leaves half an emoji this way.
LONE_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                            r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def _check_surrogates(text: str, where: str) -> None:
    if "\\u" in text and (found := LONE_SURROGATE.search(text)) is not None:
        raise DataError(f"{where} holds {found.group()}, half of a UTF-16 surrogate pair (a character cut in two, as "
                        "a writer cutting text by UTF-16 units leaves it), which no tokenizer takes; allowed: whole "
                        "characters: drop it or write the whole one")


def _json_records(raw: BinaryIO) -> Iterator[tuple[str, object]]:
    for number, source, record in json_list.records(raw):
        _check_surrogates(source, f"record {number}")
        yield f"record {number}", record



def _parquet_rows(raw: BinaryIO) -> Iterator[tuple[str, object]]:
    import pyarrow
    import pyarrow.parquet

    try:
        file = pyarrow.parquet.ParquetFile(raw)
        _check_row_groups(file.metadata)
        number = 0
        for batch in file.iter_batches():
            for row in batch.to_pylist():
                number += 1
                yield f"row {number}", row
    except (pyarrow.ArrowException, OSError) as error:
        raise DataError(f"cannot be read as .parquet ({error})") from None


def _check_row_groups(metadata) -> None:
    """The bound on one record for a .parquet, from its footer before any page is read: a row group whose columns take
    more than MAX_LINE_BYTES a row uncompressed (Parquet's RowGroup.total_byte_size, "total byte size of all the
    uncompressed column data", parquet-format's parquet.thrift) holds a row longer than that; a compressed page of a
    few kB may inflate to a gigabyte."""
    first = 1
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        if group.total_byte_size > max(group.num_rows, 1) * MAX_LINE_BYTES:
            last = first + max(group.num_rows, 1) - 1
            rows = f"row {first}" if last == first else f"rows {first}-{last}"
            raise DataError(f"{rows} (row group {index + 1}) take {group.total_byte_size:,} bytes uncompressed, more than "
                            f"{MAX_LINE_BYTES:,} a row (the bound on one record), so a row is longer than it; allowed: "
                            "each record within it (a longer document split into several)")
        first += group.num_rows
