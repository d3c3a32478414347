#!/usr/bin/env bash
# Issue 43's GPU run in one call on one H100 or H200 (under 8 minutes): record.checkpoint_bench, one dev rank of 8 on
# a fake process group, synchronous against asynchronous saves of Qwen2.5-7B full training's shards (~11 GB) and of
# Llama-3.3-70B qlora's adapters. The qlora case needs torchao's wheel in .whl/ (carry .whl; one_gpu_runs.sh names
# the `pip download` line); without it that case reports its error and the 7B still runs.
#   bash bench/tools/checkpoint_runs.sh       # there, from the repository root, OUT set
set -uo pipefail
: "${OUT:?set OUT to a directory for the logs}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# The staging directory the job's pods put on the node's NVMe; here the machine's own disk.
export RAYTRAIN_CHECKPOINT_STAGING="${STAGING:-/tmp/checkpoint-staging}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv >"$OUT/nvidia-smi.csv"
df -h "$(dirname "$RAYTRAIN_CHECKPOINT_STAGING")" >"$OUT/disk.txt"
timeout "${CHECKPOINT_S:-440}" python3 -m bench.record.checkpoint_bench --out "$OUT/checkpoint_bench.jsonl" \
  >"$OUT/checkpoint_bench.log" 2>&1; echo "checkpoint_bench rc=$?"
grep -h 'Traceback\|Error' "$OUT"/checkpoint_bench.log | tail -5
python3 - "$OUT" <<'PY'
import json, sys
for line in open(f"{sys.argv[1]}/checkpoint_bench.jsonl"):
    r = json.loads(line)
    if "error" in r:
        print("ERROR", r["model"], r["method"], r["error"][:200]); continue
    print(f'{r["model"]:34} {r["method"]:5} {r["bytes_written"]/1e9:6.2f} GB step {r["step_s_without_save"]:.3f}s '
          f'sync {r["sync_save_s"]:.2f}s async blocks {r["async_blocking_s"]:.2f}s (first {r["async_first_blocking_s"]:.2f}s) '
          f'= {r["async_over_sync_blocking"]:.2f} of sync; during {r["step_s_during_save"]}s x{r["during_over_without"]} '
          f'bounds {r["async_blocking_within_bound"]}/{r["steps_within_bound"]}')
    if "dev_pad_s" in r:
        print(f'  as the dev rank (steps padded to {r["dev_step_model_s"]}s): {r["dev_step_s_without_save"]}s, '
              f'during a save {r["dev_step_s_during_save"]}s x{r["dev_during_over_without"]} '
              f'({r["dev_steps_during_save"]} steps), blocks {r["dev_async_blocking_s"]}s; bound {r["dev_steps_within_bound"]}')
PY
