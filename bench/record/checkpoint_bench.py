"""Synchronous against asynchronous checkpoint saves, as one rank of the dev stack's 8 (issue 43).

    python -m bench.record.checkpoint_bench --out checkpoint_bench.jsonl   # on one GPU: 7B full, then 70B qlora
    python -m bench.record.checkpoint_bench --device cpu --small           # tiny shapes on CPU: the same code

Each case is one rank of a world of 8 on a fake process group (torch's fake backend, as bench/record/memory_cap.py and
adapter_memory.py run one: collectives return without moving data, so the rank holds exactly a real rank's shards),
built by adapter_memory.adapter_model with the published shape and random values: Qwen2.5-7B full training (its
rank's 1/8 of the fp32 weights and AdamW's two moments, about 11 GB) and Llama-3.3-70B qlora (the adapters and their
moments; the NF4 base is not saved). The saves are the job's own (workload.checkpoint.saver.CheckpointSaver, its
staging directory $RAYTRAIN_CHECKPOINT_STAGING or the system's temporary one), with a publish that counts the bytes
written where Ray Train would upload them (the device machine reaches no S3). Per case: the median step without a
save; a synchronous save's seconds (all of them block); an asynchronous save's blocking seconds, the first (which
pins its host buffers) and a later one; the median step while the later one is written; the background seconds;
the bytes. The verdicts the issue asks: async blocking at most 20% of sync's, steps during a save within 10%.
On a GPU the 7B case also reports its steps padded on the GPU to the dev rank's modelled step (`dev_*`): an H100's
step alone is CPU-bound (its kernels wait on the launches), which the dev rank's L4 step is not, so the write
thread's share of the host shows in the first and not in the second. The save's state is the job's own
(workload.checkpoint.state_map: DCP's get_state_dict at the first save, rebuilt from references after it).
"""
from __future__ import annotations

import dataclasses
import gc
import inspect
import json
import os
import statistics
import sys
import time

from bench.common import GpuDelay, announce, benchmark_parser, device_from_flag
from bench.model import step_inputs, step_model
from bench.record.adapter_memory import SMOKE_CONFIG, WORLD_SIZE, adapter_model
from workload.config import TrainConfig
from workload.model import architectures

# (Hub id, --method, per-GPU batch, seq_len): dev's 7B full training, and the 70B qlora dev runs (issue 32).
CASES = (("Qwen/Qwen2.5-7B", "full", 1, 2048), ("meta-llama/Llama-3.3-70B-Instruct", "qlora", 1, 2048))
STEPS_WITHOUT = 5
WARMUP = 2
ASYNC_BLOCKING_BOUND, STEP_SLOWDOWN_BOUND = 0.20, 0.10


