"""--method lora and qlora on the job's model: `apply(model, cfg)` before FSDP2 shards it, `initialize(model, seed)`
once its shards exist, and the PEFT adapter config that checkpoints and exports carry.

The adapters are PEFT's own modules (peft.inject_adapter_in_model with a LoraConfig): each target nn.Linear becomes
peft.tuners.lora.Linear, its weight moved to `base_layer` and `lora_A`/`lora_B` added beside it. They work under
FSDP2 unchanged: fully_shard still wraps each decoder layer, the adapters are two more parameters of its unit, and
FSDP2 asks only the trainable parameters of a unit for one dtype (torch 2.13 _fsdp_param_group._init_mp_dtypes): the
frozen base is bf16 (or NF4 inner tensors), the adapters fp32 master weights that the mixed-precision policy casts to
bf16 for compute, as the full method's are. So the exported adapters carry PEFT's names with nothing to translate.

The adapters' first values do not come from PEFT's init (which runs on the meta device for a pretrained model, then
is lost to to_empty) but from `initialize`: the same distribution as PEFT's default (lora_A kaiming-uniform with
a=sqrt(5), bound 1/sqrt(in_features); lora_B zeros), drawn whole for each adapter from a generator seeded by --seed and
its name, and cut to this rank's rows: the same adapters at any world size, and on the meta and the random-weight
paths alike.

May import torch, peft, workload's base, workload.model.weights and .adapters.
"""
from __future__ import annotations

import math
import zlib

import torch
from torch import nn

from workload.model import adapters
from workload.model.adapters import nf4
from workload.model.weights import local_rows

BASE_DTYPE = torch.bfloat16  # the frozen base, as the full method computes in
ADAPTER_DTYPE = torch.float32  # the adapters' master weights and AdamW state, as the full method's
ADAPTER_NAME = "default"  # PEFT's adapter name; PEFT's saved files drop it from the keys
BASE_LAYER = ".base_layer"  # PEFT's name for the wrapped linear layer


def lora_config(cfg, target_names: tuple[str, ...]):
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(target_names), bias="none", task_type="CAUSAL_LM")


def linear_names(lm: nn.Module) -> tuple[str, ...]:
    """The leaf names of the decoder layers' nn.Linear layers (q_proj, qkv_proj, c_fc, ...), sorted: what
    --lora_targets all-linear means on this model (PEFT's all-linear: every linear layer but the output head, which
    sits outside the layers)."""
    return tuple(sorted({name.rsplit(".", 1)[-1] for name, module in lm.model.layers.named_modules()
                         if isinstance(module, nn.Linear)}))


def resolved_targets(cfg, lm: nn.Module) -> tuple[str, ...]:
    """--lora_targets on this model (workload.model.adapters.resolve): ValueError naming the flag and the names the
    model has when it has no layer of a name given."""
    return adapters.resolve(cfg.lora_targets, linear_names(lm))


def apply(model, cfg):
    """The model with --method's adapters: unchanged for full; for lora every weight frozen in bf16 and PEFT's LoRA
    on --lora_targets; for qlora the same with those targets' weights in NF4. On the meta device (a pretrained model,
    filled after sharding) or with its random weights (--model_config, then initialized here)."""
    if cfg.method == "full":
        return model
    _require(cfg.method)
    from peft import inject_adapter_in_model

    lm = model.lm
    names = resolved_targets(cfg, lm)
    for parameter in lm.parameters():  # not lm.to(): the rotary inv_freq buffer stays fp32
        parameter.requires_grad_(False)
        parameter.data = parameter.data.to(BASE_DTYPE)
    if cfg.method == "qlora":
        shards = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        for name, module in target_linears(lm, names):
            rows, columns = module.weight.shape
            nf4.check_shardable(name, rows, columns, shards)
            module.weight = nn.Parameter(nf4.quantize(module.weight.data, shards), requires_grad=False)
    inject_adapter_in_model(lora_config(cfg, names), lm, adapter_name=ADAPTER_NAME)
    for _, parameter in adapter_parameters(model):
        parameter.data = parameter.data.to(ADAPTER_DTYPE)
        parameter.requires_grad_(True)
    model.adapter_config = peft_adapter_config(cfg, names)
    if not any(parameter.is_meta for _, parameter in adapter_parameters(model)):
        initialize(model, cfg.seed)
    return model


def _require(method: str) -> None:
    """The packages --method needs, or one line naming what to install (exit 3: the machine lacks it)."""
    from workload import cli

    nf4.import_torchao_quietly()  # PEFT imports it where installed
    for requirement in adapters.requirements(method):
        name = requirement.split("==")[0]
        try:
            __import__(name)
        except ImportError:
            raise cli.EnvironmentProblem(f"--method {method} needs {name}, which this Python lacks: pip install "
                                         f"{' '.join(adapters.requirements(method))}") from None


def target_linears(lm: nn.Module, names: tuple[str, ...]):
    """(name, nn.Linear) of the decoder layers' linear layers named in `names` (never the output head)."""
    for name, module in lm.named_modules():
        if isinstance(module, nn.Linear) and ".layers." in name and name.rsplit(".", 1)[-1] in names:
            yield name, module


def adapter_parameters(model: nn.Module):
    """(name under the Hugging Face model, parameter) of every LoRA matrix, in a fixed order."""
    lm = model.lm if hasattr(model, "lm") else model
    return [(name, parameter) for name, parameter in lm.named_parameters()
            if ".lora_A." in name or ".lora_B." in name]


def file_name(parameter_name: str) -> str | None:
    """A parameter's name in the pretrained model's files: PEFT's base_layer is the original linear layer; the
    adapters are in no file (None)."""
    if ".lora_A." in parameter_name or ".lora_B." in parameter_name:
        return None
    return parameter_name.replace(BASE_LAYER + ".", ".")


@torch.no_grad()
def initialize(model: nn.Module, seed: int) -> None:
    """Every adapter's first value (PEFT's default distribution), this rank's rows of it; no-op without adapters."""
    from torch.distributed.tensor import DTensor

    for name, parameter in adapter_parameters(model):
        full = torch.zeros(parameter.shape, dtype=ADAPTER_DTYPE)
        if ".lora_A." in name:
            generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            bound = 1 / math.sqrt(parameter.shape[1])
            full.uniform_(-bound, bound, generator=generator)
        start, stop = local_rows(parameter)
        local = parameter.to_local() if isinstance(parameter, DTensor) else parameter
        local.copy_(full[start:stop])


def peft_key(name: str) -> str:
    """A LoRA parameter's name in a PEFT adapter_model.safetensors: under base_model.model., without the adapter's
    name (peft.utils.save_and_load.get_peft_model_state_dict)."""
    return "base_model.model." + name.replace(f".{ADAPTER_NAME}.", ".")


def peft_adapter_config(cfg, target_names: tuple[str, ...]) -> dict:
    """adapter_config.json as PEFT writes it (LoraConfig.to_dict, with base_model_name_or_path): what
    PeftModel.from_pretrained reads. The base is --model_id; a random-weight --model_config base is written beside
    the adapters by the export, which fills base_model_name_or_path in then."""
    config = lora_config(cfg, target_names)
    config.base_model_name_or_path = "" if cfg.model_config else cfg.model_id
    as_dict = config.to_dict()
    as_dict["target_modules"] = sorted(as_dict["target_modules"])
    as_dict["peft_type"] = "LORA"
    as_dict["task_type"] = "CAUSAL_LM"
    return {key: value for key, value in as_dict.items() if _json_value(value)}


def _json_value(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))
