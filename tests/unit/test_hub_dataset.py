"""A Hugging Face dataset id's split checked before a model loads (workload/data/hub_dataset.py): at preview, naming
trainDataset (infra/preview/dataset_records.check_hub), and in the job's driver, naming --dataset. The Hub is
tests/support/fake_hub.py on 127.0.0.1, answering the endpoints huggingface_hub's HfApi.dataset_info (GET
/api/datasets/{id}) and hf_hub_url(repo_type="dataset") (GET /datasets/{id}/resolve/main/{path}, ranged) call."""
from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from infra.preview import dataset_records
from tests.support.fake_hub import FakeHub
from workload.data import hub_dataset, validate

TOKEN = "hf_test_token"
GOOD = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}] * 3
BAD = GOOD[:2] + [{"messages": [{"role": "robot", "content": "hi"}, {"role": "assistant", "content": "x"}]}]


def _jsonl(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _parquet(records) -> bytes:
    import pyarrow
    import pyarrow.parquet

    sink = io.BytesIO()
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(records), sink)
    return sink.getvalue()


@pytest.fixture(scope="module")
def server():
    with FakeHub(TOKEN) as hub:
        hub.datasets.update({
            "acme/chat": {"files": {"README.md": b"# chat", ".gitattributes": b"",
                                    "data/train-00000-of-00001.parquet": _parquet(GOOD),
                                    "data/test-00000-of-00001.parquet": _parquet(BAD)}},
            "acme/bad": {"files": {"train.jsonl": _jsonl(BAD), "test.jsonl": _jsonl(GOOD)}},
            "acme/test-only": {"files": {"test.jsonl": _jsonl(GOOD)}},
            "acme/gated": {"gated": True, "files": {"train.jsonl": _jsonl(GOOD)}},
            "acme/big": {"files": {"train.jsonl": _jsonl(GOOD * 400)}},
        })
        yield hub


