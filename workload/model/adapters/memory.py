"""What --method lora and qlora change in one rank's memory (workload.model.memory.estimate's terms), and in the
bytes a step gathers and reduces (workload.model.layout's collectives), counted from a config.json.

- the frozen base: no gradient and no optimizer state. lora keeps it in bf16 (2 bytes a parameter), qlora keeps the
  decoder blocks' linear weights in NF4 (NF4_BYTES_PER_PARAMETER, its scales included) and everything else (the
  embedding, the norms, the output head, biases, a mixture's router and experts) in bf16; both sharded over the FSDP
  ranks as full training's fp32 state is;
- the adapters: r x (in + out) parameters per targeted linear layer (PEFT's lora_A, r x in, and lora_B, out x r), in
  fp32 with fp32 gradients and AdamW's two moments (16 bytes a parameter, sharded: they live in their layer's FSDP
  unit);
- gathered weights: FSDP all-gathers the frozen base as it stores it (bf16, or NF4 with its scales) and the adapters in
  bf16 (the mixed-precision policy). qlora's layer computing also holds one linear layer's weight dequantized to bf16
  (torchao's LinearNF4 dequantizes the weight it multiplies, one linear at a time, in forward and again in backward);
- activations: the frozen base's layers keep what full training's keep, since backward must reach the adapters of
  every earlier layer (the base linears' inputs are kept by their adapters' lora_A instead); each adapter adds its
  r-wide intermediate (kept for lora_B's gradient), and with dropout its own dropped-out copy of the input and mask;
- the loss: full training's less the output head's gradient, which workload.model.loss.LinearCrossEntropy does not
  compute for a frozen head; the root's gradient reduction is gone (the root has no trainable parameter).

Standard library only: the Pulumi program imports this through workload.model.memory.
"""
from __future__ import annotations

import math

from workload.model import adapters, structure

# torchao's NF4Tensor (to_nf4(tensor, block_size=64, scaler_block_size=256), read in torchao/dtypes/nf4tensor.py,
# the module's place before 0.18; the format torchtune shards with FSDP2, and workload/model/adapters' qlora):
# two 4-bit codes a byte (quantized_data, uint8, numel / 2); one int8 absmax scaler per block of 64
# (quantized_scalers, numel / 64 bytes); the scalers double-quantized with one factor in the weight's dtype (bf16,
# 2 bytes) per 256 scalers (quantization_factor, numel / 64 / 256 x 2 bytes); the scalers' mean and the 16-entry
# lookup table are per tensor. 0.5 + 0.015625 + 0.000122 = 0.5157 bytes a parameter: the QLoRA paper's 4.127 bits
# (Dettmers et al. 2023, section 3: 8-bit scales per 64 weights, a 32-bit second-level scale per 256 blocks), 4.126
# with torchao's bf16 factor. fsdp_pre_all_gather gathers exactly quantized_scalers, quantization_factor and
# quantized_data, so the all-gather moves these bytes too.
NF4_BLOCK_SIZE = 64
NF4_SCALER_BLOCK_SIZE = 256
NF4_BYTES_PER_PARAMETER = 0.5 + 1 / NF4_BLOCK_SIZE + 2 / (NF4_BLOCK_SIZE * NF4_SCALER_BLOCK_SIZE)
BASE_BYTES_PER_PARAMETER = 2  # lora's frozen base, and whatever qlora does not quantize: bf16
ADAPTER_STATE_BYTES = 16  # fp32 weight, fp32 gradient, AdamW's two fp32 moments
ADAPTER_STATE_BEFORE_GRADIENTS = 12
GATHERED_ADAPTER_BYTES = 2  # FSDP's compute dtype
# Dequantizing one NF4 weight (NF4Tensor.get_original_weight, eager): the high and low codes as int64 (numel / 2 x 8
# bytes each, 8 a parameter), their looked-up bf16 values (2), the block scalers expanded to bf16 (1, one half at a
# time) and the scaled halves (2), then their interleaved bf16 stack (2): 15 bytes a parameter of the largest linear at
# the stack, of which the bf16 weight (2) lives on through its matmul. Compiled (torch.compile on CUDA, as the job runs)
# Inductor fuses the chain into the bf16 weight alone: 2. Like the loss kernel's count (workload.model.memory), the
# eager figure is an upper bound for the compiled job.
DEQUANTIZE_BYTES_PER_PARAMETER = 15
COMPILED_DEQUANTIZE_BYTES_PER_PARAMETER = 2
ADAPTER_ACTIVATION_BYTES_PER_RANK = 2  # lora_A's bf16 output, r wide, per token, kept for lora_B's gradient
DROPOUT_ACTIVATION_BYTES_PER_INPUT = 3  # with lora_dropout > 0: the dropped-out bf16 input and its bool mask


def linear_shapes(config: dict) -> dict[str, tuple[int, int]]:
    """A decoder layer's nn.Linear weights by their names under the layer, as (out_features, in_features)
    (workload.model.structure: recorded from the built model, or derived by its family). A mixture of experts' MLP is
    transformers 5's fused 3-D expert tensors, not nn.Linear: no MLP names then."""
    return structure.linear_shapes(config)


