"""A dataset file's lines and records read within bounds, for workload.data.validate (which every reader of a dataset
file goes through): each line of a .jsonl, .csv or .txt at most MAX_LINE_BYTES, read no further than that; a line's
JSON read with the limits of Python's json reader named (nesting, an integer's digits); a .csv's rows with a quoted
value left open refused at the line that opened it. A refusal is DataError, `line N ...`, the caller adding the file.

Standard library only.
"""
from __future__ import annotations

import csv
import io
import json
import sys
from typing import BinaryIO, Iterator

from workload.data import shapes

OTHER_DELIMITERS = {";": "';'", "\t": "tabs", "|": "'|'"}  # a .csv's header split by one of these is not CSV
# The bound on one line of a .jsonl, .csv or .txt (bytes; a .csv's in characters), read no further than that: without
# it a line is read whole before it is judged, and a 1 MB .jsonl.gz that inflates to one 1 GiB line took 6 s and 2 GiB
# of memory to refuse. The longest legitimate record is a long document: a whole book is a few MB (Tolstoy's War and
# Peace, Project Gutenberg #2600, 3.3 MB of UTF-8), 1M tokens of context about 4 MB; 64 MiB is 16 times that, and the
# preview's read of a file (infra/preview/dataset_records.py PREVIEW_MAX_BYTES), so a line the job takes is one the
# preview can read whole. Reading and parsing 64 MiB takes a fraction of a second.
MAX_LINE_BYTES = 64 * 2**20


class DataError(ValueError):
    """A dataset file or record that cannot be trained on: one line naming the file and where."""


def lines(raw: BinaryIO, complete: bool) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of each non-blank line; without `complete`, the last line (maybe cut) is left
    out, and a gzip stream cut short ends the lines instead of failing."""
    held = None
    number = 0
    try:
        while data := raw.readline(MAX_LINE_BYTES + 1):
            number += 1
            # A prefix (the preview's read, as large as the bound) that ends in a line of the bound's length: that
            # line goes on past the prefix, so it is longer than the bound too.
            if len(data) > MAX_LINE_BYTES or (not complete and len(data) == MAX_LINE_BYTES and data[-1:] != b"\n"):
                raise DataError(too_long(f"line {number}", "bytes"))
            try:
                # A byte-order mark (Windows editors, Excel's "CSV UTF-8") opens the first line only: utf-8-sig
                # drops it there, and a later line's U+FEFF stays what it is, a character of the text.
                line = data.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"line {number} is not UTF-8 text ({error.reason} at byte {error.start})") from None
            if held is not None:
                yield held
            held = (number, line) if line.strip() else None
    except EOFError:
        if complete:
            raise
        return
    if held is not None and complete:
        yield held


def too_long(where: str, unit: str) -> str:
    bound = f"{MAX_LINE_BYTES:,} {unit}" + (f" ({MAX_LINE_BYTES / 2**20:g} MiB)" if MAX_LINE_BYTES >= 2**20 else "")
    return (f"{where} is longer than {bound}, the bound on one record (the file is read no further); allowed: each "
            "record within it (a longer document split into several)")


DECODER = json.JSONDecoder()


def parsed(text: str, where: str, start: int | None = None) -> object:
    """json.loads(text) (with `start`: the value at text[start:] and where it ends, JSONDecoder.raw_decode), or
    DataError naming `where` for what Python's json reader cannot read although it may be JSON: nesting past its
    recursion limit (CPython's decoder recurses once a level, Py_EnterRecursiveCall, so RecursionError at about
    sys.getrecursionlimit() levels) and an integer past int's digit limit (ValueError
    "Exceeds the limit (4300 digits) for integer string conversion": docs.python.org/3/library/stdtypes.html,
    "Integer string conversion length limitation"). JSON's own syntax errors go to the caller (json.JSONDecodeError)."""
    try:
        return json.loads(text) if start is None else DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise DataError(f"{where} nests arrays or objects deeper than Python's json reader goes (its recursion limit, "
                        f"{sys.getrecursionlimit():,} levels); allowed: records nested a few levels, as every record "
                        "shape is") from None
    except ValueError as error:
        if "digits" not in str(error):
            raise DataError(f"{where} cannot be read as JSON ({type(error).__name__})") from None
        raise DataError(f"{where} holds an integer of more than {sys.get_int_max_str_digits():,} digits, past "
                        "Python's limit on reading one (sys.get_int_max_str_digits()); allowed: numbers within it, or "
                        "the digits as a string") from None


