"""The data stage and its token shards (workload/data/stage.py, cache.py, shards.py): the blocks a rank reads from the
shards equal the in-memory path's bit for bit (text, chat, prompt-completion, with evaluation blocks, two world sizes),
through Ray's tasks and through the driver's own tokenizing of a small file; a second run with the same key tokenizes
nothing; another seq_len or tokenizer is another key; a partial directory is never read; a rank's training blocks stay
memory-mapped."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import ray
import torch

from workload.config import TrainConfig
from workload.data import batches, cache, shards, stage
from workload.data.packing import TokenBatch

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data")
TEXT = dict(model_config="tiny", dataset=os.path.join(DATA, "corpus.txt"), tokenizer=os.path.join(DATA, "tokenizer"),
            seq_len=16, batch_size=3)
CHAT = dict(model_config="tiny", dataset=os.path.join(DATA, "conversations.jsonl"), data_format="chat",
            tokenizer=os.path.join(DATA, "chat-tokenizer"), seq_len=128, batch_size=2)
PROMPTS = dict(CHAT, dataset=os.path.join(DATA, "instructions.jsonl"), data_format="prompt-completion")
CASES = {
    "text held out": dict(TEXT, eval_fraction=0.2),
    "text jsonl": dict(TEXT, dataset=os.path.join(DATA, "corpus.jsonl"), text_field="body"),
    "chat held out": dict(CHAT, eval_fraction=0.2),
    "chat split": dict(CHAT, seq_len=48, truncation="split", seed=3),
    "chat keep_end": dict(CHAT, seq_len=48, truncation="keep_end", train_on_prompt=True),
    "prompt-completion": dict(PROMPTS, eval_fraction=0.1),
}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def node_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(tmp_path / "node"))
    # Ranges of a few hundred bytes: the sample files are read by several tasks, as a large file is (and by Ray's
    # tasks, not the driver, which tokenizes a small file itself).
    monkeypatch.setattr(stage, "MIN_PART_BYTES", 700)
    monkeypatch.setattr(stage, "IN_DRIVER_BYTES", 0)
    return tmp_path


def _rows(batch) -> torch.Tensor:
    if isinstance(batch, TokenBatch):
        return torch.stack([batch.input_ids, batch.labels, batch.position_ids], dim=1)
    return batch


@pytest.mark.parametrize("case", CASES)
def test_a_ranks_blocks_from_the_shards_equal_the_in_memory_ones(case, local_ray, node_cache):
    cfg = TrainConfig(**CASES[case], storage_path=str(node_cache / "storage"))
    location = stage.prepare(cfg, world_size=2, say=lambda line: None)
    assert location.startswith(str(node_cache / "storage" / "datasets")), location
    _assert_same_blocks(case, cfg, location)


@pytest.mark.parametrize("case", ["text held out", "chat split", "prompt-completion"])
def test_a_small_file_is_tokenized_by_the_driver_to_the_same_blocks(case, node_cache, monkeypatch):
    """Under IN_DRIVER_BYTES (the sample files are), no Ray task: the driver runs the tasks' functions, part after
    part, to the same shards."""
    def refuse(*args, **kwargs):
        raise AssertionError("a small local file went to Ray Data")

    monkeypatch.setattr(stage, "_tokenize_on_ray", refuse)
    monkeypatch.setattr(stage, "IN_DRIVER_BYTES", 2**20)
    cfg = TrainConfig(**CASES[case], storage_path=str(node_cache / "storage"))
    lines: list[str] = []
    location = stage.prepare(cfg, world_size=2, say=lines.append)
    assert lines[0].startswith(f"data: tokenizing {cfg.dataset} in the driver"), lines
    _assert_same_blocks(case, cfg, location)


def _write_variants(directory) -> dict:
    """ShareGPT records in a .json list, Alpaca records in a .jsonl.gz, text records in a .parquet: the shapes and
    the files read by one task with workload.data.validate's reader."""
    import gzip
    import json

    import pyarrow
    import pyarrow.parquet

    with open(CHAT["dataset"]) as file:
        chats = [json.loads(line) for line in file]
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    sharegpt = [{"conversations": [{"from": names[turn["role"]], "value": turn["content"]}
                                   for turn in chat["messages"]]}
                for chat in chats if all(turn["role"] in names and isinstance(turn.get("content"), str)
                                         for turn in chat["messages"])]
    (directory / "sharegpt.json").write_text(json.dumps(sharegpt))
    with open(PROMPTS["dataset"]) as file:
        alpaca = [{"instruction": record["prompt"], "input": "" if number % 2 else "in full .",
                   "output": record["completion"]} for number, record in enumerate(map(json.loads, file))]
    with gzip.open(directory / "alpaca.jsonl.gz", "wt") as file:
        file.writelines(json.dumps(record) + "\n" for record in alpaca)
    with open(TEXT["dataset"]) as file:
        pyarrow.parquet.write_table(pyarrow.table({"text": [line.strip() for line in file]}),
                                    directory / "corpus.parquet", row_group_size=50)
    return {"ShareGPT .json": dict(CHAT, dataset=str(directory / "sharegpt.json"), eval_fraction=0.2),
            "Alpaca .jsonl.gz": dict(PROMPTS, dataset=str(directory / "alpaca.jsonl.gz"), truncation="split",
                                     seq_len=40),
            "text .parquet": dict(TEXT, dataset=str(directory / "corpus.parquet"), eval_fraction=0.1)}


