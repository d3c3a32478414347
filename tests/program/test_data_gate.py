"""Every record checked before anything starts (workload/data/validate.py): a bad dataset file is one line naming the
file, the 1-based line (or record, or row), the field, the bad value and the allowed values; `python -m
workload.local` exits 2 on it before Ray starts, and the preview refuses the same file as trainDataset (a local path,
or an s3:// object read as the stack's identity, with a bound on the bytes read). The shapes people have (ShareGPT,
Alpaca, .csv, gzip, tool-call turns) are read as they are."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.preview import dataset_records
from workload.data import shapes, validate

REPO = Path(__file__).resolve().parents[2]
TURNS = [{"role": "user", "content": "the cat sees what ?"}, {"role": "assistant", "content": "the ball ."}]
GOOD = json.dumps({"messages": TURNS})
TOOL_CALL = [{"role": "user", "content": "weather in paris ?"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "paris"}}}]},
             {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "it is sunny ."}]


def _parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)


# name: (data format, the file's bytes or a writer, the words the refusal must hold)
BAD = {
    "wrong_role.jsonl": ("chat", GOOD + "\n" + json.dumps({"messages": [{"role": "bot", "content": "hi"}]}) + "\n",
                         ['line 2: messages[0].role is "bot"', "allowed: system, user, assistant, tool"]),
    "string_messages.jsonl": ("chat", json.dumps({"messages": "hello"}) + "\n",
                              ['line 1: messages is "hello"', "allowed: a non-empty list of turns"]),
    "no_field.parquet": ("chat", lambda path: _parquet(path, [{"text": "a"}]),
                         ['row 1: no field "messages"', "fields: text", "--messages_field",
                                                            "its fields are a text record's: give --data_format text"]),
    "empty.jsonl": ("chat", "", ["is empty (0 bytes)"]),
    "empty.parquet": ("chat", "", ["is empty (0 bytes)"]),
    "blank.jsonl": ("chat", "\n  \n\n", ["holds no records"]),
    "late_garbage.jsonl": ("chat", "\n".join([GOOD] * 6) + "\n\n{oops\n",
                           ["line 8 is not JSON (Expecting property name enclosed in double quotes at column 2)"]),
    "null_content.jsonl": ("chat", json.dumps({"messages": [TURNS[0], {"role": "assistant", "content": None}]}) + "\n",
                           ["line 1: messages[1].content is null", "a string (or null with tool_calls)"]),
    "no_assistant.jsonl": ("chat", json.dumps({"messages": TURNS[:1]}) + "\n",
                           ["none of its 1 records has an assistant turn"]),
    "sharegpt_role.jsonl": ("chat", json.dumps({"conversations": [{"from": "bot", "value": "x"}]}) + "\n",
                            ['line 1: conversations[0].from is "bot"', "allowed: human, gpt, system, tool"]),
    "text_missing.jsonl": ("text", json.dumps({"body": "a"}) + "\n", ['line 1: no field "text"', "--text_field"]),
    "alpaca_output.json": ("prompt-completion", json.dumps([{"instruction": "a", "output": 3}]),
                           ["record 1: output is 3", "allowed: a string"]),
    "cut.jsonl.gz": ("chat", lambda path: path.write_bytes(gzip.compress(((GOOD + "\n") * 50).encode())[:-20]),
                     ["cannot be read (EOFError"]),
}
GOOD_FILES = {
    "sharegpt.jsonl": ("chat", json.dumps({"conversations": [{"from": "system", "value": "be brief"},
                                                              {"from": "human", "value": "hi"},
                                                              {"from": "gpt", "value": "hello ."}]}) + "\n",
                       "ShareGPT records"),
    "alpaca.json": ("prompt-completion", json.dumps([{"instruction": "add", "input": "1 2", "output": "3"},
                                                     {"instruction": "greet", "output": "hi"}]), "Alpaca records"),
    "pairs.csv": ("prompt-completion", 'prompt,completion\n"a, b ?",c\nd,"e\nf"\n', "prompt-completion records"),
    "corpus.csv.gz": ("text", lambda path: path.write_bytes(gzip.compress(b"text\nthe cat\nthe dog\n")), "text"),
    "chat.jsonl.gz": ("chat", lambda path: path.write_bytes(gzip.compress(((GOOD + "\n") * 3).encode())), "chat records"),
    "tools.jsonl": ("chat", json.dumps({"messages": TOOL_CALL}) + "\n", "chat records"),
}


def _write(root: Path, name: str, content) -> Path:
    path = root / name
    if callable(content):
        content(path)
    else:
        path.write_text(content)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    for name, (_, content, _) in {**BAD, **GOOD_FILES}.items():
        _write(root, name, content)
    return root


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_file_is_refused_naming_the_file_and_where(files, name):
    data_format, _, words = BAD[name]
    with pytest.raises(validate.DataError) as refused:
        validate.check_file(str(files / name), shapes.Fields(data_format), subject="--dataset")
    message = str(refused.value)
    assert message.startswith(f"--dataset {files / name}") and "\n" not in message, message
    for word in words:
        assert word in message, f"{name}: {word!r} not in {message!r}"


@pytest.mark.parametrize("name", list(GOOD_FILES))
def test_the_shapes_people_have_are_read_as_they_are(files, name):
    data_format, _, described = GOOD_FILES[name]
    checked = validate.check_file(str(files / name), shapes.Fields(data_format), subject="--dataset")
    assert checked.records >= 1 and described in checked.describe(), checked.describe()


def test_shapes_become_the_conversations_the_template_renders():
    sharegpt = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
    fields = shapes.Fields("chat")
    shape = shapes.detect(sharegpt, fields)
    assert shapes.conversation(sharegpt, shape, fields) == (
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], [1])
    alpaca = {"instruction": "add", "input": "1 2", "output": "3"}
    fields = shapes.Fields("prompt-completion")
    assert shapes.conversation(alpaca, shapes.detect(alpaca, fields), fields) == (
        [{"role": "user", "content": "add\n\n1 2"}, {"role": "assistant", "content": "3"}], [1])
    named = shapes.Fields("prompt-completion", prompt_field="instruction", completion_field="output")
    assert shapes.conversation(alpaca, shapes.detect(alpaca, named), named)[0][0]["content"] == "add\n\n1 2", (
        "--prompt_field instruction on an Alpaca file keeps its input")
    turns, trained = shapes.conversation({"messages": TOOL_CALL}, shapes.Shape("messages", "messages"),
                                         shapes.Fields("chat"))
    assert trained == [1, 3] and turns[1]["content"] is None and turns[1]["tool_calls"], turns


LOCAL_CASES = ["wrong_role.jsonl", "string_messages.jsonl", "no_field.parquet", "empty.jsonl", "empty.parquet",
               "blank.jsonl", "late_garbage.jsonl"]


# `python -m workload.local ARGS` as the user types it (runpy runs the module as -m does), reporting after it exits
# which of the libraries that take seconds to import it had loaded: none, so the refusal is as fast as Python starts.
ENTRY = ("import runpy, sys\nsys.argv = ['workload.local'] + sys.argv[1:]\ntry:\n"
         "    runpy.run_module('workload.local', run_name='__main__', alter_sys=True)\nexcept SystemExit as exit:\n"
         "    print('LOADED', sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))\n"
         "    raise\n")


def test_the_local_run_exits_2_before_ray_starts_on_each_bad_file(files):
    for name in LOCAL_CASES:
        data_format, _, words = BAD[name]
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", ENTRY, "--data_format", data_format, "--dataset",
                               str(files / name)], cwd=REPO, capture_output=True, text=True, timeout=120)
        seconds = time.monotonic() - started
        assert done.returncode == 2, f"{name}: exit {done.returncode}\n{done.stdout}{done.stderr[-2000:]}"
        assert done.stdout.strip().splitlines() == ["LOADED []"], f"{name}: Ray or torch was loaded: {done.stdout}"
        assert "Traceback" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(files / name) in errors[0] and words[0] in errors[0], done.stderr
        print(f"{name}: exit 2 in {seconds:.2f} s")  # 0.1-0.2 s each on an idle 2-core machine


def test_the_local_run_says_what_it_read(files):
    """A good file is announced in one line before Ray starts (here the run then stops at the check of its flags
    against the model, which comes after the data's; its one record is one worker's, with none held out)."""
    done = subprocess.run([sys.executable, "-m", "workload.local", "--data_format", "chat", "--dataset",
                           str(files / "sharegpt.jsonl"), "--seq_len", "100000", "--num_workers", "1",
                           "--eval_fraction", "0", "--eval_every", "0"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "--seq_len 100000" in done.stderr, done.stderr
    assert f"dataset {files / 'sharegpt.jsonl'}: 1 ShareGPT records" in done.stdout, done.stdout


@pytest.mark.parametrize("name", LOCAL_CASES)
def test_the_preview_refuses_the_same_files_as_trainDataset(files, name):
    data_format, _, words = BAD[name]
    fields = shapes.Fields(data_format, names=dataset_records.STACK_KEYS)
    with pytest.raises(ValueError) as refused:
        dataset_records.check_records(str(files / name), fields, warn=pytest.fail)
    message = str(refused.value)
    assert message.startswith(f"config key 'trainDataset': {files / name}"), message
    assert words[0] in message and "--" not in message.replace(str(files / name), ""), message


def test_the_preview_reads_an_s3_file_as_the_stacks_identity_up_to_its_bound(aws_env):
    import boto3

    from infra.config import AwsIdentity

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="data")
    good = (GOOD + "\n") * 100
    bad_late = good + json.dumps({"messages": [{"role": "bot", "content": "x"}]}) + "\n"
    for key, body in {"good.jsonl": good, "bad_late.jsonl": bad_late, "empty.jsonl": "",
                      "wrong_role.jsonl": BAD["wrong_role.jsonl"][1], "big.json": json.dumps([{"messages": TURNS}] * 40)
                      }.items():
        s3.put_object(Bucket="data", Key=key, Body=body.encode())
    fields = shapes.Fields("chat", names=dataset_records.STACK_KEYS)
    warned: list[str] = []

    def check(key: str, limit: int = dataset_records.PREVIEW_MAX_BYTES):
        return dataset_records.check_records(f"s3://data/{key}", fields, identity=AwsIdentity(), region="us-east-1",
                                             warn=warned.append, limit=limit)

    assert check("good.jsonl").records == 100 and not warned
    with pytest.raises(ValueError, match=r"^config key 'trainDataset': s3://data/bad_late.jsonl line 101: "
                                         r'messages\[0\].role is "bot"'):
        check("bad_late.jsonl")
    with pytest.raises(ValueError, match="s3://data/empty.jsonl is empty"):
        check("empty.jsonl")
    with pytest.raises(ValueError, match="s3://data/none.jsonl does not exist"):
        check("none.jsonl")
    with pytest.raises(ValueError, match="line 2"):
        check("wrong_role.jsonl")
    # Over the bound: the records in the bytes read are checked, and the preview says the job checks the rest.
    partial = check("bad_late.jsonl", limit=len(good) // 2)
    assert 0 < partial.records < 100 and not partial.complete, partial
    assert warned and "the job checks every record" in warned[-1], warned
    assert check("big.json", limit=100).records == 0 and "cannot be read in part" in warned[-1], warned


def test_a_sharegpt_file_and_a_gzipped_csv_reach_the_job_as_the_check_read_them(files):
    """The job's own readers (workload/data/records.py, batches.py) on the shapes the check accepted: the ShareGPT
    file's turns trained on the gpt turn, named in the data line; the .csv.gz file's text column."""
    from workload.config import TrainConfig
    from workload.data import records
    from workload.data.batches import load_documents
    from workload.data.examples import example_blocks

    cfg = TrainConfig(model_config="tiny", dataset=str(files / "sharegpt.jsonl"), data_format="chat",
                      tokenizer=str(REPO / "data" / "chat-tokenizer"), seq_len=64)
    ((turns, trained),) = records.conversations(cfg, records.read_records(cfg))
    assert [turn["role"] for turn in turns] == ["system", "user", "assistant"] and trained == [2], turns
    line = example_blocks(cfg).describe(cfg)
    assert line.startswith("chat data (ShareGPT): 1 training examples") and "0 without a trained token" in line, line
    text = TrainConfig(model_config="tiny", dataset=str(files / "corpus.csv.gz"), tokenizer=str(REPO / "data" /
                                                                                                 "tokenizer"))
    assert load_documents(text) == ["the cat", "the dog"]
