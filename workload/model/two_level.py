"""Two-level collectives for full sharding across nodes (--sharding two-level): every unit sharded over all ranks, as
with full, its all-gathers and reduce-scatters split into a step between nodes and a step inside each node.

Why: NCCL's ring over all ranks of 2 nodes carries (n-1)/n of a unit's bytes through each node's network, once for
the forward's all-gather and once for the backward's reduce-scatter; HSDP carries the whole gradient once, in its
backward all-reduce, where only the backward's compute can hide it. Split in two levels, each node's network carries
half of the bytes in each direction for the gather and half for the reduction (a ring between the nodes over each
rank's shard), and the other half stays on the links inside the node: the same bytes between nodes as HSDP, but half
of them in the forward, under the forward's compute, and half in the backward. The arithmetic is full sharding's
(every rank's gradients summed, averaged over all ranks; AdamW on a 1/world shard), only the order of the sums differs.

The phases run on separate streams, so the step between nodes of one unit overlaps the step inside the node of the
next (an all-gather's step between nodes on a stream of its own, which waits only for FSDP's copy-in; the
reduce-scatter's step between nodes in FSDP's all-reduce hook, on its all-reduce stream). With global rank
node x ranks_per_node + local, FSDP's chunk of rank r is chunk r of the flat buffer; seen as (nodes, ranks_per_node)
chunks, the step between nodes works on a column (one chunk per node, same local rank), the step inside a node on a
row. Uses FSDPModule.set_custom_all_gather / set_custom_reduce_scatter / set_all_reduce_hook (torch 2.11 and 2.13).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule


def _all_gather(output: torch.Tensor, input: torch.Tensor, group: dist.ProcessGroup) -> None:
    # Looked up at each call, so that a wrapper (bench/record/emulate_rank.py) sees it; torch 2.13 deprecates the older name.
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(output, input, group=group)


def _reduce_scatter(output: torch.Tensor, input: torch.Tensor, op, group: dist.ProcessGroup) -> None:
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(output, input, op=op, group=group)


# The 2-D mesh's dimension names (workload.model.sharding.build_mesh): between nodes, inside a node.
ACROSS, INSIDE = "replicate", "shard"


class _Levels:
    """What a unit's two-level collectives share: the groups and this rank's (node, local) position."""

    def __init__(self, mesh: DeviceMesh) -> None:
        self.across, self.inside = mesh.get_group(ACROSS), mesh.get_group(INSIDE)
        self.nodes, self.per_node = self.across.size(), self.inside.size()
        self.node, self.local = self.across.rank(), self.inside.rank()
        self.device = torch.device(mesh.device_type, torch.cuda.current_device()) if mesh.device_type == "cuda" \
            else torch.device("cpu")
        self.side_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None


class TwoLevelAllGather:
    """FSDP's all-gather of a unit (output: every rank's chunk, rank-major): first the chunks of this rank's column
    between the nodes (on a stream of its own), then each node's row of chunks inside the node."""

    def __init__(self, levels: _Levels) -> None:
        self.levels = levels
        self._copy_in_stream = None

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        # FSDP allocates the output on its copy-in stream, then copies this rank's shard in on the same stream: the
        # step between nodes needs nothing else, so its stream waits for that stream only, not for the all-gather
        # stream (which still runs the previous unit's step inside the node).
        if device.type == "cuda":
            self._copy_in_stream = torch.cuda.current_stream(device)
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 async_op: bool = False):
        levels = self.levels
        chunk = input_tensor.numel()
        grid = output_tensor.view(levels.nodes, levels.per_node, chunk)
        column = torch.empty((levels.nodes, chunk), dtype=input_tensor.dtype, device=input_tensor.device)
        if levels.side_stream is not None:
            gather_stream = torch.cuda.current_stream(levels.device)
            levels.side_stream.wait_stream(self._copy_in_stream or gather_stream)
            with torch.cuda.stream(levels.side_stream):
                _all_gather(column.view(-1), input_tensor.view(-1), levels.across)
            gather_stream.wait_stream(levels.side_stream)
            column.record_stream(levels.side_stream)
        else:
            _all_gather(column.view(-1), input_tensor.view(-1), levels.across)
        grid[:, levels.local].copy_(column)
        for node in range(levels.nodes):  # in place: this rank's chunk of the row is the input
            _all_gather(grid[node].view(-1), grid[node, levels.local], levels.inside)
        return None


