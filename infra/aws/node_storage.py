"""Where a GPU node keeps what it writes fast: its instance store NVMe, striped, or a gp3 root volume sized for it.

A type with instance store (g6, g6e, p4d, p5: EC2's instance-type specifications) gets a nodeadm `NodeConfig` in its
launch template's user data with `localStorage.strategy: RAID0`: nodeadm stripes every instance store disk into one
md volume and bind-mounts /var/lib/kubelet, /var/lib/containerd and /var/log/pods onto it
(awslabs/amazon-eks-ami templates/al2023/runtime/bin/setup-local-disks), so pulled images and every emptyDir, the Ray
pods' checkpoint staging and caches among them (infra/kubernetes/local_storage.py), are on NVMe while the root volume
stays small. A type without instance store keeps its root volume, with gp3 throughput and IOPS raised to what a
checkpoint write needs. Pure functions of the instance facts; infra/aws/gpu_nodes.py puts them on the template, and
infra/preview/checkpoint_cost.py reads the rates.
"""
from __future__ import annotations

import base64

import yaml

from infra.config import InstanceFacts

# nodeadm's API (awslabs/amazon-eks-ami nodeadm/api/v1alpha1/nodeconfig_types.go; tests/reference/amazon-eks-ami-*/
# holds its CRD, which the tests validate this document against).
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
# One volume striped over all disks: a checkpoint is written and read sequentially by every rank at once, so RAID0's
# summed bandwidth is what counts; its lost redundancy costs nothing for data that is staging or a cache (the
# checkpoint's durable copy is on S3). RAID10 would halve the size and the write rate.
LOCAL_STORAGE_STRATEGY = "RAID0"
# EKS merges a managed node group's custom launch template user data only when it is a MIME multi-part document
# (EKS user guide, "Customize managed nodes with launch templates": AL2023 user data); it adds its own NodeConfig part
# with the cluster's coordinates, and nodeadm merges the parts (nodeadm/doc/examples.md, "Merging multiple
# configuration objects").
MIME_BOUNDARY = "==RAYTRAIN=="

# Without instance store: gp3's figures for a checkpoint. DCP writes each rank's shards as one large file in large
# sequential writes, so throughput, not IOPS, bounds it: gp3's maximum, 1000 MiB/s (gp3 allows 125-1000 MiB/s and
# 3000-16000 IOPS, at most 0.25 MiB/s per provisioned IOPS; Amazon EBS user guide, "General Purpose SSD volumes").
# 4000 IOPS is the least that allows it (1000 / 0.25), and is what 1000 MiB/s of 256 KiB I/Os (the size EBS counts as
# one I/O on SSD volumes) issue. The 875 MiB/s and 1000 IOPS above the baseline bill about $40 a month a volume
# (us-east-1 list prices), next to a GPU node's hundreds a day; at the 125 MiB/s baseline a dev node's 46 GB share
# of a 7B checkpoint takes 6 minutes to write, at 1000 MiB/s 44 s.
GP3_CHECKPOINT_THROUGHPUT_MIB_S = 1000
GP3_CHECKPOINT_IOPS = 4000
GP3_BASELINE_THROUGHPUT_MIB_S = 125

# An instance store disk's sequential write rate. EC2 publishes its random 4 KiB IOPS per type (EC2 user guide, "SSD
# instance store volumes"), not a sequential rate: 1 GB/s a disk is an assumption, below the 2-4 GB/s data-centre
# NVMe drives are rated for, so the plan's seconds err long. RAID0 sums the disks.
NVME_WRITE_BYTES_PER_S_PER_DISK = 1e9


def has_instance_store(facts: InstanceFacts) -> bool:
    return facts.instance_store_gb > 0 and facts.instance_store_disks > 0


def node_config(facts: InstanceFacts) -> dict | None:
    """The NodeConfig the GPU nodes add to EKS's: the instance store as one RAID0 volume. None without one."""
    if not has_instance_store(facts):
        return None
    return {"apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig",
            "spec": {"instance": {"localStorage": {"strategy": LOCAL_STORAGE_STRATEGY}}}}


def user_data(facts: InstanceFacts) -> str | None:
    """The launch template's user data, base64 as EC2 takes it: a MIME multi-part document of one NodeConfig part,
    beside which EKS adds its own. None without instance store (EKS then writes the whole user data itself)."""
    config = node_config(facts)
    if config is None:
        return None
    document = (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n'
        "\n"
        f"--{MIME_BOUNDARY}\n"
        f"Content-Type: {NODECONFIG_CONTENT_TYPE}\n"
        "\n"
        "---\n"
        f"{yaml.safe_dump(config, sort_keys=False)}"
        "\n"
        f"--{MIME_BOUNDARY}--\n"
    )
    return base64.b64encode(document.encode()).decode()


def root_volume_performance(facts: InstanceFacts) -> tuple[int, int] | None:
    """(throughput MiB/s, IOPS) of the root volume of a type without instance store, where checkpoints are staged;
    None with instance store (the root volume holds the OS alone, and gp3's baseline does)."""
    return None if has_instance_store(facts) else (GP3_CHECKPOINT_THROUGHPUT_MIB_S, GP3_CHECKPOINT_IOPS)


def local_write_bytes_per_s(facts: InstanceFacts) -> tuple[float, str]:
    """The rate a node writes its checkpoint staging at, and what it is: the striped NVMe, or the root volume."""
    if has_instance_store(facts):
        rate = facts.instance_store_disks * NVME_WRITE_BYTES_PER_S_PER_DISK
        return rate, (f"instance store NVMe, {facts.instance_store_disks} disks in RAID0 at an assumed "
                      f"{NVME_WRITE_BYTES_PER_S_PER_DISK / 1e9:g} GB/s each")
    return GP3_CHECKPOINT_THROUGHPUT_MIB_S * 2**20, f"gp3 root volume at {GP3_CHECKPOINT_THROUGHPUT_MIB_S} MiB/s"
