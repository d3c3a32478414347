"""A dataset file is untrusted input, checked by the one function the local run, the job's driver (preflight's
records_check) and the preview share (workload/data/validate.py, workload/data/line_records.py): a line past the
bound on one record is refused as soon as the bound is passed, the file read no further; JSON that Python's reader
cannot take (nesting past its recursion limit, an integer past its digit limit) and a .csv quote left open to the
end of the file are refused naming --dataset and the line; and a record's value shaped like a token is never quoted
in a refusal (workload.config.fields' rule, through workload.data.shapes.show)."""
from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path

import pytest

from workload.config import TrainConfig
from workload.data import json_list, line_records, records, shapes, validate


class _Counted(io.RawIOBase):
    """Bytes as a raw stream that counts what is read of it."""

    def __init__(self, data: bytes) -> None:
        self.data, self.taken = io.BytesIO(data), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.data.readinto(buffer)
        self.taken += count
        return count


def _refusal(path: Path, data_format: str = "text", **settings) -> str:
    with pytest.raises(validate.DataError) as refused:
        validate.check_file(str(path), shapes.Fields(data_format, **settings), subject="--dataset")
    message = str(refused.value)
    assert message.startswith(f"--dataset {path} ") and "\n" not in message, message
    return message


def _jsonl(*records: object) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def test_a_line_past_the_bound_is_refused_there_and_the_file_read_no_further(tmp_path, monkeypatch):
    monkeypatch.setattr(line_records, "MAX_LINE_BYTES", 4096)
    body = (_jsonl({"text": "one"}, {"text": "two"}) + '{"text": "' + "z" * 2**20 + '"}\n' + _jsonl({"text": "x"}))
    counted = _Counted(body.encode())
    with pytest.raises(validate.DataError) as refused:
        validate.check_file("corpus.jsonl", shapes.Fields("text"), subject="--dataset",
                            opener=lambda: io.BufferedReader(counted))
    assert str(refused.value).startswith("--dataset corpus.jsonl line 3 is longer than 4,096 bytes"), refused.value
    assert counted.taken < 64 * 1024, f"read {counted.taken:,} bytes of a 1 MiB line past a 4 KiB bound"


def test_the_bound_holds_a_line_of_its_length_and_refuses_one_byte_more(tmp_path, monkeypatch):
    monkeypatch.setattr(line_records, "MAX_LINE_BYTES", 300)
    exact = '{"text": "' + "w" * (300 - len('{"text": ""}\n')) + '"}\n'
    assert len(exact.encode()) == 300
    (tmp_path / "exact.jsonl").write_text(exact * 3)
    assert validate.check_file(str(tmp_path / "exact.jsonl"), shapes.Fields("text"), subject="--dataset").records == 3
    (tmp_path / "over.txt").write_text("short document\n" + "v" * 300 + "\n")
    assert "line 2 is longer than 300 bytes" in _refusal(tmp_path / "over.txt")
    (tmp_path / "over.csv").write_text("text\nshort\n" + "u" * 400 + "\n")
    assert "line 3 is longer than 300 characters" in _refusal(tmp_path / "over.csv")


def test_a_gzip_line_past_the_real_bound_is_refused_naming_it(tmp_path):
    bound = line_records.MAX_LINE_BYTES
    assert 2**20 <= bound <= 2**30, "one record: a long document of a few MB fits, a gigabyte does not"
    path = tmp_path / "inflates.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "first"}\n{"text": "' + b"q" * (bound + 4096), compresslevel=1))
    message = _refusal(path)
    assert f"line 2 is longer than {bound:,} bytes ({bound / 2**20:g} MiB)" in message, message


