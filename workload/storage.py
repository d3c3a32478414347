"""Where a run keeps what it writes: a local directory or a URI (s3://...), the same storage path Ray Train uses.

Remote paths go through pyarrow.fs, which Ray Train itself uses for its checkpoints (so the same credentials apply:
the node's or pod's AWS identity). Directories are written locally first and copied up whole: the model files and
event files are written by libraries (safetensors, tensorboardX) that want a local path.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator

from workload import cli, node_copy

# Node-local directories the Ray worker pods point at their node's fast disk (infra/kubernetes/local_storage.py: an
# emptyDir, on the instance store NVMe where the type has one). Unset, as in the local run, the system's temporary
# directory serves. The Hugging Face cache needs no name of ours: huggingface_hub and datasets read HF_HOME.
CHECKPOINT_STAGING_ENV = "RAYTRAIN_CHECKPOINT_STAGING"


def unwritable_directory(path: str) -> str | None:
    """Why a command cannot write into the directory `path` (a file in the way, or an ancestor that refuses a file),
    or None: its nearest existing ancestor is a directory that takes a file. Permissions alone do not tell (root
    passes any access check, and /proc refuses anyway), so the ancestor is written to once, with a temporary file
    that is gone at once. The rule of a local --storage_path, the cache variables (workload/run/writable.py) and
    workload.export's OUT."""
    existing = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a directory"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        return f"cannot be written: {error.strerror} ({existing})"
    return None
"""Where each rank writes its checkpoint shards before Ray Train uploads them to the storage path."""
DATA_CACHE_ENV = "RAYTRAIN_DATA_CACHE"
"""Where the data stage keeps what it derives from the dataset (token shards) on a node."""


# The remote locations local_copy reads: the stack's storage (S3) and a local file:// URI. What the job's pods read
# is S3 only (their Pod Identity role); another cloud's client (pyarrow's GCS) waits minutes on credentials it
# cannot find and does not stop on Ctrl-C.
COPIED_SCHEMES = ("s3", "file")


def is_remote(path: str) -> bool:
    return "://" in path


def check_remote(location: str, what: str) -> None:
    """A remote `location` with credentials in it (s3://KEY:SECRET@bucket/..., ?X-Amz-Signature=...: the one rule,
    workload/config/uri_credentials.py) refused as bad input naming `what`, before any request and without repeating
    them: pyarrow's S3 client takes the user information for the bucket's host, asks the network for its region for
    seconds, and its error quoted the URI whole. Every reader and writer of a remote location here calls it."""
    from workload.config.uri_credentials import has_credentials, shown_uri

    if is_remote(location) and has_credentials(location):
        raise cli.UsageError(f"{what} {shown_uri(location)} holds credentials in the URI; give the location alone "
                             "(s3://BUCKET/PREFIX): AWS's own credentials (AWS_PROFILE, the pod's identity) sign the "
                             "requests")


def checkpoint_name(step: int) -> str:
    """The directory Ray Train keeps a run's checkpoint of `step` in, under the run's directory."""
    return f"checkpoint_{step:06d}"


def model_name(step: int) -> str:
    """The directory the job exports the model of `step` to, under the run's directory."""
    return f"model_{step:06d}"


def join(base: str, *names: str) -> str:
    """A path under `base`, a local directory or a URI (os.path.join would not keep a URI's slashes)."""
    return "/".join([base.rstrip("/"), *names]) if is_remote(base) else os.path.join(base, *names)


def staging_directory(prefix: str) -> str:
    """A new, empty directory for a checkpoint's shards: under $RAYTRAIN_CHECKPOINT_STAGING when set (created if
    missing), else under the system's temporary directory (tempfile.mkdtemp's own choice)."""
    parent = os.environ.get(CHECKPOINT_STAGING_ENV) or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


# What the AWS SDK for C++ (pyarrow's S3 client) names a request that never reached a server: curl could not connect
# (CURLE_COULDNT_CONNECT, a port that refuses) or resolve the host (aws-sdk-cpp CurlHttpClient maps both to
# CoreErrors::NETWORK_CONNECTION). pyarrow's default AwsStandardS3RetryStrategy(max_attempts=3) retries it with
# backoff: 6 s before a refused port was said (pyarrow docs, pyarrow.fs.S3FileSystem retry_strategy).
UNREACHED = "NETWORK_CONNECTION"


