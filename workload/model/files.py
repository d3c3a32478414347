"""A pretrained model's files on this node: a local directory, a Hugging Face Hub id, or an s3:// directory.

`for_this_node` is what every rank calls: the node's local rank 0 downloads (the Hub's snapshot_download, or a copy
of an s3:// prefix through pyarrow.fs, the storage layer Ray Train and workload.storage use, with the pod's AWS
identity), while the node's other ranks wait, then all read the same node-local copy. A 70B model is 140 GB of bf16
files: one download per node through the NAT gateway, not one per GPU.

Only what loading, tokenising and exporting need is fetched (MODEL_FILE_PATTERNS): the safetensors files and their
index, config.json, generation_config.json and the tokenizer's files; never the .bin/.pth duplicates many Hub
repositories also carry.
"""
from __future__ import annotations

import datetime
import fnmatch
import os
from typing import Callable

import torch
import torch.distributed as dist

from workload import node_copy, storage
from workload.model import model_source

MODEL_FILE_PATTERNS = ("*.safetensors", "*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja")
"""Files of a model directory that are fetched: weights (safetensors), config and index (JSON), tokenizer (JSON,
merges.txt, sentencepiece .model, tiktoken) and chat template."""
CONFIG_PATTERNS = ("config.json",)
TOKENIZER_PATTERNS = tuple(pattern for pattern in MODEL_FILE_PATTERNS if pattern != "*.safetensors")
# What pyarrow's S3 client says when no answer came (AWS SDK's curl errors: 6 could not resolve the host, 7 could not
# connect, 28 timed out), as opposed to an answer about the bucket.
UNREACHABLE_SIGNS = ("curlCode: 6", "curlCode: 7", "curlCode: 28", "Couldn't resolve host", "Could not resolve host")
# How long a node's other ranks wait for its local rank 0 to finish downloading: NCCL's default collective timeout
# (10 minutes, Ray Train's 30) is shorter than 140 GB through a NAT gateway, so the wait is a gloo group of its own.
DOWNLOAD_TIMEOUT = datetime.timedelta(hours=3)


def for_this_node(model_id: str, local_rank: int, progress: Callable[[str], None]) -> str:
    """The local directory holding `model_id`'s files on this node, fetched by its local rank 0 alone. A collective:
    every rank of the job calls it. A failed download fails every rank, with the downloader's error on its own."""
    group = dist.new_group(backend="gloo", timeout=DOWNLOAD_TIMEOUT)
    fetched, error = torch.ones(1), None
    if local_rank == 0:
        try:
            fetch(model_id, progress)
        except Exception as failure:  # every rank must reach the all_reduce, or the others wait for hours
            fetched[0], error = 0, failure
    dist.all_reduce(fetched, op=dist.ReduceOp.MIN, group=group)
    dist.destroy_process_group(group)
    if error is not None:
        raise error
    if not fetched.item():
        raise RuntimeError(f"--model_id {model_id}: the download failed on another rank (its log says why)")
    return local_directory(model_id)


def fetch(model_id: str, progress: Callable[[str], None] = lambda line: None,
          patterns: tuple[str, ...] = MODEL_FILE_PATTERNS, required: str | None = "config.json") -> str:
    """Download `model_id`'s files matching `patterns` into this machine's cache (files already there, of the same
    size, are kept) and return the directory; a local directory is returned as it is. A remote directory without
    the `required` file is refused."""
    if os.path.isdir(os.path.expanduser(model_id)):
        return os.path.expanduser(model_id)
    if storage.is_remote(model_id):
        return _copy_remote(model_id, patterns, progress, required)
    from huggingface_hub import snapshot_download

    progress(f"downloading {model_id} from the Hugging Face Hub")
    # HF_TOKEN (trainSecretEnv) authorises gated models; huggingface_hub reads it from the environment.
    return snapshot_download(model_id, allow_patterns=list(patterns))


def local_directory(model_id: str) -> str:
    """Where `fetch` put `model_id` on this machine (it must have run)."""
    if os.path.isdir(os.path.expanduser(model_id)):
        return os.path.expanduser(model_id)
    if storage.is_remote(model_id):
        return _cache_directory(model_id)
    from huggingface_hub import snapshot_download

    return snapshot_download(model_id, allow_patterns=list(MODEL_FILE_PATTERNS), local_files_only=True)


def read_config_directory(model_id: str) -> str:
    """A local directory holding `model_id`'s config.json, for the driver's checks before any worker starts: only
    that file is fetched from s3:// or the Hub (workload.model.model_source: one request, no retries); a local
    directory is read where it is."""
    if storage.is_remote(model_id):
        return _copy_remote(model_id, CONFIG_PATTERNS, lambda line: None, "config.json")
    if model_source.is_path(model_id):
        directory = os.path.expanduser(model_id)
        if not os.path.isdir(directory):
            raise ValueError(f"--model_id {model_id}: {model_source.NO_MODEL_DIRECTORY}")
        return directory
    return model_source.hub_config_directory(model_id)


def _cache_directory(uri: str) -> str:
    """The node-local copy of a remote model directory: under HF_HOME (~/.cache/huggingface), beside the Hub's
    cache, so one volume holds both."""
    from huggingface_hub import constants

    scheme, _, path = uri.partition("://")
    return os.path.join(constants.HF_HOME, "remote-models", scheme, *path.strip("/").split("/"))


def _copy_remote(uri: str, patterns: tuple[str, ...], progress: Callable[[str], None], required: str | None) -> str:
    import pyarrow.fs

    what = f"--model_id {uri}"
    try:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(uri.rstrip("/"))
        listed = filesystem.get_file_info(pyarrow.fs.FileSelector(path, recursive=False))
    except (OSError, ValueError, pyarrow.lib.ArrowException) as error:
        if any(sign in str(error) for sign in UNREACHABLE_SIGNS):
            raise model_source.Unreachable(f"{uri.split('://')[0]}:// is not reachable from this machine "
                                           f"({str(error).splitlines()[0][:200]})") from None
        raise ValueError(f"{what}: cannot list the model directory ({error})") from None
    wanted = [info for info in listed if info.type == pyarrow.fs.FileType.File
              and any(fnmatch.fnmatch(info.base_name, pattern) for pattern in patterns)]
    if required and required not in {info.base_name for info in wanted}:
        raise ValueError(f"{what}: no {required} there; a model directory holds config.json and *.safetensors "
                         "(what save_pretrained writes, or the job's model_<step>/)")
    directory = _cache_directory(uri)
    try:
        # Under a lock beside the directory: a second process on the node (another job's rank, workload.export)
        # waits for this copy and finds its files there.
        node_copy.copy_once(filesystem, path, directory, patterns, progress, recursive=False)
    except (OSError, pyarrow.lib.ArrowException) as error:
        raise ValueError(f"{what}: cannot copy its files ({error})") from None
    return directory
