"""The planner's own plans, run for real steps under the target GPU's memory, with each allocator setting.

    python -m bench.record.memory_cap --out memory_cap.jsonl          # every case of CASES, both allocators, on GPU 0
    python -m bench.record.memory_cap --cases 0,6 --out cap.jsonl     # some of them
    python -m bench.record.memory_cap --cases 0,1 --sharding two-level  # the dev 7B plans with two-level's collectives

bench/record/memory_bench.py measures the allocated peak of settings chosen by hand, on the whole H200. This takes what
the planner itself picks (workload.model.memory_plan.choose: levers, micro-batch, shards) for a model, per-GPU batch,
world size and instance type, and runs it as one rank of that cluster (memory_bench.sharded_model: a fake process group
at the world size; HSDP's 2-D (replicas, shards) mesh where the plan's shards are one node's) under
torch.cuda.set_per_process_memory_fraction set to the instance GPU's usable memory (workload.model.memory.usable_gib:
EC2's figure less the CUDA context), and again at that less NCCL's buffers (NCCL_BUFFERS_GIB: what PyTorch's allocator
really has on a multi-rank job). Each run is its own process, started with PYTORCH_CUDA_ALLOC_CONF unset (the
allocator's default) or expandable_segments:True (what the job sets), because the allocator reads it once, at its first
allocation. With --sharding two-level, a plan of full sharding's share on two or more nodes (the layout auto picks for
full training on a slow network, dev's) runs with two-level collectives on the (nodes, ranks per node) mesh
(workload.model.two_level, on the fake group as bench/record/emulate_rank.py runs it): their staging buffers included.
Several runs share the GPU at once while their caps add up to under CONCURRENT_GIB: each is held to its own cap, and
max_memory_allocated/reserved are per process.

Each run records, over steps 2 to STEPS (step 1 allocates AdamW's state), torch.cuda.max_memory_allocated() and
max_memory_reserved(), the allocator's retries (cudaMalloc failures it answered by freeing its cache) and whether
the run ran out of memory (torch.OutOfMemoryError, at any step), beside the projection (allocated and the planner's
peak). Prints one JSON line per run, then a table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import GIB, announce, benchmark_parser
from workload.config import TrainConfig
from workload.model import architectures, memory, memory_plan

# GPUs per node and each GPU's memory in MiB, EC2 DescribeInstanceTypes' figures as infra/preview/instance_facts.py's
# KNOWN_GPU_INSTANCE_TYPES holds them (that module imports Pulumi, which the GPU machine has not).
INSTANCE_GPUS = {"g6.12xlarge": (4, 22888), "g6e.12xlarge": (4, 46068), "p5.48xlarge": (8, 81920)}
# (Hub id, per-GPU batch, seq_len, world size, instance type): the dev stack (2 x g6.12xlarge, 8 L4) with the 7B the
# issue names, at batch 1 and on 4 nodes; the default model on dev and a 3B that HSDP plus checkpointing fits;
# Llama-3.1-8B on dev, on 2 x g6e (HSDP 2 x 4) and on p5's HSDP 2 x 8 (as asked, and at batch 8, where the plan turns
# checkpointing on). The levers are the planner's, whatever they are when this runs.
CASES = (
    ("Qwen/Qwen2.5-7B", 2, 2048, 8, "g6.12xlarge"),
    ("Qwen/Qwen2.5-7B", 1, 2048, 8, "g6.12xlarge"),
    ("Qwen/Qwen2.5-7B", 2, 2048, 16, "g6.12xlarge"),
    ("Qwen/Qwen2.5-1.5B", 2, 2048, 8, "g6.12xlarge"),
    ("Qwen/Qwen2.5-3B", 2, 2048, 8, "g6.12xlarge"),
    ("meta-llama/Llama-3.1-8B", 2, 2048, 8, "g6.12xlarge"),
    ("meta-llama/Llama-3.1-8B", 2, 2048, 8, "g6e.12xlarge"),
    ("meta-llama/Llama-3.1-8B", 2, 2048, 16, "p5.48xlarge"),
    ("meta-llama/Llama-3.1-8B", 8, 2048, 16, "p5.48xlarge"),
)
ALLOCATORS = ("", "expandable_segments:True")
STEPS = 3
UNBOUND_CAP_GIB = 40.0
CONCURRENT_GIB = 128  # of the H200's ~139 GiB: caps of runs sharing the GPU at once, plus 1 GiB each for its context


def planned(case: tuple, sharding: str = "plan") -> dict:
    """What the planner picks for `case` and the projection of it. `sharding` two-level: a plan of full sharding's
    share on two or more nodes of several GPUs runs on the (nodes, GPUs per node) mesh with two-level collectives;
    plan: as the planner's shards say (a 1-D mesh of every rank, or HSDP's (replicas, shards))."""
    model_id, batch, seq_len, world_size, instance = case
    gpus, mib = INSTANCE_GPUS[instance]
    config = architectures.published(model_id)
    plan = memory_plan.choose(config, batch_size=batch, seq_len=seq_len, world_size=world_size,
                              ranks_per_node=min(gpus, world_size), gpu_memory_mib=mib, compiled=True)
    mesh = [world_size] if plan.shards == world_size else [world_size // plan.shards, plan.shards]
    two_level = (sharding == "two-level" and plan.shards == world_size and plan.settings.sharding != "full"
                 and world_size > gpus > 1)
    if two_level:
        mesh = [world_size // gpus, gpus]
    return {"model": model_id, "batch": batch, "seq_len": seq_len, "world_size": world_size, "instance": instance,
            "fits": plan.fits, "micro_batch": plan.micro_batch, "mesh": mesh,
            "sharding": "two-level" if two_level else "full" if len(mesh) == 1 else "hybrid",
            "activation_checkpointing": plan.settings.activation_checkpointing,
            "reshard_after_forward": plan.settings.reshard_after_forward,
            "grad_accum_steps": plan.settings.grad_accum_steps, "reduce_dtype": plan.settings.reduce_dtype,
            "usable_gib": round(plan.usable_gib, 2),
            "projected_allocated_gib": round(plan.estimate.allocated_gib, 2),
            "projected_peak_gib": round(plan.peak_gib, 2)}


def run_one(job: dict) -> dict:
    """One plan under its cap in this process (PYTORCH_CUDA_ALLOC_CONF was set by the parent)."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from bench.record.memory_bench import sharded_model
    from workload.model.optimizer import build_optimizer
    from workload.model.step import train_step

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(job["cap_gib"] * GIB / total, device)
    published = architectures.published(job["model"])
    cfg = TrainConfig(model_id=job["model"], batch_size=job["batch"], seq_len=job["seq_len"], compile=True,
                      activation_checkpointing=job["activation_checkpointing"],
                      reshard_after_forward=job["reshard_after_forward"], grad_accum_steps=job["grad_accum_steps"],
                      reduce_dtype=job.get("reduce_dtype", "fp32"))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=job["world_size"])
    started, oom, steps_done = time.perf_counter(), "", 0
    try:
        model = sharded_model(published, cfg, device, tuple(job["mesh"]), two_level=job.get("sharding") == "two-level")
        optimizer = build_optimizer(model, cfg)
        generator = torch.Generator(device=device).manual_seed(0)
        for step in range(STEPS):
            if step == 1:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            batch = torch.randint(published["vocab_size"], (cfg.batch_size, cfg.seq_len), device=device,
                                  generator=generator)
            train_step(model, optimizer, batch, cfg)
            torch.cuda.synchronize(device)
            steps_done = step + 1
    except torch.OutOfMemoryError as error:
        oom = str(error).split("\n")[0][:300]
    stats = torch.cuda.memory_stats(device)
    return {**job, "oom": bool(oom), "oom_message": oom, "steps_done": steps_done,
            "allocated_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 2),
            "reserved_gib": round(torch.cuda.max_memory_reserved(device) / GIB, 2),
            "alloc_retries": stats.get("num_alloc_retries", 0),
            "torch": torch.__version__, "seconds": round(time.perf_counter() - started, 1)}


