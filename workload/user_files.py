"""Files the user (or storage someone else can write) names, measured before a byte is read: one rule for every reader
of a config file, a model or tokenizer directory's files, a chat template, a dataset file and a checkpoint's files.

Each must be a regular file (os.stat, so a link to one passes where the reader allows links; a FIFO is refused, not
opened: opening it waits for a writer that never comes; a device or a directory is refused too), within the bound of
its kind by the size it claims and by what its blocks store, and without holes (workload/sparse_files.py: a 2 GiB
`truncate -s` file reads as 2 GiB of zeros, which json.load would allocate whole). `read_bytes` then opens it without
waiting (O_NONBLOCK), checks the descriptor again, and reads no further than the bound whatever it became since.
Standard library only: the commands call it before their heavy imports.
"""
from __future__ import annotations

import os
import stat

from workload.sparse_files import hole_problem

# For a file bounded by something else than its size (a weight file by its header's claims, a dataset file by its
# records): off_t's largest, so only its kind and its holes are checked.
UNBOUNDED = 2**63 - 1


class Refused(ValueError):
    """A file refused unread; str() is "PATH WHY", `why` the words after its name."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, words in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                        (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a file"


def problem(path: str | os.PathLike, max_bytes: int, follow_links: bool = True) -> str | None:
    """Why the file at `path` is not read (the words after its name), or None: not a regular file, more than
    `max_bytes` by the size it claims, or sparse (a hole: its blocks store less than it claims). With
    follow_links=False a symbolic link is refused too (a checkpoint's files, which another's storage decides).
    OSError (no such file, no permission) is the caller's."""
    status = os.stat(path) if follow_links else os.lstat(path)
    if not stat.S_ISREG(status.st_mode):
        return f"is {kind(status.st_mode)}, not a regular file (refused unread)"
    if (pseudo := _pseudo_file_system(path)) is not None:  # /proc/self/environ is "regular", of size 0, and holds secrets
        return f"is a file of the kernel's {pseudo} (through a link or not), not a file of yours (refused unread)"
    if status.st_size > max_bytes:
        return f"is {status.st_size:,} bytes; allowed: at most {max_bytes:,} (refused unread)"
    return hole_problem(path)


# The kernel's pseudo-file systems: their files say "regular" to stat, report sizes of 0 or 4,096 whatever they hold,
# and hold the process's environment (/proc/self/environ), memory maps and the machine's settings.
PSEUDO_ROOTS = ("/proc", "/sys")


def _pseudo_file_system(path: str | os.PathLike) -> str | None:
    real = os.path.realpath(path)
    return next((root for root in PSEUDO_ROOTS if real == root or real.startswith(root + "/")), None)


def read_bytes(path: str | os.PathLike, max_bytes: int, follow_links: bool = True) -> bytes:
    """The bytes of `path` once `problem` passes it (Refused otherwise; OSError when it cannot be opened)."""
    path = os.fspath(path)
    if (why := problem(path, max_bytes, follow_links)) is not None:
        raise Refused(path, why)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    descriptor = os.open(path, flags)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # replaced between the stat and the open
            raise Refused(path, "is not a regular file (refused unread)")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(path, f"is more than {max_bytes:,} bytes (refused unread)")
    return data


def check_existing(directory: str | os.PathLike, names: tuple[str, ...], max_bytes: int) -> None:
    """Each of `names` that `directory` holds passes `problem` (Refused naming the first that does not): the files a
    library (transformers) will read of a directory, checked before it does."""
    for name in names:
        path = os.path.join(directory, name)
        if os.path.lexists(path):
            try:
                why = problem(path, max_bytes)
            except OSError as error:  # a dangling link, a loop: the library could not read it either
                why = f"cannot be read ({error.strerror})"
            if why is not None:
                raise Refused(path, why)
