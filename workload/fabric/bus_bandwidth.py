"""nccl-tests' bus bandwidth convention (doc/PERFORMANCE.md): busbw = algbw x a factor of the operation and the number
of ranks n, so that a collective's figure compares with the bottleneck link's bandwidth whatever n is.

Standard library only: the layout's network cost (workload.model.layout), which the Pulumi program reads at preview,
counts bytes with it, and the fabric check (workload.fabric.bandwidth) reports its sweeps with it.
"""
from __future__ import annotations

OPERATIONS = ("all_reduce", "all_gather", "reduce_scatter")


def bus_bandwidth_factor(operation: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw for `ranks` ranks: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n."""
    if operation == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if operation in ("all_gather", "reduce_scatter"):
        return (ranks - 1) / ranks
    raise ValueError(f"no bus bandwidth factor for {operation!r}; known: {', '.join(OPERATIONS)}")
