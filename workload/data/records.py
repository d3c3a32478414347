"""Records of a supervised fine-tuning dataset, read and checked: they are untrusted input.

Sources as for text: a .jsonl/.json/.parquet file, local or s3:// (pyarrow, with the job's AWS credentials), or a
Hugging Face dataset id with --dataset_config and a split. Each record becomes a conversation (a list of
{role, content} turns) and the indices of the turns to train on:

- chat: `{"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}, ...]}`; every
  assistant turn is trained.
- prompt-completion: `{"prompt": ..., "completion": ...}`, each a string (a user turn and an assistant turn) or a
  list of turns, as TRL's conversational prompt-completion; only the completion's turns are trained.
"""
from __future__ import annotations

import io
import json
import os
from typing import Sequence

from workload.config import TrainConfig, is_file_dataset
from workload.data.chat import ROLES

Conversation = tuple[list[dict], list[int]]  # (turns, indices of the turns to train on)


def read_records(cfg: TrainConfig, split: str = "") -> list[dict]:
    """The records of --dataset: a file's, or a Hugging Face dataset's `split` (default --dataset_split)."""
    if is_file_dataset(cfg.dataset):
        return read_file_records(cfg.dataset)
    import datasets

    dataset = datasets.load_dataset(cfg.dataset, cfg.dataset_config or None, split=split or cfg.dataset_split)
    for name in _field_flags(cfg):
        if getattr(cfg, name) not in dataset.column_names:
            raise ValueError(f"--{name} {getattr(cfg, name)!r} is not a column of {cfg.dataset}: "
                             f"{dataset.column_names}")
    return dataset.to_list()


def read_file_records(path: str) -> list[dict]:
    """A .jsonl (one record a line), .json (a list of records) or .parquet file's records, local or remote."""
    data = _read_bytes(path)
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet

            return pyarrow.parquet.read_table(io.BytesIO(data)).to_pylist()
        text = data.decode("utf-8")
        if path.endswith(".jsonl"):
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            records = json.loads(text)
    except (ValueError, OSError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors, Arrow's OSErrors
        raise ValueError(f"--dataset {path!r} cannot be read as {os.path.splitext(path)[1]} ({error})") from None
    if not isinstance(records, list):
        raise ValueError(f"--dataset {path!r}: a .json dataset must hold a list of records")
    return records


def _read_bytes(path: str) -> bytes:
    if "://" not in path:
        with open(os.path.expanduser(path), "rb") as file:
            return file.read()
    import pyarrow.fs

    filesystem, inner = pyarrow.fs.FileSystem.from_uri(path)
    with filesystem.open_input_stream(inner) as stream:
        return stream.readall()


def _field_flags(cfg: TrainConfig) -> tuple[str, ...]:
    return ("messages_field",) if cfg.data_format == "chat" else ("prompt_field", "completion_field")


def conversations(cfg: TrainConfig, records: Sequence[object]) -> list[Conversation]:
    """Each record as a conversation to render, with the turns it trains on; a malformed record fails the job,
    naming its index and the flag of its field."""
    if cfg.data_format == "chat":
        return [_chat(record, cfg.messages_field, index, cfg.dataset) for index, record in enumerate(records)]
    return [_prompt_completion(record, cfg, index) for index, record in enumerate(records)]


def _chat(record: object, field: str, index: int, dataset: str) -> Conversation:
    turns = _turns(_field(record, field, "messages_field", index, dataset), f"--messages_field {field!r}", index,
                   dataset)
    return turns, [position for position, turn in enumerate(turns) if turn["role"] == "assistant"]


def _prompt_completion(record: object, cfg: TrainConfig, index: int) -> Conversation:
    prompt = _field(record, cfg.prompt_field, "prompt_field", index, cfg.dataset)
    completion = _field(record, cfg.completion_field, "completion_field", index, cfg.dataset)
    prompt_turns = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
                    else _turns(prompt, f"--prompt_field {cfg.prompt_field!r}", index, cfg.dataset))
    completion_turns = ([{"role": "assistant", "content": completion}] if isinstance(completion, str)
                        else _turns(completion, f"--completion_field {cfg.completion_field!r}", index, cfg.dataset))
    if any(turn["role"] != "assistant" for turn in completion_turns):
        raise ValueError(f"--completion_field {cfg.completion_field!r}: record {index} of {cfg.dataset} has a "
                         "completion turn that is not the assistant's")
    start = len(prompt_turns)
    return prompt_turns + completion_turns, list(range(start, start + len(completion_turns)))


def _field(record: object, field: str, flag: str, index: int, dataset: str) -> object:
    if not isinstance(record, dict) or field not in record:
        raise ValueError(f"--{flag} {field!r} is missing from record {index} of {dataset}")
    return record[field]


def _turns(value: object, source: str, index: int, dataset: str) -> list[dict]:
    """A list of {role, content} turns with known roles and string contents (other keys, such as a turn's name,
    are kept for the template)."""
    ok = isinstance(value, list) and value and all(
        isinstance(turn, dict) and turn.get("role") in ROLES and isinstance(turn.get("content"), str)
        for turn in value)
    if not ok:
        raise ValueError(f"{source}: record {index} of {dataset} is not a non-empty list of turns "
                         f"{{\"role\": one of {', '.join(ROLES)}, \"content\": a string}}")
    return [dict(turn) for turn in value]
