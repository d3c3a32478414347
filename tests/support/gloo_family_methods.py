"""The spawned side of tests/runs/test_family_methods.py: 2 gloo processes take each family's reduced copy (its published
config.json shrunk, saved as bf16 safetensors) through the job's pieces with --method full, lora and qlora (build on
the meta device, adapters on --lora_targets all-linear, shard, load, 2 train_steps) and rank 0 saves, per family and
method, the losses, the built model's parameter count, the adapters' count and the linear layers they went on. Kept
apart from the test module so that each spawned process imports torch, transformers, PEFT and the workload only.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model.adapters import lora
from workload.model.build import build_model, load_pretrained
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import train_step

METHODS = ("full", "lora", "qlora")
STEPS = 2
VOCAB = 512


def run_one(directory: str, method: str, rank: int) -> dict:
    cpu = torch.device("cpu")
    adapters = {"lora_rank": 4, "lora_targets": "all-linear"} if method != "full" else {}  # full refuses --lora_*
    cfg = TrainConfig(model_id=directory, method=method, batch_size=2, seq_len=16, steps=STEPS, learning_rate=1e-3,
                      **adapters)
    built = build_model(cfg, cpu, directory)
    parameters = sum(parameter.numel() for parameter in built.lm.parameters())
    built = lora.apply(built, cfg)
    adapted = sorted({name.split(".lora_")[0].rsplit(".", 1)[-1] for name, _ in lora.adapter_parameters(built)})
    adapter_count = sum(parameter.numel() for _, parameter in lora.adapter_parameters(built))
    sharded = shard_model(built, build_mesh(cpu), cfg, param_dtype=torch.float32)
    load_pretrained(sharded, directory, cpu, cfg)
    optimizer = build_optimizer(sharded, cfg)
    losses = [train_step(sharded, optimizer, random_batches(cfg, VOCAB, rank)(step), cfg).item()
              for step in range(STEPS)]
    return {"losses": losses, "parameters": parameters, "adapters": adapter_count, "adapted": adapted}


def worker(rank: int, port: int, directories: dict, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        results = {(family, method): run_one(directory, method, rank)
                   for family, directory in directories.items() for method in METHODS}
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()
