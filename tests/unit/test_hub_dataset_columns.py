"""A Hub dataset split whose files disagree on columns (workload.data.hub_columns through hub_dataset.check_dataset,
the local run's check; the preview calls the same check_records): each repo below is also written to a directory and
loaded with this venv's datasets.load_dataset, offline, and the check's verdict must be datasets' own: a later file
with a column the first lacks fails datasets' cast (CastError); one with fewer columns loads (filled with nulls).
So are splits of different formats (workload.data.hub_formats: "Couldn't infer the same data file format for all
splits") and a card whose dataset_info features the first record contradicts (workload.data.hub_features)."""
from __future__ import annotations

import gzip
import io
import json
from types import SimpleNamespace

import pytest

from tests.support.fake_hub import FakeHub
from workload.data import hub_columns, hub_dataset, hub_features, hub_formats, validate


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


def _features(*columns: tuple[str, str]) -> bytes:
    return ("---\ndataset_info:\n  features:\n" + "".join(f"  - name: {name}\n    dtype: {dtype}\n"
                                                        for name, dtype in columns) + "---\n").encode()
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
    # splits of different formats: one builder for the repo, whatever split is asked for
    "train-csv-beside-test-tsv": ({"train.csv": b"text\ntides\n", "test.tsv": b"text\ntides\n"}, "formats"),
    "split-directories-of-txt-and-jsonl": ({"train/a.jsonl": _jsonl(ROW), "train/b.jsonl": _jsonl(ROW),
                                            "test/a.txt": b"tides\n"}, "formats"),
    "jsonl-and-gzipped-json-splits-agree": ({"train.jsonl": _jsonl(ROW), "test.json.gz": gzip.compress(_jsonl(ROW))},
                                            "ok"),
    "a-split-mostly-jsonl-with-one-csv": ({"train/a.jsonl": _jsonl(ROW), "train/b.jsonl": _jsonl(ROW),
                                           "train/notes.csv": b"text\nt\n", "test/a.jsonl": _jsonl(ROW)}, "ok"),
    "a-metadata-csv-beside-the-jsonl": ({"train/a.jsonl": _jsonl(ROW), "train/metadata.csv": b"text\nt\n",
                                         "train/metadata.jsonl": _jsonl(ROW), "test/b.jsonl": _jsonl(ROW)}, "ok"),
    # a card's dataset_info features are what datasets casts the records to
    "a-card-declaring-a-float-the-record-holds-as-a-word": (
        {"README.md": _features(("text", "string"), ("score", "float64")),
         "train.jsonl": _jsonl({**ROW, "score": "high"})}, "features"),
    "a-card-declaring-int8-for-a-larger-number": (
        {"README.md": _features(("text", "string"), ("year", "int8")), "train.jsonl": _jsonl({**ROW, "year": 1998})},
        "features"),
    "a-card-not-declaring-a-column-of-the-record": (
        {"README.md": _features(("body", "string")), "train.jsonl": _jsonl(ROW)}, "features"),
    "a-card-declaring-a-column-the-record-lacks": (
        {"README.md": _features(("text", "string"), ("source", "string")), "train.jsonl": _jsonl(ROW)}, "ok"),
    "a-card-declaring-int64-for-digits-in-a-string": (
        {"README.md": _features(("text", "string"), ("year", "int64")), "train.jsonl": _jsonl({**ROW, "year": "1998"})},
        "ok"),
    "gzip-shards-renaming-the-column": ({"train/part-0.jsonl.gz": gzip.compress(_jsonl(ROW)),
                                         "train/part-1.jsonl.gz": gzip.compress(_jsonl({"body": "tides"}))}, "drift"),
}


def _parquet_repos() -> dict:
    return {"parquet-shards-one-adding-a-column": (
        {"data/train-00000-of-00002.parquet": _parquet(ROW, ROW),
         "data/train-00001-of-00002.parquet": _parquet({**ROW, "score": 0.5})}, "drift"),
        "parquet-shards-agreeing": ({f"data/train-{i:05d}-of-00002.parquet": _parquet(ROW) for i in range(2)}, "ok"),
        "train-parquet-beside-validation-jsonl": ({"train.parquet": _parquet(ROW), "validation.jsonl": _jsonl(ROW)},
                                                  "formats")}


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
        if "Couldn't infer the same data file format for all splits" in str(error):
            return "formats"
        chain = [error, error.__cause__, error.__context__]
        if any(type(e).__name__ in ("ArrowInvalid", "CastError") for e in chain) and "README.md" in files:
            return "features"
        assert any(isinstance(e, (DatasetGenerationCastError, CastError)) for e in chain), f"another failure: {error!r}"
        return "drift"


REFUSALS = {"drift": "the split's files disagree on columns: ",
            "formats": "its splits are files of different formats: ",
            "features": "the README's dataset_info features contradict the data: column "}


