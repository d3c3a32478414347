"""A .json dataset file, one JSON list of records, read a record at a time, each within the bound on one record
(workload.data.line_records.MAX_LINE_BYTES of text), as a .jsonl is read a line at a time: a .json.gz that inflates
to one record of a gigabyte is refused once the bound is passed, not after it was all read and parsed. A refusal is
DataError naming the file's own line and column (json's message), the caller adding the file.

Standard library only.
"""
from __future__ import annotations

import io
import json
from typing import BinaryIO, Iterator

from workload.data.line_records import MAX_LINE_BYTES, DataError, parsed, reason, too_long

CHUNK = 2**20  # characters read at a time
SPACE = " \t\r\n"  # JSON's whitespace (RFC 8259 2)
ALLOWED = "allowed: a JSON list of records (one record a line is .jsonl)"


def records(raw: BinaryIO) -> Iterator[tuple[int, str, object]]:
    """(1-based number, its JSON text, record) for each record of the list."""
    text = _Window(raw)
    first = text.skip_space()
    if first != "[":
        value, _ = text.value("the file")
        if text.skip_space():
            line, column = text.where(text.position)
            if first == "{" and column == 1:
                # datasets' Dataset.to_json and pandas' to_json(lines=True) write JSON Lines under any name, .json too
                raise DataError(f"holds one JSON record a line (JSON Lines: line {line} begins another), not a JSON "
                                "list; name it .jsonl")
            text.fail("Extra data", text.position)
        raise DataError(f"holds a JSON {type(value).__name__}, not a list of records; allowed: [{{...}}, {{...}}] "
                        "(one record a line is .jsonl)")
    text.position += 1
    number = 0
    if text.skip_space() == "]":
        text.position += 1
    else:
        while True:
            number += 1
            value, source = text.value(f"record {number}")
            yield number, source, value
            following = text.skip_space()
            text.position += 1
            if following == "]":
                break
            if following != ",":
                text.fail("Expecting ',' delimiter", text.position - 1)
            text.skip_space()
    if text.skip_space():
        text.fail("Extra data", text.position)


class _Window:
    """The file's text from what has not been read yet: `text` from `position` on, which grows by reading and drops
    what was read, knowing the line and column of its first character."""

    def __init__(self, raw: BinaryIO) -> None:
        self.stream = io.TextIOWrapper(raw, encoding="utf-8-sig")  # a byte-order mark, if any, dropped
        self.text, self.position, self.ended, self.line, self.column, self.head = "", 0, False, 1, 1, ""

    def more(self, at_least: int = CHUNK) -> bool:
        if self.ended:
            return False
        chunk = self.stream.read(max(CHUNK, at_least))
        if not chunk:
            self.ended = True
            return False
        self.head = self.head or chunk[:100]
        if self.position > CHUNK:  # what was read is dropped (not at each record: a copy of the window each time)
            dropped, self.text, self.position = self.text[:self.position], self.text[self.position:], 0
            self.line, self.column = self._after(dropped, self.line, self.column)
        self.text += chunk
        return True

    @staticmethod
    def _after(text: str, line: int, column: int) -> tuple[int, int]:
        newlines = text.count("\n")
        return (line + newlines, len(text) - text.rfind("\n")) if newlines else (line, column + len(text))

    def where(self, position: int) -> tuple[int, int]:
        return self._after(self.text[:position], self.line, self.column)

    def skip_space(self) -> str:
        """The next character past JSON's whitespace ('' at the end), `position` at it."""
        while True:
            while self.position < len(self.text) and self.text[self.position] in SPACE:
                self.position += 1
            if self.position < len(self.text):
                return self.text[self.position]
            if not self.more():
                return ""

    def value(self, name: str) -> tuple[object, str]:
        """The JSON value at `position` and its text, `position` past it; DataError for one longer than the bound
        (read no further than the bound and a chunk) or not JSON."""
        while True:
            start = self.position  # again after more(), which may drop what was read before it
            try:
                value, end = parsed(self.text, name, start)
            except json.JSONDecodeError as error:
                # Cut short by the window's end, or not JSON: read on until the file ends or the bound is passed,
                # four times as much each time (each try parses the record again from its start).
                held = len(self.text) - start
                if held <= MAX_LINE_BYTES and self.more(min(4 * held, MAX_LINE_BYTES + 1 - held)):
                    continue
                if self.ended or (error.pos < len(self.text) - 64 and not error.msg.startswith("Unterminated")):
                    self.fail(reason(error), error.pos)
                raise DataError(too_long(name, "characters")) from None
            if end - start > MAX_LINE_BYTES:
                raise DataError(too_long(name, "characters"))
            self.position = end
            return value, self.text[start:end]

    def fail(self, message: str, position: int) -> None:
        line, column = self.where(position)
        repr_hint = (" (Python's repr of a dict, not JSON: write each record with json.dumps)"
                     if self.head.lstrip().lstrip("[").lstrip().startswith("{'") else "")
        raise DataError(f"line {line} is not JSON ({message} at column {column}){repr_hint}; {ALLOWED}")
