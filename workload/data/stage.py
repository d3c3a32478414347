"""The data stage: --dataset read, rendered and tokenized once, in parallel on the Ray cluster's CPUs, and packed
into token shards under its cache key (workload/data/cache.py, shards.py), on the job's driver before any training
worker starts, so no GPU waits on it. A later run or a resume with the same key reads the shards and tokenizes
nothing; the first line says which ("data: 2.71 B tokens from the cache ..." or the stage's progress). A local file of
IN_DRIVER_BYTES or less (the sample data) is read and tokenized by the driver itself, with the same functions in the
same order: Ray Data's tasks would take longer to start than the whole of it takes.

Read: a .jsonl or .txt file (not compressed) in byte ranges, one Ray task each (a line belongs to the range its
first byte is in), so one large file is read and tokenized by every CPU; a .json, .csv, .parquet or compressed file by
one task with workload.data.validate's streaming reader (its records then tokenized in parallel); a Hugging Face
dataset in row ranges of the split datasets loads. Render and tokenize: Ray Data's map_batches, in the records'
order (DataContext preserve_order), so the tokens are the same as on one process. The driver appends each batch's
tokens to the shards' streams as they come (bounded memory), then packs them in numpy (shards.py).

The records were checked before Ray started (workload.data.validate, the data gate); what that cannot check early
(a template that cannot render a record, the records of a Hub dataset's files beyond the first, whose columns only
were checked: workload.data.hub_columns) fails here, naming the record, still before any worker starts.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import time
from typing import Callable, Iterator

import numpy as np

from workload.config import TrainConfig, is_file_dataset
from workload.data import cache, shapes, shards, validate
from workload.data.tokenizer import load_chat_tokenizer, load_tokenizer

MIN_PART_BYTES = 4 * 2**20  # a byte range of a file per task: at least this, and about 4 ranges per CPU
# A local file this small is tokenized by the driver itself (in well under a second): Ray Data's tasks and actors take
# seconds to start, on every run of the sample data.
IN_DRIVER_BYTES = 2**20
RECORDS_PER_BATCH = 512  # records tokenized per batch: a batch's tokens are one row of the stage's output
PROGRESS_EVERY_S = 10.0
BLOCK_BYTES = 8 * 2**20
SPLITTABLE = (".jsonl", ".txt")  # one record a line, so a byte range can be read alone


def load_run_tokenizer(cfg: TrainConfig):
    return load_tokenizer(cfg.tokenizer_name) if cfg.data_format == "text" else load_chat_tokenizer(cfg)


def prepare(cfg: TrainConfig, world_size: int = 1, say: Callable[[str], None] = print) -> str:
    """The location (local directory or s3://) of --dataset's complete token shards: found under the key, or made
    now. Refuses data whose blocks are fewer than `world_size` before any worker starts."""
    tokenizer = load_run_tokenizer(cfg)
    location = cache.location(cfg, cache.key(cfg, tokenizer))
    complete = cache.manifest(location)
    if complete is not None:
        say(f"data: {amount(complete['tokens'])} tokens from the cache {location}")
    else:
        partial = cache.partial_directory(location)
        try:
            complete = _run(cfg, tokenizer, partial, say)
            cache.publish(partial, location, complete)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        say(f"data: {amount(complete['tokens'])} tokens in {complete['blocks'][shards.TRAIN]:,} training blocks "
            f"written to {location}")
    from workload.data.batches import check_counts

    check_counts(cfg, complete["blocks"][shards.TRAIN], complete["blocks"].get(shards.EVAL), world_size)
    return location


def amount(count: int) -> str:
    """2710000000 -> '2.71 B'."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return str(count)


def _run(cfg: TrainConfig, tokenizer, directory: str, say: Callable[[str], None]) -> dict:
    examples = cfg.data_format != "text"
    shape = _shape(cfg) if examples else None
    writer = shards.StreamWriter(directory, "train", examples)
    read = tokenize(cfg, cfg.dataset_split, shape, writer, say)
    held = None
    if cfg.eval_split:
        held = shards.StreamWriter(directory, "eval", examples)
        read["eval"] = tokenize(cfg, cfg.eval_split, shape, held, say)
    if not examples:
        blocks = shards.pack_text(directory, writer.arrays()["ids"], cfg.seq_len, shards.TRAIN, cfg.eval_fraction,
                                  cfg.seed)
        if held:
            blocks.update(shards.pack_text(directory, held.arrays()["ids"], cfg.seq_len, shards.EVAL))
        complete = {"tokens": sum(blocks.values()) * cfg.seq_len, "blocks": blocks, "description": "", "summary": None}
    else:
        complete = _pack_examples(cfg, tokenizer, directory, writer, held, shape)
    for stream in (writer, held):
        if stream:
            stream.remove()
    return {**complete, "read": read, "seq_len": cfg.seq_len, "data_format": cfg.data_format,
            "format_version": cache.FORMAT_VERSION, "dataset": cfg.dataset}


def _pack_examples(cfg: TrainConfig, tokenizer, directory: str, writer, held, shape) -> dict:
    from workload.data import examples, packing

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pad = pad if pad is not None else 0  # as examples.example_blocks: padding carries no loss
    streams = writer.arrays()
    if held:  # --eval_split: the examples that train, in their order (examples.example_blocks)
        train = np.flatnonzero(np.asarray(streams["trains"], dtype=bool))
        untrained, evaluation = len(streams["trains"]) - len(train), None
    else:
        train, evaluation, untrained = shards.example_sets(streams, cfg.seed, cfg.eval_fraction)
    counts = {shards.TRAIN: shards.pack_examples(directory, shards.TRAIN, streams, train, cfg.seq_len, pad,
                                                 cfg.truncation)}
    if held:
        held_streams = held.arrays()
        counts[shards.EVAL] = shards.pack_examples(directory, shards.EVAL, held_streams,
                                                   np.arange(len(held_streams["lengths"])), cfg.seq_len, pad,
                                                   cfg.truncation)
    elif evaluation is not None:
        counts[shards.EVAL] = shards.pack_examples(directory, shards.EVAL, streams, evaluation, cfg.seq_len, pad,
                                                   cfg.truncation)

    def packed(found: shards.PackedCounts) -> packing.Packed:
        return packing.Packed(range(found.blocks), found.examples, found.over_long, found.untrained, found.cut)

    blocks = examples.SftBlocks(packed(counts[shards.TRAIN]),
                                packed(counts[shards.EVAL]) if shards.EVAL in counts else None,
                                examples.shape_label(shape), untrained)
    examples.check_trainable(cfg, blocks)
    return {"tokens": sum(found.blocks for found in counts.values()) * cfg.seq_len,
            "blocks": {name: found.blocks for name, found in counts.items()},
            "description": blocks.describe(cfg), "summary": blocks.summary()}


def _shape(cfg: TrainConfig) -> shapes.Shape | None:
    """The records' shape, from the first record, as examples.tokenize takes it for the whole file."""
    fields = shapes.Fields.of(cfg)
    if not is_file_dataset(cfg.dataset):
        dataset = _hub_split(cfg, cfg.dataset_split)
        return shapes.detect(dataset[0], fields) if len(dataset) else None
    with validate.open_binary(cfg.dataset) as raw:
        for _, record in validate.records(cfg.dataset, raw):
            try:
                return shapes.detect(record, fields)
            except shapes.RecordError as error:
                raise ValueError(f"--dataset {cfg.dataset} record 1: {error}") from None
    return None


def _hub_split(cfg: TrainConfig, split: str):
    import datasets

    dataset = datasets.load_dataset(cfg.dataset, cfg.dataset_config or None, split=split)
    if cfg.data_format == "text" and cfg.text_field not in dataset.column_names:
        raise ValueError(f"--text_field {cfg.text_field!r} is not a column of {cfg.dataset}: "
                         f"{shapes.shown_names(dataset.column_names)}")
    return dataset


def _parts(cfg: TrainConfig, split: str, cpus: int, hub) -> tuple[list[dict], int]:
    """What each read task reads, in order, and the total it is measured against (bytes, or a Hub split's rows;
    0 when unknown: a compressed file)."""
    if hub is not None:
        rows = len(hub)
        step = max(RECORDS_PER_BATCH, math.ceil(rows / (4 * cpus)))
        return [{"kind": "hub", "split": split, "start": start, "stop": min(rows, start + step)}
                for start in range(0, rows, step)], rows
    size = _size(cfg.dataset)
    if cfg.dataset.endswith(validate.COMPRESSED) or validate.suffix(cfg.dataset) not in SPLITTABLE:
        return [{"kind": "file", "start": 0, "stop": size}], 0
    step = max(MIN_PART_BYTES, math.ceil(size / (4 * cpus)))
    return [{"kind": "lines", "start": start, "stop": min(size, start + step)} for start in range(0, size, step)], size


def _size(path: str) -> int:
    if "://" not in path:
        return os.path.getsize(os.path.expanduser(path))
    import pyarrow.fs

    filesystem, inner = pyarrow.fs.FileSystem.from_uri(path)
    return filesystem.get_file_info(inner).size


def tokenize(cfg: TrainConfig, split: str, shape, writer: shards.StreamWriter, say: Callable[[str], None]) -> dict:
    """Every record of --dataset (a Hub dataset's `split`) tokenized, appended to `writer` in order: on the cluster,
    or by this process for a local file of at most IN_DRIVER_BYTES. Returns what was read."""
    if is_file_dataset(cfg.dataset) and "://" not in cfg.dataset and _size(cfg.dataset) <= IN_DRIVER_BYTES:
        return _tokenize_in_driver(cfg, split, shape, writer, say)
    return _tokenize_on_ray(cfg, split, shape, writer, say)


def _tokenize_in_driver(cfg: TrainConfig, split: str, shape, writer: shards.StreamWriter,
                        say: Callable[[str], None]) -> dict:
    """The Ray tasks' functions, in this process, part after part: the same tokens in the same order."""
    import pyarrow

    parts, total = _parts(cfg, split, 1, None)
    found = {"records": 0, "tokens": 0, "done": 0}
    started = time.monotonic()
    say(f"data: tokenizing {cfg.dataset} in the driver ({amount(total)}B: less than Ray Data's tasks take to start)"
        if total else f"data: tokenizing {cfg.dataset} in the driver (a small file)")
    for part in parts:
        for batch in _read_parts(pyarrow.Table.from_pylist([part]), cfg, None):
            for row in _tokenize_batch(batch, cfg, shape).to_pylist():
                writer.write(row)
                for name in found:
                    found[name] += row[name]
    writer.close()
    elapsed = time.monotonic() - started
    say(_progress(found, total, elapsed, final=True))
    return {"records": found["records"], "tokens": found["tokens"], "seconds": round(elapsed, 2), "cpus": 1}


def _tokenize_on_ray(cfg: TrainConfig, split: str, shape, writer: shards.StreamWriter,
                     say: Callable[[str], None]) -> dict:
    import ray
    import ray.data

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # the tokens in the records' order: the same on any cluster
    context.enable_progress_bars = False  # the stage's own lines say how far it is
    # A task hands over its tokens every few batches rather than every 128 MiB (Ray Data's default block): the
    # driver writes them as they come, the progress moves, and a worker holds less.
    context.target_max_block_size = BLOCK_BYTES
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    hub = None if is_file_dataset(cfg.dataset) else _hub_split(cfg, split)
    parts, total = _parts(cfg, split, cpus, hub)
    # One task reads an unsplittable file: a fraction of a CPU keeps it from being fused with the tokenizing tasks
    # that follow, so those still run on every CPU. A Hub split is read where datasets put its files, this node (the
    # Dataset passed to the tasks names them), and tokenized anywhere.
    read_options = {"num_cpus": 0.25} if len(parts) == 1 or hub is not None else {}
    if hub is not None:  # Ray's default label of every node: its id
        read_options["label_selector"] = {"ray.io/node-id": ray.get_runtime_context().get_node_id()}
    dataset = ray.data.from_items(parts, override_num_blocks=max(1, len(parts))).map_batches(
        _read_parts, batch_size=1, batch_format="pyarrow", fn_kwargs={"cfg": cfg, "hub": hub}, **read_options,
    ).map_batches(_tokenize_batch, batch_size=None, batch_format="pyarrow", fn_kwargs={"cfg": cfg, "shape": shape})
    found = {"records": 0, "tokens": 0, "done": 0}
    started = last = time.monotonic()
    size = (f", {amount(total)}{'B' if parts[0]['kind'] != 'hub' else ' records'}" if total else "")
    say(f"data: tokenizing {cfg.dataset}" + (f" ({split})" if not is_file_dataset(cfg.dataset) else "")
        + f" on {cpus} CPUs{size}")
    for row in dataset.iter_rows():
        writer.write(row)
        for name in found:
            found[name] += row[name]
        if time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            say(_progress(found, total, last - started))
    writer.close()
    elapsed = time.monotonic() - started
    say(_progress(found, total, elapsed, final=True))
    return {"records": found["records"], "tokens": found["tokens"], "seconds": round(elapsed, 2), "cpus": cpus}


def _progress(found: dict, total: int, elapsed: float, final: bool = False) -> str:
    rate = found["tokens"] / max(elapsed, 1e-9)
    line = (f"data: {found['records']:,} records, {amount(found['tokens'])} tokens in {elapsed:.0f} s "
            f"({found['records'] / max(elapsed, 1e-9):,.0f} records/s, {rate:,.0f} tokens/s)")
    if total and not final and found["done"]:
        left = elapsed * (total - found["done"]) / found["done"]
        line += f", {found['done'] / total:.0%} done, ETA {left:.0f} s"
    return line


def _read_parts(batch, cfg: TrainConfig, hub) -> Iterator:
    """Read tasks: each part's records as a table of raw lines (or pickled records) and where each is."""
    import pyarrow

    for part in batch.to_pylist():
        for raw, where, size in _batches(_records_of(cfg, part, hub), RECORDS_PER_BATCH):
            yield pyarrow.table({"raw": pyarrow.array(raw, pyarrow.binary()),
                                 "at": pyarrow.array(where, pyarrow.int64()),
                                 "size": pyarrow.array(size, pyarrow.int64()), "kind": [part["kind"]] * len(raw)})


def _batches(items: Iterator[tuple], size: int) -> Iterator[tuple[list, list, list]]:
    held: list[tuple] = []
    for item in items:
        held.append(item)
        if len(held) == size:
            yield tuple(map(list, zip(*held)))
            held = []
    if held:
        yield tuple(map(list, zip(*held)))


def _records_of(cfg: TrainConfig, part: dict, hub) -> Iterator[tuple[bytes, int, int]]:
    """(raw, where, progress) of each record: a line's bytes, its byte offset and length; else the pickled record,
    its 1-based number, and 1 for a Hub row (the total counts rows) or 0."""
    if part["kind"] == "lines":
        with _open_seekable(cfg.dataset) as file:
            position = part["start"]
            if position:
                file.seek(position - 1)
                position += len(file.readline()) - 1  # the line the range starts inside belongs to the one before
            while position < part["stop"]:
                line = file.readline()
                if not line:
                    break
                if line.decode("utf-8").strip():  # validate's blank lines, which it skips
                    yield line, position, len(line)
                position += len(line)
    elif part["kind"] == "file":
        with validate.open_binary(cfg.dataset) as raw:
            for number, (_, record) in enumerate(validate.records(cfg.dataset, raw), 1):
                yield pickle.dumps(record), number, 0
    else:
        for start in range(part["start"], part["stop"], RECORDS_PER_BATCH):
            rows = hub.select(range(start, min(part["stop"], start + RECORDS_PER_BATCH))).to_list()
            for number, record in enumerate(rows, start + 1):
                yield pickle.dumps(record), number, 1


def _open_seekable(path: str):
    if "://" not in path:
        return open(os.path.expanduser(path), "rb")
    import io

    import pyarrow.fs

    filesystem, inner = pyarrow.fs.FileSystem.from_uri(path)
    return io.BufferedReader(_SeekableRaw(filesystem.open_input_file(inner)), 2**20)


class _SeekableRaw(validate._Raw):
    """A pyarrow random-access file as a seekable raw stream (an S3 object read in ranges)."""

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()


_tokenizers: dict = {}


def _tokenize_batch(batch, cfg: TrainConfig, shape):
    """Render and tokenize a batch of records: one output row holding its token ids (text: each document's
    followed by the end-of-text token) and, for examples, their labels, lengths and whether each trains."""
    import pyarrow

    from workload.data import chat, packing

    key = (cfg.tokenizer_name, cfg.chat_template, cfg.data_format)
    if key not in _tokenizers:  # once per worker process: Ray reuses them across tasks
        # One thread a task: Ray gives each task a CPU, and a fast tokenizer's batch call would otherwise spread over
        # every core of the node, under every other task.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        _tokenizers[key] = load_run_tokenizer(cfg)
    tokenizer = _tokenizers[key]
    records = [_record(raw, kind, cfg.dataset) for raw, kind in zip(batch.column("raw").to_pylist(),
                                                                    batch.column("kind").to_pylist())]
    where = [_where(kind, at, cfg.dataset) for kind, at in zip(batch.column("kind").to_pylist(),
                                                              batch.column("at").to_pylist())]
    done = sum(batch.column("size").to_pylist())
    if cfg.data_format == "text":
        documents = _documents(records, batch.column("kind").to_pylist(), cfg)
        ids = tokenizer(documents, add_special_tokens=False)["input_ids"] if documents else []
        separator = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
        flat = np.fromiter((token for document in ids for token in (*document, *separator)), dtype=shards.TOKEN_DTYPE)
        row = {"ids": [flat.tobytes()], "records": [len(documents)], "tokens": [len(flat)], "done": [done]}
        return pyarrow.table(row)
    fields = shapes.Fields.of(cfg)
    found = []
    for record, place in zip(records, where):
        try:
            turns, trained = shapes.conversation(record, shape, fields)
        except shapes.RecordError as error:
            raise ValueError(f"--dataset {cfg.dataset} {place}: {error}") from None
        found.append(chat.tokenize_conversation(tokenizer, turns, trained, cfg.train_on_prompt,
                                                f"{place} of {cfg.dataset}"))
    lengths = np.array([len(example.input_ids) for example in found], dtype=np.int64)
    ids = np.fromiter((token for example in found for token in example.input_ids), dtype=shards.TOKEN_DTYPE)
    labels = np.fromiter((label for example in found for label in example.labels), dtype=shards.TOKEN_DTYPE)
    trains = np.array([packing.trains(example) for example in found], dtype=np.bool_)
    return pyarrow.table({"ids": [ids.tobytes()], "labels": [labels.tobytes()], "lengths": [lengths.tobytes()],
                          "trains": [trains.tobytes()], "records": [len(found)], "tokens": [len(ids)],
                          "done": [done]})


def _record(raw: bytes, kind: str, dataset: str):
    if kind != "lines":
        return pickle.loads(raw)
    text = raw.decode("utf-8")
    return text if validate.suffix(dataset) == ".txt" else json.loads(text)


def _where(kind: str, at: int, dataset: str) -> str:
    return f"the line at byte {at}" if kind == "lines" else f"record {at}"


def _documents(records: list, kinds: list[str], cfg: TrainConfig) -> list[str]:
    """batches.load_documents' documents: a .txt line stripped, a record's --text_field; a Hub row's when it has
    text."""
    from workload.data.batches import _text_of

    if validate.suffix(cfg.dataset) == ".txt" and is_file_dataset(cfg.dataset):
        return [record.strip() for record in records]
    if kinds and kinds[0] == "hub":
        return [record[cfg.text_field] for record in records
                if record[cfg.text_field] and record[cfg.text_field].strip()]
    return [_text_of(record, cfg.text_field, cfg.dataset) for record in records]
