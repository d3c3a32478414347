"""What trainDataset's data stage costs, known at preview: the dataset's size (S3 HeadObject, the Hub's file list),
the tokens it makes, the token shards' bytes and the stage's seconds on the Ray cluster's CPUs, as the stack output
jobDataPlan; a dataset whose shards cannot fit where they are written is refused naming trainDataset.

Where the bytes go (workload/data/stage.py, cache.py): the stage runs in the job's driver, on the Ray head, which
appends the token streams to its node-local cache (the container's temporary directory, on the system node's root
volume beside the training image), packs them into the shards, deletes the streams, uploads the shards to
trainStoragePath/datasets/<key>/ and keeps its copy. Each GPU node copies the shards once to its data cache
(infra/kubernetes/local_storage.py: the instance store NVMe, or the gp3 root volume), beside the checkpoint staging.

The rates are measured (bench/record/data_scale.py; bench/results/data_scale-cpu-2026-12-06.jsonl, RESULTS.md "The
data stage") on synthetic .jsonl text and chat with a 32k byte-level BPE: another tokenizer or corpus gives other
figures, so the plan's are estimates (~). A dataset whose size cannot be read (no network, access denied) is a
warning and no plan, as for its records (infra/preview/dataset_records.py).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from infra.aws import node_storage
from infra.aws.cluster import SYSTEM_DISK_GIB
from infra.config import AwsIdentity, InstanceFacts, StackConfig, s3_location
from infra.kubernetes import devices, raycluster
from infra.preview import dataset_records
from workload.config import is_local_dataset

KEY = dataset_records.KEY
# Bytes of the dataset per token, and tokens per CPU second of the stage (its Ray workers' CPU time: the figure that
# does not depend on the load beside them), from data_scale-cpu-2026-12-06.jsonl: text 1,000,002,125 bytes -> 164.8 M
# tokens (6.07; 6.08 at 100 MB), 404-530 k tokens per CPU s; chat 100,000,669 bytes -> 17.35 M tokens (5.76), 293-297 k.
# The lower rate of each. prompt-completion is rendered and packed as chat is, so it takes chat's figures.
BYTES_PER_TOKEN = {"text": 6.07, "examples": 5.76}
TOKENS_PER_CPU_SECOND = {"text": 404_000, "examples": 293_000}
# Examples are packed first fit into blocks of seq_len, the rest padding: 11,424 blocks of 2048 for those 17.35 M
# tokens, 1.35 block slots a token (the same file). Text blocks have no padding.
SLOTS_PER_TOKEN = {"text": 1.0, "examples": 1.35}
# workload/data/shards.py: every slot an int32 (TOKEN_DTYPE, whatever the vocabulary), one row per block for text and
# three (ids, labels, positions) for examples; the streams the stage writes before packing are int32 ids (and
# labels for examples) a token. Each example's length and flag (9 bytes) and the .npy headers are left out.
TOKEN_BYTES = 4
SHARD_ROWS = {"text": 1, "examples": 3}
STREAM_ROWS = {"text": 1, "examples": 2}
# A compressed file holds more text than its size. Parquet: the Hub's parquet files are written by datasets with
# pyarrow's default codec, Snappy, whose README gives "about 1.5-1.7x for plain text": 1.7 (the plan errs large; the
# JSON framing a .jsonl has and a parquet column lacks is a few percent of these records). gzip: about 3x on English
# prose, its usual ratio. On the benchmark's synthetic corpora (20 MB, measured for this) Snappy parquet gave 2.7x
# and gzip 4.7x, but their words repeat more than real text's, so these are not used.
EXPANSION = {".parquet": 1.7, ".gz": 3.0}
# kubelet evicts pods once a node's file system has less than 10% available (Kubernetes "Node-pressure Eviction":
# the default hard threshold nodefs.available<10%, which EKS's AL2023 AMIs keep), so 90% of a disk is usable.
USABLE_DISK = 0.9
# The training image on a root volume (the Ray head's, and a GPU node's without instance store): tens of GiB, with
# containerd's compressed layers and unpacked snapshot both kept (infra/aws/cluster.py: a 50 GiB disk filled up).
IMAGE_GIB = 50


@dataclass(frozen=True)
class DatasetSize:
    """What was read of trainDataset: its stored bytes, the text they hold (compressed files expanded), and what."""

    stored_bytes: int
    text_bytes: float
    what: str


@dataclass(frozen=True)
class DataPlan:
    """The stage's estimate for one dataset size, format and cluster."""

    size: DatasetSize
    data_format: str
    tokens: float
    shard_bytes: float
    """train.npy and eval.npy: what the storage path holds and each GPU node copies."""
    stage_bytes: float
    """The head's peak while packing: the streams and the shards both."""
    cpus: int
    stage_seconds: float

    def summary(self) -> str:
        return (f"data: ~{_bytes(self.size.stored_bytes)} {self.size.what} -> ~{_count(self.tokens)} tokens, "
                f"shards ~{_bytes(self.shard_bytes)}, stage ~{_seconds(self.stage_seconds)} on {self.cpus} Ray CPUs "
                "(a cache hit tokenizes nothing)")

    def as_dict(self) -> dict:
        kind = _kind(self.data_format)
        return {
            "summary": self.summary(),
            "dataset_gb": round(self.size.stored_bytes / 1e9, 3),
            "text_gb": round(self.size.text_bytes / 1e9, 3),
            "tokens_millions": round(self.tokens / 1e6, 1),
            "shards_gb": round(self.shard_bytes / 1e9, 3),
            "stage_peak_gb": round(self.stage_bytes / 1e9, 3),
            "stage_seconds": round(self.stage_seconds, 1),
            "cpus": self.cpus,
            "basis": (f"{BYTES_PER_TOKEN[kind]:g} bytes a token and {TOKENS_PER_CPU_SECOND[kind]:,} tokens per CPU "
                      f"second ({kind}, measured: bench/results/data_scale-cpu-2026-12-06.jsonl, a 32k BPE); "
                      f"{TOKEN_BYTES * SHARD_ROWS[kind]} bytes a block slot, {SLOTS_PER_TOKEN[kind]:g} slots a "
                      "token; " + ", ".join(f"{suffix} read as {factor:g}x its size" for suffix, factor in EXPANSION.items())
                      + "; the upload and the nodes' copy not counted"),
        }


