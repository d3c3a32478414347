"""The devices a GPU node advertises through its device plugins, and what the one Ray worker pod on it requests:
the figures the RayCluster's workers are built from and the preflight checks nodes against."""
from __future__ import annotations

from infra.config import InstanceFacts, config_error

GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource
EFA_RESOURCE = "vpc.amazonaws.com/efa"  # the EFA device plugin's resource


def worker_resources(facts: InstanceFacts) -> dict[str, str]:
    """Requests (== limits) of the one Ray worker pod on a GPU node: all GPUs and EFA interfaces, most of the rest.

    The node keeps back a fixed 2 vCPU / 8 GiB for kubelet's reservation, the eviction threshold and the
    DaemonSets (aws-node, kube-proxy, both device plugins: well under that together), plus 1/8 of the node for
    the OS, the page cache and kube-reserved memory, which grows with the node's pod limit. On g6.12xlarge that
    is the recipe's 40 CPU / 160Gi, which ran there.
    """
    memory_gib = facts.memory_mib // 1024
    cpu = facts.vcpus - (2 + facts.vcpus // 8)
    memory = memory_gib - (8 + memory_gib // 8)
    if cpu < 1 or memory < 1:
        raise config_error(
            "gpuInstanceType", f"{facts.instance_type} ({facts.vcpus} vCPU, {memory_gib} GiB) leaves no room for a "
            f"Ray worker after the node's reservations"
        )
    return {
        "cpu": str(cpu),
        "memory": f"{memory}Gi",
        GPU_RESOURCE: str(facts.gpus),
        EFA_RESOURCE: str(facts.efa_interfaces),
    }
