"""What an offline W&B run wrote, read back from its files without W&B's servers: the run-<id>.wandb transaction log.

The log is LevelDB's log format with W&B's own 7-byte header (":W&B", magic 0xBEE1 little-endian, version 0), as
wandb's former Python writer documented it (wandb/sdk/internal/datastore.py, removed when wandb-core took over the
writing; the format stayed, since `wandb sync` reads old runs): 32 KiB blocks of records, each a 7-byte header
(CRC32, length as uint16 LE, type FULL=1 FIRST=2 MIDDLE=3 LAST=4) and its data; a block's last bytes too few for a
header are padding. Each record's data is a wandb_internal_pb2.Record.
"""
from __future__ import annotations

import glob
import json
import os
import struct
import time

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
RECORD_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str):
    """The Record protobufs of a .wandb file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:len(HEADER)] == HEADER, f"{path} does not start with W&B's log header: {data[:7]!r}"
    offset, pending = len(HEADER), b""
    while offset + RECORD_HEADER <= len(data):
        left_in_block = BLOCK - offset % BLOCK
        if left_in_block < RECORD_HEADER:
            offset += left_in_block
            continue
        length, kind = struct.unpack("<HB", data[offset + 4:offset + RECORD_HEADER])
        if offset + RECORD_HEADER + length > len(data):
            break  # a record still being written
        chunk = data[offset + RECORD_HEADER:offset + RECORD_HEADER + length]
        offset += RECORD_HEADER + length
        if kind == FULL:
            pending = chunk
        elif kind in (FIRST, MIDDLE):
            pending = (pending if kind == MIDDLE else b"") + chunk
            continue
        elif kind == LAST:
            pending += chunk
        else:
            break  # a zero-filled tail: the end of what was written
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        yield record


def offline_run(directory: str, timeout_s: float = 30) -> str:
    """The .wandb file of the one offline run under `directory` (a --report_to wandb run's directory), once it is
    whole: wandb-core writes the log in its own process, and run.finish() can return before the last records (the
    history rows among them, then the exit record, always the last) are in the file. Read until the exit record is
    there, for a bounded while."""
    (path,) = glob.glob(os.path.join(directory, "wandb", "offline-run-*", "run-*.wandb"))
    deadline = time.monotonic() + timeout_s
    while not any(record.WhichOneof("record_type") == "exit" for record in records(path)):
        assert time.monotonic() < deadline, f"{path} has no exit record {timeout_s} s after the run finished"
        time.sleep(0.1)
    return path


def history(path: str) -> dict[str, list[tuple[int, float]]]:
    """{key: [(step, value), ...]} of the run's run.log calls."""
    series: dict[str, list[tuple[int, float]]] = {}
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                     for item in record.history.item}
            step = record.history.step.num if record.history.HasField("step") else items.get("_step")
            for key, value in items.items():
                if not key.startswith("_"):
                    series.setdefault(key, []).append((step, value))
    return series


def config(path: str) -> dict:
    """The run's config (its parameters), the last value of each key."""
    return _updates(path, "config")


def summary(path: str) -> dict:
    """The run's summary, the last value of each key."""
    return _updates(path, "summary")


def _updates(path: str, record_type: str) -> dict:
    """The last value of each key the file's `record_type` records (config or summary) update."""
    values = {}
    for record in records(path):
        if record.WhichOneof("record_type") == record_type:
            for item in getattr(record, record_type).update:
                values[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return values