def test_other_shapes_and_files_give_the_same_blocks_too(local_ray, node_cache):
    for case, settings in _write_variants(node_cache).items():
        cfg = TrainConfig(**settings)
        location = stage.prepare(cfg, world_size=2, say=lambda line: None)
        _assert_same_blocks(case, cfg, location)


def _assert_same_blocks(case: str, cfg: TrainConfig, location: str) -> None:
    for world_size in (2, 3):
        for rank in (0, world_size - 1):
            reference = batches.make_data(cfg, 0, rank, world_size)
            cached = batches.make_data(cfg, 0, rank, world_size, location)
            for step in range(12):  # past the end of the smaller shards: the wrap-around too
                assert torch.equal(_rows(cached.train(step)), _rows(reference.train(step))), (
                    f"{case}: rank {rank} of {world_size}, step {step}: the shards' batch differs from make_data's")
            assert len(cached.eval) == len(reference.eval), f"{case}: rank {rank}: evaluation batches"
            for ours, theirs in zip(cached.eval, reference.eval):
                assert torch.equal(_rows(ours), _rows(theirs)), f"{case}: rank {rank}: an evaluation batch differs"
            assert (cached.description, cached.summary) == (reference.description, reference.summary), case
            assert isinstance(cached.blocks, np.memmap), f"{case}: the training blocks must stay memory-mapped"


def test_a_second_run_reads_the_cache_and_tokenizes_nothing(local_ray, node_cache, monkeypatch):
    cfg = TrainConfig(**TEXT, eval_fraction=0.2)  # no storage_path: the node-local cache is the root
    lines: list[str] = []
    first = stage.prepare(cfg, say=lines.append)
    assert first.startswith(str(node_cache / "node")), first
    assert any(line.startswith("data: ") and "tokens/s" in line for line in lines), lines

    def refuse(*args, **kwargs):
        raise AssertionError("the stage ran again on a cached key")

    monkeypatch.setattr(stage, "tokenize", refuse)
    again: list[str] = []
    assert stage.prepare(cfg, say=again.append) == first
    assert again == [f"data: {stage.amount(cache.manifest(first)['tokens'])} tokens from the cache {first}"], again


def test_the_key_changes_with_what_changes_the_tokens(node_cache):
    cfg = TrainConfig(**CHAT)
    tokenizer = stage.load_run_tokenizer(cfg)
    key = cache.key(cfg, tokenizer)
    assert key == cache.key(cfg, stage.load_run_tokenizer(cfg)) and len(key) == 64
    assert cache.key(dataclasses.replace(cfg, steps=7, batch_size=8), tokenizer) == key, "steps do not change tokens"
    for change in (dict(seq_len=64), dict(seed=1), dict(truncation="split"), dict(train_on_prompt=True),
                   dict(eval_fraction=0.1)):
        assert cache.key(dataclasses.replace(cfg, **change), tokenizer) != key, change
    templated = stage.load_run_tokenizer(dataclasses.replace(cfg, chat_template="llama3"))
    assert cache.key(cfg, templated) != key, "another chat template is another key"
    other = stage.load_run_tokenizer(TrainConfig(**TEXT))
    assert cache.key(cfg, other) != key, "another tokenizer is another key"
    copy = node_cache / "conversations.jsonl"
    copy.write_bytes(open(CHAT["dataset"], "rb").read())
    assert cache.key(dataclasses.replace(cfg, dataset=str(copy)), tokenizer) != key, "another file is another key"