def jobs_for(cases: list[tuple], sharding: str = "plan") -> list[dict]:
    jobs = []
    for case in cases:
        plan = planned(case, sharding)
        caps = [plan["usable_gib"]]
        if case[4] == "g6.12xlarge":  # the tight one: also what the allocator has once NCCL holds its buffers
            caps.append(round(plan["usable_gib"] - memory.NCCL_BUFFERS_GIB, 2))
        if case == CASES[0]:  # and the dev 7B without a binding cap: what each allocator reserves left alone
            caps.append(UNBOUND_CAP_GIB)
        jobs += [{**plan, "cap_gib": cap, "alloc_conf": conf} for cap in caps for conf in ALLOCATORS]
    return sorted(jobs, key=lambda job: -job["cap_gib"])  # the large caps first, the small ones fill around them


def run_all(jobs: list[dict], out, budget_s: float) -> list[dict]:
    """Each job in its own process, as many at once as CONCURRENT_GIB holds; none started after `budget_s`, and
    any still running a minute later is stopped and recorded as such."""
    pending, running, results = list(jobs), [], []
    started = time.monotonic()
    while pending or running:
        if pending and time.monotonic() - started > budget_s:
            for job in pending:
                print(json.dumps({**job, "skipped": "time budget"}), flush=True)
            pending = []
        if running and time.monotonic() - started > budget_s + 60:
            for _, process in running:
                process.kill()
        in_use = sum(job["cap_gib"] + 1 for job, _ in running)
        for job in [job for job in pending if job["cap_gib"] + 1 <= CONCURRENT_GIB]:
            if in_use + job["cap_gib"] + 1 > CONCURRENT_GIB:
                continue
            pending.remove(job)
            env = {key: value for key, value in os.environ.items() if key != "PYTORCH_CUDA_ALLOC_CONF"}
            if job["alloc_conf"]:
                env["PYTORCH_CUDA_ALLOC_CONF"] = job["alloc_conf"]
            # Files, not pipes: a child's compile warnings must never fill a pipe nobody reads yet.
            logs = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            process = subprocess.Popen([sys.executable, "-m", "bench.record.memory_cap", "--one", json.dumps(job)],
                                       env=env, stdout=logs[0], stderr=logs[1], text=True)
            process.logs = logs
            running.append((job, process))
            in_use += job["cap_gib"] + 1
        time.sleep(1)
        for job, process in list(running):
            if process.poll() is None:
                continue
            running.remove((job, process))
            stdout, stderr = (log.seek(0) or log.read() for log in process.logs)
            lines = [line for line in stdout.splitlines() if line.startswith("{")]
            row = json.loads(lines[-1]) if lines else {**job, "failed": stderr[-1500:]}
            results.append(row)
            print(json.dumps(row), flush=True)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
    return results


