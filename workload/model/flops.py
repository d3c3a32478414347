"""The FLOPs a training step computes per trained token, for --method full, lora and qlora, from the model's
config.json: the one count the trainer's MFU, the layout's compute estimate (workload.model.layout), the step-time
model (bench/model/step_model.py) and its benchmarks use.

PaLM's accounting (appendix B): 2 FLOPs a weight in forward, 4 in backward (the input's gradient and the weight's),
plus 12 x layers x hidden x sequence for attention's scores and values, not halved for causality, as in PaLM and
nanoGPT, so the MFU compares with theirs. N: the parameters in a matmul per token, all of them less an untied input
embedding (a lookup). These are model FLOPs: activation checkpointing's recomputed forward is not counted (the
convention MFU is defined by), so a checkpointed run's MFU is what it trains, not what the GPU executes;
`recomputation=True` counts it too, the hardware FLOPs.

- full: 6N + attention.
- lora and qlora, the base frozen: forward 2N through the base and 2A through the adapters (A: their parameters,
  r x (in + out) per targeted linear); backward 2N for the base's input gradients, which must still flow to every
  earlier layer's adapters, and no 2N for the base's weight gradients (the GEMM full training spends on them is
  skipped); 4A for the adapters' input and weight gradients. The output head is no exception:
  workload.model.loss.LinearCrossEntropy computes no weight gradient for a frozen head. Attention has no weights, and
  backward needs its input gradients: 12 x L x H x T, unchanged. So 4N + 6A + attention: about two thirds of full at
  r << hidden.
- qlora computes what lora does; its NF4 dequantization is memory traffic, not FLOPs
  (workload.model.adapters.compute.dequantize_seconds times it).

Standard library only: the Pulumi preview reads it through workload.model.layout.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from workload.model import memory
from workload.model.adapters import ALL_LINEAR, METHODS
from workload.model.adapters import memory as adapter_memory

if TYPE_CHECKING:
    from workload.config import TrainConfig


def head_parameters(config: dict) -> int:
    """The output head's weights (vocabulary x hidden), tied to the input embedding or not."""
    return config["vocab_size"] * config["hidden_size"]


def matmul_parameters(config: dict) -> int:
    """N: the parameters that take part in a matmul per token, all of them less an untied input embedding."""
    untied_input_embedding = 0 if memory.tied_embeddings(config) else head_parameters(config)
    return memory.parameter_count(config) - untied_input_embedding


def attention_flops_per_token(config: dict, seq_len: int) -> float:
    """Attention's scores and values, forward and backward: 12 x layers x hidden x sequence."""
    return 12 * config["num_hidden_layers"] * config["hidden_size"] * seq_len


def flops_per_token(config: dict, seq_len: int, method: str = "full", lora_rank: int = 16,
                    lora_targets: str = ALL_LINEAR, *, recomputation: bool = False) -> float:
    """Training FLOPs per token of the model built from `config` (its config.json, or a transformers config's
    to_dict()) under --method, with --lora_rank and --lora_targets's adapters for lora and qlora (see the module's
    docstring). `recomputation`: add activation checkpointing's second forward of the decoder layers (hardware
    FLOPs); MFU leaves it out."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    matmul, head = matmul_parameters(config), head_parameters(config)
    attention = attention_flops_per_token(config, seq_len)
    adapters = adapter_memory.adapter_parameters(config, lora_rank, lora_targets) if method != "full" else 0
    if method == "full":
        trained = 6 * matmul + attention
    else:
        trained = 4 * matmul + 6 * adapters + attention
    if not recomputation:
        return trained
    # The layers' forward again (not the head's: the loss is outside the checkpointed layers): a third of
    # attention's scores and values, 2 a base weight and 2 an adapter weight.
    return trained + 2 * (matmul - head) + 2 * adapters + attention / 3


def run_flops_per_token(config: dict, cfg: TrainConfig) -> float:
    """flops_per_token of a run's flags (--seq_len, --method, --lora_rank, --lora_targets): what the trainer's MFU
    and the layout's compute estimate count."""
    return flops_per_token(config, cfg.seq_len, cfg.method, cfg.lora_rank, cfg.lora_targets)


def model_flops_utilization(tokens_per_s: float | None, flops: float, peak: float | None, devices: int) -> float | None:
    """Achieved training FLOP/s over the devices' dense bf16 peak; None where the peak (or the rate) is unknown."""
    if not peak or not tokens_per_s:
        return None
    return tokens_per_s * flops / (peak * devices)
