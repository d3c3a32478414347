"""A Hub dataset split whose files disagree on columns (workload.data.hub_columns through hub_dataset.check_dataset,
the local run's check; the preview calls the same check_records): each repo below is also written to a directory and
loaded with this venv's datasets.load_dataset, offline, and the check's verdict must be datasets' own: a later file
with a column the first lacks fails datasets' cast (CastError); one with fewer columns loads (filled with nulls)."""
from __future__ import annotations

import gzip
import io
import json
from types import SimpleNamespace

import pytest

from tests.support.fake_hub import FakeHub
from workload.data import hub_columns, hub_dataset, validate


def _jsonl(*records: dict) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def _parquet(*records: dict) -> bytes:
    pytest.importorskip("pyarrow")
    import pyarrow
    import pyarrow.parquet

    out = io.BytesIO()
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(list(records)), out)
    return out.getvalue()


ROW = {"text": "the ferry leaves at nine"}
# name: ({file: bytes}, verdict): "drift" (load_dataset's DatasetGenerationCastError) or "ok"
REPOS = {
    "a-third-shard-adds-a-column": ({f"data/train-{i:05d}-of-00003.jsonl": _jsonl(
        {**ROW, "source": "harbour log"} if i == 2 else ROW) for i in range(3)}, "drift"),
    "a-later-shard-has-fewer-columns": ({"data/train-00000-of-00002.jsonl": _jsonl({**ROW, "lang": "en"}),
                                         "data/train-00001-of-00002.jsonl": _jsonl(ROW)}, "ok"),
    "a-column-the-first-file-has-past-its-first-record": (
        {"train/a.jsonl": _jsonl(ROW, {**ROW, "lang": "en"}), "train/b.jsonl": _jsonl({"lang": "fr", **ROW})}, "ok"),
    # the card's dataset_info features, not the first file's columns, are what datasets casts to
    "a-card-declaring-both-columns": ({"README.md": b"---\ndataset_info:\n  features:\n  - name: text\n    dtype: string\n"
                                                    b"  - name: source\n    dtype: string\n---\n",
                                       "train/a.jsonl": _jsonl(ROW), "train/b.jsonl": _jsonl({**ROW, "source": "log"})},
                                      "ok"),
    "gzip-shards-renaming-the-column": ({"train/part-0.jsonl.gz": gzip.compress(_jsonl(ROW)),
                                         "train/part-1.jsonl.gz": gzip.compress(_jsonl({"body": "tides"}))}, "drift"),
}


def _parquet_repos() -> dict:
    return {"parquet-shards-one-adding-a-column": (
        {"data/train-00000-of-00002.parquet": _parquet(ROW, ROW),
         "data/train-00001-of-00002.parquet": _parquet({**ROW, "score": 0.5})}, "drift"),
        "parquet-shards-agreeing": ({f"data/train-{i:05d}-of-00002.parquet": _parquet(ROW) for i in range(2)}, "ok")}


def _all_repos() -> dict:
    return {**REPOS, **_parquet_repos()}


@pytest.fixture
def hub(monkeypatch):
    with FakeHub(repos={}) as server:
        for name, (files, _) in _all_repos().items():
            server.datasets[f"lab/{name}"] = {"files": dict(files)}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


def _cfg(dataset: str) -> SimpleNamespace:
    return SimpleNamespace(dataset=dataset, dataset_split="train", dataset_config="", eval_split="",
                           data_format="text", text_field="text", messages_field="messages", prompt_field="prompt",
                           completion_field="completion")


def _datasets_verdict(files: dict, tmp_path, monkeypatch) -> str:
    datasets = pytest.importorskip("datasets")
    from datasets.exceptions import DatasetGenerationCastError
    from datasets.table import CastError

    for name, data in files.items():
        (tmp_path / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / name).write_bytes(data)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        datasets.load_dataset(str(tmp_path / "repo"), split="train")
        return "ok"
    except Exception as error:  # noqa: BLE001 - DatasetGenerationError with the cast error as its cause
        chain = [error, error.__cause__, error.__context__]
        assert any(isinstance(e, (DatasetGenerationCastError, CastError)) for e in chain), f"another failure: {error!r}"
        return "drift"


@pytest.mark.parametrize("name", [*REPOS, "parquet-shards-one-adding-a-column", "parquet-shards-agreeing"])
def test_the_verdict_is_what_datasets_does_with_the_split(name, hub, tmp_path, monkeypatch):
    files, verdict = _all_repos()[name]
    try:
        hub_dataset.check_dataset(_cfg(f"lab/{name}"), say=pytest.fail)
        checked = "ok"
    except validate.DataError as refused:
        message = str(refused)
        assert message.startswith(f"--dataset lab/{name}: the split's files disagree on columns: "), message
        assert "CastError" in message and "\n" not in message, message
        checked = "drift"
    assert checked == verdict, f"{name}: the check says {checked}, the table {verdict}"
    assert _datasets_verdict(files, tmp_path, monkeypatch) == verdict, f"{name}: datasets disagrees: update REPOS"


def test_the_refusal_names_the_file_its_new_columns_and_the_first_files():
    files = {f"shard-{i}.jsonl": _jsonl({"text": "t"} if i < 7 else {"text": "t", "url": "u", "lang": "de"})
             for i in range(9)}
    found = hub_columns.drifted(sorted(files), files["shard-0.jsonl"], len(files["shard-0.jsonl"]),
                                lambda name, start, length: (files[name][start:start + length], len(files[name])))
    assert found == ("shard-7.jsonl", ["lang", "url"], ["text"])


def test_a_split_of_many_files_is_sampled_within_the_bound_the_last_included():
    names = [f"data/train-{i:05d}-of-05000.jsonl" for i in range(5_000)]
    reads = []

    def read(name, start, length):
        reads.append(name)
        body = _jsonl({"text": "t", "added": 1} if name == names[-1] else {"text": "t"})
        return body[start:start + length], len(body)

    first = _jsonl({"text": "t"})
    assert hub_columns.drifted(names, first, len(first), read) == (names[-1], ["added"], ["text"])
    assert len(reads) == hub_columns.MAX_FILES and names[1] in reads and len(set(reads)) == len(reads)


def test_a_first_record_past_the_read_or_another_format_is_not_judged():
    long_line = _jsonl({"text": "x" * (hub_columns.FIRST_RECORD_BYTES + 10), "extra": 1})
    files = {"a.jsonl": _jsonl({"text": "t"}), "b.jsonl": long_line}
    read = lambda name, start, length: (files[name][start:start + length], len(files[name]))  # noqa: E731
    assert hub_columns.drifted(sorted(files), files["a.jsonl"], len(files["a.jsonl"]), read) is None
    csv = {"a.csv": b"text\nt\n", "b.csv": b"text,extra\nt,1\n"}
    assert hub_columns.drifted(sorted(csv), csv["a.csv"], 7, lambda *_: pytest.fail("read")) is None


def test_a_column_name_that_would_forge_a_line_is_quoted_escaped(hub):
    hub.datasets["lab/forged-column"] = {"files": {"train/a.jsonl": _jsonl(ROW),
                                                   "train/b.jsonl": _jsonl({**ROW, "note\nok: accepted": 1})}}
    with pytest.raises(validate.DataError) as refused:
        hub_dataset.check_dataset(_cfg("lab/forged-column"), say=pytest.fail)
    message = str(refused.value)
    assert "\n" not in message and 'train/b.jsonl has "note\\nok: accepted", which train/a.jsonl' in message, message
