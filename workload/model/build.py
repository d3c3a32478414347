"""Building the model: the architecture to train (`hf_config`: a named random-weight config or --model_id's
config.json through the model gate), the model (`build_model`, fp32 master weights, on the meta device for a
--model_id), this rank's shards of its pretrained weights once sharded (`load_pretrained`), and the built model's
parameters in a matmul (`matmul_parameters`, which workload.model.flops counts from the config). Imports torch and
transformers, never ray.
"""
from __future__ import annotations

import os

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, PretrainedConfig, Qwen2Config

from workload import cli
from workload.config import ARCHITECTURES, TrainConfig
from workload.model import architectures, compatibility, config_json, model_source, weights
from workload.model import files as model_files
from workload.model.adapters import lora
from workload.model.loss import LM_PREFIX, CausalLMWithLoss

NAMED_CONFIGS = ARCHITECTURES  # --model_config name -> Qwen2Config keyword arguments (workload.config)
GENERATION_CONFIG = "generation_config.json"


def hf_config(cfg: TrainConfig, directory: str | None = None) -> PretrainedConfig:
    """The architecture to train: a named random-weight config, or --model_id's config.json (from `directory`, the
    model's files on this node, when given; else the copy the project ships, never fetched; else from a local
    directory, s3:// or the Hub, in one request), through the model gate's config checks. A source that does not
    answer, or a gated model without a token, is the environment's problem (exit 3), named in one line."""
    if cfg.model_config:
        return Qwen2Config(**NAMED_CONFIGS[cfg.model_config], use_cache=False)
    what = f"--model_id {cfg.model_id}"
    shipped = architectures.published(cfg.model_id) if directory is None else None
    if shipped is not None:
        return compatibility.check_config_dict(shipped, what)
    try:
        source = directory or model_files.read_config_directory(cfg.model_id)
    except (model_source.Unreachable, model_source.NeedsToken) as error:
        raise cli.EnvironmentProblem(f"{what}: {error}") from None
    raw = config_json.load_model_config(source, what)
    return compatibility.check_config_dict(raw, what)


def build_model(cfg: TrainConfig, device: torch.device, directory: str | None = None) -> CausalLMWithLoss:
    """fp32 master weights: random ones on `device` with --model_config (seeded); with --model_id, the architecture
    of `directory`'s config.json with its parameters on the meta device (workload.model.compatibility's gate), holding
    no memory until `load_pretrained` fills this rank's shards after shard_model. bf16 comes from FSDP's
    mixed-precision policy at compute time, so AdamW updates full-precision weights."""
    torch.manual_seed(cfg.seed)
    if cfg.model_config:
        with torch.device(device):
            lm = AutoModelForCausalLM.from_config(hf_config(cfg), dtype=torch.float32)
    else:
        # The model gate the preview ran on the same config.json: refused here too unless it can be trained.
        lm = compatibility.build(hf_config(cfg, directory), f"--model_id {cfg.model_id}")
        if directory and os.path.isfile(os.path.join(directory, GENERATION_CONFIG)):
            # What from_pretrained would take too: the published end-of-text ids and sampling defaults, which the
            # exported model keeps.
            lm.generation_config = GenerationConfig.from_pretrained(directory)
    lm.config.use_cache = False
    if cfg.activation_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return CausalLMWithLoss(lm, chunked_loss=cfg.chunked_loss, compiled_loss=compile_enabled(cfg, device))


def load_pretrained(model: CausalLMWithLoss, directory: str, device: torch.device, cfg: TrainConfig) -> None:
    """This rank's shards of --model_id's weights, read from the safetensors files in `directory` into the
    meta-built model that shard_model has sharded (workload.model.weights), and --method lora's adapters' first
    values (build_optimizer's AdamW then takes the trainable parameters: with lora/qlora the adapters alone)."""
    weights.load_sharded(model, directory, device, f"--model_id {cfg.model_id}", prefix=LM_PREFIX,
                         file_name=lora.file_name)
    lora.initialize(model, cfg.seed)


def compile_enabled(cfg: TrainConfig, device: torch.device) -> bool:
    return cfg.compile if cfg.compile is not None else device.type == "cuda"


def matmul_parameters(model: CausalLMWithLoss) -> int:
    """The built model's parameters that take part in a matmul per token: all of them, less an untied input embedding
    (a lookup). workload.model.flops.matmul_parameters counts the same from config.json (tests/unit/test_flops.py)."""
    total = sum(parameter.numel() for parameter in model.parameters())
    if model.lm.config.tie_word_embeddings:
        return total
    return total - model.lm.get_input_embeddings().weight.numel()