@pytest.fixture
def hub(server, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return server


def _stack(dataset: str, split: str = "train", token: str | None = None, eval_split: str = "", config: str = ""):
    """What check_hub reads of a StackConfig."""
    examples = dict(data_format="chat", messages_field="messages", prompt_field="prompt", completion_field="completion")
    secrets = {"HF_TOKEN": token} if token else {}
    return SimpleNamespace(train=SimpleNamespace(dataset=dataset, dataset_split=split, dataset_config=config,
                                                 eval_split=eval_split,
                                                 text_field="text", **examples, chat_template="", tokenizer="",
                                                 model_id="",  # no template to render the records with here
                                                 secret_env=SimpleNamespace(reveal=lambda: secrets)))


def test_the_split_files_are_the_ones_datasets_would_load():
    files = ["README.md", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
             "data/validation-00000-of-00001.parquet", "scripts/x.py"]
    assert hub_dataset.split_files(files, "train") == files[1:3]
    assert hub_dataset.split_files(files, "validation") == files[3:4]
    assert hub_dataset.split_files(files, "test") == []
    assert hub_dataset.split_files(["my_train.jsonl", "my_dev.jsonl"], "validation") == ["my_dev.jsonl"]
    assert hub_dataset.split_files(["corpus.jsonl"], "train") == ["corpus.jsonl"]  # no split names: all train
    assert hub_dataset.split_files(["a/train/0.parquet", "b/train/0.parquet"], "train", "b") == ["b/train/0.parquet"]


def test_a_good_dataset_passes_at_preview_reading_only_its_card_and_the_splits_first_file(hub):
    hub.requests.clear()
    checked = dataset_records.check_hub(_stack("acme/chat"), warn=pytest.fail)
    assert checked.records == 3 and checked.complete, checked
    # (huggingface_hub may also ask the endpoint's /api/agent-harnesses once a process: not the dataset's files)
    assert [path for _, path, _ in hub.requests if "acme" in path] == [
        "/api/datasets/acme/chat", "/datasets/acme/chat/resolve/main/README.md",
        "/datasets/acme/chat/resolve/main/data/train-00000-of-00001.parquet"]


def test_a_bad_record_is_refused_naming_trainDataset_the_repo_file_and_line(hub):
    with pytest.raises(ValueError) as refused:
        dataset_records.check_hub(_stack("acme/bad"), warn=pytest.fail)
    message = str(refused.value)
    assert message.startswith("config key 'trainDataset': acme/bad/train.jsonl line 3:"), message
    assert "robot" in message and "\n" not in message, message
    with pytest.raises(ValueError, match=r"acme/chat/data/test-00000-of-00001.parquet row 3: .*robot"):
        dataset_records.check_hub(_stack("acme/chat", "test"), warn=pytest.fail)


@pytest.mark.parametrize("dataset, split, words, key", [
    ("acme/missing", "train", "acme/missing is not a dataset on the Hugging Face Hub", "trainDataset"),
    ("acme/test-only", "train", "no data file of split 'train'", "trainDatasetSplit"),
    ("acme/chat", "validation", "no data file of split 'validation'", "trainDatasetSplit"),
    ("acme/gated", "train", "gated on the Hugging Face Hub", "trainDataset"),
])
def test_a_dataset_the_job_could_not_read_is_refused(hub, dataset, split, words, key):
    # A split the repo lacks names the key set wrong, trainDatasetSplit; the repo itself, trainDataset.
    with pytest.raises(ValueError, match=f"config key '{key}'") as refused:
        dataset_records.check_hub(_stack(dataset, split), warn=pytest.fail)
    assert words in str(refused.value), refused.value
    if dataset == "acme/gated":
        assert "HF_TOKEN" in str(refused.value) and TOKEN not in str(refused.value)


def test_a_gated_dataset_is_read_with_trainSecretEnvs_token(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the deployer's own token is never used
    with pytest.raises(ValueError, match="gated"):
        dataset_records.check_hub(_stack("acme/gated"), warn=pytest.fail)
    assert dataset_records.check_hub(_stack("acme/gated", token=TOKEN), warn=pytest.fail).records == 3


def test_a_large_file_is_read_up_to_the_bound_and_said(hub):
    warnings: list[str] = []
    checked = dataset_records.check_hub(_stack("acme/big"), warn=warnings.append, limit=4096)
    assert not checked.complete and 0 < checked.records < 1200, checked
    (warning,) = warnings
    assert "acme/big/train.jsonl" in warning and "first 0.00390625 MiB" in warning, warning


def test_an_unreachable_hub_is_a_warning_not_a_refusal(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    warnings: list[str] = []
    assert dataset_records.check_hub(_stack("acme/chat"), warn=warnings.append) is None
    (warning,) = warnings
    assert warning.startswith("trainDataset acme/chat is not reachable on the Hugging Face Hub"), warning


def test_the_jobs_driver_refuses_a_bad_hub_dataset_naming_dataset(hub):
    from workload.config import TrainConfig
    from workload.data.validate import DataError

    with pytest.raises(DataError, match=r"^--dataset acme/bad/train.jsonl line 3: .*robot"):
        hub_dataset.check_dataset(TrainConfig(model_config="tiny", dataset="acme/bad", data_format="chat"))
    found = hub_dataset.check_dataset(TrainConfig(model_config="tiny", dataset="acme/bad", dataset_split="test",
                                                  data_format="chat"))
    assert found.file == "test.jsonl" and found.checked.records == 3


def test_the_files_sizes_are_listed_as_dataset_info_with_files_metadata_reads_them(hub):
    """`?blobs=true` adds each file's size (an LFS file's in its "lfs" entry too), which huggingface_hub's own
    dataset_info(files_metadata=True) parses into the same figures."""
    from huggingface_hub import HfApi

    sizes = hub_dataset.file_sizes("acme/chat", subject="config key 'trainDataset':", token=False)
    chat = hub.datasets["acme/chat"]["files"]
    assert sizes == {name: len(data) for name, data in chat.items()}, sizes
    listed = HfApi(endpoint=hub.url).dataset_info("acme/chat", files_metadata=True).siblings
    assert {sibling.rfilename: sibling.size for sibling in listed} == sizes
    parquet = next(sibling for sibling in listed if sibling.rfilename.endswith(".parquet"))
    assert parquet.lfs is not None and parquet.lfs.size == parquet.size, parquet
    with pytest.raises(validate.DataError, match="is not a dataset on the Hugging Face Hub"):
        hub_dataset.file_sizes("acme/none", subject="config key 'trainDataset':", token=False)


# ---- the splits a repo has (workload.data.hub_splits): an eval split (or a train split) it lacks is refused ---------
# datasets raises "Unknown split" for it in the data stage, on the cluster (audit 44g D16).
README_CONFIGS = b"""---
license: mit
configs:
- config_name: default
  data_files:
  - split: train
    path: corpus/part-*.jsonl
  - split: holdout
    path: held/*.jsonl
---
# A card
"""


@pytest.fixture
def split_hub(hub):
    hub.datasets.update({
        "acme/dev-named": {"files": {"my_train.jsonl": _jsonl(GOOD), "my_dev.jsonl": _jsonl(GOOD)}},
        "acme/carded": {"files": {"README.md": README_CONFIGS, "corpus/part-0.jsonl": _jsonl(GOOD),
                                  "held/a.jsonl": _jsonl(GOOD)}},
    })
    return hub


@pytest.mark.parametrize("dataset, eval_split, splits", [
    ("acme/bad", "validation", "train, test"),  # train.jsonl and test.jsonl only
    ("acme/chat", "dev[:50]", "train, test"),  # the Hub's parquet export: data/{split}-NNNNN-of-NNNNN
    ("acme/carded", "validation", "train, holdout"),  # the README's configs
])
def test_an_eval_split_the_repo_lacks_is_refused_naming_trainEvalSplit_and_its_splits(split_hub, dataset, eval_split,
                                                                                      splits):
    with pytest.raises(ValueError, match=r"^config key 'trainEvalSplit': ") as refused:
        dataset_records.check_hub(_stack(dataset, eval_split=eval_split), warn=pytest.fail)
    message = str(refused.value)
    assert f"no data file of split '{eval_split.split('[')[0]}'" in message, message
    assert f"whose splits are: {splits} " in message, message
    assert "\n" not in message, message


@pytest.mark.parametrize("dataset, split, eval_split", [
    ("acme/dev-named", "train", "validation"),  # my_dev.jsonl is validation's (datasets' keyword dev)
    ("acme/dev-named", "train[:80%]", "validation[10:]+validation[:5]"),
    ("acme/chat", "train", "test"),
])
def test_the_splits_datasets_finds_pass(split_hub, dataset, split, eval_split):
    assert dataset_records.check_hub(_stack(dataset, split, eval_split=eval_split), warn=pytest.fail).records == 3


def test_a_readme_is_read_once_a_check_and_a_repo_without_one_costs_no_request_for_it(split_hub):
    # The card is read whenever the repo has one: its `configs` decide whether load_dataset needs a config name and
    # which files each split has (workload.data.hub_splits.unnamed_configs, unmatched_patterns).
    split_hub.requests.clear()
    dataset_records.check_hub(_stack("acme/chat", eval_split="test"), warn=pytest.fail)
    with pytest.raises(ValueError, match="trainEvalSplit"):
        dataset_records.check_hub(_stack("acme/chat", eval_split="validation"), warn=pytest.fail)
    assert [path for _, path, _ in split_hub.requests if path.endswith("README.md")] == [
        "/datasets/acme/chat/resolve/main/README.md"] * 2
    split_hub.requests.clear()
    dataset_records.check_hub(_stack("acme/dev-named", eval_split="validation"), warn=pytest.fail)
    assert not [path for _, path, _ in split_hub.requests if path.endswith("README.md")], split_hub.requests


def test_the_job_refuses_it_naming_eval_split(split_hub):
    cfg = SimpleNamespace(dataset="acme/bad", dataset_split="train", dataset_config="", eval_split="valid",
                          data_format="text", text_field="text", messages_field="messages", prompt_field="prompt",
                          completion_field="completion")
    with pytest.raises(validate.DataError, match=r"^--eval_split acme/bad: no data file of split 'valid' in the "
                                                 r"repo, whose splits are: train, test "):
        hub_dataset.check_dataset(cfg, say=pytest.fail)


def test_the_splits_as_datasets_resolves_them():
    from workload.data import hub_splits

    assert hub_splits.default_splits(["data/train-00000-of-00002.parquet", "data/extra-00000-of-00001.parquet",
                                      "data/validation-00000-of-00001.parquet"]) == ["train", "validation", "extra"]
    # a directory named for a split decides before file names do
    assert hub_splits.default_splits(["validation/a.jsonl", "train.jsonl"]) == ["validation"]
    assert hub_splits.default_splits(["corpus.jsonl", "notes.txt"]) == ["train"]
    assert hub_splits.default_splits(["notes.txt"]) == []
    assert hub_splits.splits_of(["a.jsonl"], "---\nconfigs:\n- config_name: x\n  data_files: a.jsonl\n---\n", "x") \
        == ["train"]
    assert hub_splits.splits_of(["a.jsonl"], "---\nconfigs:\n- config_name: x\n- config_name: y\n---\n") is None
    assert hub_splits.splits_of(["d/test.jsonl"], "---\nconfigs:\n- config_name: default\n  data_dir: d\n---\n") \
        == ["test"]
    assert hub_splits.splits_of(["test.jsonl"], "---\n: [unclosed\n---\n") == ["test"], "not YAML: the patterns"
    assert hub_splits.base_names("train[:10%]+validation") == ["train", "validation"]