@pytest.mark.parametrize("name", [*REPOS, "parquet-shards-one-adding-a-column", "parquet-shards-agreeing",
                                  "train-parquet-beside-validation-jsonl"])
def test_the_verdict_is_what_datasets_does_with_the_split(name, hub, tmp_path, monkeypatch):
    files, verdict = _all_repos()[name]
    try:
        hub_dataset.check_dataset(_cfg(f"lab/{name}"), say=pytest.fail)
        checked = "ok"
    except validate.DataError as refused:
        message = str(refused)
        checked = next(verdict for verdict, words in REFUSALS.items()
                       if message.startswith(f"--dataset lab/{name}: {words}"))
        assert "allowed: " in message and "\n" not in message, message
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


# one split's files: the builder hub_formats infers must be the one datasets infers, or None (not judged)
SPLIT_FILE_LISTS = [["a.jsonl"], ["a.jsonl.gz"], ["a.tsv"], ["a.csv", "b.jsonl"], ["a.csv", "b.csv", "c.jsonl"],
                    ["a.txt", "b.parquet"], ["x/metadata.jsonl", "x/a.csv"], ["a.v1.jsonl"], ["a.ndjson", "b.json"],
                    ["a.conllu"], ["a.jsonl", "b.png", "c.png"], ["a.zip"], ["a.jsonl", "b.xz", "c.xz"],
                    ["a.h5", "b.arrow"], ["train.tar"]]


@pytest.mark.parametrize("names", SPLIT_FILE_LISTS, ids="+".join)
def test_a_splits_builder_is_the_one_datasets_infers_or_not_judged(names):
    load = pytest.importorskip("datasets.load")
    module = hub_formats.module_of(names)
    if names in (["a.jsonl", "b.png", "c.png"], ["a.zip"]):
        assert module is None, f"{names}: a suffix the table lacks ranks first: not judged, got {module}"
        return
    name, arguments = load.infer_module_for_data_files_list(names)
    assert module == (name, tuple(arguments.items())), f"{names}: the check says {module}, datasets {name, arguments}"


def test_the_builder_table_is_datasets_own():
    modules = pytest.importorskip("datasets.packaged_modules")._EXTENSION_TO_MODULE
    differ = {suffix: found for suffix, found in hub_formats.EXTENSION_TO_MODULE.items()
              if modules.get(suffix) is None or (modules[suffix][0], tuple(modules[suffix][1].items())) != found}
    assert differ == {}, f"suffixes whose builder is not datasets' own: {differ}"
    assert not set(hub_formats.INERT) & set(modules), "an INERT suffix has a builder in datasets"


CAST_VALUES = ["12", "-12", " 12", "+12", "0x1A", "12.0", "1.5", "1e3", "nan", "inf", "", "true", "TRUE", "yes", "t",
               "harbour", "1_000", 0, 1, -1, 127, 128, 255, 256, -129, 2**40, 2**63, 1.0, 1.5, -3.0, 1e300, True, False]
CAST_TYPES = ["int8", "uint8", "int16", "int32", "int64", "uint64", "float32", "float64", "float", "double", "bool",
              "string", "large_string"]


def test_castable_never_refuses_what_pyarrow_casts_and_agrees_on_the_common_cases():
    """hub_features.castable writes pyarrow's cast rules out (no pyarrow import at the check): it may leave a value
    unjudged (True) that pyarrow refuses, never the reverse; and on the values datasets cards meet most (words and
    digits in strings, fractions, range) it says what pyarrow's cast, the one datasets' table_cast makes, does."""
    pyarrow = pytest.importorskip("pyarrow")

    def casts(value, dtype):
        try:
            pyarrow.array([value]).cast(pyarrow.type_for_alias(dtype))
            return True
        except (pyarrow.ArrowInvalid, pyarrow.ArrowNotImplementedError, OverflowError):
            return False
    pairs = [(value, dtype) for value in CAST_VALUES for dtype in CAST_TYPES if not isinstance(value, int)
             or isinstance(value, bool) or value < 2**63]
    false_refusals = [(v, t) for v, t in pairs if not hub_features.castable(v, t) and casts(v, t)]
    assert false_refusals == [], f"refused where pyarrow casts: {false_refusals}"
    common = [("12", "int64"), ("harbour", "int64"), ("12.0", "int32"), ("1.5", "float32"), ("harbour", "float64"),
              ("yes", "bool"), ("TRUE", "bool"), (1.5, "int64"), (3.0, "int8"), (300, "int8"), (-1, "uint8"),
              (255, "uint8"), (12, "string"), (True, "int64"), ("", "int64")]
    differ = [(v, t) for v, t in common if hub_features.castable(v, t) != casts(v, t)]
    assert differ == [], f"(value, dtype) where castable and pyarrow disagree: {differ}"
