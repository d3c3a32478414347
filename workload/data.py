"""Batches of token ids, a pure function of (step, rank): random tokens by default, or a packed real dataset.

Both sources are indexed by step, never by an iterator's position, so a run resumed from a checkpoint at step k
sees exactly the batches an uninterrupted run sees from step k on.

Real data: documents from a local .txt (one document a line), .jsonl/.json (the --text_field of each record) or a
Hugging Face dataset, tokenized with an end-of-text token between documents, concatenated, cut into blocks of
seq_len tokens (the tail shorter than a block is dropped), shuffled once with the run's seed, and dealt to the
ranks round-robin (block i goes to rank i % world_size), so the ranks' shards are disjoint and equal in size.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Iterable, Sequence

import torch

from workload.config import TrainConfig, is_local_dataset

Batches = Callable[[int], torch.Tensor]


def random_batches(cfg: TrainConfig, vocab_size: int, rank: int) -> Batches:
    """Uniform random token ids, seeded by (seed, step, rank): the recipe's default, which depends on nothing but
    the cluster."""

    def batch(step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(_step_seed(cfg.seed, step, rank))
        return torch.randint(0, vocab_size, (cfg.batch_size, cfg.seq_len), generator=generator)

    return batch


def _step_seed(seed: int, step: int, rank: int) -> int:
    # Disjoint bit fields: up to 2**16 ranks and 2**24 steps never collide.
    return (seed << 40) | (step << 16) | rank


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise ValueError(f"--tokenizer {name!r} (default: --model_id) cannot be loaded ({error})") from error


def check_tokenizer(cfg: TrainConfig, vocab_size: int) -> None:
    """With --dataset, the tokenizer must load and its ids must fit the model's embedding."""
    if not cfg.dataset:
        return
    size = len(load_tokenizer(cfg.tokenizer_name))
    if size > vocab_size:
        raise ValueError(
            f"--tokenizer {cfg.tokenizer_name!r} has {size} tokens, more than the model's vocabulary of {vocab_size}"
        )


def load_documents(cfg: TrainConfig) -> list[str]:
    if is_local_dataset(cfg.dataset):
        path = os.path.expanduser(cfg.dataset)
        with open(path, encoding="utf-8") as file:
            if path.endswith(".txt"):
                return [line.strip() for line in file if line.strip()]
            if path.endswith(".jsonl"):
                records = [json.loads(line) for line in file if line.strip()]
            else:
                records = json.load(file)
        return [_text_of(record, cfg.text_field, cfg.dataset) for record in records]
    import datasets

    dataset = datasets.load_dataset(cfg.dataset, cfg.dataset_config or None, split=cfg.dataset_split)
    if cfg.text_field not in dataset.column_names:
        raise ValueError(f"--text_field {cfg.text_field!r} is not a column of {cfg.dataset}: {dataset.column_names}")
    return [text for text in dataset[cfg.text_field] if text and text.strip()]


def _text_of(record: object, field: str, dataset: str) -> str:
    if not isinstance(record, dict) or field not in record:
        raise ValueError(f"--text_field {field!r} is missing from a record of {dataset}")
    return record[field]


def pack(token_ids: Iterable[Sequence[int]], seq_len: int, separator: int | None) -> torch.Tensor:
    """Concatenate documents (each followed by `separator` when given) and cut into (n, seq_len) blocks."""
    stream: list[int] = []
    for ids in token_ids:
        stream.extend(ids)
        if separator is not None:
            stream.append(separator)
    blocks = len(stream) // seq_len
    return torch.tensor(stream[: blocks * seq_len], dtype=torch.long).view(blocks, seq_len)


def shard(blocks: torch.Tensor, seed: int, rank: int, world_size: int) -> torch.Tensor:
    """This rank's share of the blocks after one seeded shuffle: disjoint across ranks, equal in size."""
    order = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed))
    per_rank = len(blocks) // world_size
    return blocks[order[rank :: world_size][:per_rank]]


def packed_batches(blocks: torch.Tensor, batch_size: int) -> Batches:
    """Step s takes rows s*batch_size ... of the rank's blocks, wrapping around at the end (a new epoch)."""

    def batch(step: int) -> torch.Tensor:
        rows = (torch.arange(batch_size) + step * batch_size) % len(blocks)
        return blocks[rows]

    return batch


def dataset_batches(cfg: TrainConfig, rank: int, world_size: int) -> Batches:
    tokenizer = load_tokenizer(cfg.tokenizer_name)
    documents = load_documents(cfg)
    token_ids = tokenizer(documents, add_special_tokens=False)["input_ids"]
    blocks = pack(token_ids, cfg.seq_len, tokenizer.eos_token_id)
    if len(blocks) < world_size:
        raise ValueError(
            f"--dataset {cfg.dataset!r} packs into {len(blocks)} blocks of --seq_len {cfg.seq_len} tokens, "
            f"fewer than the {world_size} workers"
        )
    return packed_batches(shard(blocks, cfg.seed, rank, world_size), cfg.batch_size)


def make_batches(cfg: TrainConfig, vocab_size: int, rank: int, world_size: int) -> Batches:
    if cfg.dataset:
        return dataset_batches(cfg, rank, world_size)
    return random_batches(cfg, vocab_size, rank)
