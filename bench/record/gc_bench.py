"""Python's garbage collector during training: its own schedule against workload.gc_control's, side by side on one GPU.

    python3 -m bench.record.gc_bench --steps 450      # on the GPU machine: each mode in a fresh process, in turn
    python -m bench.record.gc_bench --device cpu --model_config tiny --batch_size 2 --seq_len 64 --steps 20  # smoke

Both modes run train_func's loop by hand (bench.record.gpu_record.train_for: the job's build, FSDP2 shard, optimizer and
train_step; Qwen2.5-1.5B, batch 8 x 2048 by default): `python` leaves CPython's collector on, as the job did before
`--gc_every`; `every-50` is the job's default now (StepCollector(50): automatic collection off, the young
generations collected every 50 steps). gc.callbacks time every collection, automatic or not, with its generation.
Per mode: the median step, the steps slower than twice the median (what the dashboard showed as dips), the time
in collections during the timed steps, and tokens/s over all steps but the first (compile).
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time

from bench.common import announce, benchmark_parser

MODES = {"python": 0, "every-50": 50}


def measure(mode: str, args: argparse.Namespace) -> dict:
    from bench.record.gpu_record import train_for
    from workload.config import TrainConfig
    from workload.gc_control import StepCollector

    cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len,
                      steps=10**6, num_workers=1)
    collections: list[tuple[int, int, float]] = []  # (step, generation, seconds)
    started: dict[str, float] = {}
    step_times: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started["at"] = time.perf_counter()
        elif step_times:  # only collections during the timed steps
            collections.append((len(step_times), info["generation"], time.perf_counter() - started["at"]))

    collector = None

    def on_step(_when: float, _tokens_per_s: float, step_time_s: float) -> bool:
        nonlocal collector
        step_times.append(step_time_s)
        if collector is None:  # after the first (compiled) step: as train_func does after its setup
            collector = StepCollector(MODES[mode])
        collector.after_step(len(step_times))
        return len(step_times) < args.steps

    gc.callbacks.append(on_gc)
    train_for(float("inf"), cfg, on_step, device=args.device)
    timed = step_times[1:]
    median = statistics.median(timed)
    slow = [round(seconds, 3) for seconds in timed if seconds > 2 * median]
    by_generation = {g: [s for _, gen, s in collections if gen == g] for g in (0, 1, 2)}
    return {
        "mode": mode, "steps": len(timed), "median_step_s": round(median, 4),
        "tokens_per_s": round(cfg.batch_size * cfg.seq_len * len(timed) / sum(timed)),
        "slow_steps": len(slow), "slow_step_s": slow[:10],
        "collections": {f"gen{g}": {"count": len(s), "total_s": round(sum(s), 3), "max_s": round(max(s, default=0), 3)}
                        for g, s in by_generation.items()},
        "gen2_at_steps": [step for step, gen, _ in collections if gen == 2][:20],
    }


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, steps=450)
    parser.add_argument("--modes", default=",".join(MODES), help="in this order, each in a fresh process")
    parser.add_argument("--only", choices=tuple(MODES), help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.only:
        print(json.dumps(measure(args.only, args)), flush=True)
        return
    announce()
    results = []
    for mode in args.modes.split(","):
        command = [sys.executable, "-m", "bench.record.gc_bench", "--only", mode, "--device", args.device,
                   "--model_config", args.model_config, "--batch_size", str(args.batch_size),
                   "--seq_len", str(args.seq_len), "--steps", str(args.steps)]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            print(json.dumps({"mode": mode, "error": done.stderr[-1500:]}), flush=True)
            continue
        results.append(json.loads(lines[-1]))
        print(lines[-1], flush=True)
    if len(results) == 2:
        base, managed = results
        print(json.dumps({"run": "ratio", f"{managed['mode']}_over_{base['mode']}_tokens_per_s":
                          round(managed["tokens_per_s"] / base["tokens_per_s"], 4)}), flush=True)


if __name__ == "__main__":
    main()