def test_a_json_lists_record_past_the_bound_is_refused_there_and_the_file_read_no_further(monkeypatch):
    monkeypatch.setattr(line_records, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(json_list, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(json_list, "CHUNK", 1024)
    body = json.dumps([{"text": "one"}, {"text": "two"}, {"text": "z" * 2**20}, {"text": "three"}])
    counted = _Counted(gzip.compress(body.encode()))
    with pytest.raises(validate.DataError) as refused:
        validate.check_file("list.json.gz", shapes.Fields("text"), subject="--dataset",
                            opener=lambda: io.BufferedReader(counted))
    assert str(refused.value).startswith("--dataset list.json.gz record 3 is longer than 4,096 characters"), (
        refused.value)
    assert counted.taken < 8 * 1024, f"read {counted.taken:,} compressed bytes of {len(gzip.compress(body.encode()))}"


BROKEN_LISTS = {
    "one line, the error far in": json.dumps([{"text": f"document {n}, with ] and , inside"} for n in range(300)])[:-1]
    + ", oops]",
    "indented, a comma missing": json.dumps([{"text": f"document {n}"} for n in range(120)], indent=2).replace(
        '"document 90"\n  },', '"document 90"\n  }'),
    "a trailing comma": json.dumps([{"text": "a"}] * 200)[:-1] + ",]",
    "after the list": json.dumps([{"text": "a"}] * 200) + "\n[]",
    "a cut string": json.dumps([{"text": "a" * 50}] * 200)[:-30],
}


@pytest.mark.parametrize("case", list(BROKEN_LISTS))
def test_a_json_list_read_a_record_at_a_time_names_the_place_json_does(monkeypatch, case):
    monkeypatch.setattr(json_list, "CHUNK", 64)  # the window drops what it read many times over
    document = BROKEN_LISTS[case]
    with pytest.raises(json.JSONDecodeError) as whole:
        json.loads(document)
    error = whole.value
    expected = f"line {error.lineno} is not JSON ({line_records.reason(error)} at column {error.colno})"
    with pytest.raises(validate.DataError) as refused:
        list(json_list.records(io.BytesIO(document.encode())))
    assert str(refused.value).startswith(expected), f"{case}: {refused.value} (json.loads: {expected})"


def test_a_json_list_read_a_record_at_a_time_is_the_list_json_reads(monkeypatch):
    monkeypatch.setattr(json_list, "CHUNK", 64)
    listed = [{"text": f"café ] , [ \"{n}\" \U0001F600", "nested": [[n, {"k": [None, True, -1.5e3]}]]}
              for n in range(90)]
    for document in (json.dumps(listed), json.dumps(listed, indent=4, ensure_ascii=False), " [ ] ", "[]"):
        data = ("\ufeff" + document).encode()
        read = [record for _, _, record in json_list.records(io.BytesIO(data))]
        assert read == json.loads(document), document[:80]


def test_a_csv_value_over_many_lines_past_the_bound_is_refused_at_its_row(tmp_path, monkeypatch):
    long_document = "a long document. " * 20_000  # 340,000 characters: past the csv module's own 131,072
    (tmp_path / "book.csv").write_text(f'text\n"{long_document}"\nshort\n')
    assert validate.check_file(str(tmp_path / "book.csv"), shapes.Fields("text"), subject="--dataset").records == 2
    monkeypatch.setattr(line_records, "MAX_LINE_BYTES", 2000)
    lines = "".join(f"line {number} of a value whose quote is never closed\n" for number in range(200))
    (tmp_path / "long.csv").write_text('prompt,completion\nq,a\nr,"' + lines + 'the end",x\n')
    message = _refusal(tmp_path / "long.csv", "prompt-completion")
    assert "a value of the row at line 3 (read to line" in message and "longer than 2,000 characters" in message


def test_a_parquet_row_past_the_bound_is_refused_from_its_footer(tmp_path, monkeypatch):
    import pyarrow
    import pyarrow.parquet

    bound = line_records.MAX_LINE_BYTES
    table = pyarrow.table({"text": ["a short document", "w" * (bound + 4096), "another"]})
    pyarrow.parquet.write_table(table, tmp_path / "inflates.parquet", compression="zstd", row_group_size=1)
    assert (tmp_path / "inflates.parquet").stat().st_size < 2**20, "a compressed row of the bound's size is small"
    message = _refusal(tmp_path / "inflates.parquet")
    assert "row 2 (row group 2) take" in message and f"more than {bound:,} a row" in message, message
    monkeypatch.setattr(validate, "MAX_LINE_BYTES", 1000)
    rows = pyarrow.table({"text": [f"document {number} " + "v" * 300 for number in range(40)]})
    pyarrow.parquet.write_table(rows, tmp_path / "many.parquet", row_group_size=10)
    assert validate.check_file(str(tmp_path / "many.parquet"), shapes.Fields("text"), subject="--dataset").records == 40
    pyarrow.parquet.write_table(pyarrow.table({"text": ["x", "y" * 5000, "z"]}), tmp_path / "one.parquet")
    assert "rows 1-3 (row group 1) take" in _refusal(tmp_path / "one.parquet")


def test_the_preview_prefix_ending_in_a_line_as_long_as_the_bound_is_refused(monkeypatch):
    monkeypatch.setattr(line_records, "MAX_LINE_BYTES", 500)
    prefix = (_jsonl({"text": "fine"}) + '{"text": "' + "p" * 600)[:500 + len(_jsonl({"text": "fine"}))]
    with pytest.raises(validate.DataError, match="line 2 is longer than 500 bytes"):
        validate.check_file("s3://b/big.jsonl", shapes.Fields("text"), subject="config key 'trainDataset':",
                            opener=lambda: io.BytesIO(prefix.encode()), complete=False)


def test_json_past_pythons_reader_is_refused_naming_the_line(tmp_path):
    deep = '{"text": ' + '{"k": ' * 5000 + "0" + "}" * 5000 + "}"
    (tmp_path / "deep.jsonl").write_text(_jsonl({"text": "a"}, {"text": "b"}) + deep + "\n")
    assert "line 3 nests arrays or objects deeper than Python's json reader goes" in _refusal(tmp_path / "deep.jsonl")
    (tmp_path / "deep.json").write_text("[" + deep + "]")
    assert "record 1 nests arrays or objects deeper" in _refusal(tmp_path / "deep.json")
    digits = sys.get_int_max_str_digits()
    big = '{"prompt": "q", "completion": -' + "9" * (digits + 1) + "}"
    (tmp_path / "big.jsonl").write_text(_jsonl({"prompt": "q", "completion": "a"}) + "\n" + big + "\n")
    message = _refusal(tmp_path / "big.jsonl", "prompt-completion")
    assert f"line 3 holds an integer of more than {digits:,} digits" in message, message
    assert "set_int_max_str_digits() to increase" not in message, "advice for a Python program, not for a dataset"


def test_jsons_own_message_reads_once(tmp_path):
    (tmp_path / "cut.jsonl").write_text(_jsonl({"text": "a"}) + '{"text": "never closed')
    message = _refusal(tmp_path / "cut.jsonl")
    assert "line 2 is not JSON (Unterminated string starting at column 10)" in message, message
    (tmp_path / "control.jsonl").write_text('{"text": "a\tb"}\n')
    assert "line 1 is not JSON (Invalid control character at column 12)" in _refusal(tmp_path / "control.jsonl")
    (tmp_path / "cut.json").write_text('[{"text": "a"},\n {"text": "never closed]')
    assert "line 2 is not JSON (Unterminated string starting at column 11)" in _refusal(tmp_path / "cut.json")


def test_a_csv_quote_left_open_is_refused_at_the_line_that_opened_it(tmp_path):
    rows = "".join(f"question {number},answer {number}\n" for number in range(30))
    (tmp_path / "open.csv").write_text('prompt,completion\nfirst,one\nsecond,"two, and never closed\n' + rows)
    message = _refusal(tmp_path / "open.csv", "prompt-completion")
    assert "line 3 opens a quoted value that no '\"' closes" in message and "to line 33" in message, message
    (tmp_path / "gzipped.csv.gz").write_bytes(gzip.compress(b'text\n"closed"\n\n"open from here\n' + rows.encode()))
    assert "line 4 opens a quoted value" in _refusal(tmp_path / "gzipped.csv.gz")
    # What is allowed stays read: a quoted value over lines, holding a '""' and a comma, and the last line unended.
    (tmp_path / "good.csv").write_text('prompt,completion\n"a ""quoted"" word,\nover two lines",yes\nlast,"x"')
    assert list(records.read_file_records(str(tmp_path / "good.csv"))) == [
        {"prompt": 'a "quoted" word,\nover two lines', "completion": "yes"}, {"prompt": "last", "completion": "x"}]


def test_the_preview_prefix_cut_inside_a_quoted_value_is_not_refused():
    body = b'prompt,completion\nq,a\nr,"a value over\nlines that the prefix cuts'
    checked = validate.check_file("s3://b/pairs.csv", shapes.Fields("prompt-completion"), subject="--dataset",
                                  opener=lambda: io.BytesIO(body), complete=False)
    assert checked.records == 1 and not checked.complete, checked


TOKENS = {
    "hub": "hf_" + "Q7" * 17,
    "github": "ghp_" + "k3" * 12,
    "aws": "AKIA" + "Z9" * 8,
    "slack": "xoxb-1234567890-abcdefghijkl",
    "openai": "sk-" + "m4" * 12,
}
# (the file's name, its data format, a token -> the file's text, where the refusal points)
CASES = {
    "role.jsonl": ("chat", lambda token: _jsonl({"messages": [{"role": "user", "content": "q"},
                                                              {"role": token, "content": "a"}]}), "line 1"),
    "role_after_text.jsonl": ("chat", lambda token: _jsonl({"messages": [{"role": "x" * 30 + token,
                                                                         "content": "q"}]}), "line 1"),
    "sharegpt_from.jsonl": ("chat", lambda token: _jsonl({"conversations": [{"from": token, "value": "q"}]}),
                            "line 1"),
    "content_list.jsonl": ("chat", lambda token: _jsonl(
        {"messages": [{"role": "user", "content": "q"}], "x": 1},
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [token]}]}), "line 2"),
    "field_name.jsonl": ("text", lambda token: _jsonl({"text": "a"}, {"body": "b", token: "c"}), "line 2"),
    "completion.json": ("prompt-completion", lambda token: json.dumps([{"prompt": "q", "completion": {"k": token}}]),
                        "record 1"),
    "not_json.jsonl": ("text", lambda token: _jsonl({"text": "a"}) + '{"text": "' + token + '\n', "line 2"),
    "header.csv": ("text", lambda token: f"text;{token}\na;b\n", "line 1"),
}


