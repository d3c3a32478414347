"""A file measured by what it stores, not by the size it claims: one rule for every reader of a file from elsewhere (a
checkpoint's shards, a dataset file). A sparse file (`truncate -s 1T`) claims any size with nothing stored; its holes
read as zeros, which a loader would allocate and a validator would read for hours. Standard library only.
"""
from __future__ import annotations

import os


def stored_bytes(path: str | os.PathLike) -> int:
    """The bytes a file really holds: its size, or what its blocks hold when fewer. st_blocks counts 512-byte units on
    Linux (stat(2)). A file system that compresses (btrfs, ZFS) reports fewer blocks too, so `hole_problem`, not this,
    decides whether a file is sparse; this bounds what reading it can cost."""
    status = os.stat(path)
    blocks = getattr(status, "st_blocks", None)
    return status.st_size if blocks is None else min(status.st_size, blocks * 512)


def hole_problem(path: str | os.PathLike) -> str | None:
    """Why a file with holes is refused (the words after its name), or None: a hole before its end (lseek SEEK_HOLE,
    which compression does not make, so a compressed text file passes), measured by its blocks."""
    size = os.path.getsize(path)
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if not size or seek_hole is None:
        return None
    try:
        with open(path, "rb") as file:
            first_hole = os.lseek(file.fileno(), 0, seek_hole)
    except OSError:
        return None  # a file system that cannot say: read as it is
    if first_hole >= size:
        return None
    return (f"is a sparse file: it claims {size:,} bytes and its blocks store {stored_bytes(path):,}; its holes read as "
            "zero bytes, which no text, dataset or checkpoint file holds")
