"""Batches of token ids, a pure function of (step, rank): random tokens by default, or a packed real dataset.

Both sources are indexed by step, never by an iterator's position, so a run resumed from a checkpoint at step k
sees exactly the batches an uninterrupted run sees from step k on.

Real data: documents from a .txt (one document a line) or .jsonl/.json/.csv/.parquet (the --text_field of each
record; each but .parquet may be .gz), local or s3:// (read with pyarrow, which Ray Train itself uses for its
storage, with the same AWS credentials), or a Hugging Face dataset, tokenized with an end-of-text token between documents, concatenated, cut into blocks of seq_len
tokens (the tail shorter than a block is dropped), shuffled once with the run's seed, and dealt to the ranks
round-robin (block i goes to rank i % world_size), so the ranks' shards are disjoint and equal in size.

Evaluation: --eval_fraction holds out a seeded random share of those blocks before the ranks get theirs;
--eval_split packs another split of a Hugging Face dataset the same way. Each rank evaluates an equal share.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch

from workload.config import TrainConfig, is_file_dataset
from workload.data import shapes
from workload.data.tokenizer import load_chat_tokenizer, load_tokenizer
from workload.data.validate import suffix as validate_suffix

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


def check_tokenizer(cfg: TrainConfig, vocab_size: int) -> None:
    """With --dataset, the tokenizer must load and its ids must fit the model's embedding; chat and prompt-completion
    data also need its chat template (or --chat_template)."""
    if not cfg.dataset:
        return
    if cfg.data_format != "text":
        from workload.data.template_check import check_template_trains

        # refuses a tokenizer without a chat template, unless --chat_template names one; then a template that
        # cannot render a record, or renders no assistant turn of the first records, or --truncation that keeps none
        check_template_trains(cfg, load_chat_tokenizer(cfg))
    tokenizer = load_tokenizer(cfg.tokenizer_name)
    if tokenizer.eos_token_id is None:
        # Text is packed with the end-of-text token between documents, and examples padded with it (no pad token):
        # without one, documents ran into each other in silence.
        flag = "--tokenizer" if cfg.tokenizer else "--model_id"
        raise ValueError(f"{flag} {cfg.tokenizer_name}: the tokenizer has no eos_token, which separates the packed "
                         "documents and ends each example; set eos_token in its tokenizer_config.json (the model's "
                         "end-of-text token, such as <|endoftext|> or </s>)")
    size = len(tokenizer)
    if size > vocab_size:
        raise ValueError(
            f"--tokenizer {cfg.tokenizer_name!r} has {size} tokens, more than the model's vocabulary of {vocab_size}"
        )


def check_dataset(cfg: TrainConfig) -> None:
    """A remote --dataset file must exist and be readable with the driver's credentials (the workers have the
    same ones), before any worker starts; a local one was checked with the flags."""
    if "://" not in cfg.dataset:
        return
    import pyarrow.fs

    try:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(cfg.dataset)
        found = filesystem.get_file_info(path).type
    except (OSError, ValueError, pyarrow.lib.ArrowException) as error:
        raise ValueError(f"--dataset {cfg.dataset!r} cannot be read ({error})") from None
    if found != pyarrow.fs.FileType.File:
        raise ValueError(f"--dataset {cfg.dataset!r} is not a file there ({found.name})")


def load_documents(cfg: TrainConfig, split: str = "") -> list[str]:
    """The documents of --dataset: a file's lines or records (read by workload.data.validate, which the driver has
    run over every one), or a Hugging Face dataset's `split` (default --dataset_split)."""
    if is_file_dataset(cfg.dataset):
        from workload.data.records import read_file_records

        found = read_file_records(cfg.dataset)
        if validate_suffix(cfg.dataset) == ".txt":
            return [line.strip() for line in found]
        return [_text_of(record, cfg.text_field, cfg.dataset) for record in found]
    import datasets

    dataset = datasets.load_dataset(cfg.dataset, cfg.dataset_config or None, split=split or cfg.dataset_split)
    if cfg.text_field not in dataset.column_names:
        raise ValueError(f"--text_field {cfg.text_field!r} is not a column of {cfg.dataset}: "
                         f"{shapes.shown_names(dataset.column_names)}")
    return [text for text in dataset[cfg.text_field] if text and text.strip()]


