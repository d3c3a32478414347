"""workload.model.flops: the one FLOPs count, checked against the models the job builds, and the one the trainer's
MFU, the layout and the step-time model use."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from workload.config import ARCHITECTURES, TrainConfig
from workload.model import flops
from workload.model.adapters import lora
from workload.model.build import build_model

REPO = Path(__file__).resolve().parents[2]
SEQ_LEN = 2048


def _built(name: str, **flags) -> nn.Module:
    return build_model(TrainConfig(model_config=name, **flags), torch.device("meta"))


@pytest.mark.parametrize("name", ["tiny", "qwen2.5-1.5b"])
def test_full_training_is_six_flops_a_matmul_parameter_of_the_built_model_plus_attention(name):
    config = ARCHITECTURES[name]
    model = _built(name)
    linears = [module for module in model.modules() if isinstance(module, nn.Linear)]
    in_linears = {id(parameter) for module in linears for parameter in module.parameters()}
    linear_parameters = sum(parameter.numel() for module in linears for parameter in module.parameters())
    embedding = model.lm.get_input_embeddings().weight
    # What is neither a linear's nor the input embedding's: the norms' elementwise weights, a rounding of N.
    norms = sum(parameter.numel() for parameter in model.parameters()
                if id(parameter) not in in_linears and parameter is not embedding)
    attention = flops.attention_flops_per_token(config, SEQ_LEN)
    full = flops.flops_per_token(config, SEQ_LEN, "full")
    assert full - attention == 6 * (linear_parameters + norms), f"{name}: 6 x the built model's matmul parameters"
    assert 6 * linear_parameters <= full - attention < 6 * linear_parameters * 1.01, f"{name}: norms are a rounding"
    assert attention == 12 * model.lm.config.num_hidden_layers * model.lm.config.hidden_size * SEQ_LEN


@pytest.mark.parametrize("name", ["tiny", "qwen2.5-1.5b"])
def test_lora_is_the_frozen_bases_four_n_plus_six_a_of_the_built_adapters(name):
    config = ARCHITECTURES[name]
    base = _built(name)
    matmul = sum(parameter.numel() for parameter in base.parameters())  # tied: the head's matmul counts them
    cfg = TrainConfig(model_config=name, method="lora", lora_rank=8)
    adapted = lora.apply(_built(name), cfg)
    adapters = sum(parameter.numel() for parameter in adapted.parameters() if parameter.requires_grad)
    assert adapters > 0
    head = config["vocab_size"] * config["hidden_size"]
    attention = flops.attention_flops_per_token(config, SEQ_LEN)
    lora_flops = flops.flops_per_token(config, SEQ_LEN, "lora", 8)
    # 2N forward + 2N input gradients, no weight gradients for the frozen base, the head's included
    # (workload.model.loss.LinearCrossEntropy computes none for a frozen head).
    assert lora_flops == 4 * matmul + 6 * adapters + attention, name
    assert head > 0
    assert lora_flops < flops.flops_per_token(config, SEQ_LEN, "full")
    assert flops.flops_per_token(config, SEQ_LEN, "qlora", 8) == lora_flops, "NF4 dequantization moves bytes, no FLOPs"
    assert flops.flops_per_token(config, SEQ_LEN, "lora", 16) > lora_flops, "a larger rank, more adapter FLOPs"


def test_recomputation_is_hardware_flops_not_model_flops():
    config = ARCHITECTURES["qwen2.5-1.5b"]
    head = config["vocab_size"] * config["hidden_size"]
    attention = flops.attention_flops_per_token(config, SEQ_LEN)
    for method in ("full", "lora"):
        model_flops = flops.flops_per_token(config, SEQ_LEN, method)
        hardware = flops.flops_per_token(config, SEQ_LEN, method, recomputation=True)
        adapters = 0 if method == "full" else flops.adapter_memory.adapter_parameters(config, 16)
        assert hardware - model_flops == pytest.approx(
            2 * (flops.matmul_parameters(config) - head) + 2 * adapters + attention / 3), method
    with pytest.raises(ValueError, match="method"):
        flops.flops_per_token(config, SEQ_LEN, "dora")


def test_the_trainers_mfu_counts_what_a_lora_run_computes():
    config = _built("tiny").lm.config.to_dict()  # what the trainer passes: the built model's config
    full_cfg = TrainConfig(model_config="tiny", seq_len=256)
    lora_cfg = TrainConfig(model_config="tiny", seq_len=256, method="lora", lora_rank=4, lora_targets="q_proj,v_proj")
    trained = flops.run_flops_per_token(config, lora_cfg)
    assert trained != flops.run_flops_per_token(config, full_cfg)
    assert trained == flops.flops_per_token(config, 256, method="lora", lora_rank=4, lora_targets="q_proj,v_proj")
    assert flops.run_flops_per_token(config, full_cfg) == flops.flops_per_token(ARCHITECTURES["tiny"], 256)
    trainer = (REPO / "workload" / "trainer.py").read_text()
    assert "run_flops_per_token(structure.attach(model.lm.config.to_dict(), model.lm), cfg)" in trainer, (
        "the trainer's MFU passes the run's flags and the built model's structure")
    layout = (REPO / "workload" / "model" / "layout.py").read_text()
    assert "run_flops_per_token(config, cfg)" in layout, "the layout's compute estimate counts the same FLOPs"


def test_there_is_one_flops_per_token():
    pattern = re.compile(r"^\s*def " + "flops_per_token" + r"\b", re.M)
    found = [str(path.relative_to(REPO)) for folder in ("workload", "infra", "tools", "bench", "tests")
             for path in (REPO / folder).rglob("*.py") if pattern.search(path.read_text())]
    assert found == ["workload/model/flops.py"], f"one flops_per_token, in workload/model/flops.py: {found}"