class TwoLevelReduceScatter:
    """FSDP's reduce-scatter of a unit (input: the whole unit's gradients, rank-major chunks): each node's rows
    reduced inside the node to this rank's column, here; that column reduced between the nodes to this rank's chunk
    in `between_nodes`, FSDP's all-reduce hook, which FSDP runs on its all-reduce stream."""

    def __init__(self, levels: _Levels) -> None:
        self.levels = levels
        self._pending: list[tuple[torch.Tensor, object]] = []

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup, op,
                 async_op: bool = False):
        levels = self.levels
        chunk = output_tensor.numel()
        grid = input_tensor.view(levels.nodes, levels.per_node * chunk)
        column = torch.empty((levels.nodes, chunk), dtype=input_tensor.dtype, device=input_tensor.device)
        # AVG over all ranks is AVG inside the node then AVG between the nodes; a pre-multiplied sum (FSDP's divide
        # factor) is applied once, in the first step.
        average = op == dist.ReduceOp.AVG
        for node in range(levels.nodes):
            _reduce_scatter(column[node], grid[node], op, levels.inside)
        self._pending.append((column, dist.ReduceOp.AVG if average else dist.ReduceOp.SUM))
        return None

    def between_nodes(self, reduce_output: torch.Tensor) -> None:
        column, op = self._pending.pop(0)
        if self.levels.side_stream is not None:
            column.record_stream(torch.cuda.current_stream(self.levels.device))
        _reduce_scatter(reduce_output, column.view(-1), op, self.levels.across)


def apply(model: torch.nn.Module, mesh: DeviceMesh) -> None:
    """Give every FSDP unit of `model` (sharded over the flattened `mesh`, all ranks) the two-level collectives of
    `mesh` (nodes x ranks per node). One side stream and one pair of groups for all units."""
    levels = _Levels(mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            reduce_scatter = TwoLevelReduceScatter(levels)
            module.set_custom_all_gather(TwoLevelAllGather(levels))
            module.set_custom_reduce_scatter(reduce_scatter)
            module.set_all_reduce_hook(reduce_scatter.between_nodes)
    layers = getattr(model, "layers", None)
    if isinstance(model, FSDPModule) and layers is not None and len(layers) and isinstance(layers[0], FSDPModule):
        later = {id(param) for layer in list(layers)[1:] for param in layer.parameters()}
        first = {id(param) for param in model.parameters() if id(param) not in later}
        model._two_level_first_units = ((model, layers[0]), first)  # for optimizer_step


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """optimizer.step(); with two-level collectives (apply), the units the next forward gathers first (the root:
    embedding, tied lm_head, final norm; then layer 0) are updated first and their gathers issued at once, so they
    cross the network under the rest of the update instead of before the next forward. Each parameter gets the same
    AdamW update as in one call (AdamW is per parameter); only the kernels' order changes."""
    early = getattr(model, "_two_level_first_units", None)
    if early is None or len(optimizer.param_groups) != 1:
        optimizer.step()
        return
    modules, first_ids = early
    group = optimizer.param_groups[0]
    params = group["params"]
    try:
        group["params"] = [param for param in params if id(param) in first_ids]
        optimizer.step()
        device = group["params"][0].device if group["params"] else torch.device("cpu")
        if device.type == "cuda":  # explicit gathers do not wait for the optimizer by themselves (the forward's do)
            context = model._get_fsdp_state()._comm_ctx
            current = torch.cuda.current_stream(device)
            context.all_gather_copy_in_stream.wait_stream(current)
            context.all_gather_stream.wait_stream(current)
        for module in modules:
            module.unshard(async_op=True)  # the module's pre-forward waits for it
        group["params"] = [param for param in params if id(param) not in first_ids]
        optimizer.step()
    finally:
        group["params"] = params
