"""A remote directory (s3://, through pyarrow.fs) copied onto this node's fast disk once, in parallel parts, for all
of its ranks: a checkpoint a run resumes from, a model's files, a checkpoint workload.export reads.

One file is read as PARALLEL_PARTS ranged reads at a time (pyarrow's `read_at`, a ranged GET on S3, with the GIL
released) written in place with `os.pwrite`: one S3 stream gets about 100 MB/s, and a node's NVMe and network take
many times that (the same reason boto3's TransferManager splits a download into ranged parts, 10 at a time by
default). Each file lands under a temporary name and is renamed when whole, so a copy cut short is never taken for
a file, and a file already there at the same size is kept, so a copy that stopped half way resumes.

`copy_once` holds a file lock beside the destination (fcntl.flock, released by the kernel if its holder dies): the
first of a node's ranks copies, the others wait on the lock, then find every file there and copy nothing.
Standard library and pyarrow only, beneath everything else in the workload.
"""
from __future__ import annotations

import fcntl
import fnmatch
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

PART_BYTES = 64 * 2**20
"""One ranged read: large enough that a request's latency is small beside its transfer (S3's guidance for byte-range
fetches is 8 to 16 MB and up), small enough that PARALLEL_PARTS of them in memory stay near a GB."""
PARALLEL_PARTS = 16
"""Ranged reads in flight at once, over all files: S3 serves at least 5,500 GETs a second a prefix."""


def copy_once(filesystem, path: str, destination: str, patterns: Sequence[str] | None = None,
              progress: Callable[[str], None] = lambda line: None, recursive: bool = True) -> tuple[int, int]:
    """The files of the directory `path` on `filesystem` (those matching `patterns`, all when None; its
    subdirectories' too when `recursive`) into the local `destination`, by the first caller on this node; (files,
    bytes) this call copied."""
    os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    with _locked(os.path.abspath(destination) + ".lock"):
        return copy_tree(filesystem, path, destination, patterns, progress, recursive)


def copy_tree(filesystem, path: str, destination: str, patterns: Sequence[str] | None = None,
              progress: Callable[[str], None] = lambda line: None, recursive: bool = True) -> tuple[int, int]:
    """copy_once without the lock: for a destination of the caller's own (a temporary directory)."""
    import pyarrow.fs

    root = path.rstrip("/")
    listed = filesystem.get_file_info(pyarrow.fs.FileSelector(root, recursive=recursive))
    wanted = [(info, os.path.join(destination, *info.path[len(root):].strip("/").split("/"))) for info in listed
              if info.type == pyarrow.fs.FileType.File
              and (patterns is None or any(fnmatch.fnmatch(info.base_name, pattern) for pattern in patterns))]
    missing = [(info, local) for info, local in wanted
               if not (os.path.isfile(local) and os.path.getsize(local) == info.size)]
    os.makedirs(destination, exist_ok=True)
    if not missing:
        return 0, 0
    total = sum(info.size for info, _ in missing)
    progress(f"copying {len(missing)} files ({total / 1e9:.2f} GB) to {destination}, {PARALLEL_PARTS} parts at once")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=PARALLEL_PARTS, thread_name_prefix="node-copy") as pool:
        for info, local in missing:
            _copy_file(filesystem, info, local, pool)
    seconds = time.perf_counter() - started
    progress(f"copied {total / 1e9:.2f} GB in {seconds:.1f}s ({total / 1e6 / max(seconds, 1e-9):,.0f} MB/s)")
    return len(missing), total


def _copy_file(filesystem, info, local: str, pool: ThreadPoolExecutor) -> None:
    os.makedirs(os.path.dirname(local), exist_ok=True)
    partial = tempfile.mkdtemp(prefix=".partial-", dir=os.path.dirname(local))
    target = os.path.join(partial, os.path.basename(local))
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(descriptor, info.size)
            # One handle for the file's parts: Arrow's ReadAt is safe to call from several threads at once (its
            # RandomAccessFile contract; on S3 each call is a ranged GET of its own).
            with filesystem.open_input_file(info.path) as source:

                def part(offset: int) -> None:
                    view = memoryview(source.read_at(min(PART_BYTES, info.size - offset), offset))
                    while view:
                        written = os.pwrite(descriptor, view, offset)
                        view, offset = view[written:], offset + written

                # The parts of one file at once; files one after another, so each lands whole before the next.
                for done in [pool.submit(part, offset) for offset in range(0, info.size, PART_BYTES)]:
                    done.result()
        finally:
            os.close(descriptor)
        os.replace(target, local)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


@contextmanager
def _locked(lock_path: str) -> Iterator[None]:
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
