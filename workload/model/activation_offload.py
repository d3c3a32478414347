"""Activation offloading for the first decoder layers: instead of activation checkpointing's recomputation, those
layers keep what backward needs in pinned host memory (bench.model.offload counts what it saves: the step-time model
and the emulation of the 70B QLoRA dev plan, bench.record.seventy_b).

- which layers: the first `layers` of the model's decoder layers stop checkpointing; each runs its call inside its
  own saved_tensors_hooks, entered outside the compiled layer (a subclass's __call__, as FSDP2 swaps the class), so
  the hooks see the compiled function's saved tensors and none of any other layer or of the loss;
- what they save (`selective`): the selective activation checkpointing policy `save_matmuls`
  (torch.utils.checkpoint.create_selective_checkpoint_contexts, torchtitan's "op" policy without its every-other-matmul
  rule): the outputs of the base linears' matmuls and of attention are saved, every other op is recomputed in
  backward. The low-rank adapters' matmuls (one side at most `rank_bound` wide) are recomputed too: their
  outputs are as wide as the base's and cost nothing to redo. Without it, what torch.compile's partitioner saves;
- where: each saved tensor of at least MIN_BYTES goes to pinned host memory on a side stream in forward, with the
  size and strides it had (Inductor's backward asserts them: a contiguous copy of a transposed key fails it), and
  comes back in backward; with `prefetch`, a layer's tensors are copied back on the side stream while the layer after
  it runs its backward, as torchtune's OffloadActivations(use_streams=True) does.

May import torch only.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

MIN_BYTES = 1 << 20  # smaller tensors stay on the GPU: their copies cost more than they free
# A matmul whose contracted or output side is this narrow or narrower is a low-rank adapter's: recomputed.
RANK_BOUND = 256


def _attention_ops() -> tuple:
    names = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
    return tuple(getattr(torch.ops.aten, name).default for name in names if hasattr(torch.ops.aten, name))


def save_matmuls(rank_bound: int = RANK_BOUND):
    """The policy: MUST_SAVE the outputs of attention and of matmuls wider than `rank_bound` on both sides (the
    base linears'), PREFER_RECOMPUTE every other op."""
    matmuls = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}
    attention = set(_attention_ops())

    def policy(ctx, op, *args, **kwargs):
        if op in attention:
            return CheckpointPolicy.MUST_SAVE
        if op in matmuls:
            first, second = (args[1], args[2]) if op is torch.ops.aten.addmm.default else (args[0], args[1])
            if min(first.shape[-1], second.shape[-1]) > rank_bound:
                return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


@dataclass
class _Group:
    """One layer's saved tensors of one forward: their host copies (None once back), and the copies back once issued."""

    saved: list = field(default_factory=list)
    fetched: dict = field(default_factory=dict)
    ready: object = None


def _dense(tensor: torch.Tensor) -> bool:
    """The tensor covers its storage exactly (contiguous or a permutation of it): empty_strided rebuilds it."""
    return (tensor.storage_offset() == 0 and 0 not in tensor.stride()
            and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size())


