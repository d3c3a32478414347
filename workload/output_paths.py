"""A file or directory a command WRITES (tools.loss_curve's and tools.gpu_panel's --out, workload.export's OUT,
tools.capacity's stack file), checked before any work and any heavy import: one rule, as workload/user_files.py is
the one rule for the files the commands read.

- An existing path that is not what the command writes (a FIFO, a socket, a device; a directory for a file, a file
  for a directory) is refused unopened: open(FIFO, "w") waits for a reader that never comes, and writing a device or
  a socket is no file the user gets back.
- A name in the path over NAME_MAX bytes, or the whole path over PATH_MAX bytes, is refused naming the limit: the
  kernel answers open() and mkdir() with ENAMETOOLONG ("File name too long"), which came out as a traceback after
  the seconds of a checkpoint's load. Linux's limits (include/uapi/linux/limits.h: NAME_MAX 255 "chars in a file
  name", PATH_MAX 4096 "chars in a path name including nul"); os.pathconf asks the file system where it can (ext4,
  XFS and tmpfs all say 255), the constants serve where it cannot (a directory not made yet). Bytes, not characters:
  the limit is on the encoded name (os.fsencode), and one 'é' is two.
- A symbolic link at the path (to a file, a directory, or nothing) is refused naming the flag, never written
  through: open(link, O_TRUNC) truncates the link's TARGET (open(2): "If pathname is a symbolic link, then it is
  dereferenced"), which may be another user's file in a shared directory, and makedirs on a dangling link fails
  with FileExistsError after the seconds of a checkpoint's load. The writers open with O_NOFOLLOW too (open(2):
  "If the trailing component ... of pathname is a symbolic link, then the open fails, with the error ELOOP"), so a
  link put there after the check is not followed either. Links in the directories above are the user's own layout
  and are followed.

The refusals never repeat the path whole (it may be 4 KiB); they name the flag, the limit and how long it was.
Standard library only.
"""
from __future__ import annotations

import os
import stat

from workload.user_files import kind

NAME_MAX = 255
PATH_MAX = 4096  # with the terminating NUL: a path of at most 4,095 bytes


def _name_max(existing: str) -> int:
    """NAME_MAX of the file system that holds `existing` (an existing directory), or Linux's 255."""
    try:
        return int(os.pathconf(existing, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # no pathconf (not POSIX), a name it does not know
        return NAME_MAX


def length_problem(path: str) -> str | None:
    """Why `path` cannot be a name the kernel takes (a NUL, a name over NAME_MAX bytes, the whole over PATH_MAX), or
    None. Refuses without repeating the path."""
    if "\x00" in path:
        return "holds a NUL character, which no path can"
    encoded = os.fsencode(os.path.abspath(path))
    if len(encoded) >= PATH_MAX:
        return f"is {len(encoded):,} bytes as an absolute path; allowed: at most {PATH_MAX - 1:,} (PATH_MAX)"
    existing = os.path.abspath(path)
    while not os.path.isdir(existing) and existing != os.path.dirname(existing):
        existing = os.path.dirname(existing)
    limit = min(NAME_MAX, _name_max(existing))
    longest = max((len(name) for name in encoded.split(b"/")), default=0)
    if longest > limit:
        return f"has a name of {longest:,} bytes; allowed: at most {limit} bytes a name (NAME_MAX)"
    return None


def output_problem(path: str, directory: bool = False) -> str | None:
    """Why a command must not write `path` (a file; with `directory`, a directory it creates or fills), or None: its
    name's length (length_problem), a symbolic link (never written through), or an existing path that is not a
    regular file (a directory) - refused unopened. OSError other than "no such file" (no permission to look) is the
    caller's, as for any write."""
    if (why := length_problem(path)) is not None:
        return why
    if os.path.islink(path):  # lstat: a dangling link too
        return (f"is a symbolic link (to {'a missing path' if not os.path.exists(path) else 'another file'}); "
                "a command never writes through a link")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # a file where a directory of the path should be
        above = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(above):
            above = os.path.dirname(above)
        return f"goes through {above}, which is a file, not a directory"
    wanted, test = ("a directory", stat.S_ISDIR) if directory else ("a regular file", stat.S_ISREG)
    if test(mode):
        return None
    return f"is {kind(mode) if not stat.S_ISREG(mode) else 'a file'}, not {wanted} (refused unopened)"


def check_output(flag: str, path: str, directory: bool = False) -> None:
    """ValueError naming `flag` (the command's flag or argument: --out, OUT) when `output_problem` refuses `path`;
    workload/cli.py run() answers it with exit 2."""
    if (why := output_problem(path, directory)) is not None:
        named = f" {path}" if len(path) <= SHOWN_PATH_CHARS and path.isprintable() else ""
        raise ValueError(f"{flag}{named}: the path {why}; give a new {'directory' if directory else 'file'} name")


# A path a refusal repeats: one a person types (longer ones are named by their length only).
SHOWN_PATH_CHARS = 200
