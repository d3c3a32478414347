"""Every family the models table accepts, reduced to a tiny random-weight copy of its published config.json, trains
with --method full, lora and qlora for 2 steps on the CPU (one spawn of 2 gloo processes: tests/support/gloo_family_methods.py),
its planned parameter count equals the model transformers builds, and --lora_targets all-linear puts adapters on every
linear layer of its decoder layers, as PEFT's all-linear does (fused qkv_proj and gate_up_proj, StarCoder2's c_fc and
c_proj included)."""
from __future__ import annotations

import json
import math
import os

import pytest
import torch

from tests.support import gloo_spawn
from tests.support.gloo_family_methods import METHODS, worker
from tests.support.gloo_family_steps import CONFIGS, FIXTURE_CONFIGS, shrink
from tests.support.gloo_layout_steps import free_port
from workload.model import structure
from workload.model.adapters import memory as adapter_memory

FAMILIES = {
    "llama": os.path.join(CONFIGS, "meta-llama--Llama-3.2-1B.json"),
    "mistral": os.path.join(CONFIGS, "mistralai--Mistral-7B-v0.3.json"),
    "qwen2": os.path.join(CONFIGS, "Qwen--Qwen2.5-0.5B.json"),
    "qwen3": os.path.join(CONFIGS, "Qwen--Qwen3-0.6B.json"),
    "gemma2": os.path.join(FIXTURE_CONFIGS, "google--gemma-2-2b-it.json"),
    "gemma3": os.path.join(FIXTURE_CONFIGS, "google--gemma-3-1b-pt.json"),
    "phi3": os.path.join(FIXTURE_CONFIGS, "microsoft--Phi-3-mini-4k-instruct.json"),
    "olmo2": os.path.join(FIXTURE_CONFIGS, "allenai--OLMo-2-1124-7B.json"),
    "starcoder2": os.path.join(FIXTURE_CONFIGS, "bigcode--starcoder2-7b.json"),
    "glm4": os.path.join(FIXTURE_CONFIGS, "THUDM--GLM-4-9B-0414.json"),
    "granite": os.path.join(FIXTURE_CONFIGS, "ibm-granite--granite-3.1-8b-base.json"),
    "cohere2": os.path.join(FIXTURE_CONFIGS, "CohereForAI--c4ai-command-r7b-12-2024.json"),
    "smollm3": os.path.join(FIXTURE_CONFIGS, "HuggingFaceTB--SmolLM3-3B.json"),
}
# PEFT's all-linear on each family: every nn.Linear of the decoder layers (the head is outside them).
ALL_LINEAR = {
    "phi3": ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"],
    "glm4": ["down_proj", "gate_up_proj", "k_proj", "o_proj", "q_proj", "v_proj"],
    "starcoder2": ["c_fc", "c_proj", "k_proj", "o_proj", "q_proj", "v_proj"],
}
LLAMA_NAMES = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


def reduced(family: str) -> dict:
    with open(FAMILIES[family]) as file:
        config = shrink(json.load(file))
    if "no_rope_layers" in config:  # SmolLM3: one layer with rotary embeddings, one without
        config["no_rope_layers"] = [1, 0]
    if config.get("sliding_window_pattern") and config["model_type"] == "cohere2":
        config["sliding_window_pattern"] = 2
    return config


def save_reduced(family: str, directory: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = reduced(family)
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(len(family))
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(torch.bfloat16).save_pretrained(directory)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("family-methods")
    directories = {family: str(root / family) for family in FAMILIES}
    for family, directory in directories.items():
        save_reduced(family, directory)
    out = str(root / "results.pt")
    gloo_spawn.spawn(worker, args=(free_port(), directories, out), nprocs=2)
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_trains_full_lora_and_qlora_and_is_planned_as_built(results, family):
    config = reduced(family)
    for method in METHODS:
        result = results[family, method]
        assert len(result["losses"]) == 2 and all(math.isfinite(loss) for loss in result["losses"]), (
            f"{family} {method}: 2 finite losses, got {result['losses']}")
        assert structure.parameter_count(config) == result["parameters"], (
            f"{family}: planned {structure.parameter_count(config)} parameters, built {result['parameters']}")
    names = ALL_LINEAR.get(family, LLAMA_NAMES)
    for method in ("lora", "qlora"):
        result = results[family, method]
        assert result["adapted"] == names, f"{family} {method}: all-linear adapted {result['adapted']}, not {names}"
        assert result["adapters"] == adapter_memory.adapter_parameters(config, 4), (
            f"{family} {method}: planned adapters {adapter_memory.adapter_parameters(config, 4)}, built "
            f"{result['adapters']}")
    assert list(structure.linear_names(config)) == names, family
