"""What a checkpoint costs, known at preview: its size, the seconds a save holds up training, and the seconds it takes
at the node's disk and network rates; the stack output jobCheckpointPlan, and a warning when trainCheckpointEvery
leaves a save always in flight.

What a save writes is workload/checkpoint/sharded.py's `save`: DCP's shards of the model's state dict (FSDP2 keeps
the fp32 master weights) and AdamW's state (two fp32 moments a parameter); with --method lora/qlora the trainable
parameters (the adapters, fp32) and their moments alone. Each rank writes its share into its node's staging directory
(infra/kubernetes/local_storage.py), then Ray Train's `report` uploads it to trainStoragePath
(workload/checkpoint/saver.py). With trainCheckpointMode sync the step waits for the write and the upload; with async
(the default) it waits only while each rank copies its shards to pinned host memory, and the write and the upload run
beside the next steps. A node's ranks share its disk and its network, so a save takes the busiest node's share at
those rates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from infra.aws import node_storage
from infra.config import InstanceFacts
from workload.model import layout, memory
from workload.model.adapters import memory as adapter_memory

# Bytes a saved parameter takes: its fp32 weight, and AdamW's exp_avg and exp_avg_sq in fp32 (torch.optim.AdamW's
# state; its `step` is one scalar a parameter tensor, nothing beside these). Gradients are not saved.
WEIGHT_BYTES = 4
ADAMW_MOMENT_BYTES = 8

# The network a node uploads through. S3 traffic leaves through the one interface with an IP address, the primary on
# network card 0 (infra/aws/gpu_nodes.py: the other cards' interfaces are efa-only), so through card 0's share of the
# node's bandwidth. Inside the Region an instance's multi-flow traffic may use its full bandwidth, and a single flow
# outside its cluster placement group is limited to 5 Gbit/s (EC2 user guide, "Amazon EC2 instance network
# bandwidth"). Ray Train uploads each rank's directory with pyarrow.fs.copy_files, whose S3 writes run on Arrow's
# I/O thread pool, 8 threads by default (Arrow docs, "Thread Management"): a node's ranks open that many flows each.
SINGLE_FLOW_GBITS_PER_S = 5.0
UPLOAD_THREADS_PER_RANK = 8
# An asynchronous save's wait: each rank copies its shards from its GPU to pinned host memory over its own PCIe link,
# all ranks at once. The GPUs these stacks carry sit on PCIe Gen4 x16 or faster: 32 GB/s a direction (NVIDIA's L4
# datasheet: "PCIe Gen4 x16, 64 GB/s bidirectional"; L40S the same; H100 SXM Gen5, twice it); pinned
# device-to-host copies reach about 80% of a link (the CUDA samples' bandwidthTest), so 25 GB/s a rank. The host's
# memory (several hundred GB/s on these instances' CPUs) is not the limit.
HOST_COPY_BYTES_PER_S = 25e9


@dataclass(frozen=True)
class CheckpointPlan:
    """One save's size and seconds, for the job's model, method and workers on the stack's nodes."""

    size_bytes: float
    node_bytes: float
    """The busiest node's share: what its disk writes and its network uploads."""
    contents: str
    write_seconds: float
    upload_seconds: float
    disk: str
    network: str
    step_seconds: float | None
    """The step's predicted compute (workload.model.layout.step_compute_seconds); None for a GPU without a peak."""
    checkpoint_every: int
    mode: str = "sync"
    """trainCheckpointMode: async holds the step for host_copy_seconds only."""
    host_copy_seconds: float = 0.0
    """A rank's share copied to pinned host memory over its PCIe link (HOST_COPY_BYTES_PER_S), all ranks at once."""

    @property
    def save_seconds(self) -> float:
        """The whole save: the write to the node's disk, then the upload, which reads it back."""
        return self.write_seconds + self.upload_seconds

    @property
    def blocking_seconds(self) -> float:
        """What a save holds the step for: the whole save when sync; the copy to host memory when async."""
        return self.host_copy_seconds if self.mode == "async" else self.save_seconds

    @property
    def seconds_between_saves(self) -> float | None:
        if not self.checkpoint_every or self.step_seconds is None:
            return None
        return self.checkpoint_every * self.step_seconds

    def as_dict(self) -> dict:
        between = self.seconds_between_saves
        return {
            "size_gb": round(self.size_bytes / 1e9, 2),
            "node_gb": round(self.node_bytes / 1e9, 2),
            "contents": self.contents,
            "mode": self.mode,
            # sync: the step waits for the write and the upload both; async: for the copy to host memory alone.
            "blocking_seconds": round(self.blocking_seconds, 2 if self.mode == "async" else 1),
            # What a save takes beside the steps when it runs in the background: the same disk and network work.
            "background_seconds": round(self.save_seconds, 1),
            "write_seconds": round(self.write_seconds, 1),
            "upload_seconds": round(self.upload_seconds, 1),
            "disk": self.disk,
            "network": self.network,
            "step_seconds": None if self.step_seconds is None else round(self.step_seconds, 2),
            "seconds_between_saves": None if between is None else round(between, 1),
            "basis": ("a save writes the busiest node's share of the checkpoint to its disk and uploads it at the "
                      "rates named (background_seconds); a sync save holds the step for all of it, an async one "
                      f"for each rank's copy of its share to pinned host memory at {HOST_COPY_BYTES_PER_S / 1e9:g} "
                      "GB/s (PCIe Gen4 x16 at 80%) (blocking_seconds); the step is its predicted compute at the GPU's bf16 peak and the "
                      "measured MFU (communication and recompute left out, so steps are if anything longer)"),
        }


