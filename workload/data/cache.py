"""The token cache: the key a dataset's token shards are kept under, where they are kept, and how a directory of them
becomes readable only once it is whole.

The key is a sha256 over everything that changes the tokens: the data's identity (a local file's size, mtime and the
hash of its first MiB; a remote file's size, mtime and head hash through pyarrow's file system; a Hugging Face
dataset's id, config, split and revision), the tokenizer (its serialized vocabulary and rules, special tokens and chat
template), seq_len, the data format, the field names, train_on_prompt, truncation, the evaluation set, the seed, and
FORMAT_VERSION (raised whenever the shards' layout or the packing changes).

Where: `<storage_path>/datasets/<key>/` (local or s3://, through pyarrow.fs as the rest of the run's storage), else
the node-local cache root itself. The node-local root is RAYTRAIN_DATA_CACHE (on the cluster an NVMe emptyDir),
default `<tempdir>/raytrain-data`; a node copies remote shards there once, under a file lock, and its ranks share
that copy.

Atomic: the stage writes into `<key>.partial-<uuid>/`; locally that directory is renamed to `<key>/` once whole; on
S3 (which has no rename) the files are uploaded and COMPLETE.json last. A reader requires COMPLETE.json, so a failed
stage's output is never read.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from typing import Callable

from workload import storage
from workload.config import TrainConfig, is_file_dataset

FORMAT_VERSION = 1
CACHE_VARIABLE = "RAYTRAIN_DATA_CACHE"
COMPLETE = "COMPLETE.json"
HEAD_BYTES = 2**20
# A file at least this large that passed the data gate whole is remembered on the node (size, mtime, first MiB and
# the fields read): the local run and the job's driver each check every record, seconds a run at 100 MB.
REMEMBER_CHECKED_BYTES = 16 * 2**20
# What of the run's settings changes the tokens or their blocks (the rest, batch size and steps among them, do not).
TOKEN_SETTINGS = ("seq_len", "data_format", "text_field", "messages_field", "prompt_field", "completion_field",
                  "train_on_prompt", "truncation", "eval_fraction", "eval_split", "dataset_split", "dataset_config",
                  "seed")


def node_root() -> str:
    """This node's cache directory (RAYTRAIN_DATA_CACHE, or one under the system's temporary directory)."""
    return os.environ.get(CACHE_VARIABLE) or os.path.join(tempfile.gettempdir(), "raytrain-data")


def root(cfg: TrainConfig) -> str:
    """Where the shards are kept: beside the run (storage_path/datasets), or on this node without a storage_path."""
    return storage.join(cfg.storage_path, "datasets") if cfg.storage_path else node_root()


def data_identity(cfg: TrainConfig) -> dict:
    """What names this exact data: a file's size, modification time and first MiB; a Hub dataset's revision."""
    if not is_file_dataset(cfg.dataset):
        return {"hub": cfg.dataset, "revision": _hub_revision(cfg.dataset)}
    if "://" not in cfg.dataset:
        path = os.path.expanduser(cfg.dataset)
        status = os.stat(path)
        with open(path, "rb") as file:
            head = hashlib.sha256(file.read(HEAD_BYTES)).hexdigest()
        return {"path": os.path.abspath(path), "size": status.st_size, "mtime_ns": status.st_mtime_ns, "head": head}
    import pyarrow.fs

    filesystem, path = pyarrow.fs.FileSystem.from_uri(cfg.dataset)
    info = filesystem.get_file_info(path)
    with filesystem.open_input_file(path) as file:
        head = hashlib.sha256(file.read(min(HEAD_BYTES, info.size or 0))).hexdigest()
    # S3's ETag is not in pyarrow's file info; size, mtime and the head's hash change with any upload.
    return {"uri": cfg.dataset, "size": info.size, "mtime_ns": info.mtime_ns, "head": head}


def _hub_revision(dataset: str) -> str:
    """The Hub repo's commit sha; offline, the one datasets' cache holds (empty when neither answers: the key then
    changes with nothing of the data, which a new --seed or a cleared cache fixes)."""
    if os.environ.get("HF_HUB_OFFLINE", "").upper() not in ("1", "ON", "YES", "TRUE"):
        try:
            from huggingface_hub import HfApi

            return HfApi().dataset_info(dataset).sha or ""
        except Exception:  # noqa: BLE001 - no network, a private repo: fall back to the local cache's revision
            pass
    try:
        from huggingface_hub import scan_cache_dir

        for repo in scan_cache_dir().repos:
            if repo.repo_id == dataset and repo.repo_type == "dataset":
                return max(repo.revisions, key=lambda revision: revision.last_modified).commit_hash
    except Exception:  # noqa: BLE001 - no cache directory yet
        pass
    return ""


def _checked_path(cfg: TrainConfig, fields: tuple) -> str | None:
    identity = data_identity(cfg)
    if identity.get("size", 0) < REMEMBER_CHECKED_BYTES:
        return None
    digest = hashlib.sha256(json.dumps([identity, list(fields), FORMAT_VERSION], default=str).encode()).hexdigest()
    return os.path.join(node_root(), "checked", f"{digest}.json")


def checked_before(cfg: TrainConfig, fields: tuple) -> dict | None:
    """What workload.data.validate found in this exact file (the same `fields` read) in an earlier process, or None."""
    try:
        path = _checked_path(cfg, fields)
        with open(path) as file:
            return json.load(file)
    except (OSError, ValueError, TypeError):
        return None


def remember_checked(cfg: TrainConfig, fields: tuple, found: dict) -> None:
    try:
        path = _checked_path(cfg, fields)
        if path and found.get("complete"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(f"{path}.{uuid.uuid4().hex}", "w") as file:
                json.dump(found, file)
            os.replace(file.name, path)
    except (OSError, TypeError):
        pass  # a cache that cannot be written: the next run checks the file again


def tokenizer_identity(tokenizer) -> str:
    """sha256 of what the tokenizer turns text into: its serialized model and rules (a fast tokenizer's
    tokenizer.json), its special tokens and its chat template (--chat_template's, applied already, or its own)."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
    else:
        digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    digest.update(json.dumps([str(token) for token in tokenizer.all_special_tokens]).encode())
    digest.update(json.dumps([tokenizer.eos_token_id, tokenizer.pad_token_id]).encode())
    digest.update((getattr(tokenizer, "chat_template", None) or "").encode() if isinstance(
        getattr(tokenizer, "chat_template", None), (str, type(None))) else json.dumps(tokenizer.chat_template).encode())
    return digest.hexdigest()


def key(cfg: TrainConfig, tokenizer) -> str:
    """The cache key (64 hex digits) of --dataset tokenized for this run."""
    described = {"format_version": FORMAT_VERSION, "data": data_identity(cfg),
                 "tokenizer": tokenizer_identity(tokenizer),
                 "settings": {name: getattr(cfg, name) for name in TOKEN_SETTINGS}}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def location(cfg: TrainConfig, cache_key: str) -> str:
    return storage.join(root(cfg), cache_key)


def _filesystem(path: str):
    import pyarrow.fs

    return pyarrow.fs.FileSystem.from_uri(path)


def manifest(path: str) -> dict | None:
    """The COMPLETE.json of the shards at `path` (local or remote), or None when they are not whole."""
    if not storage.is_remote(path):
        try:
            with open(os.path.join(path, COMPLETE)) as file:
                return json.load(file)
        except (OSError, ValueError):
            return None
    import pyarrow.fs

    filesystem, inner = _filesystem(path)
    try:
        with filesystem.open_input_stream(f"{inner}/{COMPLETE}") as file:
            return json.loads(file.read())
    except (OSError, ValueError, pyarrow.lib.ArrowException):
        return None


def partial_directory(path: str) -> str:
    """A fresh local directory to write the shards of `path` into: beside it when it is local (so the rename that
    publishes it stays on one file system), else in this node's cache."""
    parent = os.path.dirname(path) if not storage.is_remote(path) else node_root()
    name = path.rstrip("/").rsplit("/", 1)[-1]
    directory = os.path.join(parent, f"{name}.partial-{uuid.uuid4().hex}")
    os.makedirs(directory)
    return directory


def publish(partial: str, path: str, complete: dict) -> None:
    """Make the shards written in `partial` readable at `path`: COMPLETE.json written last, then a local rename, or
    an upload with COMPLETE.json uploaded after every other file (the node-local copy is kept for this node)."""
    with open(os.path.join(partial, COMPLETE), "w") as file:
        json.dump(complete, file, indent=1)
    if not storage.is_remote(path):
        _rename_into(partial, path)
        return
    filesystem, inner = _filesystem(path)
    filesystem.create_dir(inner, recursive=True)
    for name in sorted(os.listdir(partial), key=lambda name: name == COMPLETE):
        with open(os.path.join(partial, name), "rb") as source, filesystem.open_output_stream(f"{inner}/{name}") as out:
            shutil.copyfileobj(source, out, 8 * 2**20)
    _rename_into(partial, os.path.join(node_root(), path.rstrip("/").rsplit("/", 1)[-1]))


def _rename_into(partial: str, destination: str) -> None:
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    try:
        os.rename(partial, destination)
    except OSError:
        if manifest(destination) is not None:  # another stage published the same key first: the same tokens
            shutil.rmtree(partial, ignore_errors=True)
            return
        shutil.rmtree(destination)  # a directory left incomplete (no COMPLETE.json): never read, replaced
        os.rename(partial, destination)


def local_directory(path: str, say: Callable[[str], None] = lambda line: None) -> str:
    """The whole shards of `path` as a local directory: itself when local, else this node's copy, downloaded once
    under a file lock that the node's other ranks wait on."""
    if not storage.is_remote(path):
        if manifest(path) is None:
            raise ValueError(f"the token shards at {path} are not complete (no {COMPLETE})")
        return path
    local = os.path.join(node_root(), path.rstrip("/").rsplit("/", 1)[-1])
    if manifest(local) is not None:
        return local
    os.makedirs(node_root(), exist_ok=True)
    with open(f"{local}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if manifest(local) is None:
            _download(path, local, say)
    return local


def _download(path: str, local: str, say: Callable[[str], None]) -> None:
    if manifest(path) is None:
        raise ValueError(f"the token shards at {path} are not complete (no {COMPLETE})")
    import pyarrow.fs

    filesystem, inner = _filesystem(path)
    partial = partial_directory(local)
    say(f"copying the token shards {path} to {local}")
    infos = filesystem.get_file_info(pyarrow.fs.FileSelector(inner))
    for info in sorted(infos, key=lambda info: info.base_name == COMPLETE):
        destination = os.path.join(partial, info.base_name)
        with filesystem.open_input_stream(info.path) as source, open(destination, "wb") as out:
            shutil.copyfileobj(source, out, 8 * 2**20)
    _rename_into(partial, local)
