"""The upper bound of every numeric setting, each with its reason: a value past it is a typo (1e300 epochs, a seed of
2**70, 10**11 MiB of GPU memory) that would otherwise reach torch, the trackers or the preview's estimates as it is.
tests/unit/test_numeric_bounds.py holds every numeric declaration (workload/config/__init__.py) to both bounds.

Standard library only: the Pulumi program imports it at preview.
"""
from __future__ import annotations

# The most sequences per worker per step: the preview's memory check looks for the largest batch that fits, and a
# per-GPU batch beyond 65536 sequences fits no GPU at any sequence length a model has. --grad_accum_steps splits
# --batch_size into that many micro-batches, so it shares the bound.
MAX_BATCH_SIZE = 65536
# The most optimizer steps (and the most steps between logs, evaluations, checkpoints and garbage collections, and of
# warmup): ten million is months of steps at the fastest step any model takes here; a larger count (10**30) is a typo.
# It also keeps a step inside the 24 bits workload/data/batches.py _step_seed gives it (2**24 = 16,777,216).
MAX_STEPS = 10_000_000
# --epochs instead of --steps: an epoch of at least one worker-batch of data is at least one step, so more epochs than
# MAX_STEPS is more steps than any run takes (and more than the stack's 30-day trainTimeoutMinutes could run).
MAX_EPOCHS = MAX_STEPS
# The most restarts of a failed worker group (-1: forever): each restart reloads the last checkpoint, so a thousand is
# already a job that will not recover; a larger count is a typo for -1.
MAX_FAILURES = 1000
# --seed: torch.manual_seed and torch.Generator.manual_seed take a 64-bit seed ("ValueError: Overflow when
# unpacking long long" past 2**64 - 1; torch/random.py manual_seed), and workload/data/batches.py _step_seed gives each
# step's batch the seed (seed << 40) | (step << 16) | rank, whose 64 bits leave the seed 24: 0 to 2**24 - 1.
MAX_SEED = (1 << 24) - 1
# Ranks: _step_seed above gives the rank 16 bits, so at most 2**16 workers (and ranks on one node).
MAX_RANKS = 1 << 16
# --seq_len: above the longest context any published model's config declares (Llama 4 Scout's max_position_embeddings,
# 10,485,760 tokens; meta-llama/Llama-4-Scout-17B-16E config.json); the memory plan refuses far less on any GPU.
MAX_SEQ_LEN = 1 << 24
# --learning_rate: 1e6 sends any model's loss to NaN within steps (tests/runs/test_workload_runs.py diverges a run on
# purpose with it); the stack's own guard keeps trainLearningRate below 1 (infra/config/train_keys.py).
MAX_LEARNING_RATE = 1e6
# --max_grad_norm: torch.nn.utils.clip_grad_norm_ scales gradients whose global norm exceeds it; a bound of a million
# clips nothing a finite bf16/fp32 run produces, so a larger one is a typo (0 turns clipping off).
MAX_GRAD_NORM = 1e6
# --method lora/qlora, as workload/model/adapters check_settings takes them: rank 1 to 1024, alpha above 0 up to
# 4096, dropout from 0 to below 1 (torch.nn.Dropout: "dropout probability has to be between 0 and 1").
MAX_LORA_RANK = 1024
MAX_LORA_ALPHA = 4096.0
# --gpu_memory_mib: the largest GPU's memory with room to spare: NVIDIA B300's 288 GB of HBM3e (about 274,700 MiB;
# NVIDIA's "HGX B300" datasheet), as EC2 gives a GPU's memory, in MiB (DescribeInstanceTypes'
# GpuInfo.Gpus[].MemoryInfo.SizeInMiB). 1 TiB is 3.8 times the largest.
MAX_GPU_MEMORY_MIB = 1 << 20
# --node_gbits_per_s: EC2's fastest instance networking is 6,400 Gbit/s (P6-B300, EC2 "Accelerated computing instance
# network specifications"); 100,000 leaves room for the next generations.
MAX_NODE_GBITS_PER_S = 100_000.0
# --min_bus_gbytes_per_s: NVLink 5, the fastest fabric, moves 1,800 GB/s per GPU (NVIDIA Blackwell datasheet); a bus
# bandwidth (nccl-tests' busbw) cannot pass the links it crosses.
MAX_BUS_GBYTES_PER_S = 10_000.0
# --fabric_check_seconds: the check times collectives for seconds (3 by default) before training; an hour measures
# nothing a minute does not, and each second of it is a second of every GPU of the cluster (the stack's job runs at
# most 30 days, trainTimeoutMinutes 43200: a check of days would spend the job's time on timing).
MAX_FABRIC_CHECK_SECONDS = 3600.0