def test_a_partial_directory_is_never_read(local_ray, node_cache, monkeypatch):
    cfg = TrainConfig(**TEXT)
    location = cache.location(cfg, cache.key(cfg, stage.load_run_tokenizer(cfg)))

    def fail(*args, **kwargs):
        raise RuntimeError("the stage failed while packing")

    packed_text = shards.pack_text
    monkeypatch.setattr(shards, "pack_text", fail)
    with pytest.raises(RuntimeError, match="while packing"):
        stage.prepare(cfg, say=lambda line: None)
    assert not os.path.exists(location) and os.listdir(os.path.dirname(location)) == [], (
        "a failed stage leaves neither its key nor its partial directory")
    # A directory under the key without COMPLETE.json (a copy cut short) is not read, and the stage writes it anew.
    os.makedirs(location)
    np.save(os.path.join(location, shards.TRAIN), np.zeros((4, 16), np.int32))
    with pytest.raises(ValueError, match="not complete"):
        batches.make_data(cfg, 0, 0, 1, location)
    monkeypatch.setattr(shards, "pack_text", packed_text)
    assert stage.prepare(cfg, say=lambda line: None) == location and cache.manifest(location) is not None
    assert len(batches.make_data(cfg, 0, 0, 1, location).blocks) > 4, "the stage's blocks replaced the stale ones"


def test_a_large_file_checked_whole_is_not_read_again_by_the_next_process(node_cache, monkeypatch):
    from workload.data import validate

    monkeypatch.setattr(cache, "REMEMBER_CHECKED_BYTES", 0)
    copy = node_cache / "corpus.jsonl"
    copy.write_bytes(open(TEXT["dataset"].replace(".txt", ".jsonl"), "rb").read())
    cfg = TrainConfig(**dict(TEXT, dataset=str(copy), text_field="body"))
    monkeypatch.setattr(validate, "_checked", {})
    first = validate.check_dataset(cfg, say=lambda line: None)
    monkeypatch.setattr(validate, "_checked", {})  # as a new process
    monkeypatch.setattr(validate, "check_file", lambda *args, **kwargs: pytest.fail("the file was read again"))
    assert validate.check_dataset(cfg, say=lambda line: None) == first
    copy.write_bytes(copy.read_bytes().replace(b'"body"', b'"text"', 1))  # another file now: checked again
    monkeypatch.setattr(validate, "_checked", {})
    with pytest.raises(pytest.fail.Exception, match="read again"):
        validate.check_dataset(cfg, say=lambda line: None)


def test_a_hub_datasets_blocks_from_the_shards_equal_the_in_memory_ones(local_ray, node_cache, monkeypatch):
    import json

    import datasets

    with open(CHAT["dataset"]) as file:
        conversations = [json.loads(line) for line in file]
    with open(TEXT["dataset"]) as file:
        lines = [line.strip() for line in file] + ["", "  "]  # a Hub split's blank texts are left out
    splits = {("org/corpus", "train"): {"text": lines}, ("org/corpus", "validation"): {"text": lines[::3]},
              ("org/chats", "train"): conversations}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: (
        datasets.Dataset.from_list if name == "org/chats" else datasets.Dataset.from_dict)(splits[name, split]))
    for settings in (dict(TEXT, dataset="org/corpus", eval_split="validation"),
                     dict(CHAT, dataset="org/chats", eval_fraction=0.2)):
        cfg = TrainConfig(**settings)
        location = stage.prepare(cfg, world_size=2, say=lambda line: None)
        for rank in (0, 1):
            reference, cached = batches.make_data(cfg, 0, rank, 2), batches.make_data(cfg, 0, rank, 2, location)
            for step in range(6):
                assert torch.equal(_rows(cached.train(step)), _rows(reference.train(step))), (cfg.dataset, rank, step)
            assert [_rows(batch).tolist() for batch in cached.eval] == [_rows(batch).tolist()
                                                                       for batch in reference.eval], cfg.dataset
            assert cached.eval, f"{cfg.dataset}: an evaluation set"


def test_shards_beside_a_remote_run_are_uploaded_whole_and_copied_to_a_node_once(local_ray, node_cache):
    import shutil

    # file:// goes through pyarrow's file systems as s3:// does: an upload with COMPLETE.json last, then a download.
    cfg = TrainConfig(**TEXT, eval_fraction=0.2, storage_path=f"file://{node_cache / 'remote'}")
    location = stage.prepare(cfg, say=lambda line: None)
    key = location.rsplit("/", 1)[-1]
    uploaded = node_cache / "remote" / "datasets" / key
    assert sorted(os.listdir(uploaded)) == [cache.COMPLETE, shards.EVAL, shards.TRAIN], os.listdir(uploaded)
    local = node_cache / "node" / key
    assert cache.manifest(str(local)) is not None, "the stage's node keeps its copy"
    shutil.rmtree(local)
    said: list[str] = []
    assert cache.local_directory(location, said.append) == str(local) and said == [
        f"copying the token shards {location} to {local}"], said
    assert cache.local_directory(location, said.append) == str(local) and len(said) == 1, "copied once"
    _assert_same_blocks("remote", cfg, location)