def _kind(data_format: str) -> str:
    return "text" if data_format == "text" else "examples"


def expansion(name: str) -> float:
    """How many bytes of text a byte of the file `name` holds."""
    return next((factor for suffix, factor in EXPANSION.items() if name.endswith(suffix)), 1.0)


def estimate(size: DatasetSize, data_format: str, cpus: int) -> DataPlan:
    """The stage's tokens, shards, peak bytes and seconds for `size` of `data_format` on `cpus` CPUs."""
    kind = _kind(data_format)
    tokens = size.text_bytes / BYTES_PER_TOKEN[kind]
    shard_bytes = tokens * SLOTS_PER_TOKEN[kind] * SHARD_ROWS[kind] * TOKEN_BYTES
    return DataPlan(size=size, data_format=data_format, tokens=tokens, shard_bytes=shard_bytes,
                    stage_bytes=shard_bytes + tokens * STREAM_ROWS[kind] * TOKEN_BYTES, cpus=cpus,
                    stage_seconds=tokens / (TOKENS_PER_CPU_SECOND[kind] * cpus))


def ray_cpus(gpu: InstanceFacts, gpu_node_count: int) -> int:
    """The CPUs Ray schedules the stage's tasks on: each GPU node's worker pod's (devices.worker_resources) and the
    head's (Ray counts a container's CPU limit)."""
    return gpu_node_count * int(devices.worker_resources(gpu)["cpu"]) + int(raycluster.HEAD_CPU)


def node_disk(gpu: InstanceFacts, root_volume_gib: int) -> tuple[float, str, str]:
    """(usable bytes, what, what would give more) of a GPU node's data cache."""
    if node_storage.has_instance_store(gpu):
        return (gpu.instance_store_gb * 1e9 * USABLE_DISK,
                f"{gpu.instance_type}'s {gpu.instance_store_gb:,} GB instance store NVMe",
                "a gpuInstanceType with more instance store")
    return ((root_volume_gib * USABLE_DISK - IMAGE_GIB) * 2**30,
            f"the {root_volume_gib} GiB gp3 root volume (gpuRootVolumeGiB; {IMAGE_GIB} GiB of it the image)",
            "a larger gpuRootVolumeGiB")


def check_fits(plan: DataPlan, dataset: str, gpu: InstanceFacts, root_volume_gib: int,
               checkpoint_node_bytes: float = 0.0) -> None:
    """ValueError naming trainDataset unless the shards fit each GPU node's data cache beside a checkpoint's share of
    it, and the stage's streams and shards the Ray head's system disk beside the image. Where both are too small, the
    one that allows the smaller dataset is named."""
    node_bytes, node_what, node_more = node_disk(gpu, root_volume_gib)
    head_bytes = (SYSTEM_DISK_GIB * USABLE_DISK - IMAGE_GIB) * 2**30
    evicts = f"kubelet evicts below {1 - USABLE_DISK:.0%} free"
    beside = f", less a checkpoint's ~{_bytes(checkpoint_node_bytes)} share" if checkpoint_node_bytes else ""
    limits = [  # (the share of this dataset that fits, where, what else would make room)
        ((node_bytes - checkpoint_node_bytes) / plan.shard_bytes,
         f"more than each GPU node's data cache holds: {node_what}, ~{_bytes(node_bytes)} usable ({evicts}){beside}",
         f", or {node_more}"),
        (head_bytes / plan.stage_bytes,
         (f"which the Ray head packs beside their token streams (~{_bytes(plan.stage_bytes)} at once) on its "
          f"{SYSTEM_DISK_GIB} GiB system disk, ~{_bytes(head_bytes)} usable beside the image ({evicts})"), ""),
    ]
    share, where, more = min(limits)
    if share < 1:
        raise ValueError(
            f"config key '{KEY}': {dataset} (~{_bytes(plan.size.stored_bytes)} {plan.size.what}, "
            f"~{_count(plan.tokens)} tokens) makes ~{_bytes(plan.shard_bytes)} of token shards, {where}; allowed: a "
            f"dataset of at most ~{_bytes(plan.size.stored_bytes * max(0.0, share))} stored{more}")


