"""The preview refuses an untrusted dataset file as the job's driver does (infra/preview/dataset_records.py runs
workload.data.validate): a record past the bound on one record, JSON past Python's reader, a .csv quote never
closed, each naming trainDataset and the place, never a job flag, and never a value shaped like a token."""
from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from infra.preview import dataset_records
from workload.data import shapes

TOKEN = "github_pat_" + "R5" * 15

FILES = {
    "wide.jsonl.gz": ("text", lambda: gzip.compress(b'{"text": "ok"}\n{"text": "' + b"m" * (65 * 2**20) + b'"}\n',
                                                    compresslevel=1), "line 2 is longer than"),
    "nested.json": ("text", lambda: ("[" + '{"text": "a"}, ' * 3 + '{"text": ' + "[" * 3000 + "]" * 3000 + "}]")
                    .encode(), "record 4 nests arrays or objects deeper"),
    "open.csv.gz": ("prompt-completion", lambda: gzip.compress(b'prompt,completion\nq,a\n"open,b\nr,c\n'),
                    "line 3 opens a quoted value"),
    "secret_role.jsonl": ("chat", lambda: json.dumps({"messages": [{"role": TOKEN, "content": "q"}]}).encode() + b"\n",
                          "line 1: messages[0].role is a value of"),
}


@pytest.mark.parametrize("name", list(FILES))
def test_the_preview_refuses_an_untrusted_file_naming_trainDataset(tmp_path: Path, name: str):
    data_format, content, words = FILES[name]
    path = tmp_path / name
    path.write_bytes(content())
    with pytest.raises(ValueError) as refused:
        dataset_records.check_records(str(path), shapes.Fields(data_format, names=dataset_records.STACK_KEYS),
                                      warn=pytest.fail)
    message = str(refused.value)
    assert message.startswith(f"config key 'trainDataset': {path} ") and words in message, message
    assert "--" not in message.replace(str(path), "") and TOKEN[:15] not in message, message


def test_the_previews_prefix_of_an_s3_file_is_read_by_the_same_bound():
    """A prefix of the file (what one ranged GET returns) whose last line is as long as the bound: that line goes on
    past it, so it is refused as too long, not read as a file of no records."""
    from workload.data import line_records, validate

    body = b'{"text": "ok"}\n{"text": "' + b"n" * line_records.MAX_LINE_BYTES
    with pytest.raises(validate.DataError, match="line 2 is longer than"):
        validate.check_file("s3://data/wide.jsonl", shapes.Fields("text"), subject="config key 'trainDataset':",
                            opener=lambda: io.BytesIO(body[:len(b'{"text": "ok"}\n') + line_records.MAX_LINE_BYTES]),
                            complete=False)
