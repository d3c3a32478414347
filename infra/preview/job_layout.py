"""The job's layout, predicted at preview: workload.model.layout.for_job, the function every worker of the job runs
(workload.model.parallel.plan_for_worker), with what EC2 says of the instance type where a worker has its own figures.

The inputs are the job's own flags (infra/job/job_config.py: the instance's network as --node_gbits_per_s, its GPUs'
memory as --gpu_memory_mib), with the memory plan's levers applied first, as workload/trainer.py applies them before
it chooses; the ranks per node are those of Ray Train's packed placement; the compute is the step's FLOPs at EC2's
GPU's bf16 peak. The job decides again on its workers, with its fabric check's measured bus bandwidth in place of the
instance's nominal figure, and reports what it chose in jobSharding.
"""
from __future__ import annotations

from typing import Any

from infra.config import InstanceFacts
from workload.model import layout, memory_plan

# What the job's reason names the bandwidth by when no fabric check measured it (workload.model.parallel's), so the
# preview's plan reads as the job's would from the same figures.
NOMINAL_SOURCE = "--node_gbits_per_s"


def one_node_warning(sharding: str, workers: int, ranks_per_node: int | None, gpu_node_count: int,
                     gpu: InstanceFacts) -> str | None:
    """hybrid and two-level split the job's traffic into a step between nodes and one inside each: with every worker
    on one node the job runs them on a (1, ranks) mesh, which is full sharding under another name (full's losses and
    weights: tests/runs/test_parallel.py, gloo on a (1, 4) mesh). Not refused, since the job works; said, since the
    name promises a saving there is nothing to save on."""
    if sharding not in ("hybrid", layout.TWO_LEVEL) or not ranks_per_node or workers // ranks_per_node != 1:
        return None
    where = (f"gpuNodeCount {gpu_node_count}" if gpu_node_count == 1 else
             f"trainNumWorkers {workers}, which fill one node of {gpu.gpus} GPUs of the {gpu_node_count}")
    one = "HSDP has one replica group" if sharding == "hybrid" else "the step between nodes has one node"
    return (f"trainSharding {sharding}: every worker is on one {gpu.instance_type} node ({where}), so {one} and the "
            f"job runs full sharding's step on a (1, {ranks_per_node}) mesh; set trainSharding full (or auto) to say "
            "so, or add nodes")


def ranks_per_node_problem(ranks_per_node: int, workers: int, gpu: InstanceFacts) -> str | None:
    """Why --ranks_per_node (workload/config: "Ranks that share a node, for the sharding"; set to emulate nodes on one
    host) names no node of the stack's, or None. Ray Train places one worker per GPU (workload/trainer.py's
    ScalingConfig(num_workers, use_gpu=True); Ray's docs of use_gpu: "1 per worker"), so a node of the instance holds
    at most its GPUs' ranks: a larger group is ranks of several nodes that hybrid's and two-level's "inside a node"
    step would join over the network, a node the cluster does not have. A smaller one emulates smaller nodes, as on
    one host. It must divide the workers too: workload/model/layout.py choose() refuses it at the job's start
    otherwise, after the nodes were paid for."""
    if not ranks_per_node:
        return None
    divisors = [size for size in range(1, gpu.gpus + 1) if workers % size == 0]
    if ranks_per_node <= gpu.gpus and workers % ranks_per_node == 0:
        return None
    why = (f"a {gpu.instance_type} node holds {gpu.gpus} ranks (one a GPU)" if ranks_per_node > gpu.gpus
           else f"it must divide the job's {workers} workers")
    return (f"--ranks_per_node {ranks_per_node}: {why}; allowed: 0 (from Ray) or "
            f"{', '.join(map(str, divisors))} (divisors of the {workers} workers, up to the {gpu.gpus} GPUs a node)")


def predict(workload: Any, architecture: dict, gpu: InstanceFacts, workers: int,
            plan: memory_plan.MemoryPlan) -> dict:
    """The layout the job would choose with the instance's nominal figures, as the stack output jobLayoutPlan: the
    plan (sharding, mesh_shape, reduce_dtype, requested, reason) and its basis."""
    cfg = memory_plan.apply(workload, plan)
    ranks_per_node = cfg.ranks_per_node or layout.packed_ranks_per_node(workers, gpu.gpus)
    if cfg.sharding in ("hybrid", layout.TWO_LEVEL) and not ranks_per_node:
        # The job's own refusal names its flags (--ranks_per_node); the stack's keys are these.
        raise ValueError(
            f"config keys 'trainSharding', 'trainNumWorkers': {cfg.sharding} shards within each node, and "
            f"{workers} workers fill no whole number of {gpu.instance_type} nodes of {gpu.gpus} GPUs; allowed: "
            f"trainNumWorkers up to {gpu.gpus} or a multiple of {gpu.gpus}, or trainSharding full or auto")
    chosen = layout.for_job(cfg, architecture, world_size=workers, ranks_per_node=ranks_per_node,
                            gpu_name=gpu.gpu_name, node_gbytes_per_s=cfg.node_gbits_per_s / 8,
                            bandwidth_source=NOMINAL_SOURCE,
                            gpu_memory_bytes=cfg.gpu_memory_mib * 2**20 if cfg.gpu_memory_mib else None)
    network = (f"{gpu.network_gbps:g} Gbit/s between nodes" if gpu.network_gbps
               else "no network figure from EC2")
    basis = (f"predicted at preview from {gpu.instance_type}'s nominal figures ({network}, {gpu.gpu_name or 'GPU'} "
             f"bf16 peak) and the memory plan's levers; the job decides again with its fabric check's measured bus "
             "bandwidth and reports its choice in jobSharding")
    return {**chosen.as_dict(), "basis": basis}
