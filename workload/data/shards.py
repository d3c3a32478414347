"""Token shards: the stage's token streams packed into fixed-width arrays on disk, and read back memory-mapped.

Layout of a cache directory (workload/data/cache.py makes it whole):
    train.npy      the training blocks: (n, seq_len) token ids for text; (n, 3, seq_len) ids, labels and positions
                   for chat and prompt-completion (workload/data/packing.py's blocks); int32
    eval.npy       the evaluation blocks, the same way (absent without an evaluation set)
    COMPLETE.json  counts, the data line and the summary the job prints; written last

The packing is batches.pack_documents's and packing.pack's, done over lengths and offsets in numpy so that memory holds the
arrays, not a Python list of every token: text is the documents' ids with an end-of-text token after each, cut into
blocks of seq_len (the tail dropped), --eval_fraction of the blocks held out with the seed (batches.hold_out);
examples are those that train, shuffled with the seed, --eval_fraction of them held out, each set fitted (truncated,
kept at the end or split) and packed first fit in order (packing.fit, packing.pack_examples). The streams the stage
writes (StreamWriter) are deleted once packed.
"""
from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass

import numpy as np
import torch

from workload.data.chat import IGNORE_INDEX

TRAIN, EVAL = "train.npy", "eval.npy"
TOKEN_DTYPE = np.int32
ROWS_PER_WRITE = 4096  # blocks gathered in memory before each write: a few MiB


class StreamWriter:
    """The stage's output, appended in order: every token id (and for examples every label, each example's length
    and whether it trains at all), as raw int32/int64/uint8 files named `<prefix>.<what>.bin`."""

    def __init__(self, directory: str, prefix: str, examples: bool) -> None:
        names = ("ids", "labels", "lengths", "trains") if examples else ("ids",)
        self.paths = {name: os.path.join(directory, f"{prefix}.{name}.bin") for name in names}
        self.files = {name: open(path, "wb") for name, path in self.paths.items()}

    def write(self, parts: dict) -> None:
        for name, file in self.files.items():
            file.write(parts[name])

    def close(self) -> None:
        for file in self.files.values():
            file.close()

    def arrays(self) -> dict:
        dtypes = {"ids": TOKEN_DTYPE, "labels": TOKEN_DTYPE, "lengths": np.int64, "trains": np.bool_}
        return {name: _read_raw(path, dtypes[name]) for name, path in self.paths.items()}

    def remove(self) -> None:
        for path in self.paths.values():
            os.remove(path)


def _read_raw(path: str, dtype) -> np.ndarray:
    if not os.path.getsize(path):
        return np.empty(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def release(arrays) -> None:
    """Unmap the pages of the memory-mapped streams read so far: they stay in the page cache, but not in the stage's
    resident memory, which would otherwise grow to the streams' size (1.3 GiB at 1 GB of text)."""
    for array in arrays:
        mapped = getattr(array, "_mmap", None)  # np.memmap's own mmap object
        if mapped is not None:
            mapped.madvise(mmap.MADV_DONTNEED)


def _write(path: str, shape: tuple, fill, streams=()) -> int:
    """An int32 .npy of `shape`, its rows filled ROWS_PER_WRITE at a time by fill(start, stop) -> array; the
    `streams` read by fill are released after each."""
    # Written, not memory-mapped: a mapped output's dirty pages would count in the stage's memory until unmapped.
    with open(path, "wb") as out:
        np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(np.dtype(TOKEN_DTYPE)),
                                                   "fortran_order": False, "shape": shape})
        for start in range(0, shape[0], ROWS_PER_WRITE):
            stop = min(shape[0], start + ROWS_PER_WRITE)
            out.write(np.ascontiguousarray(fill(start, stop), dtype=TOKEN_DTYPE).tobytes())
            release(streams)
    return shape[0]


def seeded_order(count: int, seed: int) -> np.ndarray:
    """torch.randperm(count) with the seed, as the in-memory path draws it (so the blocks equal it bit for bit)."""
    return torch.randperm(count, generator=torch.Generator().manual_seed(seed)).numpy()