def _text_of(record: object, field: str, dataset: str) -> str:
    if not isinstance(record, dict) or field not in record:
        raise ValueError(f"--text_field {field!r} is missing from a record of {dataset}")
    return record[field]


def pack_documents(token_ids: Iterable[Sequence[int]], seq_len: int, separator: int | None) -> torch.Tensor:
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


def hold_out(blocks: torch.Tensor, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(training blocks, evaluation blocks): a seeded random `fraction` of the blocks (at least one) held out."""
    held = max(1, math.ceil(len(blocks) * fraction))
    order = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed))
    return blocks[order[held:].sort().values], blocks[order[:held]]


def text_blocks(cfg: TrainConfig) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(training blocks, evaluation blocks or None) of --dataset, tokenized and packed."""
    tokenizer = load_tokenizer(cfg.tokenizer_name)

    def blocks_of(documents: list[str]) -> torch.Tensor:
        return pack_documents(tokenizer(documents, add_special_tokens=False)["input_ids"], cfg.seq_len, tokenizer.eos_token_id)

    blocks = blocks_of(load_documents(cfg))
    if cfg.eval_split:
        return blocks, blocks_of(load_documents(cfg, cfg.eval_split))
    if cfg.eval_fraction:
        return hold_out(blocks, cfg.eval_fraction, cfg.seed)
    return blocks, None


def eval_batches(blocks: torch.Tensor, batch_size: int, rank: int, world_size: int) -> list[torch.Tensor]:
    """This rank's equal share of the evaluation blocks, in batches of at most batch_size."""
    per_rank = len(blocks) // world_size
    return list(blocks[rank::world_size][:per_rank].split(batch_size))


@dataclass(frozen=True)
class Data:
    train: Batches
    eval: list[torch.Tensor]
    """This rank's evaluation batches; empty without an evaluation set."""
    description: str = ""
    """A progress line saying what the data became (chat and prompt-completion data)."""
    summary: dict | None = None
    """What the job's summary reports of the examples (chat and prompt-completion data)."""
    train_blocks: int = 0
    """The training blocks over all ranks (0 for random tokens): what --epochs counts passes over."""
    blocks: object = None
    """The memory-mapped training blocks the batches are read from (token shards); None when held in memory."""


def steps_for_epochs(cfg: TrainConfig, train_blocks: int, world_size: int) -> tuple[TrainConfig, str]:
    """--epochs as steps, once the data is packed: (the config with those --steps, the line that says so). Each
    step takes batch_size blocks on every rank, so an epoch is blocks / (batch_size x world_size) steps, rounded up.
    Unchanged, with no line, without --epochs."""
    if not cfg.epochs:
        return cfg, ""
    steps = max(1, math.ceil(cfg.epochs * train_blocks / (cfg.batch_size * world_size)))
    if cfg.warmup_steps > steps:
        raise ValueError(f"--warmup_steps {cfg.warmup_steps} must be at most the {steps} steps of --epochs {cfg.epochs:g}")
    line = (f"training for --epochs {cfg.epochs:g}: {train_blocks} training blocks of {cfg.seq_len} tokens, "
            f"{cfg.batch_size * world_size} a step, make {steps} steps")
    return dataclasses.replace(cfg, steps=steps), line


def make_data(cfg: TrainConfig, vocab_size: int, rank: int, world_size: int, shards_at: str | None = None) -> Data:
    """This rank's data: random tokens; the token shards at `shards_at` (the stage's, workload/data/stage.py),
    memory-mapped; or without them --dataset tokenized and packed here, in memory (small data, the tests' reference)."""
    if not cfg.dataset:
        return Data(random_batches(cfg, vocab_size, rank), [])
    if shards_at:
        return cached_data(cfg, shards_at, rank, world_size)
    if cfg.data_format != "text":
        return _example_data(cfg, rank, world_size)
    train, held = text_blocks(cfg)
    return _deal(cfg, train, held, rank, world_size)


def _example_data(cfg: TrainConfig, rank: int, world_size: int) -> Data:
    """Chat or prompt-completion examples (workload/data/), packed, then dealt as text blocks are."""
    from workload.data.examples import check_trainable, example_blocks
    from workload.data.packing import TokenBatch

    blocks = example_blocks(cfg)
    check_trainable(cfg, blocks)
    data = _deal(cfg, blocks.train.blocks, blocks.eval.blocks if blocks.eval else None, rank, world_size)
    train = data.train
    return Data(lambda step: TokenBatch.of(train(step)), [TokenBatch.of(rows) for rows in data.eval],
                blocks.describe(cfg), blocks.summary(), data.train_blocks)


def check_counts(cfg: TrainConfig, train: int, held: int | None, world_size: int) -> None:
    """Every rank needs a training block, and an evaluation block when there is an evaluation set."""
    if train < world_size:
        raise ValueError(
            f"--dataset {cfg.dataset!r} packs into {train} training blocks of --seq_len {cfg.seq_len} tokens, "
            f"fewer than the {world_size} workers"
        )
    if held is not None and held < world_size:
        source = f"--eval_split {cfg.eval_split!r}" if cfg.eval_split else f"--eval_fraction {cfg.eval_fraction}"
        raise ValueError(f"{source} gives {held} evaluation blocks of --seq_len {cfg.seq_len} tokens, fewer "
                         f"than the {world_size} workers (each evaluates an equal share)")


def _deal(cfg: TrainConfig, train: torch.Tensor, held: torch.Tensor | None, rank: int, world_size: int) -> Data:
    check_counts(cfg, len(train), None if held is None else len(held), world_size)
    return Data(packed_batches(shard(train, cfg.seed, rank, world_size), cfg.batch_size),
                eval_batches(held, cfg.batch_size, rank, world_size) if held is not None else [],
                train_blocks=len(train))


def dataset_batches(cfg: TrainConfig, rank: int, world_size: int) -> Batches:
    """This rank's training batches of --dataset."""
    return make_data(cfg, 0, rank, world_size).train


def cached_data(cfg: TrainConfig, location: str, rank: int, world_size: int, say=lambda line: None) -> Data:
    """This rank's batches from the token shards at `location`, memory-mapped from this node's disk (copied there
    once per node when remote): each step reads its rows by index (shards.read_rows), so a rank's data memory is a
    batch, its index of rows, and its evaluation share. The same blocks as make_data's in-memory path, dealt the same
    way."""
    import numpy as np

    from workload.data import cache, shards
    from workload.data.packing import TokenBatch

    directory = cache.local_directory(location, say)
    complete = cache.manifest(directory)
    train, held = shards.open_blocks(directory, shards.TRAIN), shards.open_blocks(directory, shards.EVAL)
    check_counts(cfg, len(train), None if held is None else len(held), world_size)
    rows = shards.dealt_rows(len(train), cfg.seed, rank, world_size)
    wrap = TokenBatch.of if train.ndim == 3 else (lambda tensor: tensor)

    def batch(step: int):
        chosen = rows[(torch.arange(cfg.batch_size) + step * cfg.batch_size) % len(rows)]
        return wrap(torch.from_numpy(shards.read_rows(train, chosen.numpy()).astype(np.int64)))

    evaluation = []
    if held is not None:
        share = np.arange(rank, len(held), world_size)[:len(held) // world_size]
        evaluation = [wrap(torch.from_numpy(shards.read_rows(held, share[start:start + cfg.batch_size]).astype(
            np.int64))) for start in range(0, len(share), cfg.batch_size)]
    return Data(batch, evaluation, complete.get("description", ""), complete.get("summary"),
                train_blocks=len(train), blocks=train)
