"""What --method qlora adds to a step's time besides FLOPs: its dequantization. (The FLOPs of lora and qlora, a
frozen base's 4N + 2 x head + 6A + attention against full training's 6N + attention, are workload.model.flops's.)

qlora dequantizes each decoder linear weight (torchao's NF4Tensor.get_original_weight): read as NF4 and written as
bf16 once in forward and once in backward (and once more under activation checkpointing's recomputation), per step
whatever the batch: a memory-bound pass at the GPU's memory bandwidth. Compiled, that is the NF4 bytes read and the
bf16 bytes written (DEQUANTIZED_BYTES_MOVED); eager moves several times more (adapters.memory's
DEQUANTIZE_BYTES_PER_PARAMETER counts its temporaries).

Standard library only: the step-time model (bench/model/step_model.py) reads it.
"""
from __future__ import annotations

from workload.model.adapters import memory as adapter_memory

# Read the NF4 codes and scales, write the bf16 weight: bytes moved per parameter per dequantization (compiled).
DEQUANTIZED_BYTES_MOVED = adapter_memory.NF4_BYTES_PER_PARAMETER + 2
# Each GPU's memory bandwidth in GB/s, from NVIDIA's data sheets: L4 300 GB/s; L40S 864 GB/s; A100 40 GB (SXM4)
# 1,555 GB/s; H100 SXM 3,350 GB/s; H200 4,800 GB/s. A dequantization pass is assumed to reach DEQUANTIZE_EFFICIENCY
# of it (a streaming element-wise kernel; not measured here).
MEMORY_GBYTES_PER_S = (("H200", 4800.0), ("H100", 3350.0), ("A100", 1555.0), ("L40S", 864.0), ("L4", 300.0))
DEQUANTIZE_EFFICIENCY = 0.7


def memory_gbytes_per_s(gpu_name: str) -> float | None:
    """A GPU's memory bandwidth by name (torch's "NVIDIA L4" or EC2's "L4"), None when unlisted."""
    return next((rate for key, rate in MEMORY_GBYTES_PER_S if key in gpu_name), None)


def dequantize_seconds(quantized_parameters: int, gpu_name: str, *, activation_checkpointing: bool) -> float:
    """One rank's dequantization per step under qlora: every quantized weight twice (forward, backward), three times
    with activation checkpointing (the recomputed forward); 0 where the GPU's bandwidth is not listed."""
    rate = memory_gbytes_per_s(gpu_name)
    if not rate:
        return 0.0
    passes = 3 if activation_checkpointing else 2
    return passes * quantized_parameters * DEQUANTIZED_BYTES_MOVED / (rate * 1e9 * DEQUANTIZE_EFFICIENCY)
