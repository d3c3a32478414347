"""Nodes that fail are replaced (issue 24): the EKS node monitoring agent add-on and the GPU node group's automatic
node repair.

The agent (a DaemonSet of the `eks-node-monitoring-agent` add-on, on every node) parses the node's logs and sets one
NodeCondition per category with a reason; with `node_repair_config.enabled` EKS acts on those conditions (and on a
node NotReady) for a managed node group, rebooting or replacing the instance (EKS user guide, "Detect node health
issues and enable automatic node repair"; aws/eks-node-monitoring-agent README).

What it detects, by category (the condition it sets): accelerated hardware (AcceleratedHardwareReady): NVIDIA GPU
errors the driver logs as XID codes, and DCGM diagnostics failures; kernel (KernelReady): kernel bugs, soft lockups,
process limits; networking (NetworkingReady): VPC CNI (IPAMD) problems, interface and connectivity problems; storage
(StorageReady): EBS throughput and IOPS limits, I/O delays; container runtime (ContainerRuntimeReady): pods that do
not terminate, probe failures.

What it cannot: a GPU that is healthy but slow (a throttling straggler shows only in infra/kubernetes/monitoring.py's
panels), an NCCL hang or a job stuck in a collective on healthy hardware, EFA loss or degradation that the driver does
not log as an error, a wrong result (silent data corruption), and anything inside the container (a Python exception, a
CUDA out-of-memory). Those fail or hang the job, not the node: Ray Train's FailureConfig (trainMaxFailures) restarts the
workers from the last checkpoint, and the job's time limit (trainTimeoutMinutes) ends a hang.

Capacity. A replacement needs an instance. In a Capacity Reservation sized to the node count, or a Capacity Block,
there is no spare: EKS terminates the faulty instance first (the node group's MINIMAL update strategy does the same
for updates, infra/aws/gpu_nodes.py), and the reservation's freed slot takes the new one; if EC2 keeps the faulty host
out of service the slot does not come back, and the node group waits with one node short (the Ray job waits for its
workers, then fails at its time limit). With the repair configuration's thresholds EKS stops repairing when more than
one node is unhealthy at once, which keeps a fleet-wide fault (a bad AMI, a driver mismatch) from replacing every node
in a reservation that cannot take them back. Turning gpuNodeRepair off leaves a faulty node in place (conditions
still set, so `kubectl describe node` shows the reason).
"""
from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.aws.addon_pins import NODE_MONITORING_AGENT_ADDON, NODE_MONITORING_AGENT_VERSION
from infra.aws.node_labels import GPU_TOLERATION

# One node at a time, and none once two are unhealthy together: a GPU node group is small and each replacement
# relaunches an instance that bills by the hour.
MAX_PARALLEL_REPAIRS = 1
MAX_UNHEALTHY_NODES = 1


def node_repair_config(enabled: bool) -> aws.eks.NodeGroupNodeRepairConfigArgs:
    """The GPU node group's node_repair_config (pulumi-aws 7.51's eks.NodeGroup input). Off is explicit, so turning
    the key off on a live stack turns repair off rather than leaving it as it was."""
    if not enabled:
        return aws.eks.NodeGroupNodeRepairConfigArgs(enabled=False)
    return aws.eks.NodeGroupNodeRepairConfigArgs(
        enabled=True,
        max_parallel_nodes_repaired_count=MAX_PARALLEL_REPAIRS,
        max_unhealthy_node_threshold_count=MAX_UNHEALTHY_NODES,
    )


def node_monitoring_agent_configuration() -> dict:
    """The add-on's configuration values. Its node agent tolerates every taint already (nodeAgent.tolerations:
    [{operator: Exists}]), but its DCGM host engine DaemonSet, which runs the GPU diagnostics, tolerates none
    (dcgmAgent.tolerations: []), so on the tainted GPU nodes it would never run (aws/eks-node-monitoring-agent v1.6.6,
    the pinned version (infra/aws/addon_pins.py), charts/eks-node-monitoring-agent/values.yaml; the keys are checked
    against its charts/configuration.schema.json, copied to tests/reference, which has `dcgmAgent` only from v1.6.0)."""
    return {"dcgmAgent": {"tolerations": [dict(GPU_TOLERATION)]}}


class NodeMonitoringAgent(pulumi.ComponentResource):
    """The agent as an EKS add-on at the pinned version (infra/aws/addon_pins.py: EKS's default for the cluster may
    predate the `dcgmAgent` key our configuration sets, and would refuse it), on every node once the system nodes
    are up."""

    def __init__(self, name: str, *, cluster_name: pulumi.Input[str], tags: dict[str, str],
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("raytrain:infra:NodeMonitoringAgent", name, None, opts)
        self.addon = aws.eks.Addon(
            name, cluster_name=cluster_name, addon_name=NODE_MONITORING_AGENT_ADDON,
            addon_version=NODE_MONITORING_AGENT_VERSION,
            configuration_values=json.dumps(node_monitoring_agent_configuration()),
            resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE", tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)))
        self.register_outputs({"addon_version": self.addon.addon_version})
