"""How the model is spread over the cluster, and what that costs on its network: the layout's arithmetic.

Three layouts of FSDP2 (workload.model.sharding.shard_model builds them):
- full: every unit sharded over all ranks (a 1-D mesh). Each step all-gathers the bf16 weights and reduce-scatters
  the gradients over every rank, so between nodes each node's network carries about the whole model's weights and
  gradients every step.
- hybrid (HSDP): units sharded over the ranks of one node and replicated across nodes (a 2-D mesh, replicas x
  shards). The all-gather and the reduce-scatter stay inside a node; only an all-reduce of each rank's gradient
  shard crosses the network, once per step.
- two-level: sharded as full, each all-gather and reduce-scatter split into a step between the nodes and a step
  inside each node (workload.model.two_level): each node's network carries HSDP's bytes, half of them in the forward
  (the weights' gather) and half in the backward (the gradients' reduction), instead of all in the backward.

`step_collectives` lists exactly what one step issues (tests/runs/test_parallel.py records a real step on a gloo mesh
and compares), `network_traffic` turns that into bytes inside and between nodes with nccl-tests' bus factors, and
`choose` picks the layout for --sharding auto. `for_job` is choose() for a job's flags and its model's config.json:
what every worker runs (workload.model.parallel.plan_for_worker, with the fabric check's measured bandwidth) and what
the preview predicts (infra/preview/job_layout.py, the stack output jobLayoutPlan, with the instance's nominal
network), so both decide alike from the same inputs. bench/model/step_model.py predicts step times from the same functions.

Standard library only: the Pulumi program imports this, and it must not pull in torch.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Iterable, Sequence

from workload.config import TrainConfig
from workload.fabric.bus_bandwidth import bus_bandwidth_factor
from workload.model import memory
from workload.model.adapters import memory as adapter_memory
from workload.model.flops import run_flops_per_token
from workload.model.gpu_peaks import peak_flops_of

Shape = tuple[int, ...]
# Bytes a parameter holds in sharded state: fp32 weight, fp32 gradient and AdamW's two fp32 moments.
STATE_BYTES_PER_PARAMETER = memory.SHARDED_BYTES_PER_PARAMETER
# HSDP keeps 1/ranks_per_node of the state per GPU instead of 1/world_size. auto (for an adapter method, the only one
# for which it picks HSDP) refuses it when that share would take more than this fraction of a GPU's memory: the rest
# holds activations, the gathered weights and NCCL's buffers (bench/results/RESULTS.md, memory on the g6 stack).
HYBRID_STATE_MEMORY_FRACTION = 0.5
# The gathered weights are in the compute dtype, bf16.
PARAMETER_BYTES = 2
REDUCE_BYTES = {"fp32": 4, "bf16": 2}  # per gradient element, by --reduce_dtype
# For auto's compute estimate: the project step's model FLOPs utilisation measured on an H200 (0.533,
# bench/results/RESULTS.md), assumed to carry over to other GPUs through their dense bf16 peak.
ASSUMED_MFU = 0.53
# The backward's share of the project step's compute, which hides full sharding's reduce-scatters: 0.374 measured
# by bench/record/emulate_rank.py at the stacks' per-GPU batch (bench/results/RESULTS.md, bench.model.step_inputs.SPLIT).
BACKWARD_SHARE = 0.37
# --sharding's name for full sharding with two-level collectives (workload.model.two_level).
TWO_LEVEL = "two-level"


@dataclass(frozen=True)
class Collective:
    """One collective a step issues. `size` is nccl-tests' S in bytes: the all-gather's output, the
    reduce-scatter's input, the all-reduce's buffer."""

    operation: str  # all_gather | reduce_scatter | all_reduce
    group: str  # world (1-D mesh) | shard (a node's ranks) | replicate (one rank per node)
    ranks: int
    size: int
    phase: str  # forward | backward
    exposed: bool = False  # issued where no compute can hide it: the step's first gather, its last reduction


@dataclass(frozen=True)
class Traffic:
    """Bytes one step sends, per direction: through each node's network, and over each GPU's link inside a node."""

    inter_node_bytes_per_node: float
    intra_node_bytes_per_gpu: float


@dataclass(frozen=True)
class Plan:
    """The chosen layout: its mesh, and why."""

    sharding: str  # full | hybrid | two-level
    mesh_shape: tuple[int, ...]
    reduce_dtype: str  # fp32 | bf16
    requested: str
    reason: str

    def as_dict(self) -> dict:
        return {**asdict(self), "mesh_shape": list(self.mesh_shape)}

    def describe(self) -> str:
        return (f"{self.sharding} over mesh {'x'.join(map(str, self.mesh_shape))}, gradients reduced in "
                f"{self.reduce_dtype} ({self.reason})")


def padded_numel(shape: Shape, shards: int) -> int:
    """FSDP2 shards a parameter on dim 0, padded to a multiple of the shard count."""
    rows = math.ceil(shape[0] / shards) * shards if shape else 1
    return rows * math.prod(shape[1:])


def step_collectives(units: Sequence[tuple[str, Sequence[Shape]]], mesh_shape: Sequence[int], reduce_dtype: str,
                     reshard_after_forward: bool = False, sharding: str = "",
                     costs: Sequence[Sequence[tuple[float, bool]]] | None = None) -> list[Collective]:
    """What one training step of workload.model.step issues with these units on this mesh, in issue order.

    Forward gathers each unit once (root first). With reshard_after_forward the layers (not the root, whose weights
    FSDP2 keeps) are gathered again in backward. Backward reduce-scatters each unit's gradients (layers in reverse,
    the root last), and on a 2-D mesh all-reduces each rank's reduced shard across the replicas. A group of one rank
    issues nothing. --grad_accum_steps changes none of this: inner micro-batches issue no collective at all.
    `costs` (method_units'): per unit, each parameter's (bytes a gathered element, trained); default bf16 and trained.
    A frozen parameter is gathered but never reduced, and a unit without a trained parameter reduces nothing.
    sharding two-level: the 2-D mesh is (nodes, ranks per node) of two_level_collectives (full training's units:
    an adapter method never needs it, see choose)."""
    if sharding == TWO_LEVEL:
        return two_level_collectives(units, mesh_shape, reduce_dtype, reshard_after_forward)
    replicas, shards = (1, *mesh_shape) if len(mesh_shape) == 1 else tuple(mesh_shape)
    group = "world" if len(mesh_shape) == 1 else "shard"
    costs = costs or [[(PARAMETER_BYTES, True)] * len(shapes) for _, shapes in units]
    gathered = [sum(padded_numel(shape, shards) * cost for shape, (cost, _) in zip(shapes, unit_costs))
                for (_, shapes), unit_costs in zip(units, costs)]
    numels = [sum(padded_numel(shape, shards) for shape, (_, trained) in zip(shapes, unit_costs) if trained)
              for (_, shapes), unit_costs in zip(units, costs)]
    reduce_bytes = REDUCE_BYTES[reduce_dtype]
    collectives: list[Collective] = []
    if shards > 1:
        for index, size in enumerate(gathered):
            collectives.append(Collective("all_gather", group, shards, round(size), "forward", exposed=index == 0))
        if reshard_after_forward:
            for size in reversed(gathered[1:]):
                collectives.append(Collective("all_gather", group, shards, round(size), "backward"))
    reduced = [index for index in range(len(numels)) if numels[index]]
    for index in reversed(reduced):
        last = index == reduced[0]
        if shards > 1:
            collectives.append(Collective("reduce_scatter", group, shards, numels[index] * reduce_bytes, "backward",
                                          exposed=last))
        if replicas > 1:
            collectives.append(Collective("all_reduce", "replicate", replicas, numels[index] // shards * reduce_bytes,
                                          "backward", exposed=last))
    return collectives


def two_level_collectives(units: Sequence[tuple[str, Sequence[Shape]]], mesh_shape: Sequence[int], reduce_dtype: str,
                          reshard_after_forward: bool = False) -> list[Collective]:
    """What one step issues with two-level collectives (workload.model.two_level) on a (nodes, ranks_per_node) mesh,
    in issue order: per unit gathered, the gather of its column between the nodes ("replicate" group, S = nodes
    chunks), then one gather per node inside the node ("shard" group, S = a row); per unit reduced, one reduce-scatter
    per node inside the node, then the column's between the nodes. The first unit's gather and the last unit's reduction are exposed."""
    nodes, per_node = mesh_shape
    world = nodes * per_node
    numels = [sum(padded_numel(shape, world) for shape in shapes) for _, shapes in units]

    def gather(numel: int, phase: str) -> list[Collective]:
        shard_bytes = numel // world * PARAMETER_BYTES
        return ([Collective("all_gather", "replicate", nodes, nodes * shard_bytes, phase)]
                + [Collective("all_gather", "shard", per_node, per_node * shard_bytes, phase)] * nodes)

    def reduce(numel: int) -> list[Collective]:
        shard_bytes = numel // world * REDUCE_BYTES[reduce_dtype]
        return ([Collective("reduce_scatter", "shard", per_node, per_node * shard_bytes, "backward")] * nodes
                + [Collective("reduce_scatter", "replicate", nodes, nodes * shard_bytes, "backward")])

    collectives: list[Collective] = []
    for index, numel in enumerate(numels):
        parts = gather(numel, "forward")
        collectives += [replace(part, exposed=True) for part in parts] if index == 0 else parts
    if reshard_after_forward:
        for numel in reversed(numels[1:]):
            collectives += gather(numel, "backward")
    for index in reversed(range(len(numels))):
        parts = reduce(numels[index])
        collectives += [replace(part, exposed=True) for part in parts] if index == 0 else parts
    return collectives


def network_traffic(collective: Collective, nodes: int, ranks_per_node: int) -> Traffic:
    """Where a collective's bytes travel, with NCCL's ring algorithms: each rank sends busbw-factor x S bytes.

    A ring over all ranks crosses each node boundary once per direction, so a node's network carries what each
    link of the ring carries (and each link inside a node too, if a node has more than one rank); a shard group
    stays inside a node; a replicate group's ranks (one per node) all cross the network at once, ranks_per_node of
    them through each node's network."""
    sent = bus_bandwidth_factor(collective.operation, collective.ranks) * collective.size
    if collective.group == "shard":
        return Traffic(0.0, sent)
    if collective.group == "replicate":
        return Traffic(sent * ranks_per_node, 0.0)
    return Traffic(sent if nodes > 1 else 0.0, sent if ranks_per_node > 1 else 0.0)


def total_traffic(collectives: Iterable[Collective], nodes: int, ranks_per_node: int) -> Traffic:
    parts = [network_traffic(collective, nodes, ranks_per_node) for collective in collectives]
    return Traffic(sum(part.inter_node_bytes_per_node for part in parts),
                   sum(part.intra_node_bytes_per_gpu for part in parts))


def mesh_shape(sharding: str, world_size: int, ranks_per_node: int) -> tuple[int, ...]:
    """HSDP's (replicas, shards), two-level's (nodes, ranks per node), full's (world,)."""
    two_d = sharding in ("hybrid", TWO_LEVEL)
    return (world_size // ranks_per_node, ranks_per_node) if two_d else (world_size,)


def ranks_per_node_of(node_ranks: Sequence[int], local_world_sizes: Sequence[int]) -> int | None:
    """Ranks per node from every rank's (node rank, local world size), as Ray Train reports them; None unless all
    nodes hold as many ranks and each node's ranks are consecutive, which a (replicas, shards) mesh assumes."""
    per_node = local_world_sizes[0]
    if any(size != per_node for size in local_world_sizes):
        return None
    if any(node != rank // per_node for rank, node in enumerate(node_ranks)):
        return None
    return per_node


def choose(requested: str, requested_reduce: str, world_size: int, ranks_per_node: int | None,
           units: Sequence[tuple[str, Sequence[Shape]]], *, node_gbytes_per_s: float | None = None,
           bandwidth_source: str = "", compute_seconds: float | None = None,
           gpu_memory_bytes: int | None = None, costs: Sequence[Sequence[tuple[float, bool]]] | None = None) -> Plan:
    """The layout for --sharding `requested` and the dtype for --reduce_dtype `requested_reduce`, with the reason
    the progress line and the summary print.

    auto sharding is full unless the network is the bottleneck: full on one node or with one rank per node; full
    when its reduce-scatters between nodes take less time than the backward's share of the compute, which hides
    them (and the forward, the gathers); two-level otherwise: full sharding's memory and arithmetic, HSDP's
    bytes between nodes, half of them under the forward. Without a bandwidth or a compute estimate, fewer bytes
    decide (two-level). hybrid only when asked for. `gpu_memory_bytes` no longer decides: what auto picks needs
    full sharding's memory, which the memory plan (workload.model.memory_plan) already checked.
    auto reduction is bf16 when the chosen layout's fp32 traffic between nodes would outlast the compute, else
    fp32 (bf16 needs a known bandwidth and compute). `costs`: an adapter method's (method_units): the frozen base's
    gathers and only the adapters' reductions are counted, and the state HSDP would keep is the base as stored plus
    the adapters' 16 bytes a parameter."""
    def plan(sharding: str, reason: str) -> Plan:
        shape = mesh_shape(sharding, world_size, per_node)
        reduce, why = requested_reduce, f"--reduce_dtype {requested_reduce}"
        if requested_reduce == "auto":
            reduce, why = "fp32", "fp32: " + ("nodes unknown" if not ranks_per_node else "one node" if nodes == 1
                                              else "bandwidth or compute unknown")
            if costs is not None:
                # Only the adapters' gradients are reduced: bf16 would halve a few hundred MB at most, at their
                # precision's cost.
                why = "fp32: only the adapters' gradients are reduced"
            elif nodes > 1 and node_gbytes_per_s and compute_seconds:
                seconds = between_nodes(shape, "fp32", sharding) / (node_gbytes_per_s * 1e9)
                reduce = "bf16" if seconds > compute_seconds else "fp32"
                why = (f"{reduce}: fp32 gradients take {seconds:.2f} s between nodes, "
                       f"{'more' if reduce == 'bf16' else 'less'} than the compute")
        return Plan(sharding, shape, reduce, requested, f"{reason}; reduction {why}")

    def between_nodes(shape: tuple[int, ...], reduce: str, sharding: str = "") -> float:
        return total_traffic(step_collectives(units, shape, reduce, sharding=sharding, costs=costs), nodes,
                             per_node).inter_node_bytes_per_node

    per_node = ranks_per_node or world_size
    if world_size % per_node:
        raise ValueError(f"--ranks_per_node {per_node} must divide the {world_size} workers")
    nodes = world_size // per_node
    if requested in ("hybrid", TWO_LEVEL) and not ranks_per_node:
        raise ValueError(f"--sharding {requested} needs nodes of equal size with consecutive ranks; set "
                         "--ranks_per_node")
    if requested in ("full", "hybrid", TWO_LEVEL):
        return plan(requested, f"--sharding {requested}")
    if not ranks_per_node:
        return plan("full", "ranks are not grouped into nodes of equal size")
    if nodes == 1:
        return plan("full", f"one node of {world_size} ranks: nothing crosses a network")
    if per_node == 1:
        return plan("full", "one rank per node: the ring between the nodes is already the only step")
    if costs is not None:
        return _auto_for_adapters(plan, between_nodes, units, costs, world_size, per_node, gpu_memory_bytes)
    return _auto_across_nodes(plan, between_nodes, units, requested_reduce, world_size, per_node,
                              node_gbytes_per_s, bandwidth_source, compute_seconds)


def _auto_for_adapters(plan, between_nodes, units, costs, world_size: int, per_node: int,
                       gpu_memory_bytes: int | None) -> Plan:
    """auto for --method lora/qlora on two or more nodes: HSDP wherever the frozen base and the adapters' state fit
    a node's shards, since its gathers then stay inside each node and only the adapters' gradients cross the
    network; full sharding otherwise (the state then needs every GPU)."""
    state = state_bytes(units, costs) / per_node
    if gpu_memory_bytes and state > HYBRID_STATE_MEMORY_FRACTION * gpu_memory_bytes:
        return plan("full", f"memory: HSDP would keep {state / 2**30:.1f} GiB of frozen base and adapters' state "
                            f"on each GPU, over {HYBRID_STATE_MEMORY_FRACTION:.0%} of its "
                            f"{gpu_memory_bytes / 2**30:.1f} GiB")
    full_bytes = between_nodes(mesh_shape("full", world_size, per_node), "fp32")
    hybrid_bytes = between_nodes(mesh_shape("hybrid", world_size, per_node), "fp32")
    return plan("hybrid", f"adapters: HSDP gathers the frozen base inside each node and sends "
                          f"{hybrid_bytes / 1e9:.2f} GB per node per step between nodes, full sharding "
                          f"{full_bytes / 1e9:.2f} GB")


def _auto_across_nodes(plan, between_nodes, units, requested_reduce: str, world_size: int, per_node: int,
                       node_gbytes_per_s: float | None, bandwidth_source: str,
                       compute_seconds: float | None) -> Plan:
    """auto on two or more nodes of several ranks: full sharding when the backward's compute hides its reductions
    between nodes, else two-level (HSDP's bytes between nodes, half of them in the forward; full sharding's
    memory)."""
    nodes = world_size // per_node
    # Compared at the same reduction dtype, so the layout's choice does not depend on the dtype's.
    reduce = "fp32" if requested_reduce == "auto" else requested_reduce
    full_bytes = between_nodes(mesh_shape("full", world_size, per_node), reduce)
    two_d = mesh_shape(TWO_LEVEL, world_size, per_node)
    two_level_bytes = between_nodes(two_d, reduce, TWO_LEVEL)
    hybrid_bytes = between_nodes(two_d, reduce)
    between = (f"full sharding sends {full_bytes / 1e9:.2f} GB per node per step between nodes, HSDP "
               f"{hybrid_bytes / 1e9:.2f} GB all in the backward, two-level {two_level_bytes / 1e9:.2f} GB half in "
               f"the forward ({reduce} gradients)")
    if node_gbytes_per_s and compute_seconds:
        # Full sharding's reduce-scatters can hide only under the backward, its gathers under the forward (about
        # half); the reductions, with the larger dtype, decide.
        full_parts = step_collectives(units, mesh_shape("full", world_size, per_node), reduce)
        reductions = total_traffic([part for part in full_parts if part.operation == "reduce_scatter"], nodes,
                                   per_node).inter_node_bytes_per_node
        seconds, backward = reductions / (node_gbytes_per_s * 1e9), BACKWARD_SHARE * compute_seconds
        timing = (f"full sharding's reductions take {seconds:.2f} s at {node_gbytes_per_s:.3g} GB/s "
                  f"({bandwidth_source}) against about {backward:.2f} s of backward compute")
        if seconds <= backward:
            return plan("full", f"{between}; {timing}: hidden, with the fewest collectives")
        return plan(TWO_LEVEL, f"network-bound: {between}; {timing}")
    return plan(TWO_LEVEL, f"{between}; bandwidth or compute unknown, so fewer bytes decide")


def state_bytes(units: Sequence[tuple[str, Sequence[Shape]]],
                costs: Sequence[Sequence[tuple[float, bool]]] | None = None) -> float:
    """The sharded state of every unit, before it is divided among the shards: 16 bytes a trained parameter (fp32
    weight, gradient, AdamW's two moments), a frozen one as it is stored (its gathered bytes: bf16, or NF4)."""
    costs = costs or [[(PARAMETER_BYTES, True)] * len(shapes) for _, shapes in units]
    return sum(math.prod(shape) * (STATE_BYTES_PER_PARAMETER if trained else cost)
               for (_, shapes), unit_costs in zip(units, costs) for shape, (cost, trained) in zip(shapes, unit_costs))


def method_units(config: dict, method: str, rank: int = 16, targets: str = "all-linear"
                 ) -> tuple[list[tuple[str, list[Shape]]], list[list[tuple[float, bool]]] | None]:
    """The FSDP units of the model built from `config` for --method (memory.unit_shapes, with each layer's adapters
    appended) and their costs for step_collectives: the frozen base in bf16, qlora's decoder linear weights in NF4
    (workload.model.adapters.memory), the adapters gathered in bf16 and trained. Full training: costs None."""
    units = memory.unit_shapes(config)
    if method == "full":
        return units, None
    adapters = adapter_memory.adapter_shapes(config, rank, targets)
    linears = set(adapter_memory.targeted(config, targets).values()) if method == "qlora" else set()
    with_adapters, costs = [], []
    for name, shapes in units:
        frozen = [(adapter_memory.NF4_BYTES_PER_PARAMETER if name != "root" and shape in linears
                   else adapter_memory.BASE_BYTES_PER_PARAMETER, False) for shape in shapes]
        extra = adapters if name != "root" else []
        with_adapters.append((name, [*shapes, *extra]))
        costs.append(frozen + [(adapter_memory.GATHERED_ADAPTER_BYTES, True)] * len(extra))
    return with_adapters, costs


def packed_ranks_per_node(world_size: int, gpus_per_node: int) -> int | None:
    """The ranks per node that Ray Train's default placement (PACK: as few nodes as hold the workers, a node's ranks
    consecutive) gives `world_size` workers on nodes of `gpus_per_node` GPUs, as ranks_per_node_of finds them: all
    of them on one node, whole nodes, or None where the last node would hold fewer than the others."""
    if world_size <= gpus_per_node:
        return world_size
    return gpus_per_node if world_size % gpus_per_node == 0 else None


def step_compute_seconds(cfg: TrainConfig, config: dict, gpu_name: str) -> float | None:
    """A step's compute on one GPU: its tokens' FLOPs (workload.model.flops) at the GPU's bf16 peak by name and
    ASSUMED_MFU; None for an unlisted GPU or none. The communication it does not hide and activation checkpointing's
    recompute are not in it: a lower bound of the step."""
    peak = peak_flops_of(gpu_name) if gpu_name else None
    flops = run_flops_per_token(config, cfg)
    return cfg.batch_size * cfg.seq_len * flops / (peak * ASSUMED_MFU) if peak else None


def for_job(cfg: TrainConfig, config: dict, *, world_size: int, ranks_per_node: int | None, gpu_name: str,
            node_gbytes_per_s: float | None, bandwidth_source: str, gpu_memory_bytes: int | None) -> Plan:
    """choose() for a job's flags (its memory plan's levers applied: workload.model.memory_plan.apply) and its model's
    config.json: the units and their costs for --method (method_units), the step's compute (FLOPs per token at the
    GPU's bf16 peak by name and ASSUMED_MFU; unknown for an unlisted GPU or none), the network and the GPU's memory
    as given. workload.model.parallel.plan_for_worker calls it with what a worker knows, the preview with what EC2
    says of the instance type."""
    units, costs = method_units(config, cfg.method, cfg.lora_rank, cfg.lora_targets)
    compute_seconds = step_compute_seconds(cfg, config, gpu_name)
    return choose(cfg.sharding, cfg.reduce_dtype, world_size, ranks_per_node, units,
                  node_gbytes_per_s=node_gbytes_per_s or None, bandwidth_source=bandwidth_source,
                  compute_seconds=compute_seconds, gpu_memory_bytes=gpu_memory_bytes, costs=costs)
