#!/usr/bin/env bash
# Issue 23's GPU runs in one call on one H200: the one-rank emulation (dev and p5, every strategy, fp8 on dev's
# default), then fp8 against bf16 (speed, and the loss of the sample-corpus fine-tune). Full logs under $OUT; a
# short table last. Needs torchao's wheel in .whl/ (the GPU machine has no registry):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl torchao==0.18.0
#   bash bench/tools/one_gpu_runs.sh       # there, from the repository root, OUT set
set -uo pipefail
: "${OUT:?set OUT to a directory for the logs}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv >"$OUT/nvidia-smi.csv"
python3 -c "import torch, torchao, transformers; print(torch.__version__, torchao.__version__, transformers.__version__)"
timeout "${EMULATE_S:-330}" python3 -m bench.record.emulate_rank --fp8_strategies hybrid-bf16 \
  --output "$OUT/emulate_rank.jsonl" >"$OUT/emulate_rank.log" 2>&1; echo "emulate_rank rc=$?"
timeout "${FP8_S:-200}" python3 -m bench.record.fp8_bench --output "$OUT/fp8_bench.jsonl" >"$OUT/fp8_bench.log" 2>&1
echo "fp8_bench rc=$?"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >>"$OUT/nvidia-smi.csv"
grep -h '"error"\|Traceback\|Error' "$OUT"/*.log | tail -5
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def lines(name):
    try:
        return [json.loads(l) for l in open(f"{out}/{name}") if l.startswith("{")]
    except OSError:
        return []
for l in lines("emulate_rank.jsonl"):
    if "error" in l:
        print("ERROR", l["stack"], l["strategy"], l["error"][:150]); continue
    if l["run"].startswith("compute"):
        print(f'{l["stack"]:4} {l["strategy"]:17} h200 {l["h200_step_s"]:.3f}s split {l["split_forward_backward_optimizer"]} peak {l["peak_memory_gib"]} GiB {l.get("fp8_compute_over_bf16", "")}')
    else:
        print(f'{l["stack"]:4} {l["strategy"]:17} {l["run"][10:32]:22} scale {l["delay_scale"]:.3f} stack {l["stack_step_s"]:.3f}s {l["stack_tokens_per_s"]:>7} tok/s model {l["model_step_s"]:.3f}s ratio {l["emulated_over_model"]}')
for l in lines("fp8_bench.jsonl"):
    if l.get("run") in ("speed", "loss verdict") or l.get("run") == "loss":
        print(json.dumps({k: v for k, v in l.items() if k != "train_losses_every_10"}))
PY
