"""A UTF-8 byte-order mark, as Windows editors and Excel's "CSV UTF-8" write one, opens a data file of every text
kind: it is read as the records after it (the CSV header's first column included), by the check and by what the job
trains on, plain or gzipped."""
from __future__ import annotations

import gzip
import json

import pytest

from workload.data import records, shapes, validate

BOM = b"\xef\xbb\xbf"
TURNS = [{"role": "user", "content": "the cat sees what ?"}, {"role": "assistant", "content": "the ball ."}]
FILES = {
    "chat.jsonl": ("chat", (json.dumps({"messages": TURNS}) + "\n") * 2, {"messages": TURNS}),
    "alpaca.json": ("prompt-completion", json.dumps([{"instruction": "add", "output": "3"}]),
                    {"instruction": "add", "output": "3"}),
    "pairs.csv": ("prompt-completion", "prompt,completion\nhi,hello\n", {"prompt": "hi", "completion": "hello"}),
    "corpus.csv.gz": ("text", "text\nthe cat\n", {"text": "the cat"}),
    "corpus.txt": ("text", "the cat\nthe dog\n", "the cat\n"),
}


@pytest.mark.parametrize("name", list(FILES))
def test_a_byte_order_mark_is_read_as_the_records_after_it(tmp_path, name):
    data_format, text, first = FILES[name]
    body = BOM + text.encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    checked = validate.check_file(str(path), shapes.Fields(data_format), subject="--dataset")
    assert checked.records >= 1, checked.describe()
    read = records.read_file_records(str(path))
    assert read[0] == first, f"{name}: the first record after the byte-order mark must be {first!r}: {read[0]!r}"


def test_a_byte_order_mark_inside_a_later_line_stays_a_character(tmp_path):
    path = tmp_path / "later.txt"
    path.write_bytes(b"one\n" + BOM + b"two\n")
    assert records.read_file_records(str(path))[1] == "\ufefftwo\n"
