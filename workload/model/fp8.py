"""fp8 matmuls for the decoder's linear layers (--fp8, the stack's trainFp8): torchao's float8 training.

Each nn.Linear inside a decoder layer becomes torchao's Float8Linear with its default recipe: dynamic tensorwise
scaling, e4m3 for inputs and weights, e5m2 for the output gradient, all three matmuls (forward, input gradient,
weight gradient) through torch._scaled_mm with bf16 output. The embedding and the tied lm_head stay bf16 (the
chunked loss multiplies by the lm_head's weight directly, and the vocabulary projection is where fp8's error would
reach the loss first), as do the norms and attention. The master weights stay fp32 and FSDP2 still gathers bf16:
only the matmuls' operands are cast, per call; Float8Linear subclasses nn.Linear and keeps its parameters' names.

Standard library at import: the Pulumi program imports this module for its preview checks, and must not pull in
torch. torchao is imported only by `convert`, on the workers, where the job's runtime_env installs it
(TORCHAO_REQUIREMENT, added to the job's pip by infra/job/ray_job.py whenever trainFp8 is on).
"""
from __future__ import annotations

# torchao's float8 training path is Python over torch._scaled_mm (its compiled extensions serve other recipes and
# may fail to load on another torch build; the float8 path does not need them). 0.18.0 (2026-08) imports and
# converts with torch 2.11 (the bench GPU), 2.13 (CI and the cluster image's torch).
TORCHAO_REQUIREMENT = "torchao==0.18.0"
# GPUs with fp8 tensor cores (compute capability 8.9 and up): Ada (L4, L40S) and Hopper (H100, H200). The A100 (8.0)
# has none; matched as substrings of EC2's GPU name, as workload.model.gpu_peaks.PEAK_BF16_FLOPS is.
FP8_GPUS = ("L4", "L40S", "H100", "H200")
FP8_MIN_CAPABILITY = (8, 9)
# torch._scaled_mm needs both matmul dimensions divisible by 16 (torchao skips nothing by itself).
DIMENSION_MULTIPLE = 16


def gpu_has_fp8(gpu_name: str) -> bool:
    """Whether a GPU, by EC2's or torch's name, has fp8 tensor cores."""
    return any(name in gpu_name for name in FP8_GPUS)


def local_gpus_problem(query=None) -> str | None:
    """Why this machine cannot run --fp8 on a GPU, asked of nvidia-smi (no torch: the local run says it before the
    heavy imports): no NVIDIA GPU, or none of compute capability 8.9+; None when one has fp8 tensor cores. `query`
    stands in for nvidia-smi in tests: () -> its CSV lines of name, compute_cap, or None where it is not there."""
    lines = (query or _nvidia_smi)()
    if lines is None:
        return "this machine has no NVIDIA GPU (no nvidia-smi)"
    gpus = []
    for line in lines:
        name, _, capability = (part.strip() for part in line.rpartition(","))
        try:
            has_fp8 = tuple(int(number) for number in capability.split(".")) >= FP8_MIN_CAPABILITY
        except ValueError:  # an older driver without compute_cap: the GPU's name says it
            has_fp8 = gpu_has_fp8(name)
        if has_fp8:
            return None
        gpus.append(f"{name} ({capability})" if capability[:1].isdigit() else name)
    return f"this machine's GPUs are {', '.join(gpus)}" if gpus else "this machine has no NVIDIA GPU (nvidia-smi lists none)"


def _nvidia_smi() -> list[str] | None:
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [line for line in answer.stdout.splitlines() if line.strip()] if answer.returncode == 0 else None


def check_device(device) -> None:
    """--fp8 on a GPU without fp8 tensor cores: a ValueError naming the flag, before the model is converted. On the
    CPU torch emulates torch._scaled_mm (slowly), so the local path and the tests run the same code."""
    import torch

    if device.type != "cuda":
        return
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_MIN_CAPABILITY:
        raise ValueError(f"--fp8 needs a GPU with fp8 tensor cores (compute capability 8.9+: {', '.join(FP8_GPUS)}); "
                         f"{torch.cuda.get_device_name(device)} is {capability[0]}.{capability[1]}")


def apply(layers, device) -> int:
    """--fp8: refuse a device without fp8, then convert the decoder layers (workload.model.sharding.shard_model's one
    call)."""
    check_device(device)
    return convert(layers)


def convert(layers) -> int:
    """Swap every nn.Linear of `layers` (the decoder layers) whose dimensions fit torch._scaled_mm for a
    Float8Linear, in place, before FSDP and torch.compile wrap them. Returns how many were swapped."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as error:
        raise ValueError(f"--fp8 needs torchao ({TORCHAO_REQUIREMENT}): pip install {TORCHAO_REQUIREMENT}") from error
    import torch

    def fits(module, _name: str) -> bool:
        return (isinstance(module, torch.nn.Linear) and module.in_features % DIMENSION_MULTIPLE == 0
                and module.out_features % DIMENSION_MULTIPLE == 0)

    before = sum(isinstance(module, torch.nn.Linear) and fits(module, "") for layer in layers
                 for module in layer.modules())
    config = Float8LinearConfig()
    for layer in layers:
        convert_to_float8_training(layer, config=config, module_filter_fn=fits)
    swapped = sum(type(module).__name__ == "Float8Linear" for layer in layers for module in layer.modules())
    assert swapped == before, f"torchao swapped {swapped} of {before} linear layers"
    return swapped
