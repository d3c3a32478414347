"""bench/record/checkpoint_bench.py's smoke path: the 7B case's code at tiny shapes on CPU, one rank of 8 on a fake
process group, a synchronous and an asynchronous save of the job's own CheckpointSaver."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def test_the_checkpoint_benchmark_runs_its_smoke_path_on_cpu(tmp_path):
    run = subprocess.run([sys.executable, "-m", "bench.record.checkpoint_bench", "--device", "cpu", "--small",
                          "--cases", "0"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "RAYTRAIN_CHECKPOINT_STAGING": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    (line,) = [json.loads(text) for text in run.stdout.splitlines() if text.startswith("{")]
    assert "error" not in line, line
    assert line["bytes_written"] > 0 and line["bytes_equal_sync_async"], line
    assert line["sync_save_s"] > 0 and line["async_blocking_s"] >= 0 and line["async_background_s"] > 0, line