def check_connects(filesystem, path: str, what: str) -> None:
    """One request of a single attempt before the copy: a connection that fails on its first try (a refused port, a
    host that does not resolve: AWS_ENDPOINT_URL_S3 at the wrong place) is said at once, exit 3. Any other answer,
    an error too (throttling, a server's 5xx, a missing key), leaves the copy to the client's own retries, so a
    real network keeps them. Not for other file systems (file://: no network)."""
    import pyarrow.fs

    if not isinstance(filesystem, pyarrow.fs.S3FileSystem):
        return
    options = dict(filesystem.__reduce__()[1][0])  # the client's own settings (endpoint, region, credentials)
    once = pyarrow.fs.S3FileSystem(**options, retry_strategy=pyarrow.fs.AwsStandardS3RetryStrategy(max_attempts=1))
    try:
        once.get_file_info(path)
    except OSError as error:
        if UNREACHED in str(error):
            raise cli.EnvironmentProblem(f"{what}: S3 is not reachable from this machine (the connection failed: "
                                         f"{str(error).rsplit('Details: ', 1)[-1][:160]})",
                                         hint="check the network and AWS_ENDPOINT_URL_S3, or give a path on this "
                                              "machine") from None


def upload(local_directory: str, uri: str) -> None:
    """Copy a local directory's files to a remote directory (existing files are overwritten)."""
    check_remote(uri, "the storage location")
    import pyarrow.fs

    filesystem, path = pyarrow.fs.FileSystem.from_uri(uri)
    filesystem.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(local_directory, path, destination_filesystem=filesystem)


@contextmanager
def writing(destination: str) -> Iterator[str]:
    """A local directory to write `destination`'s files into: itself, or a temporary one uploaded on success."""
    if not is_remote(destination):
        os.makedirs(destination, exist_ok=True)
        yield destination
        return
    scratch = tempfile.mkdtemp(prefix="upload-")
    try:
        yield scratch
        upload(scratch, destination)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def node_local_checkpoint(filesystem, path: str, progress=lambda line: None) -> str:
    """A checkpoint Ray Train hands a resuming worker (its pyarrow filesystem and path) as a local directory: itself
    when local, else one copy a node under the staging directory ($RAYTRAIN_CHECKPOINT_STAGING, the NVMe), made by
    the node's first rank in parallel parts while the others wait (workload.node_copy). Ray's own
    Checkpoint.as_directory would copy it file by file into the container's /tmp, on the root volume. The caller
    removes a copy (`remove_node_local_checkpoint`) once every rank has read it."""
    import pyarrow.fs

    if isinstance(filesystem, pyarrow.fs.LocalFileSystem):
        return path
    parent = os.environ.get(CHECKPOINT_STAGING_ENV) or tempfile.gettempdir()
    destination = os.path.join(parent, "resume", *path.strip("/").split("/"))
    node_copy.copy_once(filesystem, path, destination, progress=progress)
    return destination


def remove_node_local_checkpoint(directory: str, path: str) -> None:
    """Remove what node_local_checkpoint copied (nothing when it returned the checkpoint itself)."""
    if directory != path:
        shutil.rmtree(directory, ignore_errors=True)


def nearest_sibling(path: str) -> str | None:
    """The directory beside a missing `path` whose name is nearest to its name (checkpoint_00020, a digit short, for
    checkpoint_000020), as the user wrote the parent; None when none is near."""
    import difflib

    parent, name = os.path.split(os.path.normpath(path))
    try:
        siblings = [entry.name for entry in os.scandir(parent or ".") if entry.is_dir()]
    except OSError:
        return None
    match = difflib.get_close_matches(name, siblings, n=1, cutoff=0.8)
    return os.path.join(parent, match[0]) if match else None


@contextmanager
def local_copy(source: str, what: str = "CHECKPOINT") -> Iterator[str]:
    """`source` as a local directory: itself, or a temporary copy of a remote one (disk, not memory). Errors name
    `what` (the argument the user gave)."""
    if not is_remote(source):
        if not os.path.isdir(source):
            guess = nearest_sibling(source)
            raise cli.UsageError(f"{what} {source}: no such directory"
                                 + (f" (did you mean {guess}?)" if guess else ""))
        yield source
        return
    check_remote(source, what)
    scheme = source.split("://", 1)[0].lower()
    if scheme not in COPIED_SCHEMES:  # gs:// and the like: pyarrow's clients retry unseen credentials for minutes
        from workload.s3_names import s3_hint

        raise cli.UsageError(f"{what} {source}: a {scheme}:// location is not read here; allowed: a local directory "
                             f"or {' or '.join(f'{name}://' for name in COPIED_SCHEMES)}{s3_hint(source)}")
    import pyarrow.fs

    try:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(source)
        scratch = tempfile.mkdtemp(prefix="download-")
    except ValueError as error:  # pyarrow's ArrowInvalid too: a URI it cannot parse, an unknown scheme
        raise cli.UsageError(f"{what} {source}: {error}") from None
    except (OSError, pyarrow.lib.ArrowException) as error:  # the bucket's region asked of S3, over the network
        raise cli.EnvironmentProblem(f"{what} {source} cannot be reached: {error}") from None
    check_connects(filesystem, path, f"{what} {source}")
    try:
        try:
            node_copy.copy_tree(filesystem, path, scratch)
        except (OSError, pyarrow.lib.ArrowException) as error:
            raise cli.EnvironmentProblem(f"{what} {source} cannot be read: {error}") from None
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