def table(results: list[dict]) -> None:
    for row in sorted(results, key=lambda r: (r["model"], r["instance"], r["world_size"], r["batch"], -r["cap_gib"],
                                              r["alloc_conf"])):
        levers = (f"ac={int(row['activation_checkpointing'])} raf={int(row['reshard_after_forward'])} "
                  f"k={row['grad_accum_steps']} {row.get('reduce_dtype', 'fp32')} "
                  f"mesh={'x'.join(map(str, row['mesh']))}{' two-level' if row.get('sharding') == 'two-level' else ''}")
        measured = ("FAILED" if "failed" in row else
                    f"alloc {row['allocated_gib']:6.2f} resv {row['reserved_gib']:6.2f} "
                    f"{'OOM' if row['oom'] else 'ok '} retries {row['alloc_retries']}")
        print(f"{row['model']:24s} {row['instance']:12s} ws{row['world_size']:<2d} b{row['batch']} {levers:28s} "
              f"cap {row['cap_gib']:5.2f} {'expandable' if row['alloc_conf'] else 'default   '} {measured}  "
              f"projected {row['projected_allocated_gib']:6.2f}")


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, step_flags=False)
    parser.add_argument("--cases", default="", help="comma-separated indices into CASES; empty: all")
    parser.add_argument("--out", default="", help="also write the JSON lines here")
    parser.add_argument("--sharding", default="plan", choices=("plan", "two-level"),
                        help="plan: each plan's mesh as its shards say; two-level: full-share plans on two or more "
                             "nodes run with two-level collectives on the (nodes, GPUs per node) mesh")
    parser.add_argument("--time_budget_s", type=float, default=420, help="start no run after this")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)  # a child: run this job, print its line
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))), flush=True)
        return
    announce()
    chosen = [CASES[int(i)] for i in args.cases.split(",")] if args.cases else list(CASES)
    jobs = jobs_for(chosen, args.sharding)
    print(json.dumps({"jobs": len(jobs), "steps": STEPS, "concurrent_gib": CONCURRENT_GIB}), flush=True)
    with open(args.out, "w") if args.out else open(os.devnull, "w") as out:
        results = run_all(jobs, out, args.time_budget_s)
    table(results)


if __name__ == "__main__":
    main()
