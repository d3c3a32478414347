"""The fabric check: timed all-reduce, all-gather and reduce-scatter sweeps over the job's own process group, before
training, reported as nccl-tests reports them, and a minimum bus bandwidth the job refuses to train below.

Every rank runs the same sweep (NCCL on GPUs, gloo on CPU, with the job's environment, so a silent TCP fallback shows
up as a low figure). For each operation and size S (bytes of the whole array, nccl-tests' convention: all-gather's
output, reduce-scatter's input, all-reduce's buffer), the time t is one iteration's, averaged over the ranks as
nccl-tests does by default; algbw = S / t, and busbw = algbw x a factor that makes it comparable with the bottleneck
link's bandwidth whatever the number of ranks n (nccl-tests doc/PERFORMANCE.md): all-reduce 2(n-1)/n,
all-gather and reduce-scatter (n-1)/n. Across nodes the bottleneck is a node's network, so there busbw approaches the
node's bandwidth in GB/s (1e9 bytes/s).

The job's bus bandwidth is the lowest of the three operations' busbw at the largest size: the figure the step's
large collectives see.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
import torch.distributed as dist

from workload.fabric.bus_bandwidth import OPERATIONS, bus_bandwidth_factor

MIB = 2**20
# Sizes in the bandwidth-bound range of the step's own collectives (an FSDP unit of Qwen2.5-1.5B is 89 MB in bf16).
# On CPU, gloo's figures only prove the path works, so the sizes stay small enough for a test.
SIZES = {"cuda": (MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB), "cpu": (64 * 1024, 256 * 1024, MIB)}
DEFAULT_SECONDS = {"cuda": 3.0, "cpu": 0.5}
# nccl-tests' default warm-up iterations (-w 5) would cost seconds at 256 MiB over 40 Gbps; one warms the
# communicator's buffers and connections, and its time sizes the timed run.
WARMUP_ITERATIONS = 1


class FabricTooSlowError(RuntimeError):
    """The fabric check measured less bus bandwidth than --min_bus_gbytes_per_s asks for."""


def seconds_for(device: torch.device, seconds: float | None) -> float:
    """--fabric_check_seconds, or the device's default when unset."""
    return DEFAULT_SECONDS["cuda" if device.type == "cuda" else "cpu"] if seconds is None else seconds


def _collective(operation: str, size: int, ranks: int, device: torch.device) -> Callable[[], None]:
    """One call of `operation` on an array of `size` bytes in total (fp32, nccl-tests' default type)."""
    count = size // 4
    if operation == "all_reduce":
        buffer = torch.ones(count, device=device)
        return lambda: dist.all_reduce(buffer)
    shard = torch.ones(count // ranks, device=device)
    whole = torch.empty(count // ranks * ranks, device=device)
    if operation == "all_gather":
        return lambda: dist.all_gather_single(whole, shard)
    return lambda: dist.reduce_scatter_single(shard, whole)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(call: Callable[[], None], iterations: int, device: torch.device) -> float:
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(iterations):
        call()
    _synchronize(device)
    return (time.perf_counter() - started) / iterations


def _agreed(value: float, op: dist.ReduceOp, device: torch.device) -> float:
    """One figure all ranks share: every rank must run the same number of iterations, or the collectives hang."""
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return float(tensor.item())


def sweep(device: torch.device, seconds: float) -> dict:
    """Time each operation at each size for about `seconds` in all; a collective: every rank must call it."""
    ranks = dist.get_world_size()
    sizes = SIZES["cuda" if device.type == "cuda" else "cpu"]
    budget = seconds / (len(OPERATIONS) * len(sizes))
    results = []
    for operation in OPERATIONS:
        for size in sizes:
            call = _collective(operation, size, ranks, device)
            first = _agreed(_timed(call, WARMUP_ITERATIONS, device), dist.ReduceOp.MAX, device)
            iterations = max(1, int(budget / max(first, 1e-9)))
            # gloo has no AVG reduction: sum, then divide.
            per_iteration = _agreed(_timed(call, iterations, device), dist.ReduceOp.SUM, device) / ranks
            algbw = size / per_iteration / 1e9
            results.append({
                "operation": operation,
                "bytes": size,
                "iterations": iterations,
                "time_us": _figure(per_iteration * 1e6),
                "algbw_gbytes_per_s": _figure(algbw),
                "busbw_gbytes_per_s": _figure(algbw * bus_bandwidth_factor(operation, ranks)),
            })
    largest = [result for result in results if result["bytes"] == sizes[-1]]
    limiting = min(largest, key=lambda result: result["busbw_gbytes_per_s"])
    return {
        "ranks": ranks,
        "device": device.type,
        "seconds": seconds,
        "bus_gbytes_per_s": limiting["busbw_gbytes_per_s"],
        "limited_by": f"{limiting['operation']} at {_size_text(limiting['bytes'])}",
        "results": results,
    }


def check_minimum(result: dict, minimum_gbytes_per_s: float) -> None:
    """Refuse a fabric slower than the job's minimum, naming the measured and the expected figures."""
    if minimum_gbytes_per_s and result["bus_gbytes_per_s"] < minimum_gbytes_per_s:
        raise FabricTooSlowError(
            f"fabric check: bus bandwidth {result['bus_gbytes_per_s']:.3g} GB/s ({result['limited_by']}, "
            f"{result['ranks']} ranks on {result['device']}) is below the expected minimum of "
            f"{minimum_gbytes_per_s:.3g} GB/s (--min_bus_gbytes_per_s, stack key trainMinBusBandwidthGBps); "
            "training did not start"
        )


def summary_line(result: dict) -> str:
    """The progress line: each operation's busbw at the largest size."""
    largest = max(result["bytes"] for result in result["results"])
    figures = ", ".join(f"{row['operation']} {row['busbw_gbytes_per_s']:.3g}" for row in result["results"]
                        if row["bytes"] == largest)
    return (f"fabric check over {result['ranks']} ranks ({result['seconds']:g} s): bus bandwidth GB/s at "
            f"{_size_text(largest)}: {figures}")


def _figure(value: float) -> float:
    """Four significant digits: gloo's MB/s and EFA's GB/s alike stay readable."""
    return float(f"{value:.4g}")


def _size_text(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // 1024} KiB"


def run_before_training(seconds: float | None, minimum_gbytes_per_s: float, device: torch.device,
                        report: Callable[[str], None]) -> dict | None:
    """The check as train_func runs it: the sweep (None when --fabric_check_seconds is 0), its line through `report`
    (rank 0's progress), then the minimum. Every rank raises alike, so the whole worker group stops."""
    seconds = seconds_for(device, seconds)
    if not seconds:
        return None
    result = sweep(device, seconds)
    report(summary_line(result))
    check_minimum(result, minimum_gbytes_per_s)
    return result
