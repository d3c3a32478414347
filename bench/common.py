"""What the benchmarks of record and the explorations share: the step's common flags, the two steps they compare (the
original recipe's and the project's), timing a step, the emulation's delay kernel (GpuDelay), the device and its
one-rank process group, and the provenance line (command, machine, versions) each benchmark of record writes beside
its results.

May import workload/ and bench.model (never ray, and bench/model/ never imports this module). torch, transformers
and the workload's model are imported by the functions that use them, so a parent that only parses its flags and starts
a child per measurement (bench.record.memory_cap, adapter_memory) makes no CUDA context and `--help` stays fast.
"""
from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from workload.model import memory
from workload.model.memory import GIB

if TYPE_CHECKING:
    import torch

    from workload.config import TrainConfig

RESULTS = Path(__file__).resolve().parent / "results"
# The distributions whose versions decide a figure; read from their metadata, so none is imported for it.
VERSIONED = ("torch", "transformers", "ray", "torchao", "peft", "nvidia-nccl-cu13", "nvidia-nccl-cu12")


def benchmark_parser(doc: str, *, step_flags: bool = True, device: str | None = "cuda",
                     model_config: str | None = "qwen2.5-1.5b", batch_size: int | None = 8, seq_len: int | None = 2048,
                     warmup: int | None = None, steps: int | None = 10) -> argparse.ArgumentParser:
    """A benchmark's parser: its description the first paragraph of `doc` (the module's docstring), with the flags of
    the step most benchmarks time, each keyword the flag's default for this benchmark, None to leave the flag out;
    step_flags=False: none of them."""
    built = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if not step_flags:
        return built
    if device is not None:
        built.add_argument("--device", default=device, help="cuda: the first GPU; cpu: a smoke run of the code "
                           "(gloo), not a measurement")
    if model_config is not None:
        built.add_argument("--model_config", default=model_config, help="a named architecture of "
                           "workload.model.build.NAMED_CONFIGS (random weights)")
    if batch_size is not None:
        built.add_argument("--batch_size", type=int, default=batch_size, help="sequences per GPU per step")
    if seq_len is not None:
        built.add_argument("--seq_len", type=int, default=seq_len, help="tokens per sequence")
    if warmup is not None:
        built.add_argument("--warmup", type=int, default=warmup, help="untimed steps first (compile, allocator)")
    if steps is not None:
        built.add_argument("--steps", type=int, default=steps, help="timed steps")
    return built


def provenance() -> dict:
    """The command as run, the machine (host, OS, GPUs and driver by nvidia-smi, so no CUDA context is made) and the
    versions that decide a figure."""
    gpus = "none"
    if shutil.which("nvidia-smi"):
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True)
        gpus = "; ".join(query.stdout.split("\n")).strip("; ") if query.returncode == 0 else "nvidia-smi failed"
    versions = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    command = ["python", "-m", spec.name] if spec else ["python", *sys.argv[:1]]
    return {"command": shlex.join(command + sys.argv[1:]),
            "machine": {"host": platform.node(), "os": platform.platform(), "gpus": gpus}, "versions": versions}


def announce() -> None:
    """The provenance line, on stderr: the device scripts keep stderr in the same log, and stdout stays the results'
    JSON lines that callers and tests read."""
    print(json.dumps(provenance()), file=sys.stderr, flush=True)


def parameters(model_config: str) -> int:
    """Parameters of a named architecture (tied embeddings once: 1,543,714,304 for Qwen2.5-1.5B)."""
    from workload.model.build import NAMED_CONFIGS

    return memory.parameter_count(NAMED_CONFIGS[model_config])


def recipe_model(cfg: TrainConfig, device: torch.device, min_num_params: int | None = None):
    """The original recipe's model, wrapping and optimizer (its code/train.py): bf16 weights, FSDP1 over the default
    process group (what ray.train.torch.prepare_model(parallel_strategy="fsdp", ...) does with the recipe's kwargs),
    plain AdamW. A smaller `min_num_params` than the recipe's (RECIPE_MIN_NUM_PARAMS) gives a small model the same
    units (tests/runs/test_parallel.py)."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
    from transformers import AutoModelForCausalLM, Qwen2Config

    from bench.model.step_shapes import RECIPE_MIN_NUM_PARAMS
    from workload.model.build import NAMED_CONFIGS

    min_num_params = RECIPE_MIN_NUM_PARAMS if min_num_params is None else min_num_params
    torch.manual_seed(cfg.seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(Qwen2Config(**NAMED_CONFIGS[cfg.model_config]),
                                                 dtype=torch.bfloat16)
    model = FullyShardedDataParallel(
        model, device_id=device,
        auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)


def recipe_step(cfg: TrainConfig, device: torch.device):
    """The original recipe's step (the Hugging Face loss, no clipping), as a step function."""
    model, optimizer = recipe_model(cfg, device)

    def step(batch):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    return step