def pack_text(directory: str, stream: np.ndarray, seq_len: int, name: str, eval_fraction: float = 0.0,
              seed: int = 0) -> dict:
    """Text: the stream cut into (n, seq_len) blocks as `name` (with eval_fraction, a seeded share held out as
    eval.npy, batches.hold_out). Returns the blocks' counts."""
    count = len(stream) // seq_len
    blocks = stream[:count * seq_len].reshape(count, seq_len)
    if not eval_fraction:
        return {name: _write(os.path.join(directory, name), (count, seq_len), lambda a, b: blocks[a:b], (stream,))}
    held = max(1, math.ceil(count * eval_fraction))
    order = seeded_order(count, seed)
    train_rows, eval_rows = np.sort(order[held:]), order[:held]
    return {TRAIN: _write(os.path.join(directory, TRAIN), (len(train_rows), seq_len),
                          lambda a, b: blocks[train_rows[a:b]], (stream,)),
            EVAL: _write(os.path.join(directory, EVAL), (len(eval_rows), seq_len), lambda a, b: blocks[eval_rows[a:b]],
                         (stream,))}


@dataclass(frozen=True)
class PackedCounts:
    """packing.Packed's counts of one set, without its blocks."""

    blocks: int
    examples: int
    over_long: int
    untrained: int = 0
    cut: int = 0


def example_sets(streams: dict, seed: int, eval_fraction: float) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(training examples, held-out examples or None, examples without a trained token) as indices into the
    streams: those that train, shuffled with the seed, the first eval_fraction held out (examples.example_blocks)."""
    trains = np.asarray(streams["trains"], dtype=bool)
    training = np.flatnonzero(trains)
    untrained = len(trains) - len(training)
    shuffled = training[seeded_order(len(training), seed)]
    if not eval_fraction:
        return shuffled, None, untrained
    held = max(1, math.ceil(len(shuffled) * eval_fraction))
    return shuffled[held:], shuffled[:held], untrained


def pack_examples(directory: str, name: str, streams: dict, chosen: np.ndarray, seq_len: int, pad_id: int,
                  truncation: str) -> PackedCounts:
    """The examples `chosen` (indices into the streams, in order) that train, fitted and packed as packing.pack does,
    written as `name`: (n, 3, seq_len) ids, labels, positions."""
    lengths = np.asarray(streams["lengths"])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    training = chosen[np.asarray(streams["trains"], dtype=bool)[chosen]]
    piece_starts, piece_lengths, over_long = _pieces(starts[training], lengths[training], seq_len, truncation)
    labels = streams["labels"]
    long_pieces = np.flatnonzero(np.repeat(lengths[training] > seq_len, _piece_counts(
        lengths[training], seq_len, truncation)))
    trains = np.ones(len(piece_starts), dtype=bool)
    for piece in long_pieces.tolist():  # only an over-long example's pieces can lose every trained token
        start, length = int(piece_starts[piece]), int(piece_lengths[piece])
        trains[piece] = bool(np.any(labels[start + 1:start + length] != IGNORE_INDEX))
    kept = trains & (piece_lengths > 0)
    cut = int(len(kept) - kept.sum())
    blocks = _write_packed(os.path.join(directory, name), streams, piece_starts[kept], piece_lengths[kept], seq_len,
                           pad_id)
    return PackedCounts(blocks, len(training) - (cut if truncation != "split" else 0), over_long,
                        len(chosen) - len(training), cut)


def _piece_counts(lengths: np.ndarray, seq_len: int, truncation: str) -> np.ndarray:
    if truncation == "split":
        return np.where(lengths > seq_len, -(-lengths // seq_len), 1)
    return np.ones(len(lengths), dtype=np.int64)


def _pieces(starts: np.ndarray, lengths: np.ndarray, seq_len: int, truncation: str
            ) -> tuple[np.ndarray, np.ndarray, int]:
    """(start, length) of every piece of at most seq_len tokens, in order (packing.fit), and the over-long count."""
    over = lengths > seq_len
    counts = _piece_counts(lengths, seq_len, truncation)
    owner = np.repeat(np.arange(len(lengths)), counts)
    within = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
    if truncation == "split":
        offset = within * seq_len
    elif truncation == "keep_end":
        offset = np.where(over, lengths - seq_len, 0)[owner]
    else:
        offset = np.zeros(len(owner), dtype=np.int64)
    return starts[owner] + offset, np.minimum(seq_len, lengths[owner] - offset), int(over.sum())


def _write_packed(path: str, streams: dict, starts: np.ndarray, lengths: np.ndarray, seq_len: int,
                  pad_id: int) -> int:
    """First fit in order: a piece that does not fit the rest of the block starts the next (packing.pack_examples);
    the rest is padding with ignored labels and positions continuing the last piece's."""
    block = np.empty(len(lengths), dtype=np.int64)
    offset = np.empty(len(lengths), dtype=np.int64)
    current, fill = 0, 0
    for index, length in enumerate(lengths.tolist()):
        if fill + length > seq_len:
            current, fill = current + 1, 0
        block[index], offset[index] = current, fill
        fill += length
    count = current + 1 if len(lengths) else 0
    ids, labels = streams["ids"], streams["labels"]
    counting = np.arange(2 * seq_len)

    def fill_blocks(first: int, stop: int) -> np.ndarray:
        rows = np.empty((stop - first, 3, seq_len), dtype=TOKEN_DTYPE)
        rows[:, 0], rows[:, 1] = pad_id, IGNORE_INDEX
        low, high = np.searchsorted(block, [first, stop])
        for piece in range(low, high):
            row, at = int(block[piece]) - first, int(offset[piece])
            start, length = int(starts[piece]), int(lengths[piece])
            rows[row, 0, at:at + length] = ids[start:start + length]
            rows[row, 1, at + 1:at + length] = labels[start + 1:start + length]
            rows[row, 2, at:at + length] = counting[:length]
            if piece + 1 == len(block) or block[piece + 1] != block[piece]:  # the block's last piece: pad after it
                rows[row, 2, at + length:] = counting[length:length + seq_len - at - length]
        return rows

    return _write(path, (count, 3, seq_len), fill_blocks, (ids, labels))


