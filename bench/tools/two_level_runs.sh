#!/usr/bin/env bash
# Issue 33's GPU runs in one call on one H200: the one-rank emulation of the dev stack (recipe, HSDP bf16, two-level
# bf16) twice, each in a process of its own, then the single-GPU step against the recipe (the 1.30x guard). Logs
# under $OUT; a short table last. EMULATE_ARGS adds flags to both emulations; STEP_S=0 skips the single-GPU step.
#   bash bench/tools/two_level_runs.sh                                   # there, from the repository root, OUT set
#   STEP_S=0 EMULATE_S=75 EMULATE_ARGS=--central_only bash bench/tools/two_level_runs.sh   # the second call
set -uo pipefail
: "${OUT:?set OUT to a directory for the logs}"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv >"$OUT/nvidia-smi.csv"
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
for run in 1 2; do
  timeout "${EMULATE_S:-170}" python3 -m bench.record.emulate_rank --stacks dev --strategies recipe,hybrid-bf16,two-level-bf16 \
    ${EMULATE_ARGS:-} --output "$OUT/emulate_rank-run$run.jsonl" >"$OUT/emulate_rank-run$run.log" 2>&1; echo "emulate_rank run $run rc=$?"
done
if [ "${STEP_S:-110}" != 0 ]; then
  timeout "${STEP_S:-110}" python3 -m bench.record.step_bench --batch_size 8 --seq_len 2048 --warmup 2 --steps 8 \
    >"$OUT/step_bench.log" 2>&1; echo "step_bench rc=$?"
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >>"$OUT/nvidia-smi.csv"
grep -h '"error"\|Traceback\|Error' "$OUT"/*.log | tail -5
grep -sh 'ratio\|tokens_per_s' "$OUT/step_bench.log" | tail -4
python3 - "$OUT" <<'PY'
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/emulate_rank-run*.jsonl")):
    for l in (json.loads(line) for line in open(path) if line.startswith("{")):
        if "error" in l:
            print(path[-10:], "ERROR", l["strategy"], l["error"][:200]); continue
        if l["run"].startswith("compute"):
            print(path[-10:], f'{l["strategy"]:15} h200 {l["h200_step_s"]:.3f}s split {l["split_forward_backward_optimizer"]} peak {l["peak_memory_gib"]} GiB')
        else:
            print(path[-10:], f'{l["strategy"]:15} {l["run"][10:36]:26} stack {l["stack_step_s"]:.3f}s {l["stack_tokens_per_s"]:>6} tok/s model {l["model_step_s"]:.3f}s ratio {l["emulated_over_model"]}')
PY
