"""A Hub dataset load_dataset cannot build, refused at preview naming trainDataset (the preview's
infra/preview/dataset_records.py calls workload.data.hub_dataset.check_records, as the local run does): a train split
whose later files have a column the first lacks (workload.data.hub_columns: datasets builds the split with the first
file's columns and fails the cast of the others), and a README card datasets cannot use (workload.data.hub_card:
huggingface_hub's RepoCard parse, datasets' MetadataConfigs). The Hub is tests/support/fake_hub.py."""
from __future__ import annotations

import io
import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import run_program

JOB = {"trainEnabled": True, "trainStoragePath": "s3://company-data/runs"}


def _jsonl(*records: dict) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def _parquet(*records: dict) -> bytes:
    import pyarrow
    import pyarrow.parquet

    out = io.BytesIO()
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(list(records)), out)
    return out.getvalue()


ROW = {"text": "the tide turns at four"}
CARDS = {  # a card datasets cannot use, and the words the refusal gives for it
    "lab/unnamed-config": (b"---\nconfigs:\n- data_files: corpus.jsonl\n---\n", "has no `config_name`"),
    "lab/tabbed-card": (b"---\npretty_name: Tides\nlanguage:\n\t- en\n---\n", "does not parse (ScannerError"),
    "lab/two-defaults": (b"---\nconfigs:\n- config_name: default\n  data_files: corpus.jsonl\n- config_name: more\n"
                         b"  default: true\n  data_files: corpus.jsonl\n---\n", "configs default and more are both"),
}


@pytest.fixture
def hub(monkeypatch):
    pytest.importorskip("pyarrow")
    with FakeHub(repos={}) as server:
        server.datasets["lab/drifting-parquet"] = {"files": {
            **{f"data/train-{i:05d}-of-00004.parquet": _parquet(ROW) for i in range(3)},
            "data/train-00003-of-00004.parquet": _parquet({**ROW, "harbour": "Dover"})}}
        server.datasets["lab/narrowing-jsonl"] = {"files": {"train/a.jsonl": _jsonl({**ROW, "harbour": "Dover"}),
                                                            "train/b.jsonl": _jsonl(ROW)}}
        server.datasets["lab/parquet-train-csv-validation"] = {"files": {
            "data/train.parquet": _parquet(ROW), "data/validation.csv": b"text\nthe tide turns at five\n"}}
        server.datasets["lab/card-says-bool"] = {"files": {
            "README.md": b"---\ndataset_info:\n  features:\n  - name: text\n    dtype: bool\n---\n",
            "train/part-0.jsonl": _jsonl(ROW)}}
        for name, (card, _) in CARDS.items():
            server.datasets[name] = {"files": {"README.md": card, "corpus.jsonl": _jsonl(ROW)}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_a_train_split_whose_later_file_adds_a_column_is_refused_naming_trainDataset(hub):
    message = program_refusal({**JOB, "trainDataset": "lab/drifting-parquet"})
    assert message.startswith("config key 'trainDataset': lab/drifting-parquet: the split's files disagree on "
                              "columns: data/train-00003-of-00004.parquet has harbour, which "
                              "data/train-00000-of-00004.parquet"), message
    assert "allowed: files with the first file's columns or fewer" in message, message


def test_later_files_with_fewer_columns_are_accepted(hub):
    run = run_program("dev", {**JOB, "trainDataset": "lab/narrowing-jsonl"})
    assert run.error is None, run.error


@pytest.mark.parametrize("dataset", CARDS)
def test_a_card_datasets_cannot_use_is_refused_naming_trainDataset(hub, dataset):
    message = program_refusal({**JOB, "trainDataset": dataset})
    assert message.startswith(f"config key 'trainDataset': {dataset}: its README's "), message
    assert CARDS[dataset][1] in message and "allowed: a card whose YAML datasets reads" in message, message


def test_splits_of_different_formats_are_refused_naming_trainDataset(hub):
    message = program_refusal({**JOB, "trainDataset": "lab/parquet-train-csv-validation"})
    assert message.startswith("config key 'trainDataset': lab/parquet-train-csv-validation: its splits are files of "
                              "different formats: 'train' is parquet (data/train.parquet), 'validation' csv "
                              "(data/validation.csv)"), message
    assert "Couldn't infer the same data file format" in message and "allowed: " in message, message


def test_a_card_whose_features_the_records_contradict_is_refused_naming_trainDataset_and_the_column(hub):
    message = program_refusal({**JOB, "trainDataset": "lab/card-says-bool"})
    assert message.startswith("config key 'trainDataset': lab/card-says-bool: the README's dataset_info features "
                              "contradict the data: column text of train/part-0.jsonl's first record holds a str the "
                              "card declares bool"), message
