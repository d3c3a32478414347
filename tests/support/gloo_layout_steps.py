"""The spawned side of tests/runs/test_parallel.py: 4 gloo processes (a 2 x 2 mesh stands for 2 nodes of 2 GPUs) train the
tiny model with each layout, record every collective one step dispatches, run the fabric check and plan the
sharding; rank 0 saves what they saw for the tests. Kept apart from the test module so that each spawned process
imports torch and the workload only, not Ray, Pulumi or pytest.
"""
from __future__ import annotations

import dataclasses
import os
import socket

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.fabric import bandwidth as fabric
from workload.model import parallel
from workload.model.build import build_model
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import train_step

WORLD = 4
BASE = TrainConfig(model_config="tiny", batch_size=4, seq_len=32, learning_rate=1e-2, reduce_dtype="fp32")
STEPS = 3
# FSDP1 size-based thresholds for the tiny model's recipe step: two different sets of units (tests/runs/test_parallel.py).
RECIPE_MIN_NUM_PARAMS = (20_000, 8_000)
# (mesh shape, overrides) of the recorded steps.
RECORDED = {
    "full": ((4,), {}),
    "hybrid": ((2, 2), {}),
    "hybrid-bf16": ((2, 2), {"reduce_dtype": "bf16"}),
    "replicate": ((4, 1), {}),
    "full-reshard": ((4,), {"reshard_after_forward": True}),
    "hybrid-accum2": ((2, 2), {"grad_accum_steps": 2}),
    "two-level": ((2, 2), {}),
    "two-level-bf16-reshard": ((2, 2), {"reduce_dtype": "bf16", "reshard_after_forward": True}),
}


class CollectiveRecorder(TorchDispatchMode):
    """Every collective dispatched while active, as (operation, ranks, nccl-tests size in bytes, phase).

    c10d's ops are FSDP's gathers and reductions; DTensor's functional ones (gradient clipping's norm) are kept
    apart, reached by letting DTensor desugar first. Backward is told apart by autograd's running graph task."""

    def __init__(self) -> None:
        super().__init__()
        self.c10d: list[tuple[str, int, int, str]] = []
        self.functional: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.distributed.tensor import DTensor

        if any(issubclass(kind, DTensor) for kind in types):
            return NotImplemented
        phase = "backward" if torch._C._current_graph_task_id() >= 0 else "forward"
        name = func._overloadpacket.__name__
        if func.namespace == "c10d" and name in ("_allgather_base_", "allgather_"):
            output = args[0] if name == "_allgather_base_" else [t for ts in args[0] for t in ts]
            ranks = len(args[0][0]) if name == "allgather_" else output.numel() // args[1].numel()
            self.c10d.append(("all_gather", ranks, _bytes(output), phase))
        elif func.namespace == "c10d" and name == "_reduce_scatter_base_":
            self.c10d.append(("reduce_scatter", args[1].numel() // args[0].numel(), _bytes(args[1]), phase))
        elif func.namespace == "c10d" and name == "allreduce_":
            self.c10d.append(("all_reduce", dist.ProcessGroup.unbox(args[1]).size(), _bytes(args[0]), phase))
        elif func.namespace in ("c10d", "_c10d_functional") and "wrap" not in name:
            self.functional.append(_bytes(args[0]))
        return func(*args, **(kwargs or {}))


def _bytes(tensors) -> int:
    tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def _train(cfg: TrainConfig, mesh_shape, rank: int, two_level: bool = False) -> tuple[list[float], dict]:
    """STEPS steps on one batch per rank, in fp32 compute: the losses (mean over ranks), which fall as the batch is
    learnt, and the full parameters after them."""
    cpu = torch.device("cpu")
    sharded = shard_model(build_model(cfg, cpu), build_mesh(cpu, mesh_shape), cfg,
                                param_dtype=torch.float32, two_level=two_level)
    optimizer = build_optimizer(sharded, cfg)
    batch = random_batches(cfg, 512, rank)(0)
    losses = []
    for _ in range(STEPS):
        loss = train_step(sharded, optimizer, batch, cfg)
        dist.all_reduce(loss)
        losses.append(loss.item() / WORLD)
    return losses, {name: parameter.full_tensor() for name, parameter in sharded.named_parameters()}


def _record(step, rank_batch) -> dict:
    step(rank_batch)  # lazy initialisation and first-step allocations stay out of the record
    recorder = CollectiveRecorder()
    with recorder:
        step(rank_batch)
    return {"c10d": recorder.c10d, "functional": recorder.functional}


def worker(rank: int, port: int, out: str) -> None:
    from bench.common import recipe_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # 4 processes share the CI machine's 2 cores
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    cpu = torch.device("cpu")
    results: dict = {"train": {}, "recorded": {}}
    for name, (shape, cfg) in {"full": ((4,), BASE), "hybrid": ((2, 2), BASE),
                               "full-accum2": ((4,), dataclasses.replace(BASE, grad_accum_steps=2)),
                               "hybrid-accum2": ((2, 2), dataclasses.replace(BASE, grad_accum_steps=2))}.items():
        results["train"][name] = _train(cfg, shape, rank)
    results["train"]["two-level"] = _train(BASE, (2, 2), rank, two_level=True)
    # One node of 4 ranks: what the job runs for trainSharding hybrid or two-level on gpuNodeCount 1.
    results["train"]["hybrid-one-node"] = _train(BASE, (1, 4), rank)
    results["train"]["two-level-one-node"] = _train(BASE, (1, 4), rank, two_level=True)

    batch = random_batches(BASE, 512, rank)(0)
    for name, (shape, overrides) in RECORDED.items():
        cfg = dataclasses.replace(BASE, **overrides)
        sharded = shard_model(build_model(cfg, cpu), build_mesh(cpu, shape), cfg,
                                    two_level=name.startswith("two-level"))
        optimizer = build_optimizer(sharded, cfg)
        results["recorded"][name] = _record(lambda b: train_step(sharded, optimizer, b, cfg), batch)
    for min_num_params in RECIPE_MIN_NUM_PARAMS:
        recipe, recipe_optimizer = recipe_model(BASE, cpu, min_num_params=min_num_params)

        def recipe_step(b, recipe=recipe, recipe_optimizer=recipe_optimizer):
            recipe(input_ids=b, labels=b).loss.backward()
            recipe_optimizer.step()
            recipe_optimizer.zero_grad()

        results["recorded"][f"recipe-{min_num_params}"] = _record(recipe_step, batch)

    lines: list[str] = []
    results["fabric"] = fabric.run_before_training(0.3, 0.0, cpu, lines.append)
    results["fabric_lines"] = lines
    try:
        fabric.run_before_training(0.1, 1e6, cpu, lambda line: None)
    except fabric.FabricTooSlowError as error:
        results["refusal"] = str(error)

    tiny = build_model(BASE, cpu)
    auto = dataclasses.replace(BASE, reduce_dtype="auto")
    results["plans"] = {
        placement: parallel.plan_for_worker(auto, tiny, cpu, WORLD, node, 2, results["fabric"]).as_dict()
        for placement, node in (("grouped", rank // 2), ("interleaved", rank % 2))}
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
