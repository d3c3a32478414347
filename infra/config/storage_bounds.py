"""trainStoragePath's lengths and places: a location where the job could never write its files, refused at preview.

- S3: an object key is at most 1,024 bytes of UTF-8 (Amazon S3 User Guide, "Naming Amazon S3 objects": "The object
  key name is a sequence of Unicode characters with UTF-8 encoding of up to 1,024 bytes long"). The job writes under
  the prefix: the run's directory (trainRunId, 32 at most), Ray Train's checkpoint_<timestamp> directories and the
  shards' file names in them, datasets/<cache key>/<shard>, and MLflow's mlflow/<experiment>/<run id>/artifacts/...;
  none of these is over 200 bytes, so the prefix keeps JOB_SUFFIX_MARGIN (256) bytes of the 1,024 for them.
- A local path (absolute, or file:///path): Linux refuses a name over NAME_MAX (255 bytes) and a path over PATH_MAX
  (4,096 bytes, the terminating NUL included) with ENAMETOOLONG; the same margin is kept for the job's own names.
  /proc, /sys and /dev are the kernel's pseudo file systems, where no directory can be made for a checkpoint.
"""
from __future__ import annotations

from urllib.parse import unquote

from workload.user_files import PSEUDO_ROOTS

KEY = "trainStoragePath"
S3_KEY_MAX_BYTES = 1024
NAME_MAX = 255
PATH_MAX = 4096
JOB_SUFFIX_MARGIN = 256
# The kernel's pseudo-file systems a user file is refused in (workload/user_files.py), and /dev: no directory of a
# run can be made under any of them.
PSEUDO_FILE_SYSTEMS = (*PSEUDO_ROOTS, "/dev")


def check_storage_bounds(path: str) -> None:
    """trainStoragePath (checked for its form by infra.config.rules.check_storage_path): refused where the job's keys
    or paths under it would be too long, or where it is a kernel pseudo file system. The refusal gives lengths only."""
    if path.startswith("s3://"):
        prefix = path.removeprefix("s3://").partition("/")[2].strip("/")
        size = len(prefix.encode())
        room = S3_KEY_MAX_BYTES - JOB_SUFFIX_MARGIN
        if size > room:
            raise ValueError(f"config key {KEY!r}: the prefix after the bucket is {size:,} bytes, and S3 object keys "
                             f"are at most {S3_KEY_MAX_BYTES:,} bytes with the job's own {JOB_SUFFIX_MARGIN} bytes of "
                             f"names under it; allowed: a prefix of at most {room} bytes")
        return
    local = path.removeprefix("file://") if path.startswith("file:///") else path
    if not local.startswith("/"):
        return  # not a local path: check_storage_path says what is allowed
    local = unquote(local)
    longest = max((len(name.encode()) for name in local.split("/")), default=0)
    if longest > NAME_MAX:
        raise ValueError(f"config key {KEY!r}: a directory name in the path is {longest:,} bytes, and Linux refuses "
                         f"names over {NAME_MAX} bytes (NAME_MAX); allowed: each name at most {NAME_MAX} bytes")
    size, room = len(local.encode()), PATH_MAX - 1 - JOB_SUFFIX_MARGIN
    if size > room:
        raise ValueError(f"config key {KEY!r}: the path is {size:,} bytes, and Linux refuses paths over {PATH_MAX:,} "
                         f"bytes (PATH_MAX) with the job's own {JOB_SUFFIX_MARGIN} bytes of names under it; allowed: a "
                         f"path of at most {room:,} bytes")
    top = "/" + local.strip("/").split("/")[0]
    if top in PSEUDO_FILE_SYSTEMS:
        raise ValueError(f"config key {KEY!r}: {top} is a kernel pseudo file system, where no checkpoint directory "
                         f"can be made; allowed: a directory on a disk of the GPU node, such as /mnt/checkpoints, or "
                         "s3://bucket/prefix")
