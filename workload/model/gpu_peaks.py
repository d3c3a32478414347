"""Each GPU's dense bf16 peak, by name: what MFU is measured against, and what the layout's choice (workload.model.layout)
turns a step's FLOPs into seconds with.

Standard library only: the Pulumi program reads it at preview, with EC2's GPU name for the instance type.
"""
from __future__ import annotations

# Dense bf16 peak FLOP/s per GPU, matched as substrings of torch.cuda.get_device_name() ("NVIDIA L4") or EC2's GPU name
# ("L4"). L40S comes before L4, which it contains.
PEAK_BF16_FLOPS = (
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)


def peak_flops_of(gpu_name: str) -> float | None:
    """Dense bf16 peak of a GPU by name (torch's "NVIDIA L4", or EC2's "L4"), None when unlisted."""
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in gpu_name), None)