def saved_parameters(architecture: dict, workload: Any) -> tuple[int, str]:
    """The parameters a save holds with weights and moments, and what they are."""
    if workload.method == "full":
        count = memory.parameter_count(architecture)
        return count, f"{count / 1e9:.2f} B parameters"
    count = adapter_memory.adapter_parameters(architecture, workload.lora_rank, workload.lora_targets)
    return count, f"{workload.method}'s {count / 1e6:.1f} M adapter parameters (the frozen base is not saved)"


def upload_bytes_per_s(gpu: InstanceFacts, ranks_on_node: int) -> tuple[float, str]:
    card_gbits = gpu.network_gbps / max(gpu.network_cards, 1)
    flows_gbits = ranks_on_node * UPLOAD_THREADS_PER_RANK * SINGLE_FLOW_GBITS_PER_S
    gbits = min(card_gbits, flows_gbits) if card_gbits else flows_gbits
    return gbits * 1e9 / 8, (f"S3 at {gbits:g} Gbit/s (network card 0's {card_gbits:g} Gbit/s, {ranks_on_node} ranks "
                             f"x {UPLOAD_THREADS_PER_RANK} flows of at most {SINGLE_FLOW_GBITS_PER_S:g} Gbit/s)")


def plan(workload: Any, architecture: dict, gpu: InstanceFacts, workers: int) -> CheckpointPlan:
    """A save of the job `workload` (its flags, the memory plan's levers applied) of `architecture` on `workers` GPUs
    of `gpu` nodes, packed as Ray Train places them."""
    parameters, what = saved_parameters(architecture, workload)
    size = parameters * (WEIGHT_BYTES + ADAMW_MOMENT_BYTES)
    if workload.method == "full" and memory.tied_embeddings(architecture):
        # The state dict lists a tied output head under its own key too, and DCP writes it twice.
        size += WEIGHT_BYTES * architecture["vocab_size"] * architecture["hidden_size"]
    ranks_on_node = min(workers, gpu.gpus)
    node_bytes = size * ranks_on_node / workers
    disk_rate, disk = node_storage.local_write_bytes_per_s(gpu)
    network_rate, network = upload_bytes_per_s(gpu, ranks_on_node)
    return CheckpointPlan(
        size_bytes=size, node_bytes=node_bytes,
        contents=(f"fp32 weights and AdamW's two fp32 moments ({WEIGHT_BYTES + ADAMW_MOMENT_BYTES} bytes each) "
                  f"of {what}"),
        write_seconds=node_bytes / disk_rate, upload_seconds=node_bytes / min(network_rate, disk_rate),
        disk=disk, network=network, step_seconds=layout.step_compute_seconds(workload, architecture, gpu.gpu_name),
        checkpoint_every=workload.checkpoint_every, mode=workload.checkpoint_mode,
        host_copy_seconds=size / workers / HOST_COPY_BYTES_PER_S)


def always_in_flight_warning(checkpoint: CheckpointPlan) -> str | None:
    """A warning when trainCheckpointEvery's steps take less time than a save: a save would always be in flight (and
    while saves are synchronous, the run would spend more of its time saving than training). None otherwise, or
    when the step time is not known. Asynchronous or not, the background work is the same: a new save waits for the
    one in flight."""
    between = checkpoint.seconds_between_saves
    if between is None or between >= checkpoint.save_seconds:
        return None
    enough = math.ceil(checkpoint.save_seconds / checkpoint.step_seconds)
    steps = "1 step takes" if checkpoint.checkpoint_every == 1 else f"{checkpoint.checkpoint_every} steps take"
    return (f"trainCheckpointEvery {checkpoint.checkpoint_every}: {steps} about "
            f"{between:.0f} s (predicted), less than one save's {checkpoint.save_seconds:.0f} s "
            f"({checkpoint.node_bytes / 1e9:.1f} GB a node: {checkpoint.write_seconds:.0f} s to {checkpoint.disk}, "
            f"{checkpoint.upload_seconds:.0f} s to {checkpoint.network}), so a save would always be in flight "
            f"(trainCheckpointMode {checkpoint.mode}: "
            + ("each save would wait for the one before, and the steps with it" if checkpoint.mode == "async"
               else "the run would spend more time saving than training") + "). Allowed: "
            f"trainCheckpointEvery {enough} or more, or 0 (only after the last step)")
