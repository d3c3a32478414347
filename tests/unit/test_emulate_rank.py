"""bench.record.emulate_rank's bookkeeping, on the CPU: the collectives it intercepts on a fake world of 8 ranks (2 nodes of
4) are the ones workload.model.layout says a step issues, and each one's delay is its bus bytes over the link it
crosses. The timings themselves are the GPU run's (bench/results/emulate_rank-h200-2026-12-01.jsonl)."""
from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.distributed as dist

from bench.model import step_inputs, step_model
from bench.record import emulate_rank
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import layout, parallel
from workload.model.build import build_model

DEV = emulate_rank.Links(nodes=2, gpus_per_node=4, inter_node_gbytes_per_s=4.0, intra_node_gbytes_per_s=10.0)


def test_a_collective_waits_for_its_slower_link():
    size = 10**9
    # HSDP's all-reduce across the 2 nodes: each rank sends S, and the node's 4 ranks share its network.
    assert emulate_rank.collective_seconds("all_reduce", 2, size, DEV) == pytest.approx(4 * size / 4e9)
    # A gather inside a node: 3/4 of S over each GPU's link.
    assert emulate_rank.collective_seconds("all_gather", 4, size, DEV) == pytest.approx(0.75 * size / 10e9)
    # A ring over all 8 ranks crosses the network once per direction: the 4 GB/s of the node is the slower link.
    assert emulate_rank.collective_seconds("reduce_scatter", 8, size, DEV) == pytest.approx(7 / 8 * size / 4e9)


def test_intercepted_step_issues_what_workload_parallel_counts():
    if dist.is_initialized():
        pytest.skip("a process group of another test is live in this process")
    cfg = TrainConfig(model_config="tiny", batch_size=2, seq_len=16, reduce_dtype="bf16")
    strategy = next(s for s in step_inputs.STRATEGIES if s.name == "hybrid-bf16")
    try:
        emulate_rank.fake_world(DEV.world_size)
        collectives = emulate_rank.TimedCollectives(DEV, delay=None)
        with collectives.active():
            timed, _ = emulate_rank.build_step(strategy, cfg, torch.device("cpu"), DEV)
            loss = timed(random_batches(cfg, 512, rank=0)(0))
            model_units = parallel.fsdp_units(build_model(cfg, torch.device("meta")))
    finally:
        dist.destroy_process_group()
    assert torch.isfinite(loss), "the stand-in data (this rank's shard in every slot) trains"
    expected = [(c.operation, c.group, c.ranks, c.size)
                for c in layout.step_collectives(model_units, (2, 4), "bf16")]
    assert Counter(collectives.recorded) == Counter(expected), (collectives.recorded, expected)
    assert collectives.link_seconds == pytest.approx(
        sum(emulate_rank.collective_seconds(op, ranks, size, DEV) for op, _, ranks, size in expected))


def test_the_l4_runs_the_step_at_the_mfu_its_published_gemm_rate_gives():
    # zzc0721/torch-performance-test-data#120: 54.9-59.4 TFLOP/s at 4096-10240, so the project's step at MFU 0.32-0.35.
    low, high = (step_model.h200_mfu("project") * step_model.compute_scale(
        "project", "L4", step_inputs.Assumptions(l4_gemm_tflops=gemm)) for gemm in step_inputs.LOW_HIGH["l4_gemm_tflops"])
    assert 0.31 <= low < high <= 0.36, (low, high)


def test_each_stack_gets_a_central_figure_inside_its_range():
    dev, p5 = step_inputs.saved_hardware("dev"), step_inputs.saved_hardware("p5")
    assert {case.links for case in step_model.corners(dev)} == {"concurrent", "serialized"}, \
        "G family: SHM and EFA share host memory, so serialized links are in dev's range"
    assert {case.links for case in step_model.corners(p5)} == {"concurrent"}, "p5's NVLink and EFA do not"
    hybrid = next(s for s in step_inputs.STRATEGIES if s.name == "hybrid-bf16")
    figures = step_model.predict_range(hybrid, dev, 2, 2048)
    low, high = figures["speedup_vs_recipe_range"]
    assert low < figures["speedup_vs_recipe"] < high, figures
    lever = step_model.predict(hybrid, dev, 2, 2048, hide_under_step=True)
    assert lever["step_s"] < figures["step_s"], "hiding the reductions under the whole step can only shorten it"
