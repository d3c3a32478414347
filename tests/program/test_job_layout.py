"""The layout at preview (issue 33, item 4): jobLayoutPlan, what --sharding auto would choose from the instance's
nominal figures with the memory plan's levers, and that it is what the job's workers choose from the same inputs
(workload.model.layout.for_job on both sides)."""
from __future__ import annotations

import pytest

from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import run_program, stack_settings
from workload.model import architectures, layout

JOB_ON = {"trainEnabled": True}
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def test_dev_default_job_is_planned_two_level_with_its_reason():
    plan = run_program("dev", JOB_ON).exports["jobLayoutPlan"]
    assert (plan["sharding"], plan["mesh_shape"], plan["reduce_dtype"], plan["requested"]) == \
        ("two-level", [2, 4], "bf16", "auto"), plan
    # 40 Gbit/s between 2 x 4 L4s: full sharding's reductions outlast the backward that should hide them.
    assert plan["reason"].startswith("network-bound: ") and "at 5 GB/s (--node_gbits_per_s)" in plan["reason"], plan
    assert "g6.12xlarge's nominal figures (40 Gbit/s" in plan["basis"] and "fabric check" in plan["basis"], plan


def test_p5_job_is_planned_with_full_sharding():
    plan = run_program("p5", JOB_ON).exports["jobLayoutPlan"]
    assert (plan["sharding"], plan["mesh_shape"]) == ("full", [16]), plan
    assert "hidden, with the fewest collectives" in plan["reason"] and "3200 Gbit/s" in plan["basis"], plan


def test_a_qlora_70b_on_dev_is_planned_as_its_memory_plan_and_choose_say():
    # At the stack's default batch of 2 (at 1, with no gradient for the frozen head, HSDP's shards fit an L4).
    run = run_program("dev", {**JOB_ON, "trainModelId": LLAMA_70B, "trainMethod": "qlora", "trainBatchSize": 2})
    memory, plan = run.exports["jobMemoryPlan"], run.exports["jobLayoutPlan"]
    # The memory plan turned HSDP off (its 4-way shards of the NF4 base do not fit an L4), and the layout keeps that.
    assert memory["sharding"] == "full" and "sharding" in memory["changed"], memory
    assert (plan["sharding"], plan["mesh_shape"], plan["requested"]) == ("full", [8], "full"), plan
    assert "only the adapters' gradients are reduced" in plan["reason"], plan
    # auto alone would pick HSDP (its state rule: the NF4 base's 4-way shards are under half an L4); the memory plan's
    # whole-step projection, which the job applies first, is what rules it out: the order matters, and is the job's.
    units, costs = layout.method_units(architectures.published(LLAMA_70B), "qlora")
    auto = layout.choose("auto", "auto", 8, 4, units, gpu_memory_bytes=22888 * 2**20, costs=costs)
    assert auto.sharding == "hybrid", auto


def test_the_job_leaves_no_layout_plan_for_an_unknown_architecture(monkeypatch):
    from infra.preview import model_config

    monkeypatch.setattr(model_config, "resolve", lambda *args, **kw: model_config.Unknown("the Hub is not reachable"))
    run = run_program("dev", {**JOB_ON, "trainModelId": "acme/qwen-7b-chat"})
    assert run.exports["jobLayoutPlan"] is None and run.exports["jobMemoryPlan"] is None


@pytest.mark.parametrize("model_id", ["Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-7B"])
def test_the_preview_plans_the_layout_the_workers_choose(monkeypatch, model_id):
    """The job's side as workload/trainer.py runs it on 2 nodes of 4 L4s: the memory plan's levers, the model on the
    meta device, Ray's placement gathered from every rank, the flag's bandwidth (no fabric check figure): the plan
    the preview exported."""
    import torch

    from infra import config as stack_config
    from infra.job import job_config
    from infra.preview import job_layout, job_plan
    from workload import trainer
    from workload.model import parallel
    from workload.model.build import build_model

    facts = INSTANCE_FACTS["g6.12xlarge"]
    stack = stack_config.parse(stack_settings("dev") | {**JOB_ON, "trainModelId": model_id})
    workload = job_config.workload_config(stack, facts)
    architecture = architectures.published(model_id)
    memory_plan = job_plan.check_job_shape(workload, architecture, facts, 8, model=model_id, node_count=2)
    preview = job_layout.predict(workload, architecture, facts, 8, memory_plan)

    device = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L4")
    monkeypatch.setattr(parallel.dist, "all_gather_object",
                        lambda placements, mine: placements.__setitem__(slice(None), [(r // 4, 4) for r in range(8)]))
    applied, _ = trainer._plan_memory(workload, 8, 4, device)
    model = build_model(applied, torch.device("meta"))
    worker = parallel.plan_for_worker(applied, model, device, 8, 0, 4, None)
    assert worker.as_dict() == {key: value for key, value in preview.items() if key != "basis"}, (worker, preview)
    assert worker.sharding == "two-level", f"{model_id} on dev: network-bound, two-level: {worker}"


def test_ray_s_packed_placement_gives_the_ranks_per_node():
    assert [layout.packed_ranks_per_node(workers, 4) for workers in (1, 3, 4, 8, 6, 12)] == [1, 3, 4, 4, None, 4]


def one_node_warnings(caplog, overrides: dict) -> list[str]:
    import logging

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        run_program("dev", {**JOB_ON, "trainExpectTransport": "any", **overrides})
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("trainSharding ")]


@pytest.mark.parametrize("sharding, overrides, where", [
    ("hybrid", {"gpuNodeCount": 1}, "(gpuNodeCount 1)"),
    ("two-level", {"gpuNodeCount": 1, "trainNumWorkers": 2}, "(gpuNodeCount 1)"),
    ("hybrid", {"trainNumWorkers": 4}, "(trainNumWorkers 4, which fill one node of 4 GPUs of the 2)"),
])
def test_hybrid_or_two_level_on_one_node_is_one_warning(caplog, sharding, overrides, where):
    """What the job does with it: a (1, ranks) mesh, full sharding's losses and weights exactly (gloo, 2 ranks, 3
    steps of the tiny model: hybrid, two-level and full each 6.2445, 5.8301, 5.6119). It works, so it is said, not
    refused."""
    (warning,) = one_node_warnings(caplog, {"trainSharding": sharding, **overrides})
    ranks = overrides.get("trainNumWorkers", 4)
    assert warning.startswith(f"trainSharding {sharding}: every worker is on one g6.12xlarge node {where}, so "), warning
    assert f"the job runs full sharding's step on a (1, {ranks}) mesh; set trainSharding full" in warning, warning


def test_hybrid_across_nodes_and_full_on_one_node_are_not_warned(caplog):
    assert one_node_warnings(caplog, {"trainSharding": "hybrid"}) == []  # 8 workers on 2 nodes
    assert one_node_warnings(caplog, {"trainSharding": "full", "gpuNodeCount": 1}) == []
    assert one_node_warnings(caplog, {"gpuNodeCount": 1}) == []  # auto picks full there itself
