"""QLoRA's frozen base: the decoder blocks' linear weights as torchao's NF4Tensor (4-bit NormalFloat codes in blocks
of 64 weights, each block's absmax scale itself quantized to int8 in blocks of 256: QLoRA's double quantization,
arXiv:2305.14314 section 3), which FSDP2 shards and all-gathers through the tensor's own fsdp_pre/post_all_gather
hooks, as torchtune's QLoRA recipes do.

A pretrained weight is quantized as it is loaded, rows by rows on each rank (workload/model/weights.py reads only this
rank's rows): no rank ever holds the full bf16 tensor, let alone the model. Quantizing a shard alone would differ from
quantizing the whole tensor in one number: double quantization subtracts the mean of all the tensor's block scales
before quantizing them, and the all-gathered tensor is dequantized with one rank's mean for every shard. So each rank
adds up its blocks' scales, one all-reduce of two numbers per tensor gives the tensor's mean, and the shard is then
quantized with it: the result is exactly the shard of torchao's to_nf4 of the whole tensor (tests/runs/test_adapters.py
checks that, code for code).

May import torch, torchao (imported when qlora is used: workload.model.adapters.requirements) and the package's own
standard-library names (workload.model.adapters: the NF4 shard rule the preview shares).
"""
from __future__ import annotations

import math

import torch

from workload.model import adapters

BLOCK_SIZE = adapters.NF4_BLOCK_SIZE  # QLoRA's and torchao's to_nf4 default: weights per absmax scale
SCALER_BLOCK_SIZE = 256  # scales per int8 quantization factor (the second quantization), the same defaults
# The 16 NF4 levels as torchao's NF4Tensor.from_tensor writes them (bitsandbytes' table rounded to 4 decimals; the
# tests hold both against each other). A shard built here must carry the same table as torchao's to_nf4 would give it.
NF4_CODES = (-1.0, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0, 0.0796, 0.1609, 0.2461, 0.3379, 0.4407,
             0.5626, 0.7230, 1.0)


def torchao_nf4():
    """torchao's NF4 module (torchao.dtypes.nf4tensor before 0.18), imported only when qlora is used."""
    import_torchao_quietly()
    from torchao.quantization.quantize_.workflows.nf4 import nf4_tensor

    return nf4_tensor


def import_torchao_quietly() -> None:
    """Import torchao, where installed, without its import's log lines: its CUDA-only extensions failing to load on
    a CPU machine, no Triton, and torch's deprecation warnings for the enums it registers with torch.compile (some as
    its submodules load later, so those are filtered out for good). Noise in a job's or the local run's output,
    printed by whatever imports torchao first (transformers' from_pretrained does, wherever torchao is installed)."""
    import logging

    pytree = logging.getLogger("torch.utils._pytree")
    if not any(isinstance(existing, _EnumRegistrationNotice) for existing in pytree.filters):
        pytree.addFilter(_EnumRegistrationNotice())
    logger = logging.getLogger("torchao")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import torchao  # noqa: F401
    except ImportError:
        pass
    finally:
        logger.setLevel(level)


class _EnumRegistrationNotice:
    """A logging filter: torch 2.13's notice that registering an Enum as a pytree constant is deprecated (torchao
    0.18 registers its config enums so)."""

    def filter(self, record) -> bool:
        return "register_constant() on Enum subclasses" not in record.getMessage()


def is_nf4(tensor: torch.Tensor) -> bool:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return type(local).__name__ == "NF4Tensor"


def scaler_block_size(rows: int, columns: int, shards: int) -> int:
    """The second quantization's block: 256 scales, or fewer where a shard holds fewer (a tiny test model's 32 x 64
    projection over 2 ranks has 16 blocks a shard). FSDP2's chunks of an NF4 tensor must hold whole scale blocks, so
    the block divides each shard's number of blocks; every published model's shards hold a multiple of 256."""
    blocks_per_shard = rows // shards * columns // BLOCK_SIZE
    return math.gcd(SCALER_BLOCK_SIZE, blocks_per_shard)


def check_shardable(name: str, rows: int, columns: int, shards: int) -> None:
    """A model whose projection does not split into NF4 shards (adapters.nf4_shard_problem, which the preview and the
    driver apply before any worker starts) is refused, naming it."""
    if (why := adapters.nf4_shard_problem(name, rows, columns, shards)) is not None:
        raise ValueError(f"--method qlora: {why}; use --method lora or another number of GPUs")


def quantize(weight: torch.Tensor, shards: int) -> torch.Tensor:
    """A whole weight (bf16, on any device, meta included) as an NF4Tensor whose blocks FSDP2 can split `shards`
    ways: torchao's to_nf4."""
    rows, columns = weight.shape
    blocks = scaler_block_size(rows, columns, shards)
    return torchao_nf4().to_nf4(weight.to(torch.bfloat16).contiguous(), BLOCK_SIZE, blocks)


@torch.no_grad()
def quantized_shard(local, rows: torch.Tensor):
    """This rank's `rows` of a weight (as read from the files) as the NF4 shard that replaces `local` (the
    placeholder that to_empty allocated, whose block sizes it keeps), quantized with the whole tensor's mean scale:
    one all-reduce of two numbers over every rank (a collective: every rank calls it, in the same order). Equal to
    the shard of to_nf4 of the whole tensor."""
    import torch.distributed as dist

    NF4Tensor = torchao_nf4().NF4Tensor
    device = local.quantized_data.device
    rows = rows.to(device=device, dtype=local.dtype).contiguous()
    block_scales = rows.flatten().view(-1, local.block_size).abs().max(dim=1).values
    total = torch.stack([block_scales.float().sum(), torch.tensor(float(block_scales.numel()), device=device)])
    if dist.is_initialized():
        dist.all_reduce(total)
    mean = (total[0] / total[1]).to(local.dtype)
    # torchao's NF4Tensor.double_quantize_scalers, with the whole tensor's mean instead of the shard's.
    centred = (block_scales - mean).view(-1, local.scaler_block_size)
    factor = 256 / (2 * centred.abs().max(dim=1).values)
    quantized_scales = (centred * factor[:, None]).round().clamp(-128, 127).flatten().to(torch.int8)
    codes = torch.tensor(NF4_CODES, device=device, dtype=local.dtype)
    data = NF4Tensor.convert_to_norm_float_weight(rows, rows.numel() // local.block_size, local.block_size, codes)
    return NF4Tensor(local_meta(local), local.block_size, rows.numel() // local.block_size, local.scaler_block_size,
                     quantized_scales, factor.contiguous(), mean, data, codes)


def local_meta(local):
    """The NF4 tensor's outer description (shape, strides, dtype, device) as torchao's constructor takes it."""
    return torchao_nf4().SubclassTensorArgs(local.size(), local.stride(), local.storage_offset(), local.dtype,
                              local.quantized_data.device, False)


def dequantize(tensor: torch.Tensor) -> torch.Tensor:
    """An NF4 weight (local, or a DTensor of NF4 shards) as the full bf16 tensor it stands for; a collective for a
    DTensor (each rank's shard is dequantized, then all-gathered)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        return tensor.get_original_weight()
    local = tensor.to_local().get_original_weight()
    return DTensor.from_local(local, tensor.device_mesh, tensor.placements, run_check=False,
                              shape=tensor.shape, stride=tensor.stride()).full_tensor()
