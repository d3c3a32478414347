"""One rank's real peak GPU memory at a cluster's world size, on one GPU, against workload.model.memory's projection.

    python -m bench.record.memory_bench                 # every case of CASES, on the first GPU (torch + transformers)
    python -m bench.record.memory_bench --cases 0,3     # some of them

For each case the model is built from its shipped config (workload/model/architectures/configs) on the meta device,
sharded with workload.model.sharding.shard_model over a mesh of `world_size` ranks of a fake process group
(torch.testing._internal.distributed.fake_pg: FakeStore and the "fake" backend), then materialised with to_empty:
this GPU holds exactly what one rank of that cluster holds, its shards of the fp32 weights and of AdamW's state, and
all-gathers allocate their full outputs. It then runs real steps of workload.model.step.train_step on random tokens
and records torch.cuda.max_memory_allocated() over the steps after the first (which allocates AdamW's state).

A fake process group's collectives return without writing their outputs: gathered weights and reduced gradients are
whatever the allocator handed out, so the losses are meaningless (often NaN) and only the memory is real. The rotary
embeddings' inv_freq buffers, which to_empty leaves uninitialised, are filled with a plain ramp for the same reason.
Cases run eager or compiled (torch.compile of each layer and of the loss kernel, as the job does on a GPU); the
projection has a figure for each (workload.model.memory: the eager one counted, the compiled one measured here).
Prints one JSON line per case, then a table.
"""
from __future__ import annotations

import argparse
import gc
import json
import time

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from transformers import AutoConfig, AutoModelForCausalLM

from bench.common import GIB, announce, benchmark_parser
from workload.config import TrainConfig
from workload.model import architectures, memory
from workload.model.loss import CausalLMWithLoss
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import train_step

# (Hub id, world size, micro-batch, seq_len, activation checkpointing, reshard_after_forward, grad_accum_steps,
# compiled): eager cases first (seconds each), then compiled ones (each compiles its layer and loss kernel).
CASES = (
    ("Qwen/Qwen2.5-0.5B", 8, 2, 2048, False, False, 1, False),
    ("Qwen/Qwen2.5-0.5B", 8, 2, 2048, True, False, 1, False),
    ("Qwen/Qwen2.5-3B", 8, 2, 2048, False, False, 1, False),
    ("Qwen/Qwen2.5-3B", 8, 2, 2048, True, False, 1, False),
    ("meta-llama/Llama-3.2-3B", 8, 2, 2048, False, False, 1, False),
    ("meta-llama/Llama-3.2-3B", 8, 2, 2048, False, True, 1, False),
    ("meta-llama/Llama-3.1-8B", 8, 2, 2048, False, False, 1, False),
    ("meta-llama/Llama-3.1-8B", 8, 2, 2048, True, False, 1, False),
    ("meta-llama/Llama-3.1-8B", 8, 2, 2048, True, True, 1, False),
    ("meta-llama/Llama-3.1-8B", 8, 2, 2048, True, False, 2, False),
    ("Qwen/Qwen3-8B", 16, 1, 2048, False, False, 1, False),
    ("mistralai/Mistral-7B-v0.3", 16, 2, 2048, True, True, 1, False),
    ("Qwen/Qwen2.5-7B", 8, 1, 4096, False, False, 1, False),
    ("Qwen/Qwen3-0.6B", 8, 4, 2048, False, False, 1, False),
    ("meta-llama/Llama-3.2-1B", 8, 4, 2048, True, False, 1, False),
    ("Qwen/Qwen2.5-14B", 16, 1, 2048, True, True, 1, False),
    ("Qwen/Qwen3-4B", 8, 2, 2048, True, False, 2, False),
    ("meta-llama/Llama-3.1-8B", 8, 2, 2048, False, False, 1, True),
    ("Qwen/Qwen2.5-0.5B", 8, 2, 2048, False, False, 1, True),
    ("meta-llama/Llama-3.2-3B", 8, 2, 2048, False, False, 1, True),
    ("Qwen/Qwen3-8B", 16, 1, 2048, False, False, 1, True),
    ("meta-llama/Llama-3.1-8B", 8, 2, 2048, True, False, 1, True),
    ("Qwen/Qwen2.5-3B", 8, 2, 2048, True, False, 1, True),
)
STEPS = 3


def hf_config(published: dict):
    fields = {key: value for key, value in published.items()
              if key not in ("architectures", "model_type", "torch_dtype", "transformers_version", "use_cache")}
    return AutoConfig.for_model(published["model_type"], **fields, use_cache=False)