def tree_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def measure(case: tuple, device, small: bool) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint import default_planner
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from workload.checkpoint.saver import CheckpointSaver
    from workload.model.optimizer import build_optimizer
    from workload.model.step import train_step

    model_id, method, batch, seq_len = case
    config = dict(SMOKE_CONFIG) if small else architectures.published(model_id)
    # The 80 GB of an H100 holds either case without the L4's levers but activation checkpointing (a 70B's layers).
    cfg = TrainConfig(model_id=model_id, method=method, batch_size=batch, seq_len=64 if small else seq_len,
                      compile=False, lora_rank=16, activation_checkpointing=not small)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD_SIZE)
    # The fake group's gather brings back this rank's plan alone, which DCP's check of the global plan (every
    # tensor's chunks fill it) refuses; the rank's own plan, the files and their bytes are a real rank's.
    if not getattr(default_planner._validate_global_plan, "one_rank", False):
        # torch 2.13 returns the errors (none: []), 2.11 whether the plan is valid (True).
        answer = ([] if "list" in str(inspect.signature(default_planner._validate_global_plan).return_annotation)
                  else True)
        default_planner._validate_global_plan = lambda *args, **kwargs: answer
        default_planner._validate_global_plan.one_rank = True
    # And its gathers of the ranks' plans return the fake group's zeros, which do not unpickle (torch 2.11): the rank
    # plans as the coordinator of one, which writes the same shard files and its own .metadata.
    from torch.distributed.checkpoint import utils as dcp_utils

    if not getattr(dcp_utils._DistWrapper, "one_rank", False):
        as_given = dcp_utils._DistWrapper.__init__

        def one_rank(self, group, use_dist, *args, **kwargs):
            as_given(self, group, False, *args, **kwargs)

        dcp_utils._DistWrapper.__init__, dcp_utils._DistWrapper.one_rank = one_rank, True
    written: list[int] = []

    def publish(metrics: dict, directory: str, step: int) -> None:
        written.append(tree_bytes(directory))

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(index: int, pad_s: float = 0.0) -> float:
        started = time.perf_counter()
        if pad_s:
            delay(pad_s)  # the rest of the dev rank's step, on the GPU ahead of the step's own kernels
        tokens = torch.randint(config["vocab_size"], (cfg.batch_size, cfg.seq_len), device=device,
                               generator=torch.Generator(device=device).manual_seed(index))
        train_step(model, optimizer, tokens, cfg).item()
        synchronize()
        return time.perf_counter() - started

    # The dev rank's step by the step model: an L4's compute and dev's links. On a GPU, the 7B case also runs its
    # steps padded to it, so that the host's work during a save (the write thread's share of the GIL and memory)
    # meets a step as long as the dev rank's, whose kernels the CPU launches well ahead of the L4.
    dev_step_s = (step_model.method_line(model_id, method, step_inputs.saved_hardware("dev"), batch, seq_len)["step_s"]
                  if device.type == "cuda" and method == "full" else 0.0)
    delay = GpuDelay(device) if dev_step_s else None
    try:
        model = adapter_model(config, dataclasses.replace(cfg), device)
        optimizer = build_optimizer(model, cfg)
        for index in range(WARMUP):
            step(index)
        without = statistics.median(step(index) for index in range(STEPS_WITHOUT))

        synchronous = CheckpointSaver("sync", publish, group_backend="fake")
        sync_seconds = synchronous.save({}, model, optimizer, 1)
        synchronous.close()

        asynchronous = CheckpointSaver("async", publish, group_backend="fake")
        first_blocking = asynchronous.save({}, model, optimizer, 2)
        asynchronous.wait()
        started = time.perf_counter()
        blocking = asynchronous.save({}, model, optimizer, 3)
        during = steps_during_save(asynchronous, step)
        background = time.perf_counter() - started
        dev_rank = dev_rank_steps(asynchronous, model, optimizer, step, dev_step_s) if dev_step_s else {}
        asynchronous.close()
    finally:
        model = optimizer = None
        dist.destroy_process_group()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    during_median = statistics.median(during) if during else None
    return {
        "model": model_id, "method": method, "world_size": WORLD_SIZE, "batch": batch, "seq_len": cfg.seq_len,
        "small": small, "bytes_written": written[0], "step_s_without_save": round(without, 4),
        "sync_save_s": round(sync_seconds, 3), "async_first_blocking_s": round(first_blocking, 3),
        "async_blocking_s": round(blocking, 3), "async_background_s": round(background, 3),
        "steps_during_save": len(during),
        "step_s_during_save": None if during_median is None else round(during_median, 4),
        "async_over_sync_blocking": round(blocking / sync_seconds, 3),
        "during_over_without": None if during_median is None else round(during_median / without, 3),
        "async_blocking_within_bound": blocking <= ASYNC_BLOCKING_BOUND * sync_seconds,
        "steps_within_bound": None if during_median is None else during_median <= (1 + STEP_SLOWDOWN_BOUND) * without,
        "bytes_equal_sync_async": len(set(written)) == 1,
        "staging": os.environ.get("RAYTRAIN_CHECKPOINT_STAGING") or "the system's temporary directory",
        **dev_rank,
    }


def steps_during_save(saver, step, pad_s: float = 0.0) -> list[float]:
    """The steps' seconds while the save in flight is written, then the save's end (raising its error)."""
    during = []
    while saver._pending is not None and not saver._pending.done():
        during.append(step(len(during), pad_s))
    saver.wait()
    return during


def dev_rank_steps(saver, model, optimizer, step, dev_step_s: float) -> dict:
    """Steps padded on the GPU to the dev rank's modelled step, without a save and during an asynchronous one."""
    import torch

    unpadded = statistics.median(step(index) for index in range(3))
    pad = max(0.0, dev_step_s - unpadded)
    step(0, pad)
    without = statistics.median(step(index, pad) for index in range(3))
    blocking = saver.save({}, model, optimizer, 4)
    during = steps_during_save(saver, step, pad)
    torch.cuda.synchronize()
    during_median = statistics.median(during) if during else None
    return {"dev_step_model_s": dev_step_s, "dev_pad_s": round(pad, 3), "dev_step_s_without_save": round(without, 4),
            "dev_async_blocking_s": round(blocking, 3), "dev_steps_during_save": len(during),
            "dev_step_s_during_save": None if during_median is None else round(during_median, 4),
            "dev_during_over_without": None if during_median is None else round(during_median / without, 3),
            "dev_steps_within_bound": None if during_median is None else
            during_median <= (1 + STEP_SLOWDOWN_BOUND) * without}


def build_parser():
    parser = benchmark_parser(__doc__, model_config=None, batch_size=None, seq_len=None, steps=None)
    parser.add_argument("--small", action="store_true", help="tiny shapes (the smoke path the tests run)")
    parser.add_argument("--cases", default="", help="comma list of CASES' indices; empty: all")
    parser.add_argument("--out", default="", help="also append the JSON lines to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    import torch

    args = build_parser().parse_args(argv)
    announce()
    device = device_from_flag(args.device)  # cuda: the first GPU, with its index (set_device needs one)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    chosen = [CASES[int(index)] for index in args.cases.split(",")] if args.cases else list(CASES)
    for case in chosen:
        try:
            line = measure(case, device, args.small)
        except Exception as error:  # noqa: BLE001 - one case's failure is a result; the next case still runs
            line = {"model": case[0], "method": case[1], "error": f"{type(error).__name__}: {error}"[:500]}
        print(json.dumps(line), flush=True)
        if args.out:
            with open(args.out, "a") as out:
                out.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
