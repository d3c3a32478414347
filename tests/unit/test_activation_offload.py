"""workload.model.activation_offload on the CPU: the offloaded layers train as the checkpointed ones do (the same
gradients, with and without the selective policy, eager and under torch.compile), every offloaded tensor comes
back with the size and strides it left with, and the policy saves the base's matmuls, not the adapters'."""
from __future__ import annotations

import pytest
import torch

from bench.model import offload as offload_figures
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import activation_offload
from workload.model.activation_offload import ActivationOffload
from workload.model.adapters import lora
from workload.model.build import NAMED_CONFIGS, build_model
from workload.model.loss import loss_fn

CPU = torch.device("cpu")


def gradients(cfg: TrainConfig, layers: int, selective: bool, compile_backend: str | None = None,
              rank_bound: int = activation_offload.RANK_BOUND):
    torch.manual_seed(0)
    model = lora.apply(build_model(cfg, CPU), cfg)
    if compile_backend:
        for layer in model.layers:
            layer.compile(backend=compile_backend)
    offload = ActivationOffload(model, layers, CPU, selective=selective, min_bytes=0,
                                rank_bound=rank_bound) if layers else None
    loss_fn(model, random_batches(cfg, 512, rank=0)(0)).backward()
    grads = {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None}
    return grads, offload, model


@pytest.mark.parametrize("selective", [False, True])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_offloaded_layers_train_as_recomputed_ones(method, selective):
    cfg = TrainConfig(model_config="tiny", method=method, batch_size=2, seq_len=32, activation_checkpointing=True,
                      compile=False)
    plain, _, _ = gradients(cfg, 0, False)
    offloaded, offload, model = gradients(cfg, 1, selective)
    assert plain.keys() == offloaded.keys() and plain
    for name in plain:
        torch.testing.assert_close(offloaded[name], plain[name], msg=name)
    layers = list(model.layers)
    assert not layers[0].gradient_checkpointing and layers[1].gradient_checkpointing
    assert type(layers[0]).__name__.startswith("Offloaded") and not type(layers[1]).__name__.startswith("Offloaded")
    assert offload.held_bytes == 0 and not offload.groups, "every offloaded tensor came back"
    if not selective:  # eager, the selective policy keeps its saves in its own cache, not through the hooks
        assert offload.peak_host_bytes > 0


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_offloaded_layers_train_as_recomputed_ones_under_compile(method):
    """torch.compile traces the selective checkpoint inside the layer (qlora: around torchao's NF4 linear) and the
    hooks see the compiled function's saved tensors (aot_eager: AOTAutograd's partition without Inductor's kernels;
    Inductor on the CPU gives the same, in minutes). The tiny model's base linears are 64 wide, its adapters 16: a
    bound of 16 saves the base's matmuls, the default (256) none of them."""
    torch._dynamo.reset()
    cfg = TrainConfig(model_config="tiny", method=method, batch_size=2, seq_len=32, activation_checkpointing=True,
                      compile=False, lora_rank=16)
    plain, _, _ = gradients(cfg, 0, False, "aot_eager")
    held = {}
    for bound in (16, activation_offload.RANK_BOUND):
        torch._dynamo.reset()
        offloaded, offload, _ = gradients(cfg, 1, True, "aot_eager", rank_bound=bound)
        for name in plain:
            torch.testing.assert_close(offloaded[name], plain[name], msg=name)
        assert offload.held_bytes == 0
        held[bound] = offload.peak_host_bytes
    # q, k, v, o, gate and up outputs saved at 16 beside the input and attention's output at both: the step model's
    # count of the selective set (bench.model.offload), and the rotary cos and sin (1 x 32 x 16 bf16 each).
    config = {**NAMED_CONFIGS["tiny"], "model_type": "qwen2"}
    assert held[16] == offload_figures.selective_bytes_per_token(config) * 2 * 32 + 2 * 32 * 16 * 2, held
    assert held[16] > held[activation_offload.RANK_BOUND] > 0, held
    torch._dynamo.reset()


def test_a_transposed_tensor_comes_back_with_its_strides():
    """The 2026-12-06 failure: a key saved as [batch, heads, tokens, head_dim] with the strides of its transpose came
    back contiguous, and Inductor's backward asserted its strides."""
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4)])
    offload = ActivationOffload(model, 1, CPU, min_bytes=0)
    key = torch.randn(2, 64, 8, 16).transpose(1, 2)
    with offload.hooks(0):
        packed = offload.pack(0, key)
    assert not isinstance(packed, torch.Tensor) and offload.held_bytes == key.numel() * 4
    back = offload.unpack(packed)
    assert back.stride() == key.stride() and back.shape == key.shape and torch.equal(back, key)
    assert offload.held_bytes == 0
    # A slice of a larger buffer or an expanded view stays where it is: rebuilding it would copy its whole storage.
    for kept in (torch.randn(8, 16)[:4], torch.randn(1, 16).expand(8, 16)):
        with offload.hooks(0):
            assert offload.pack(0, kept) is kept


def test_the_policy_saves_the_base_matmuls_and_attention():
    policy = activation_offload.save_matmuls(rank_bound=16)
    save, recompute = torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE, \
        torch.utils.checkpoint.CheckpointPolicy.PREFER_RECOMPUTE
    mm = torch.ops.aten.mm.default
    tokens = torch.empty(64, 128)
    assert policy(None, mm, tokens, torch.empty(128, 256)) == save  # a base linear
    assert policy(None, mm, tokens, torch.empty(128, 16)) == recompute  # lora_A
    assert policy(None, mm, torch.empty(64, 16), torch.empty(16, 256)) == recompute  # lora_B
    assert policy(None, torch.ops.aten.addmm.default, torch.empty(256), tokens, torch.empty(128, 256)) == save
    assert policy(None, torch.ops.aten.silu.default, tokens) == recompute
    assert policy(None, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, tokens) == save
