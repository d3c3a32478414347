"""The Ray workers' node-local directories: checkpoint staging, the Hugging Face cache and the data cache, on one
emptyDir and named to the workload by environment variables.

An emptyDir lives under /var/lib/kubelet, which nodeadm puts on the instance store's RAID0 volume where the type has
one (infra/aws/node_storage.py), so these directories are on NVMe; on a type without, they are on the root volume at
the gp3 throughput node_storage gives it. Kubelet deletes the emptyDir with the pod: a checkpoint's durable copy is
the one Ray Train uploads to the storage path, and a cache refills. The workload reads the names (workload/storage.py;
HF_HOME is huggingface_hub's and datasets' own) and falls back to the system's temporary directory without them.
"""
from __future__ import annotations

from workload.storage import CHECKPOINT_STAGING_ENV, DATA_CACHE_ENV

VOLUME_NAME = "node-local"
MOUNT_ROOT = "/mnt/local"
# Each directory a subPath of the one emptyDir (kubelet creates it), so each exists when the container starts and
# they share the node's space as the run needs it: the model cache first, then the checkpoint shards.
DIRECTORIES = {
    CHECKPOINT_STAGING_ENV: "checkpoints",
    "HF_HOME": "hf",
    DATA_CACHE_ENV: "data",
}


def env() -> dict[str, str]:
    """The environment variables that name the directories, for the worker container."""
    return {name: f"{MOUNT_ROOT}/{directory}" for name, directory in DIRECTORIES.items()}


def volume_mounts() -> list[dict]:
    return [{"name": VOLUME_NAME, "mountPath": f"{MOUNT_ROOT}/{directory}", "subPath": directory}
            for directory in DIRECTORIES.values()]


def volume() -> dict:
    # No sizeLimit: the instance store holds terabytes, and a limit would evict the pod mid-run for a large model's
    # cache; kubelet's node-pressure eviction bounds it on a root volume.
    return {"name": VOLUME_NAME, "emptyDir": {}}
