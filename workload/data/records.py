"""Records of a supervised fine-tuning dataset, read as conversations: they are untrusted input.

Sources as for text: a file (.jsonl, .json, .csv, .parquet, the first three also .gz), local or s3:// (pyarrow, with
the job's AWS credentials), or a Hugging Face dataset id with --dataset_config and a split. The files are read by
workload.data.validate (which the driver runs on every record before any worker starts), each record's shape
(OpenAI messages, ShareGPT, prompt-completion, Alpaca) by workload.data.shapes; a record becomes a conversation
(a list of {role, content} turns) and the indices of the turns to train on.
"""
from __future__ import annotations

from typing import Sequence

from workload.config import TrainConfig, is_file_dataset
from workload.data import shapes, validate

Conversation = tuple[list[dict], list[int]]  # (turns, indices of the turns to train on)


def read_records(cfg: TrainConfig, split: str = "") -> list[dict]:
    """The records of --dataset: a file's, or a Hugging Face dataset's `split` (default --dataset_split)."""
    if is_file_dataset(cfg.dataset):
        return read_file_records(cfg.dataset)
    import datasets

    dataset = datasets.load_dataset(cfg.dataset, cfg.dataset_config or None, split=split or cfg.dataset_split)
    return dataset.to_list()


def read_file_records(path: str) -> list[object]:
    """A dataset file's records, local or remote (workload.data.validate reads them, and names a bad line)."""
    try:
        with validate.open_binary(path) as raw:
            return [record for _, record in validate.records(path, raw)]
    except validate.DataError as error:
        raise validate.DataError(f"--dataset {path} {error}") from None


def conversations(cfg: TrainConfig, records: Sequence[object]) -> list[Conversation]:
    """Each record as a conversation to render, with the turns it trains on (none: the example is dropped and
    counted); a malformed record fails the job, naming its 1-based number and its field."""
    fields = shapes.Fields.of(cfg)
    shape = None
    found = []
    for number, record in enumerate(records, 1):
        try:
            shape = shape or shapes.detect(record, fields)
            found.append(shapes.conversation(record, shape, fields))
        except shapes.RecordError as error:
            raise ValueError(f"--dataset {cfg.dataset} record {number}: {error}") from None
    return found


def shape_of(cfg: TrainConfig, records: Sequence[object]) -> shapes.Shape | None:
    return shapes.detect(records[0], shapes.Fields.of(cfg)) if records else None