def reason(error: json.JSONDecodeError) -> str:
    """json's message without its dangling ' at' ('Unterminated string starting at'): the caller says where."""
    return error.msg.removesuffix(" at")


class _CsvLines:
    """A .csv's lines for csv.reader, each bounded (MAX_LINE_BYTES characters), counting them: `row_start` is the first
    non-blank line of the row being read, `ended` whether the file's end was reached."""

    def __init__(self, text: io.TextIOBase) -> None:
        self.text, self.number, self.row_start, self.ended = text, 0, 0, False

    def __iter__(self) -> "_CsvLines":
        return self

    def __next__(self) -> str:
        line = self.text.readline(MAX_LINE_BYTES + 1)
        if not line:
            self.ended = True
            raise StopIteration
        self.number += 1
        if len(line) > MAX_LINE_BYTES:
            raise DataError(too_long(f"line {self.number}", "characters"))
        if not self.row_start and line.strip():
            self.row_start = self.number
        return line


def csv_rows(raw: BinaryIO, complete: bool) -> Iterator[tuple[str, object]]:
    """(`line N`, row) for each row of a .csv (N its last line), as lines() says of `complete`."""
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") would otherwise open the first column's name.
    source = _CsvLines(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""))
    # strict: a quoted value still open at the end of the file is csv.Error ("unexpected end of data"), where the
    # csv module's default takes the rest of the file, every line after the '"', as that one value (docs.python.org
    # /3/library/csv.html, Dialect.strict); strict also refuses a character after a closing quote ("a"b: ',' expected
    # after '"'), which RFC 4180 2.7 does not allow either (a '"' inside a quoted value is written '""').
    reader = csv.DictReader(source, strict=True)
    # The csv module's own bound on a value, 128 Ki characters by default (csv.field_size_limit, the process's one
    # setting), refused a long document; the bound on one record is this module's, for every format.
    csv.field_size_limit(MAX_LINE_BYTES)
    held = None
    try:
        names = reader.fieldnames or []
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:  # csv.DictReader keeps a name's last column: the first would be silently left out
            raise DataError(f"line 1: the header names {', '.join(map(shapes.show, twice))} more than once; allowed: "
                            "one column a name")
        # Excel's CSV in a comma-decimal locale is split by ';', a TSV renamed .csv by tabs: its header is then one
        # column whose name holds them all, and every field was "missing" from it.
        if len(names) == 1 and (split_by := next((each for each in OTHER_DELIMITERS if each in names[0]), None)):
            raise DataError(f"line 1: the header is one column, {shapes.show(names[0])}, its names split by "
                            f"{OTHER_DELIMITERS[split_by]}; allowed: comma-separated values (save it with commas, or "
                            "as .jsonl)")
        while True:
            source.row_start = 0
            try:
                row = next(reader)
            except StopIteration:
                break
            if None in row:  # more values than the header names
                raise DataError(f"line {reader.line_num} has {len(row) - 1 + len(row[None])} values and the header "
                                f"{len(reader.fieldnames)}; allowed: one value a column")
            if held is not None:
                yield held
            held = (f"line {reader.line_num}", row)
    except EOFError:
        if complete:
            raise
        return
    except csv.Error as error:
        if source.ended and not complete:  # the preview's prefix cut inside a quoted value: that row is the job's
            if held is not None:
                yield held
            return
        if source.ended:
            raise DataError(f"line {source.row_start} opens a quoted value that no '\"' closes: the rest of the file "
                            f"(to line {source.number}) would be that one value; allowed: each quoted value closed, a "
                            "'\"' inside one written '\"\"'") from None
        if "field limit" in str(error):  # a value past the bound: over many lines, a '"' never closed
            raise DataError(too_long(f"a value of the row at line {source.row_start} (read to line {reader.line_num})",
                                     "characters")) from None
        began = f" (its row begins at line {source.row_start})" if source.row_start not in (0, reader.line_num) else ""
        raise DataError(f"line {reader.line_num} is not CSV ({error}){began}") from None
    if held is not None and complete:
        yield held