def project_step(cfg: TrainConfig, device: torch.device):
    """workload.model's step with the workload's defaults: the same calls train_func makes. The names are read from
    their modules at each call, so bench.explore.probe's patches of those modules take effect."""
    from workload.model import build, optimizer, sharding, step

    model = build.build_model(cfg, device)
    model = sharding.shard_model(model, sharding.build_mesh(device), cfg)
    return functools.partial(step.train_step, model, optimizer.build_optimizer(model, cfg), cfg=cfg)


def measure(name: str, step, cfg: TrainConfig, device: torch.device, warmup: int, steps: int) -> dict:
    """Median step time over `steps` steps after `warmup` (compile, allocator), each step timed to completion."""
    import torch

    from workload.data.batches import random_batches
    from workload.model.build import NAMED_CONFIGS
    from workload.model.flops import model_flops_utilization, run_flops_per_token
    from workload.model.step import peak_flops

    batches = random_batches(cfg, NAMED_CONFIGS[cfg.model_config]["vocab_size"], rank=0)
    flops = run_flops_per_token(NAMED_CONFIGS[cfg.model_config], cfg)
    losses, times = [], []
    for index in range(warmup + steps):
        batch = batches(index).to(device)
        synchronize(device)
        started = time.perf_counter()
        losses.append(step(batch).item())  # .item() waits for the step
        times.append(time.perf_counter() - started)
    tokens_per_s = cfg.batch_size * cfg.seq_len / statistics.median(times[warmup:])
    mfu = model_flops_utilization(tokens_per_s, flops, peak_flops(device), devices=1)
    return {
        "run": name,
        "tokens_per_s": round(tokens_per_s),
        "mfu": round(mfu, 3) if mfu is not None else None,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 1) if device.type == "cuda" else None,
        "step_times_s": [round(t, 4) for t in times],
        "losses": [round(loss, 4) for loss in losses],
    }


def device_from_flag(name: str) -> torch.device:
    """--device: cuda means the first GPU; anything else (cpu) as given."""
    import torch

    return torch.device(name, 0) if name == "cuda" else torch.device(name)


def single_process_group(device: torch.device, port: int) -> None:
    """A process group of one rank on `device` (NCCL on a GPU, gloo on the CPU): FSDP needs one even on one GPU."""
    import torch
    import torch.distributed as dist

    if device.type == "cuda":
        torch.cuda.set_device(device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)


def synchronize(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fresh(device: torch.device) -> None:
    """Drop the previous run's model and allocator state before the next one is measured."""
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# The delay kernel: spins on the GPU's global nanosecond timer, so the delay does not stretch when the SM clock
# drops under the H200's power cap (torch.cuda._sleep counts clock cycles; used only if CuPy cannot build this).
SPIN_SOURCE = r"""
extern "C" __global__ void spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
"""


class GpuDelay:
    """Holds the current stream for a given time, using one thread of one SM."""

    def __init__(self, device: torch.device) -> None:
        import torch

        self.device = device
        try:
            import cupy

            self._kernel = cupy.RawKernel(SPIN_SOURCE, "spin")
            self._cupy, self._streams = cupy, {}
            self.kind = "globaltimer spin (CuPy)"
            self(1e-4)
            torch.cuda.synchronize(device)
        except Exception as error:  # no CuPy, or NVRTC missing: the cycle-counting sleep, calibrated once
            self._kernel, self.kind = None, f"torch.cuda._sleep, calibrated ({type(error).__name__}: {error})"
            cycles = 50_000_000
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_s = cycles / (start.elapsed_time(end) / 1e3)

    def __call__(self, seconds: float) -> None:
        import torch

        if seconds <= 0:
            return
        if self._kernel is None:
            torch.cuda._sleep(int(seconds * self._cycles_per_s))
            return
        handle = torch.cuda.current_stream(self.device).cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = self._cupy.cuda.ExternalStream(handle)
        self._kernel((1,), (1,), (self._cupy.uint64(int(seconds * 1e9)),), stream=stream)

    def accuracy(self, seconds: float = 0.01) -> float:
        """Measured over asked, for one delay alone."""
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self(seconds)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / seconds


def device_and_delay(name: str) -> tuple[torch.device, GpuDelay | None]:
    """--device as a device (the current one, for cuda) and, on a GPU, the delay kernel the emulations time their
    collectives with."""
    device = device_from_flag(name)
    if device.type != "cuda":
        return device, None
    import torch

    torch.cuda.set_device(device)
    return device, GpuDelay(device)


