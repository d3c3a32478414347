#!/usr/bin/env bash
# Issue 45 part 6 in one call on one H100 (80 GB) or H200, under 8 minutes: the 70B QLoRA dev rank emulated
# (bench.record.seventy_b: world size 8, batch 2 x 2048, the memory plan's levers), the current plan (activation
# checkpointing) beside the chosen lever (bench.model.step_breakdown: the first 36 layers un-recomputed, their base
# matmuls' and attention's outputs in pinned host memory, copied back ahead of their backward), a summary line a plan,
# then the lever's gain emulated beside the step model's. Needs torchao's and peft's wheels in .whl/ (the GPU machine
# has no registry), then run(command="bash bench/tools/seventy_b_runs.sh", carry=[".whl"]):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl \
#     torchao==0.18.0 peft==0.21.2
set -uo pipefail
: "${OUT:?set OUT to a directory for the logs}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/nvidia-smi.csv"
free -g | head -2 >>"$OUT/nvidia-smi.csv"
python3 -c "import torch, torchao, transformers; print(torch.__version__, torchao.__version__, transformers.__version__)"
python3 -m bench.model.step_breakdown >"$OUT/step_breakdown.jsonl" 2>&1 || echo "step_breakdown failed"
# 75 GiB of the card at most, whatever card comes (an H100's 80 GB less the context): set before the model is built.
timeout "${SEVENTY_B_S:-420}" python3 -c "
import sys, torch
torch.cuda.set_per_process_memory_fraction(min(1.0, 75 * 2**30 / torch.cuda.get_device_properties(0).total_memory))
from bench.record import seventy_b
seventy_b.main(['--output', sys.argv[1]])" "$OUT/seventy_b.jsonl" >"$OUT/seventy_b.log" 2>&1
echo "seventy_b rc=$?"
grep -h 'Traceback\|Error' "$OUT/seventy_b.log" | tail -5
python3 -m bench.record.seventy_b --compare "$OUT/seventy_b.jsonl"