class ActivationOffload:
    """The first `layers` decoder layers of `model` (workload.model.loss.CausalLMWithLoss) offloaded; see the
    module's docstring. `peak_host_bytes` is the most host memory held at once; `held_bytes` what is held now."""

    def __init__(self, model, layers: int, device: torch.device, *, selective: bool = False,
                 prefetch: bool = True, min_bytes: int = MIN_BYTES, rank_bound: int = RANK_BOUND) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.prefetch = prefetch and self.cuda
        self.min_bytes = min_bytes
        self.held_bytes = self.peak_host_bytes = 0
        self.groups: dict[int, _Group] = {}
        self.layers = list(model.layers)[:layers]
        for index, layer in enumerate(self.layers):
            layer.gradient_checkpointing = False  # transformers' GradientCheckpointingLayer reads it each call
            layer.__class__ = _offloaded_class(type(layer), rank_bound if selective else None)
            layer._activation_offload = (self, index)

    # The hooks, one pair a layer call: entered by the layer's class outside its compiled region.
    def hooks(self, index: int):
        stale = self.groups.get(index)  # tensors a backward never asked for (none in a training step)
        if stale is not None:
            self.held_bytes -= sum(host.numel() * host.element_size() for host in stale.saved if host is not None)
        self.groups[index] = _Group()
        return torch.autograd.graph.saved_tensors_hooks(functools.partial(self.pack, index), self.unpack)

    def _offloads(self, tensor: torch.Tensor) -> bool:
        """Plain, dense tensors of two or more dimensions: not a parameter, a DTensor or an NF4 weight, nor the
        one-dimensional codes and scales AOTAutograd saves of an NF4 weight, nor a view into FSDP's gathered buffer
        (the gathered weights are FSDP's to free and gather again)."""
        return (type(tensor) is torch.Tensor and tensor.dim() >= 2 and _dense(tensor)
                and tensor.numel() * tensor.element_size() >= self.min_bytes)

    def pack(self, index: int, tensor: torch.Tensor):
        if not self._offloads(tensor):
            return tensor
        host = torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype, pin_memory=self.cuda)
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                host.copy_(tensor, non_blocking=True)
            tensor.record_stream(self.stream)  # its memory is not reused before the copy has read it
        else:
            host.copy_(tensor)
        group = self.groups[index]
        group.saved.append(host)
        self.held_bytes += host.numel() * host.element_size()
        self.peak_host_bytes = max(self.peak_host_bytes, self.held_bytes)
        return (index, len(group.saved) - 1)

    def _fetch(self, index: int) -> None:
        """Issue the copies back of layer `index`'s tensors on the side stream (the compute stream waits for them
        when it unpacks)."""
        group = self.groups.get(index)
        if group is None or group.ready is not None:
            return
        with torch.cuda.stream(self.stream):
            for position, host in enumerate(group.saved):
                if host is None:
                    continue
                device = torch.empty_strided(host.size(), host.stride(), dtype=host.dtype, device=self.device)
                device.copy_(host, non_blocking=True)
                group.fetched[position] = device
            group.ready = torch.cuda.Event()
            group.ready.record(self.stream)

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        index, position = packed
        group = self.groups[index]
        host = group.saved[position]
        if self.stream is None:
            tensor = torch.empty_strided(host.size(), host.stride(), dtype=host.dtype, device=self.device)
            tensor.copy_(host)
        else:
            self.stream.wait_stream(torch.cuda.current_stream())  # the forward's copies to the host are done
            self._fetch(index)
            if self.prefetch:
                self._fetch(index - 1)  # backward reaches the layer before next
            torch.cuda.current_stream().wait_event(group.ready)
            tensor = group.fetched.pop(position)
            tensor.record_stream(torch.cuda.current_stream())
        group.saved[position] = None
        self.held_bytes -= host.numel() * host.element_size()
        if all(saved is None for saved in group.saved):
            del self.groups[index]
        return tensor


@functools.cache
def _offloaded_class(base: type, rank_bound: int | None) -> type:
    """`base` (a decoder layer's class, FSDP2's subclass of it) whose call enters its offload hooks, and whose
    forward runs under the selective policy (save_matmuls(rank_bound)) unless `rank_bound` is None. One class, and
    one policy, for every offloaded layer: torch.compile's one graph for them all (a closure a layer would recompile
    it a layer)."""
    def __call__(self, *args, **kwargs):
        offload, index = self._activation_offload
        if not (self.training and torch.is_grad_enabled()):
            return base.__call__(self, *args, **kwargs)
        with offload.hooks(index):
            return base.__call__(self, *args, **kwargs)

    selective = functools.partial(create_selective_checkpoint_contexts, save_matmuls(rank_bound or RANK_BOUND))

    def forward(self, *args, **kwargs):
        if not (self.training and torch.is_grad_enabled()):
            return base.forward(self, *args, **kwargs)
        # transformers' own form (GradientCheckpointingLayer): the layer bound with its keywords, the tensors
        # positional, which torch.compile traces into its checkpoint operator.
        return checkpoint(functools.partial(base.forward, self, **kwargs), *args, use_reentrant=False,
                          context_fn=selective)

    members = {"__call__": __call__, **({"forward": forward} if rank_bound is not None else {})}
    return type(f"Offloaded{base.__name__}", (base,), members)