def read_size(cfg: StackConfig, *, identity: AwsIdentity | None = None, region: str | None = None,
              warn: Callable[[str], None]) -> DatasetSize | None:
    """trainDataset's size: an s3:// object's ContentLength (HeadObject, as the stack's identity), a Hub dataset's
    split files (and trainEvalSplit's) from its file list with their sizes, a local file's. None, warned, when it
    cannot be read."""
    train = cfg.train
    dataset = train.dataset
    if is_local_dataset(dataset):
        stored = os.path.getsize(os.path.expanduser(dataset))
        return DatasetSize(stored, stored * expansion(dataset), "local file")
    if dataset.startswith("s3://"):
        return _s3_size(dataset, identity or AwsIdentity(), region, warn)
    if "://" in dataset:
        return None
    return _hub_size(cfg, warn)


def _s3_size(dataset: str, identity: AwsIdentity, region: str | None,
             warn: Callable[[str], None]) -> DatasetSize | None:
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.aws import identity as aws_identity

    bucket, key = s3_location(dataset, KEY)
    try:
        stored = aws_identity.session(identity, region).client("s3").head_object(Bucket=bucket, Key=key)[
            "ContentLength"]
    except (BotoCoreError, ClientError) as error:
        code = error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else ""
        warn(_unread(dataset, f"read as {aws_identity.describe(identity)} ({code or type(error).__name__})"))
        return None
    return DatasetSize(stored, stored * expansion(key), "s3 object")


def _hub_size(cfg: StackConfig, warn: Callable[[str], None]) -> DatasetSize | None:
    from workload.data import hub_dataset, validate

    train = cfg.train
    token = train.secret_env.reveal().get(dataset_records.HUB_TOKEN) or False
    try:
        sizes = hub_dataset.file_sizes(train.dataset, subject=f"config key '{KEY}':", token=token)
    except (hub_dataset.NotReachable, validate.DataError) as error:
        warn(_unread(train.dataset, f"listed on the Hugging Face Hub ({error})"))
        return None
    # A slice (train[:10%]) reads part of its split's files: the whole split is counted, so the plan errs large.
    splits = [split.split("[")[0] for split in (train.dataset_split, train.eval_split) if split]
    files = sorted({name for split in splits for name in hub_dataset.split_files(list(sizes), split,
                                                                                   train.dataset_config)})
    stored = sum(sizes[name] for name in files)
    suffixes = sorted({name.rsplit(".", 1)[-1] for name in files})
    return DatasetSize(stored, sum(sizes[name] * expansion(name) for name in files),
                       f"in {len(files)} {'/'.join(suffixes)} file{'s' if len(files) != 1 else ''} on the Hub")


def _unread(dataset: str, how: str) -> str:
    return (f"{KEY} {dataset}: its size could not be {how}, so the data stage's time and its shards' size are not "
            "estimated (jobDataPlan is null) nor checked against the nodes' disks")


def plan(cfg: StackConfig, gpu: InstanceFacts, *, checkpoint_node_bytes: float = 0.0,
         identity: AwsIdentity | None = None, region: str | None = None,
         warn: Callable[[str], None] | None = None) -> DataPlan | None:
    """The data stage's plan for the stack's trainDataset, refused when its shards cannot fit; None without a dataset
    (random tokens: no stage) or when its size cannot be read (warned)."""
    if warn is None:
        from infra.config.schema import warn
    if not cfg.train.dataset:
        return None
    size = read_size(cfg, identity=identity, region=region, warn=warn)
    if size is None:
        return None
    found = estimate(size, cfg.train.data_format, ray_cpus(gpu, cfg.gpu_node_count))
    check_fits(found, cfg.train.dataset, gpu, cfg.gpu_root_volume_gib, checkpoint_node_bytes)
    return found


def _bytes(count: float) -> str:
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} bytes"


def _count(count: float) -> str:
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f}"


def _seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