def targeted(config: dict, targets: str = adapters.ALL_LINEAR) -> dict[str, tuple[int, int]]:
    """The linear layers of a decoder layer that --lora_targets names (PEFT matches a module's last name), by their
    names under the layer; ValueError naming --lora_targets when the model has no layer of a name given."""
    names = set(adapters.resolve(targets, structure.linear_names(config)))
    return {name: shape for name, shape in linear_shapes(config).items() if name.rsplit(".", 1)[-1] in names}


def adapter_shapes(config: dict, rank: int, targets: str = adapters.ALL_LINEAR) -> list[tuple[int, int]]:
    """One decoder layer's adapter weights: lora_A (r x in) and lora_B (out x r) for each targeted linear layer."""
    shapes = []
    for out_features, in_features in targeted(config, targets).values():
        shapes += [(rank, in_features), (out_features, rank)]
    return shapes


def adapter_parameters(config: dict, rank: int, targets: str = adapters.ALL_LINEAR) -> int:
    """Trainable parameters of the whole model: r x (in + out) per targeted linear layer, in every decoder layer."""
    return config["num_hidden_layers"] * sum(math.prod(shape) for shape in adapter_shapes(config, rank, targets))


def quantized_parameters(config: dict, targets: str = adapters.ALL_LINEAR) -> int:
    """Parameters qlora keeps in NF4 per decoder layer: the targeted linear layers' weights (biases, norms and the
    linear layers without an adapter stay bf16, as workload.model.adapters.lora quantizes them)."""
    return sum(math.prod(shape) for shape in targeted(config, targets).values())


def stored_bytes(method: str, parameters: int, quantized: int) -> float:
    """Bytes the frozen base takes as stored (and gathered): `parameters` of which `quantized` are NF4 under qlora."""
    if method == "qlora":
        return NF4_BYTES_PER_PARAMETER * quantized + BASE_BYTES_PER_PARAMETER * (parameters - quantized)
    return BASE_BYTES_PER_PARAMETER * parameters


def activation_bytes_per_token(config: dict, rank: int, targets: str, dropout: float) -> int:
    """What a layer's adapters keep for backward per token, beyond the frozen layer's own activations."""
    total = 0
    for _, in_features in targeted(config, targets).values():
        total += ADAPTER_ACTIVATION_BYTES_PER_RANK * rank
        total += DROPOUT_ACTIVATION_BYTES_PER_INPUT * in_features if dropout > 0 else 0
    return total


def moments(config: dict, *, method: str, rank: int, targets: str, dropout: float, parameters: int, root: int,
            per_layer: int, activations: int, activated_layers: int, tokens: int, loss: int, gathered_all: bool,
            reduce_bytes: int, accumulating: bool, compiled: bool, workspace: int,
            layers_in_flight: int) -> dict[str, tuple[dict, float]]:
    """workload.model.memory's three moments for an adapter method, from the full method's counts: `activations` and
    `loss` (bytes, as full training keeps them), `activated_layers` (layers whose activations are all kept: every one,
    or the one recomputed under checkpointing), `gathered_all` (every layer stays gathered: no reshard_after_forward;
    accumulation reshards the frozen base after each micro-batch, workload.model.step). Each moment is (its unsharded parts in bytes, the bytes sharded over every shard)."""
    layers = config["num_hidden_layers"]
    quantized = quantized_parameters(config, targets) if method == "qlora" else 0
    layer_stored = stored_bytes(method, per_layer, quantized)
    root_stored = stored_bytes(method, root, 0)
    trained = adapter_parameters(config, rank, targets)
    layer_adapters = trained // layers
    base = root_stored + layers * layer_stored
    if gathered_all:
        gathered = base + GATHERED_ADAPTER_BYTES * trained
    else:
        gathered = root_stored + layers_in_flight * (layer_stored + GATHERED_ADAPTER_BYTES * layer_adapters)
    if method == "qlora":
        largest = max(math.prod(shape) for shape in targeted(config, targets).values())
        gathered += largest * (COMPILED_DEQUANTIZE_BYTES_PER_PARAMETER if compiled
                               else DEQUANTIZE_BYTES_PER_PARAMETER)
    activations += activation_bytes_per_token(config, rank, targets, dropout) * tokens * activated_layers
    accumulated = reduce_bytes * trained if accumulating else 0
    root_after = root_stored if gathered_all else 0
    return {
        "loss": ({"gathered_weights": gathered, "activations": activations, "loss": loss,
                  "accumulated_gradients": accumulated, "workspace": workspace},
                 base + ADAPTER_STATE_BEFORE_GRADIENTS * trained),
        # The end of backward, every adapter's gradient made; the frozen root makes none.
        "root reduction": ({"gathered_weights": root_after, "root_gradients": 0,
                            "accumulated_gradients": accumulated, "workspace": workspace},
                           base + ADAPTER_STATE_BYTES * trained),
        "optimizer step": ({"gathered_weights": root_stored, "accumulated_gradients": accumulated,
                            "workspace": workspace},
                           base + ADAPTER_STATE_BYTES * trained),
    }
