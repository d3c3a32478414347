"""With trainCheckpointMode async (the default) the preview's jobCheckpointPlan says a save holds the step only for
each rank's copy of its shards to pinned host memory (infra/preview/checkpoint_cost.py's HOST_COPY_BYTES_PER_S), while
the write and the upload, the same seconds as a synchronous save's, run beside the steps."""
from __future__ import annotations

import pytest

from infra.preview import checkpoint_cost
from tests.program.test_checkpoint_cost import QWEN_7B
from tests.support.pulumi_mocks import run_program


def test_dev_7b_async_save_blocks_for_the_host_copy_alone():
    plan = run_program("dev", {**QWEN_7B, "trainCheckpointEvery": 100}).exports["jobCheckpointPlan"]
    assert plan["mode"] == "async", plan
    # 8 ranks, each copying its eighth over its own PCIe link at once.
    per_rank_gb = plan["size_gb"] / 8
    assert plan["blocking_seconds"] == pytest.approx(per_rank_gb * 1e9 / checkpoint_cost.HOST_COPY_BYTES_PER_S,
                                                     abs=0.01), plan
    assert plan["background_seconds"] == pytest.approx(plan["write_seconds"] + plan["upload_seconds"], abs=0.1), plan
    assert plan["blocking_seconds"] < 0.2 * plan["background_seconds"], plan
