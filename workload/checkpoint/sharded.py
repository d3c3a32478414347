"""Sharded checkpoints with torch.distributed.checkpoint: every rank writes only its own shards.

Each rank saves into a local directory of its own; every rank's `ray.train.report(checkpoint=...)` (train.py) then
merges the ranks' files into one checkpoint directory under RunConfig.storage_path (DCP names each rank's file
`__<rank>_0.distcp`, and rank 0 adds `.metadata`, so the merge never collides). Loading works at any world size,
since DCP reshards on read. From s3://, a resume copies the whole checkpoint once per node onto its staging disk, in
parallel parts (workload.storage.node_local_checkpoint), and its ranks share the copy; the model and AdamW state are
about 12 bytes a parameter, 18 GB for 1.5B. `async_save` is the asynchronous save workload/checkpoint/saver.py uses. With
--method lora/qlora a checkpoint holds the adapters and their AdamW state alone (and adapter_config.json).
"""
from __future__ import annotations

import json
import os
from concurrent.futures import Future

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from workload.checkpoint import reader as checkpoint_reader
from workload.checkpoint.file_checks import MAX_JSON_BYTES, CheckpointRefused, read_record, read_regular  # noqa: F401
from workload.model.sharding import reshard

STEP_FILE = "train_step.json"
# Where the Hugging Face model's weights sit in a checkpoint: it is saved as {"model": ..., "optimizer": ...}, and the
# model is CausalLMWithLoss, whose Hugging Face model is its `lm` (LM_PREFIX).
MODEL_KEY = "model"
# --method lora/qlora's adapter config (PEFT's adapter_config.json), written beside the shards for workload.export.
ADAPTER_CONFIG = "adapter_config.json"


def save(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, tokenizer: str = "",
         chat_template: str = "", state: dict | None = None) -> None:
    """Write this rank's shards of the model and optimizer state. Rank 0 also records the step reached, the
    tokenizer trained with (and the text of the chat template it rendered with, when not the tokenizer's own), and the
    model's Hugging Face config (config.json, generation_config.json), so that
    workload.export can turn the checkpoint into a model directory with nothing else at hand. `state`: what
    `state_to_save` returns, when the caller has it (workload.checkpoint.state_map)."""
    dcp.save(state_to_save(model, optimizer) if state is None else state, checkpoint_id=directory)
    write_record(directory, model, step, tokenizer, chat_template)


def async_save(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, group, stager,
               tokenizer: str = "", chat_template: str = "", state: dict | None = None) -> Future:
    """`save`, except that it returns once `stager` has copied this rank's shards to host memory: DCP writes them
    beside the next steps, in a thread whose collectives (the plan, rank 0's .metadata) run on `group`, a gloo group
    of their own (as torchtitan's async_mode "async" does: components/checkpointer/dcp.py), so they never queue
    behind the training's NCCL collectives. The files are the same as `save`'s; the future fails if the write does."""
    write_record(directory, model, step, tokenizer, chat_template)
    state = state_to_save(model, optimizer) if state is None else state
    return dcp.async_save(state, checkpoint_id=directory, process_group=group,
                          async_stager=stager)


def state_to_save(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    model_state, optimizer_state = _state(model, optimizer)
    return {MODEL_KEY: model_state, "optimizer": optimizer_state}


def write_record(directory: str, model: nn.Module, step: int, tokenizer: str, chat_template: str) -> None:
    """Rank 0's files beside the shards: the step, the tokenizer, the Hugging Face config, the adapters' config."""
    if torch.distributed.get_rank() != 0:
        return
    with open(os.path.join(directory, STEP_FILE), "w") as file:
        json.dump({"step": step, "tokenizer": tokenizer, "chat_template": chat_template}, file)
    model.lm.config.save_pretrained(directory)
    if model.lm.generation_config is not None:
        model.lm.generation_config.save_pretrained(directory)
    if getattr(model, "adapter_config", None):
        with open(os.path.join(directory, ADAPTER_CONFIG), "w") as file:
            json.dump(model.adapter_config, file, indent=2)


def load(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore the model and optimizer in place; returns the number of steps the checkpoint had completed. The
    checkpoint is untrusted input (workload/checkpoint/reader.py): a crafted one is refused, nothing of it run."""
    # get_state_dict materialises AdamW's moments (a zero step) before the load, so they are restored too.
    model_state, optimizer_state = _state(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    checkpoint_reader.load(state, directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                   options=_options(model))
    return read_step(directory)


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The model's and the optimizer's state dicts as DCP saves them: with a frozen base, the trainable parameters
    alone (a tied lm_head shares the frozen embedding, and the state dict lists it under its own key too)."""
    model_state, optimizer_state = get_state_dict(model, optimizer, options=_options(model))
    if _options(model).ignore_frozen_params:
        trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
        model_state = {name: value for name, value in model_state.items() if name in trainable}
    return model_state, optimizer_state


def _options(model: nn.Module) -> StateDictOptions:
    """A model with a frozen base (--method lora/qlora) saves and restores its trainable parameters (the adapters)
    and their AdamW state only: the base is the pretrained files' (or the seed's), read again at every start."""
    frozen = any(not parameter.requires_grad for parameter in model.parameters())
    # strict=False on load: the frozen parameters are missing from the state by design; the adapters' names and
    # shapes are held to the checkpoint's by DCP's planner, which fails on a key the checkpoint lacks.
    return StateDictOptions(ignore_frozen_params=frozen, strict=not frozen)


def gather_full_weights(model: nn.Module, keep: bool) -> dict[str, torch.Tensor]:
    """The Hugging Face model's full weights, all-gathered from the FSDP2 shards one parameter at a time; the rank
    that `keep`s them (rank 0) copies each to host memory as it arrives, the others drop it. Every rank must call
    this (each parameter is a collective). Host memory holds one full copy at most, tied weights once (parameters
    are listed once however many modules share them), and each device one full parameter at a time."""
    from torch.distributed.tensor import DTensor


    reshard(model)  # the sharded fp32 master weights, not gathered bf16 ones a forward may have left
    state = {}
    for name, parameter in model.lm.named_parameters():
        full = parameter.full_tensor() if isinstance(parameter, DTensor) else parameter
        if keep:
            state[name] = full.detach().to("cpu", copy=True)
    return state


def read_model_state(directory: str) -> dict[str, torch.Tensor]:
    """The full, unsharded model weights of a checkpoint, in one process without a process group: tensors of the
    sizes and dtypes its metadata lists, filled by DCP (which reshards on read)."""
    metadata = checkpoint_reader.read_metadata(directory)
    prefix = MODEL_KEY + "."
    state = {MODEL_KEY: {name.removeprefix(prefix): torch.empty(item.size, dtype=item.properties.dtype)
                         for name, item in metadata.state_dict_metadata.items()
                         if name.startswith(prefix) and isinstance(item, TensorStorageMetadata)}}
    checkpoint_reader.load(state, directory, no_dist=True)
    return state[MODEL_KEY]


def read_step(directory: str) -> int:
    """The number of steps the checkpoint had completed."""
    return read_record(directory)["step"]
