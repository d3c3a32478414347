"""A pretrained model's weights into its FSDP2 shards: each rank reads only its own rows of each tensor.

The model is built on the meta device (workload.model.build.build_model: no memory at all), sharded with FSDP2
(workload.model.sharding.shard_model), and only then materialised: `load_sharded` turns each parameter into this rank's
shard on the device (`to_empty`), and fills it from the model directory's safetensors files, one
`model.safetensors` or the shards that `model.safetensors.index.json` lists. For each tensor,
`safe_open(...).get_slice(name)[start:stop]` reads the rows of dim 0 that FSDP2 gave this rank, out of the
memory-mapped file, and `copy_` casts them (bf16 or fp16 in published files) into the fp32 master weights. No rank
holds more than one tensor's own shard in host memory, or any full tensor on its device; host memory per rank is one
shard of the largest tensor (the embedding), device memory the rank's fp32 shards.

Not torch.distributed.checkpoint's HuggingFaceStorageReader (torch 2.13 has it): DCP's load plans every key of the
state dict, and a tied lm_head is not in the files, so it would need a partial-load planner, which passes over a
truly missing tensor in silence; and its errors on a malformed file are planner tracebacks, not a line naming the
tensor. safe_open and get_slice are what it reads with too, and the cluster's and the benchmark machine's
safetensors (0.8) both have them.

Files from storage are untrusted input: a tensor missing from the files, or of another shape than config.json
implies, or not floating point, or an index that names a file outside the directory, fails with one line naming the
tensor, the file and what was expected.
"""
from __future__ import annotations

import contextlib
import os

import torch
from torch import nn

from workload.model.header_shapes import shape_problem
from workload.model.safetensors_index import INDEX_FILE, SINGLE_FILE, weight_map

# safetensors' dtype names that copy_ can cast into fp32 master weights; anything else is a quantised or integer
# checkpoint this loader does not dequantise.
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


def weight_files(directory: str, what: str) -> dict[str, str]:
    """Tensor name -> the safetensors file (a path) that holds it: the index's map, or every tensor of the single
    file. `what` names the setting the directory came from, for the errors."""
    files = weight_map(directory, what)  # untrusted: bounded, and every file inside the directory
    if files is not None:
        return files
    single = os.path.join(directory, SINGLE_FILE)
    if not os.path.isfile(single):
        raise ValueError(f"{what}: no {SINGLE_FILE} or {INDEX_FILE} in {directory}; only safetensors weights are "
                         "loaded (convert .bin/.pth checkpoints with save_pretrained(safe_serialization=True))")
    from safetensors import safe_open

    with safe_open(single, framework="pt") as handle:
        return {name: single for name in handle.keys()}


