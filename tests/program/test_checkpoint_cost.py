"""A checkpoint's cost, known at preview (issue 43, item 4): jobCheckpointPlan states what one save of the job writes
and how long it takes at the nodes' disk and network rates, and a trainCheckpointEvery that would keep a save always
in flight is warned about.

Expected figures come from published facts, not the code under test: Qwen2.5-7B's 7.62 B parameters (its model card),
12 bytes a parameter (fp32 weights and AdamW's two fp32 moments), dev's 2 x g6.12xlarge (4 GPUs, 4 x 940 GB NVMe and
40 Gbit/s each: tests/support/instance_facts.py).
"""
from __future__ import annotations

import dataclasses
import logging

import pytest

from infra.preview import checkpoint_cost
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import run_program

QWEN_7B = {"trainEnabled": True, "trainModelId": "Qwen/Qwen2.5-7B", "trainStoragePath": "s3://bucket/runs",
           "trainSteps": 1000}  # a run long enough for trainCheckpointEvery 100
QWEN_7B_PARAMETERS = 7.62e9


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "trainCheckpointEvery" in r.getMessage()]


def test_dev_7b_full_training_states_the_checkpoints_size_and_cost(caplog):
    with caplog.at_level(logging.WARNING):
        plan = run_program("dev", {**QWEN_7B, "trainCheckpointEvery": 100, "trainCheckpointMode": "sync"}
                           ).exports["jobCheckpointPlan"]
    assert plan["size_gb"] == pytest.approx(QWEN_7B_PARAMETERS * 12 / 1e9, rel=0.01), plan
    # Two nodes of four ranks each: half the checkpoint a node.
    assert plan["node_gb"] == pytest.approx(plan["size_gb"] / 2, rel=0.001), plan
    assert "12 bytes" in plan["contents"] and "7.62 B parameters" in plan["contents"], plan
    # The node writes its half to 4 striped NVMe disks at the assumed 1 GB/s each, then uploads it through its one
    # 40 Gbit/s network card (5 GB/s), read back from those disks (4 GB/s).
    assert plan["write_seconds"] == pytest.approx(plan["node_gb"] / 4, abs=0.1), plan
    assert plan["upload_seconds"] == pytest.approx(plan["node_gb"] / 4, abs=0.1), plan
    assert plan["blocking_seconds"] == pytest.approx(plan["write_seconds"] + plan["upload_seconds"], abs=0.1), plan
    assert plan["background_seconds"] == plan["blocking_seconds"], "synchronous today: the whole save blocks"
    assert "4 disks in RAID0" in plan["disk"] and "40 Gbit/s" in plan["network"], plan
    # Both rounded in the output: the steps to 0.01 s, the interval to 0.1 s.
    assert plan["step_seconds"] > 0 and plan["seconds_between_saves"] == pytest.approx(100 * plan["step_seconds"],
                                                                                      abs=0.5), plan
    assert not warnings_of(caplog), "100 steps outlast a save: no warning"


def test_a_save_every_step_is_warned_about_as_always_in_flight(caplog):
    with caplog.at_level(logging.WARNING):
        plan = run_program("dev", {**QWEN_7B, "trainCheckpointEvery": 1, "trainCheckpointMode": "sync"}
                           ).exports["jobCheckpointPlan"]
    (warning,) = warnings_of(caplog)
    assert warning.startswith("trainCheckpointEvery 1: 1 step takes about "), warning
    assert "always be in flight" in warning and f"{plan['node_gb']:.1f} GB a node" in warning, warning
    enough = -(-plan["blocking_seconds"] // plan["step_seconds"])
    assert f"Allowed: trainCheckpointEvery {enough:.0f} or more" in warning, (warning, plan)


def test_a_lora_checkpoint_holds_the_adapters_alone():
    plan = run_program("dev", {**QWEN_7B, "trainMethod": "lora"}).exports["jobCheckpointPlan"]
    assert plan["size_gb"] < 1, plan
    assert "adapter parameters (the frozen base is not saved)" in plan["contents"], plan


def test_without_instance_store_the_save_runs_at_the_root_volumes_gp3_throughput(monkeypatch):
    monkeypatch.setitem(INSTANCE_FACTS, "g6.12xlarge", dataclasses.replace(
        INSTANCE_FACTS["g6.12xlarge"], instance_store_gb=0, instance_store_disks=0))
    plan = run_program("dev", QWEN_7B).exports["jobCheckpointPlan"]
    assert plan["disk"] == "gp3 root volume at 1000 MiB/s", plan
    assert plan["write_seconds"] == pytest.approx(plan["node_gb"] * 1e9 / (1000 * 2**20), abs=0.1), plan


def test_the_warning_needs_a_known_step_time():
    save = checkpoint_cost.CheckpointPlan(
        size_bytes=1e11, node_bytes=5e10, contents="", write_seconds=50, upload_seconds=10, disk="d", network="n",
        step_seconds=None, checkpoint_every=1)
    assert checkpoint_cost.always_in_flight_warning(save) is None
    assert checkpoint_cost.always_in_flight_warning(dataclasses.replace(save, step_seconds=1.0)) is not None
    assert checkpoint_cost.always_in_flight_warning(dataclasses.replace(save, step_seconds=60.0)) is None
    assert checkpoint_cost.always_in_flight_warning(dataclasses.replace(save, step_seconds=1.0,
                                                                        checkpoint_every=0)) is None
