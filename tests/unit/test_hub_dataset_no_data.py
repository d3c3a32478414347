"""A Hub dataset repo with no data file at all (a loading script alone, a card alone, files of no format the job
reads) is the dataset's mistake, not a split's: refused naming trainDataset at preview and --dataset in the job's
driver (workload/data/hub_dataset.check_holds_data), never trainDatasetSplit / --dataset_split. datasets 4.0 dropped
loading scripts (datasets/load.py: "Dataset scripts are no longer supported, but found {filename}"), so a script is
no data. The Hub is tests/support/fake_hub.py on 127.0.0.1."""
from __future__ import annotations

import pytest

from infra.preview import dataset_records
from tests.support.fake_hub import FakeHub
from tests.unit.test_hub_dataset import GOOD, _jsonl, _stack
from workload.data import hub_dataset, validate

SCRIPT = b"import datasets\nclass Poems(datasets.GeneratorBasedBuilder):\n    pass\n"


@pytest.fixture(scope="module")
def server():
    with FakeHub("hf_unused") as hub:
        hub.datasets.update({
            "lab/poems-builder": {"files": {"README.md": b"# poems", "poems_builder.py": SCRIPT,
                                            "validation.txt": b"not read"}},
            "lab/card-only": {"files": {"README.md": b"# nothing yet", ".gitattributes": b""}},
            "lab/hidden-data": {"files": {"_private/train.jsonl": _jsonl(GOOD), "notes.txt": b"x"}},
            "lab/fine": {"files": {"dev.jsonl": _jsonl(GOOD), "training.jsonl": _jsonl(GOOD)}},
        })
        yield hub


@pytest.fixture
def hub(server, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return server


@pytest.mark.parametrize("dataset, split, words", [
    ("lab/poems-builder", "validation", "a loading script (poems_builder.py), which datasets 4+ no longer runs"),
    ("lab/card-only", "test", "the repo holds no data files"),
    ("lab/hidden-data", "train", "the repo holds no data files"),
])
def test_a_repo_without_data_files_is_refused_naming_trainDataset_not_the_split(hub, dataset, split, words):
    with pytest.raises(ValueError) as refused:
        dataset_records.check_hub(_stack(dataset, split), warn=pytest.fail)
    message = str(refused.value)
    assert message.startswith(f"config key 'trainDataset': {dataset}"), message
    assert words in message and ".parquet" in message and "\n" not in message, message
    assert "trainDatasetSplit" not in message, message


def test_the_jobs_driver_names_dataset(hub):
    from workload.config import TrainConfig

    with pytest.raises(validate.DataError, match=r"^--dataset lab/poems-builder: the repo holds a loading script"):
        hub_dataset.check_dataset(TrainConfig(model_config="tiny", dataset="lab/poems-builder", data_format="chat"))


def test_a_repo_with_data_files_still_reaches_the_split_check(hub):
    # dev.jsonl is validation's (a keyword), training.jsonl train's: a missing test split names the split's key
    with pytest.raises(ValueError, match=r"^config key 'trainDatasetSplit': lab/fine: no data file of split 'test'"):
        dataset_records.check_hub(_stack("lab/fine", "test"), warn=pytest.fail)
    assert dataset_records.check_hub(_stack("lab/fine", "validation"), warn=pytest.fail).records == 3