@pytest.mark.parametrize("token", list(TOKENS.values()), ids=list(TOKENS))
@pytest.mark.parametrize("name", list(CASES))
def test_a_value_shaped_like_a_token_is_never_quoted(tmp_path, name, token):
    data_format, text, where = CASES[name]
    (tmp_path / name).write_text(text(token))
    message = _refusal(tmp_path / name, data_format)
    assert f" {where}" in message, message
    for piece in (token, token[:12], token[-12:]):
        assert piece not in message, f"{name}: {piece!r} quoted in {message!r}"


def test_a_bad_value_not_shaped_like_a_token_is_still_quoted(tmp_path):
    (tmp_path / "robot.jsonl").write_text(_jsonl({"messages": [{"role": "robot\u202e", "content": "q"}]}))
    message = _refusal(tmp_path / "robot.jsonl", "chat")
    assert 'messages[0].role is "robot\\u202e"; allowed: system, user, assistant, tool' in message, message
    assert shapes.show("plain words of a long document, " * 3).endswith("...")
    assert shapes.show(json.loads("[" * 900 + "]" * 900)).startswith(("[[[", "a list nested"))


def test_the_drivers_check_refuses_the_same_files(tmp_path):
    """preflight's records_check is validate.check_dataset: the job's driver refuses what the local run does."""
    (tmp_path / "open.csv").write_text('text\n"never closed\nmore\n')
    with pytest.raises(validate.DataError, match=r"^--dataset \S+open.csv line 2 opens a quoted value"):
        validate.check_dataset(TrainConfig(dataset=str(tmp_path / "open.csv"), data_format="text"), say=print)
    (tmp_path / "deep.jsonl").write_text('{"text": ' + "[" * 4000 + "]" * 4000 + "}\n")
    with pytest.raises(validate.DataError, match=r"^--dataset \S+deep.jsonl line 1 nests"):
        validate.check_dataset(TrainConfig(dataset=str(tmp_path / "deep.jsonl"), data_format="text"), say=print)


def test_a_datasets_column_names_are_listed_by_the_same_rule():
    token = TOKENS["github"]
    listed = shapes.shown_names(["body", token, "title"])
    assert token not in listed and token[:12] not in listed, listed
    assert listed == "body, a value of 28 characters (not shown: it holds something shaped like a token), title"
    assert shapes.shown_names(f"column_{number:02}" for number in range(50)).endswith("column_19 and 30 more")


def test_a_tool_calls_name_shaped_like_a_token_is_not_quoted_when_the_template_drops_it():
    from tests.unit.test_sft import tiny_tokenizer
    from workload.data import chat

    token = TOKENS["openai"]
    turns = [{"role": "user", "content": "weather ?"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"type": "function", "function": {"name": token, "arguments": {"city": "x"}}}]}]
    with pytest.raises(ValueError, match="does not render turn 2's tool_calls") as refused:
        chat.tokenize_conversation(tiny_tokenizer("llama3"), turns, [1], False, "record 1")
    assert token not in str(refused.value) and token[:12] not in str(refused.value), refused.value