def local_rows(tensor: torch.Tensor) -> tuple[int, int]:
    """The rows [start, stop) of dim 0 of the full tensor that this rank's shard holds: all of them for a plain
    tensor; FSDP2's even chunks (torch.chunk's: ceil(rows / shards) each, the last ones shorter or empty) for each
    mesh dimension it is sharded over (one for FSDP, the second of HSDP's (replicate, shard) mesh)."""
    from torch.distributed.tensor import DTensor

    start, stop = 0, tensor.shape[0] if tensor.dim() else 1
    if not isinstance(tensor, DTensor):
        return start, stop
    for mesh_dim, placement in enumerate(tensor.placements):
        if not placement.is_shard():
            continue  # Replicate: every replica reads the same rows
        assert placement.dim == 0, f"FSDP2 shards dim 0, got {tensor.placements}"
        shards = tensor.device_mesh.size(mesh_dim)
        chunk = -(-(stop - start) // shards)
        first = start + tensor.device_mesh.get_local_rank(mesh_dim) * chunk
        start, stop = min(first, stop), min(first + chunk, stop)
    return start, stop


def load_sharded(model: nn.Module, directory: str, device: torch.device, what: str, prefix: str = "",
                 file_name=lambda name: name) -> None:
    """Materialise the meta-built, FSDP2-sharded `model` on `device` and fill this rank's shards from the
    safetensors files in `directory`, where each tensor is named as in the model's state dict less `prefix` (the
    Hugging Face model's own names when `model` wraps it). Non-persistent buffers (the rotary inv_freq) are not in
    the files: they were computed when the model was built (workload.model.compatibility.parameters_on_meta keeps
    them off the meta device), and are put back after to_empty. `file_name` maps a parameter's name (less `prefix`)
    to its name in the files, None for one that is in none (--method lora's adapters, initialized after). A weight
    that qlora holds in NF4 is quantized as its rows arrive (workload.model.adapters.nf4: one scalar all-reduce per
    such tensor, the only communication here)."""
    persistent = set(model.state_dict())
    computed = computed_buffers(model, persistent, what)
    # On the root: FSDP2's FSDPModule._apply re-registers each unit's sharded parameters after to_empty.
    model.to_empty(device=device)
    files = weight_files(directory, what)
    with contextlib.ExitStack() as stack, torch.no_grad():
        handles = {}

        def handle(path: str):
            if path not in handles:
                from safetensors import safe_open

                handles[path] = stack.enter_context(safe_open(path, framework="pt"))
            return handles[path]

        # named_parameters lists a tied lm_head once, as the embedding it shares; files that also hold
        # lm_head.weight (Qwen3-0.6B's do) have it left unread.
        tensors = [*model.named_parameters(), *((name, buffer) for name, buffer in model.named_buffers()
                                                if name in persistent)]
        for full_name, tensor in tensors:
            name = file_name(full_name.removeprefix(prefix))
            if name is None:
                continue
            if name not in files:
                raise ValueError(_lacks(what, directory, name))
            _fill(tensor, name, handle(files[name]), os.path.basename(files[name]), what)
        for name, value in computed.items():
            model.get_buffer(name).copy_(value)


def _fill(tensor: torch.Tensor, name: str, handle, file_name: str, what: str) -> None:
    """Copy this rank's rows of `name` from an open safetensors file into `tensor` (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    stored = handle.get_slice(name)
    if (why := stored_problem(name, file_name, tuple(stored.get_shape()), stored.get_dtype(), tensor.shape)):
        raise ValueError(f"{what}: {why}")
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    start, stop = local_rows(tensor)
    assert stop - start == (local.shape[0] if local.dim() else 1), (name, start, stop, local.shape)
    rows = stored[start:stop] if tensor.dim() else handle.get_tensor(name)
    if type(local).__name__ == "NF4Tensor":
        from workload.model.adapters import nf4

        # A new NF4 shard in the DTensor: FSDP2 takes it up at its lazy init (FSDPParam.reset_sharded_param).
        tensor._local_tensor = nf4.quantized_shard(local, rows)
        return
    local.copy_(rows)


def _lacks(what: str, directory: str, name: str) -> str:
    return (f"{what}: the safetensors files in {directory} lack the tensor {name}, which the architecture of its "
            "config.json needs")


def stored_problem(name: str, file_name: str, shape: tuple, dtype: str, expected: tuple) -> str | None:
    """Why a stored tensor cannot fill the model's `name` of shape `expected` (after "{what}: "), or None."""
    if (why := shape_problem(name, file_name, shape, expected)) is not None:
        return why
    if dtype not in FLOAT_DTYPES:
        return (f"{name} in {file_name} is {dtype}; only floating-point weights ({', '.join(FLOAT_DTYPES)}) are "
                "loaded, not quantised checkpoints")
    return None


def check_files(model: nn.Module, directory: str, what: str) -> None:
    """load_sharded's refusals from the files' headers alone, for the driver before any worker starts: every tensor
    the meta-built Hugging Face `model` (its own names are the files') needs is in the file the index names, in its
    shape and a floating dtype. Without it a missing lm_head, a shard re-saved without a tensor or an int8 file was
    found by every worker inside Ray."""
    from workload.model import safetensors_files

    files = weight_files(directory, what)
    persistent = set(model.state_dict())
    headers: dict[str, dict] = {}
    for name, tensor in [*model.named_parameters(), *((name, buffer) for name, buffer in model.named_buffers()
                                                      if name in persistent)]:
        path = files.get(name)
        if path is not None and path not in headers:
            headers[path] = safetensors_files.tensor_entries(path)
        if path is None or name not in headers[path]:
            raise ValueError(_lacks(what, directory, name) + ("" if path is None else
                             f" (its index puts it in {os.path.basename(path)}, which does not hold it)"))
        dtype, shape = headers[path][name]
        if (why := stored_problem(name, os.path.basename(path), shape, dtype, tuple(tensor.shape))) is not None:
            raise ValueError(f"{what}: {why}")


def computed_buffers(model: nn.Module, persistent: set[str], what: str) -> dict[str, torch.Tensor]:
    """Copies of the buffers that are not in the files (non-persistent: a rotary embedding's inv_freq, Gemma's
    embed_scale), as the model's modules computed them when it was built, before to_empty discards them. One still on
    the meta device was never computed: refused, naming it."""
    computed = {name: buffer for name, buffer in model.named_buffers() if name not in persistent}
    never = [name for name, buffer in computed.items() if buffer.is_meta]
    if never:
        raise ValueError(f"{what}: buffers that are not in the weights were not computed when the model was built "
                         f"({', '.join(never)}); build it with workload.model.compatibility.build")
    return {name: buffer.detach().clone() for name, buffer in computed.items()}
