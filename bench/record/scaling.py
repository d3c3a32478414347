"""Weak scaling of the workload under Ray Train with NCCL, and what a silent TCP fallback costs, on one host.

    python -m bench.record.scaling --world_sizes 1,2 --batch_size 8 --seq_len 2048 --steps 10 --nccl_logs $OUT

Every run is `workload.trainer.fit` on a local Ray cluster with one GPU worker per rank and the same per-GPU batch
(weak scaling). Efficiency = tokens/s per GPU at world size N over tokens/s at 1. Then the largest world size
again with NCCL forced onto its socket transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket): the
one-host counterpart of EFA against TCP between nodes. With --nccl_logs DIR every rank writes its NCCL_DEBUG=INFO
output under DIR/<run>/, and each run's per-rank transport verdicts are printed.
NVLink multicast stays as the machine sets it (NCCL_NVLS_ENABLE and friends are inherited, never changed).
"""
from __future__ import annotations

import argparse
import json
import os

import ray

from bench.common import announce, benchmark_parser
from workload.config import TrainConfig
from workload.fabric.transport import rank_verdicts
from workload.trainer import fit, summarize

SOCKET_FALLBACK = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET": "Socket"}


def run(cfg: TrainConfig, gpus: int, env: dict[str, str], nccl_dir: str | None) -> dict:
    """One training run on a fresh local Ray cluster whose workers get `env` (and NCCL_DEBUG_FILE)."""
    env = dict(env)
    if nccl_dir:
        os.makedirs(nccl_dir, exist_ok=True)
        env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_FILE=os.path.join(nccl_dir, "nccl-%h-%p.log"))
    ray.init(num_gpus=gpus, include_dashboard=False, runtime_env={"env_vars": env} if env else None)
    try:
        result, final = fit(cfg)
        return summarize(cfg, result, final)
    finally:
        ray.shutdown()


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, steps=10)
    parser.add_argument("--world_sizes", default="1,2")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs Ray may use (default: the largest world size)")
    parser.add_argument("--nccl_logs", default="", help="directory for every rank's NCCL debug file")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()
    world_sizes = [int(size) for size in args.world_sizes.split(",")]
    gpus = 0 if args.device == "cpu" else args.gpus or max(world_sizes)

    runs = [(f"nccl-{size}", size, {}) for size in world_sizes]
    runs.append((f"socket-{max(world_sizes)}", max(world_sizes), SOCKET_FALLBACK))
    per_gpu = {}
    for name, size, env in runs:
        cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len,
                          steps=args.steps, num_workers=size)
        nccl_dir = os.path.join(args.nccl_logs, name) if args.nccl_logs else None
        summary = run(cfg, gpus, env, nccl_dir)
        per_gpu[name] = summary["tokens_per_s"] / size
        verdicts = rank_verdicts(summary["nccl_logs"]) if summary["nccl_logs"] else {}
        print(json.dumps({"run": name, "world_size": size, "env": env, "tokens_per_s": round(summary["tokens_per_s"]),
                          "tokens_per_s_per_gpu": round(per_gpu[name]), "mfu": summary["mfu"],
                          "final_loss": summary["final_loss"], "verdicts": verdicts}), flush=True)
    largest = max(world_sizes)
    print(json.dumps({
        "run": "summary",
        "weak_scaling_efficiency": {size: round(per_gpu[f"nccl-{size}"] / per_gpu[f"nccl-{world_sizes[0]}"], 3)
                                    for size in world_sizes},
        "socket_fallback_slowdown": round(per_gpu[f"nccl-{largest}"] / per_gpu[f"socket-{largest}"], 2),
    }), flush=True)


if __name__ == "__main__":
    main()
