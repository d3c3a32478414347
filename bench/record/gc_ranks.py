"""One rank's garbage collection stalls every rank: N gloo processes on the CPU, Python's schedule against
workload.gc_control's, side by side in one run. An emulation, not a training run (bench/record/gc_bench.py is one).

    python -m bench.record.gc_ranks                      # this machine: 1 and 2 ranks, each mode, 300 steps each

Each rank runs the same step: a fixed matrix product on one thread (the GPU's work), `--garbage` container objects
in reference cycles that stay alive for `--keep` steps, so they outlive the young generations as some of a training
process's objects do, then an all-reduce, which waits for the slowest rank, as FSDP's collectives do. Rank 0 makes
`--rank0_extra` more (the job's rank 0 also logs, writes TensorBoard and sets its gauges); with identical ranks
CPython's schedules would coincide. Each process also holds `--heap` long-lived tuples, so that a full collection
takes as long as it does in a training process (0.5 s on the H200 run: RESULTS.md). With CPython's own schedule each
rank runs its full collections at steps of its own, and a step stalls when any rank collects; with StepCollector(50)
all ranks collect at the same steps. Rank 0 reports the median step, the steps over twice the median, each rank's
full-collection steps, and the time over all steps.
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.common import announce, benchmark_parser
from workload.run.local import free_port

MODES = {"python": 0, "every-50": 50}


def rank_main(rank: int, world: int, port: int, mode: str, args: argparse.Namespace, out: str) -> None:
    from workload.gc_control import StepCollector

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    heap = [(index, index + 1) for index in range(args.heap)]  # noqa: F841 long-lived objects a full collection walks
    full_collections: list[int] = []
    steps: list[float] = []
    gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                        and full_collections.append(len(steps)))
    work = torch.randn(args.size, args.size)
    token = torch.zeros(1)
    recent: collections.deque = collections.deque(maxlen=args.keep)
    collector = StepCollector(MODES[mode])
    for step in range(args.steps):
        started = time.perf_counter()
        work @ work
        made = [[] for _ in range(args.garbage + (args.rank0_extra if rank == 0 else 0))]
        for cycle in made:
            cycle.append(cycle)
        recent.append(made)  # garbage once `keep` steps later
        del made
        collector.after_step(step + 1)
        dist.all_reduce(token)
        steps.append(time.perf_counter() - started)
    collector.close()
    gathered: list = [None] * world
    dist.all_gather_object(gathered, full_collections[1:] if MODES[mode] else full_collections)
    if rank == 0:
        median = statistics.median(steps)
        with open(out, "w") as file:
            json.dump({"mode": mode, "ranks": world, "steps": len(steps), "median_step_s": round(median, 4),
                       "slow_steps": sum(seconds > 2 * median for seconds in steps),
                       "total_s": round(sum(steps), 2), "full_collections_at_steps": gathered}, file)
    dist.destroy_process_group()


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, step_flags=False)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--size", type=int, default=1700, help="the matrix product's side")
    parser.add_argument("--garbage", type=int, default=900, help="containers in cycles made per step")
    parser.add_argument("--keep", type=int, default=20, help="steps each step's containers stay alive")
    parser.add_argument("--rank0_extra", type=int, default=90,
                        help="more containers per step on rank 0 (its progress lines, metrics and gauges)")
    parser.add_argument("--heap", type=int, default=3_000_000, help="long-lived tuples per process")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()
    results = {}
    for world in map(int, args.ranks.split(",")):
        for mode in MODES:
            out = f"/tmp/gc_ranks-{os.getpid()}-{world}-{mode}.json"
            mp.spawn(rank_main, args=(world, free_port(), mode, args, out), nprocs=world)
            with open(out) as file:
                results[(world, mode)] = json.load(file)
            os.remove(out)
            print(json.dumps(results[(world, mode)]), flush=True)
    for world in map(int, args.ranks.split(",")):
        python, managed = results[(world, "python")], results[(world, "every-50")]
        print(json.dumps({"run": "ratio", "ranks": world,
                          "every-50_over_python_speed": round(python["total_s"] / managed["total_s"], 4)}), flush=True)


if __name__ == "__main__":
    main()
