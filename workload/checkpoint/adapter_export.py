"""--method lora/qlora's models out: a PEFT adapter directory, and with --merge a merged Hugging Face model.

The adapter directory is what PEFT's `save_pretrained` writes and `PeftModel.from_pretrained(base, directory)` reads:
adapter_config.json (PEFT's LoraConfig with base_model_name_or_path) and adapter_model.safetensors (the LoRA matrices
under PEFT's key names, base_model.model.<module>.lora_A.weight), plus the tokenizer, as TRL's and axolotl's adapter
runs leave it. It is what `--export final` writes for these methods: a few MB instead of the whole model, loaded on
the base the user already has. A random-weight --model_config base exists nowhere else, so it is written beside the
run's models (base_model/, its frozen weights: bf16, or NF4 dequantized to bf16 for qlora) and named as the base.
workload/checkpoint/export.py writes these (write_model, in the job; the export command) from the pieces here.

export.merge is the other way out: the base with the adapters folded in (W + B A * alpha / r, PEFT's merge_and_unload),
as a plain Hugging Face model that needs no PEFT to load. A qlora adapter is merged into the bf16 base it was
quantized from, as axolotl's and PEFT's own merges do; the merged weights then differ from the NF4 ones trained on by
the quantization error.

May import workload's base, workload.model, workload.checkpoint's reader, model_config, sharded, file_checks and
untrusted_values.
"""
from __future__ import annotations

import json
import os

import torch
from torch import nn

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # peft.utils.constants.SAFETENSORS_WEIGHTS_NAME
BASE_MODEL_DIRECTORY = "base_model"  # a random-weight base's own directory, beside the run's model_<step>/


def gather_adapters(model: nn.Module, keep: bool) -> dict[str, torch.Tensor]:
    """The LoRA matrices, all-gathered from their shards (a collective: every rank calls it), under PEFT's saved
    key names, in fp32; the rank that `keep`s them copies them to host memory."""
    from torch.distributed.tensor import DTensor

    from workload.model.adapters.lora import adapter_parameters, peft_key
    from workload.model.sharding import reshard

    reshard(model)
    state = {}
    for name, parameter in adapter_parameters(model):
        full = parameter.full_tensor() if isinstance(parameter, DTensor) else parameter
        if keep:
            state[peft_key(name)] = full.detach().to("cpu", torch.float32, copy=True)
    return state


def gather_base(model: nn.Module, keep: bool) -> dict[str, torch.Tensor]:
    """The frozen base's weights under the Hugging Face model's own names (PEFT's base_layer removed), NF4 ones
    dequantized to bf16: a collective, one tensor at a time, kept by the rank that `keep`s them."""
    from torch.distributed.tensor import DTensor

    from workload.model.adapters import nf4
    from workload.model.adapters.lora import file_name

    state = {}
    for name, parameter in model.lm.named_parameters():
        if (target := file_name(name)) is None:
            continue
        if nf4.is_nf4(parameter):
            full = nf4.dequantize(parameter)
        else:
            full = parameter.full_tensor() if isinstance(parameter, DTensor) else parameter
        if keep:
            state[target] = full.detach().to("cpu", copy=True)
    return state


def save_adapter_directory(adapter_config: dict, weights: dict[str, torch.Tensor], out: str, *,
                           tokenizer: str = "", chat_template: str = "") -> list[str]:
    """adapter_config.json, adapter_model.safetensors and the tokenizer into `out` (created); notes for the user."""
    from safetensors.torch import save_file

    from workload.checkpoint.untrusted_values import drop_remote_code, source_problem, tokenizer_note

    adapter_config = dict(adapter_config)
    notes = drop_remote_code(adapter_config, ADAPTER_CONFIG)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, ADAPTER_CONFIG), "w") as file:
        json.dump(adapter_config, file, indent=2, sort_keys=True)
    save_file({key: tensor.contiguous() for key, tensor in weights.items()}, os.path.join(out, ADAPTER_WEIGHTS),
              metadata={"format": "pt"})
    if tokenizer and source_problem(tokenizer):  # credentials in it, a token, a megabyte: neither loaded nor quoted
        return notes + [tokenizer_note(tokenizer, out)]
    if tokenizer:
        from workload.data.tokenizer import load_tokenizer

        try:
            loaded = load_tokenizer(tokenizer)
        except (OSError, ValueError) as error:
            return notes + [tokenizer_note(tokenizer, out, error)]
        if chat_template:
            loaded.chat_template = chat_template
        loaded.save_pretrained(out)
    return notes


def read_adapter_checkpoint(directory: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """A lora/qlora checkpoint's adapter config and LoRA matrices (PEFT's key names), read as untrusted input: the
    config's values through the flags' own checks, and the checkpoint's tensors exactly those that the model of its
    config.json with those adapters has, by name and shape (workload/checkpoint/model_config.py's rule), before any
    is allocated. A refusal is a CheckpointRefused naming the file."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from transformers import AutoConfig, AutoModelForCausalLM

    from workload.checkpoint import reader as checkpoint_reader
    from workload.checkpoint.adapter_config import check_adapter_config
    from workload.checkpoint.model_config import read_config_file
    from workload.checkpoint.sharded import MODEL_KEY
    from workload.model.adapters.lora import adapter_parameters, peft_key
    from workload.model.loss import LM_PREFIX

    # Its values by the flags' own rules, as export checked them before these imports (adapter_config.py).
    config = check_adapter_config(directory, directory)
    targets = config["target_modules"]
    metadata = checkpoint_reader.read_metadata(directory)
    read_config_file(directory)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory))
    from peft import LoraConfig, inject_adapter_in_model

    inject_adapter_in_model(LoraConfig(r=config["r"], lora_alpha=config["lora_alpha"], target_modules=targets), lm)
    expected = {f"{MODEL_KEY}.{LM_PREFIX}{name}": (peft_key(name), tuple(parameter.shape))
                for name, parameter in adapter_parameters(lm)}
    listed = {name: tuple(item.size) for name, item in metadata.state_dict_metadata.items()
              if name.startswith(f"{MODEL_KEY}.") and isinstance(item, TensorStorageMetadata)}
    if listed != {name: shape for name, (_, shape) in expected.items()}:
        wrong = sorted(set(listed.items()) ^ {(name, shape) for name, (_, shape) in expected.items()})[:1]
        raise checkpoint_reader.CheckpointRefused(
            f"checkpoint {directory}: its adapter tensors are not those of {ADAPTER_CONFIG} on the model of its "
            f"config.json (first difference: {wrong[0][0]} {list(wrong[0][1])})")
    state = {MODEL_KEY: {name.removeprefix(f"{MODEL_KEY}."): torch.empty(shape)
                         for name, (_, shape) in expected.items()}}
    checkpoint_reader.load(state, directory, no_dist=True)
    return config, {expected[f"{MODEL_KEY}.{name}"][0]: tensor for name, tensor in state[MODEL_KEY].items()}