def open_blocks(directory: str, name: str) -> np.ndarray | None:
    """The blocks `name` of a cache directory, memory-mapped read-only (None when absent): its shape and dtype are
    read, its rows are read with read_rows."""
    path = os.path.join(directory, name)
    return np.load(path, mmap_mode="r") if os.path.exists(path) else None


def read_rows(blocks: np.memmap, rows: np.ndarray) -> np.ndarray:
    """`rows` of memory-mapped blocks, read with pread into a new array: the process maps no page of the file, so its
    data memory is the rows, whatever the file's size. Indexing the mapping instead would keep every page it touched
    resident, and the 64 KiB around each that the kernel maps on a fault: an epoch of random rows maps the file."""
    out = np.empty((len(rows), *blocks.shape[1:]), dtype=blocks.dtype)
    if not len(rows):
        return out
    size = out[0].nbytes
    descriptor = os.open(blocks.filename, os.O_RDONLY)
    try:
        for index, row in enumerate(np.asarray(rows).tolist()):
            assert 0 <= row < len(blocks), f"row {row} of {len(blocks)}"
            read = os.preadv(descriptor, [out[index]], blocks.offset + row * size)
            assert read == size, f"{blocks.filename}: row {row} cut short ({read} of {size} bytes)"
    finally:
        os.close(descriptor)
    return out


def dealt_rows(count: int, seed: int, rank: int, world_size: int) -> torch.Tensor:
    """This rank's rows of `count` training blocks: one seeded shuffle, dealt round-robin, equal shares
    (batches.shard, over indices)."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    return order[rank::world_size][:count // world_size]
