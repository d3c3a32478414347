"""Two-level collectives (workload.model.two_level) outside the gloo run of tests/runs/test_parallel.py: the optimizer's
reordered update is exactly one AdamW step, and the step-time model's figures for the dev stack."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.model import step_inputs, step_model
from bench.record import emulate_rank
from workload.model import two_level


class _Unit(nn.Linear):
    """A stand-in FSDP unit: records the gathers asked of it."""

    def __init__(self, size: int) -> None:
        super().__init__(size, size)
        self.unshards: list[bool] = []

    def unshard(self, async_op: bool = False) -> None:
        self.unshards.append(async_op)


def _model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(_Unit(8), _Unit(8), _Unit(8))


def test_the_reordered_update_is_one_adamw_step():
    plain, reordered = _model(0), _model(0)
    first = {id(param) for unit in reordered[:2] for param in unit.parameters()}
    reordered._two_level_first_units = ((reordered[0], reordered[1]), first)
    optimizers = [torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1) for model in (plain, reordered)]
    batch = torch.randn(4, 8)
    for _ in range(3):
        for model, optimizer in zip((plain, reordered), optimizers):
            model(batch).square().sum().backward()
            two_level.optimizer_step(model, optimizer)
            optimizer.zero_grad()
    for (name, expected), (_, got) in zip(plain.named_parameters(), reordered.named_parameters()):
        assert torch.equal(expected, got), f"{name}: the update in two calls must equal one call's, bit for bit"
    assert reordered[0].unshards == reordered[1].unshards == [True] * 3, "the first units gathered, asynchronously"
    assert reordered[2].unshards == [] and len(optimizers[1].param_groups[0]["params"]) == 6, "group restored"


def test_dev_two_level_doubles_the_recipe_by_the_model_s_central_inputs():
    dev = step_inputs.saved_hardware("dev")
    strategies = {strategy.name: strategy for strategy in step_inputs.STRATEGIES}
    recipe = step_model.predict(strategies["recipe"], dev, 2, 2048)
    hybrid = step_model.predict(strategies["hybrid-bf16"], dev, 2, 2048)
    ours = step_model.predict(strategies["two-level-bf16"], dev, 2, 2048)
    assert ours["inter_node_gb_per_node"] == pytest.approx(hybrid["inter_node_gb_per_node"]), "HSDP's bytes"
    assert recipe["step_s"] / ours["step_s"] >= 2.0 > recipe["step_s"] / hybrid["step_s"], (recipe, hybrid, ours)
    # Still above the compute: what is left is the last reduction (the root's) and the gathers' last unit.
    assert ours["compute_s"] < ours["step_s"] < 1.15 * ours["compute_s"], ours


def test_a_collective_queues_on_the_link_that_times_it():
    links = emulate_rank.Links(nodes=2, gpus_per_node=4, inter_node_gbytes_per_s=4.0, intra_node_gbytes_per_s=10.0)
    size = 10**9
    assert emulate_rank.slower_link("all_gather", 8, size, links) == "between", "a ring over both nodes"
    assert emulate_rank.slower_link("reduce_scatter", 2, size, links) == "between", "one rank per node"
    assert emulate_rank.slower_link("all_gather", 4, size, links) == "inside", "a node's ranks"


def test_memory_cap_runs_a_plan_with_two_level_collectives():
    """bench.record.memory_cap --sharding two-level: the dev 7B plan on its (nodes, GPUs per node) mesh, and the path that
    builds it (bench.record.memory_bench.sharded_model on the fake group at the world size) stepping a tiny model on CPU with
    two-level's collectives in every unit."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from bench.record import memory_cap
    from bench.record.memory_bench import sharded_model
    from workload.config import ARCHITECTURES, TrainConfig
    from workload.model.optimizer import build_optimizer
    from workload.model.step import train_step

    job = memory_cap.planned(("Qwen/Qwen2.5-7B", 2, 2048, 8, "g6.12xlarge"), "two-level")
    assert (job["sharding"], job["mesh"], job["reduce_dtype"]) == ("two-level", [2, 4], "bf16"), job
    assert memory_cap.planned(("Qwen/Qwen2.5-7B", 2, 2048, 8, "g6.12xlarge"))["mesh"] == [8], "plan: full's mesh"
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        cfg = TrainConfig(model_config="tiny", batch_size=2, seq_len=32, compile=False, reduce_dtype="bf16")
        model = sharded_model({**ARCHITECTURES["tiny"], "model_type": "qwen2"}, cfg, torch.device("cpu"), (2, 4),
                              two_level=True)
        units = [module for module in model.modules() if hasattr(module, "_get_fsdp_state")]
        assert len(units) == ARCHITECTURES["tiny"]["num_hidden_layers"] + 1 and all(
            isinstance(unit._get_fsdp_state()._fsdp_param_group._reduce_scatter_comm, two_level.TwoLevelReduceScatter)
            for unit in units), "every FSDP unit reduces in two levels"
        optimizer = build_optimizer(model, cfg)
        batch = torch.randint(ARCHITECTURES["tiny"]["vocab_size"], (2, 32))
        train_step(model, optimizer, batch, cfg)  # the fake group moves nothing: only that it runs
    finally:
        dist.destroy_process_group()