def sharded_model(published: dict, cfg: TrainConfig, device: torch.device,
                  mesh_shape: tuple[int, ...] | None = None, two_level: bool = False) -> CausalLMWithLoss:
    """The model as one rank of the fake group holds it: built on meta, sharded (over a 1-D mesh of every rank, or
    HSDP's 2-D (replicas, shards) `mesh_shape`; with `two_level`, over every rank with two-level collectives on the
    2-D (nodes, ranks per node) `mesh_shape`, as the job shards it: workload.model.two_level), then given this rank's
    storage."""
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(hf_config(published), dtype=torch.float32)
    lm.config.use_cache = False
    if cfg.activation_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lm.train()
    model = CausalLMWithLoss(lm, chunked_loss=cfg.chunked_loss, compiled_loss=bool(cfg.compile))
    model = shard_model(model, build_mesh(device, mesh_shape), cfg, two_level=two_level)
    model.to_empty(device=device)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.to_local().normal_(0.0, 0.02)
        for name, buffer in model.named_buffers():
            if name.endswith("inv_freq"):
                buffer.copy_(torch.linspace(1.0, 1e-4, buffer.numel(), device=device))
    return model


def measure(case: tuple, device: torch.device) -> dict:
    model_id, world_size, micro_batch, seq_len, checkpointing, reshard, accumulation, compiled = case
    published = architectures.published(model_id)
    cfg = TrainConfig(model_id=model_id, batch_size=micro_batch * accumulation, seq_len=seq_len, compile=compiled,
                      activation_checkpointing=checkpointing, reshard_after_forward=reshard,
                      grad_accum_steps=accumulation)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    started = time.perf_counter()
    try:
        model = sharded_model(published, cfg, device)
        optimizer = build_optimizer(model, cfg)
        generator = torch.Generator(device=device).manual_seed(0)
        for step in range(STEPS):
            if step == 1:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            batch = torch.randint(published["vocab_size"], (cfg.batch_size, seq_len), device=device,
                                  generator=generator)
            train_step(model, optimizer, batch, cfg)
        torch.cuda.synchronize(device)
        measured = torch.cuda.max_memory_allocated(device) / GIB
    finally:
        del model, optimizer
        dist.destroy_process_group()
        torch._dynamo.reset()  # the next case's shapes compile afresh, not as dynamic shapes of this one's
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    projected = memory.estimate(published, micro_batch=micro_batch, seq_len=seq_len, shards=world_size,
                                activation_checkpointing=checkpointing, reshard_after_forward=reshard,
                                grad_accum_steps=accumulation, compiled=compiled)
    return {
        "model": model_id, "world_size": world_size, "micro_batch": micro_batch, "seq_len": seq_len,
        "activation_checkpointing": checkpointing, "reshard_after_forward": reshard,
        "grad_accum_steps": accumulation, "compiled": compiled, "measured_max_allocated_gib": round(measured, 2),
        "projected_allocated_gib": round(projected.allocated_gib, 2),
        "projected_over_measured": round(projected.allocated_gib / measured, 3),
        "within_10_percent": abs(projected.allocated_gib / measured - 1) <= 0.10,
        "projection": projected.as_dict(), "seconds": round(time.perf_counter() - started, 1),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, step_flags=False)
    parser.add_argument("--cases", default="", help="comma-separated indices into CASES; empty: all")
    parser.add_argument("--time_budget_s", type=float, default=400, help="skip the remaining cases after this")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    chosen = [CASES[int(i)] for i in args.cases.split(",")] if args.cases else list(CASES)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(device),
                      "steps": STEPS, "memory_constants": {k: v for k, v in vars(memory).items()
                                                           if k.isupper() and isinstance(v, (int, float, dict))}}),
          flush=True)
    started, results = time.perf_counter(), []
    for case in chosen:
        if time.perf_counter() - started > args.time_budget_s:
            print(json.dumps({"skipped": list(case), "reason": "time budget"}), flush=True)
            continue
        try:
            results.append(measure(case, device))
        except Exception as error:  # noqa: BLE001 - one failed case (a compile error) must not lose the others
            print(json.dumps({"failed": list(case), "error": f"{type(error).__name__}: {error}"[:2000]}), flush=True)
            continue
        print(json.dumps(results[-1]), flush=True)
    for row in results:
        print(f"{row['model']:28s} ws{row['world_size']:<3d} b{row['micro_batch']}x{row['seq_len']} "
              f"ac={int(row['activation_checkpointing'])} raf={int(row['reshard_after_forward'])} "
              f"k={row['grad_accum_steps']} c={int(row['compiled'])}  measured {row['measured_max_allocated_gib']:6.2f}  projected "
              f"{row['projected_allocated_gib']:6.2f}  ratio {row['projected_over_measured']:.3f}")


if __name__ == "__main__":
    main()
