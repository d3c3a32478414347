"""--method lora and qlora (issue 32), against references nobody here wrote: one spawn of 2 gloo processes
(tests/support/gloo_adapter_steps.py) takes the tiny model through the job's pieces; the tests compare its LoRA steps with a
single-process PEFT model (peft.get_peft_model, same LoraConfig, same first adapters and data), its NF4 shards with
torchao's to_nf4 of the whole weight and torchao's NF4 levels with bitsandbytes' published ones, qlora's losses with
lora's, a resumed run with an uninterrupted one, and its exports with PeftModel.from_pretrained and a merged model.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from tests.support import gloo_spawn
from tests.support.gloo_adapter_steps import BASE, NF4_SHAPE, STEPS, WORLD, batch, worker
from tests.support.gloo_layout_steps import free_port
from workload.model.build import build_model

# bitsandbytes' NF4 levels (bitsandbytes/functional.py, get_4bit_type("nf4"): the QLoRA paper's NormalFloat4,
# quantiles of N(0, 1) normalized to [-1, 1] with an exact zero), as published; torchao's table rounds them to 4
# decimals.
BITSANDBYTES_NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0)
# qlora's loss may differ from lora's by the NF4 base's error: on the tiny model's 3 steps, within 2% of it.
QLORA_LOSS_BOUND = 0.02


@pytest.fixture(scope="module")
def adapter_gloo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    pretrained = str(root / "tiny-base")
    built = build_model(BASE, torch.device("cpu"))
    built.lm.to(torch.bfloat16).save_pretrained(pretrained)
    out = str(root / "results.pt")
    gloo_spawn.spawn(worker, args=(free_port(), out, pretrained), nprocs=WORLD)
    return torch.load(out, weights_only=False), root, pretrained


def _peft_reference(results: dict):
    """The tiny model as a single-process PEFT model: the job's bf16 base in fp32, the job's first adapters."""
    from peft import LoraConfig, get_peft_model

    from workload.model.adapters import lora

    base = build_model(BASE, torch.device("cpu"))
    for parameter in base.lm.parameters():
        parameter.data = parameter.data.to(torch.bfloat16).float()
    config = LoraConfig(r=BASE.lora_rank, lora_alpha=BASE.lora_alpha, target_modules=["q_proj", "v_proj", "down_proj"])
    peft_model = get_peft_model(base.lm, config)
    adapters = dict(peft_model.base_model.model.named_parameters())
    with torch.no_grad():
        for name, value in results["initial"].items():
            adapters[name].copy_(value)
    return peft_model, [adapters[name] for name, _ in lora.adapter_parameters(base)]


def test_lora_steps_equal_a_single_process_peft_model(adapter_gloo_run):
    results, _, _ = adapter_gloo_run
    peft_model, parameters = _peft_reference(results)
    optimizer = torch.optim.AdamW(parameters, lr=BASE.learning_rate)
    names = list(results["initial"])
    for step in range(STEPS):
        tokens = torch.cat([batch(BASE, rank, step) for rank in range(WORLD)])
        loss = peft_model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        assert loss.item() == pytest.approx(results["lora_losses"][step], rel=1e-5), f"step {step + 1}'s loss"
        for name, parameter in zip(names, parameters):
            torch.testing.assert_close(results["grads"][step][name], parameter.grad, rtol=1e-4, atol=1e-6,
                                       msg=f"step {step + 1}: the gradient of {name}")
        torch.nn.utils.clip_grad_norm_(parameters, BASE.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
    assert results["grads"][-1][names[0]].abs().sum() > 0, "lora_A's gradient is not zero after the first step"


def test_lora_trains_the_adapters_alone_in_fp32_and_leaves_the_base(adapter_gloo_run):
    results, _, _ = adapter_gloo_run
    assert results["trainable"] and all(".lora_A." in name or ".lora_B." in name for name in results["trainable"])
    assert len(results["trainable"]) == 2 * 3 * 2, "two adapters on three targets in each of two layers"
    assert results["optimized"] == len(results["trainable"]), "AdamW holds the adapters only"
    assert all(value.dtype == torch.float32 for value in results["initial"].values()), "fp32 adapters"
    for name, before in results["base_before"].items():
        assert before.dtype == torch.bfloat16, f"{name}: the frozen base is bf16"
        assert torch.equal(before, results["base_after"][name]), f"{name} changed in training"


def test_qlora_base_is_nf4_on_the_targets_and_bf16_elsewhere(adapter_gloo_run):
    dtypes = adapter_gloo_run[0]["qlora_dtypes"]
    assert dtypes["model.layers.0.self_attn.q_proj.base_layer.weight"].startswith("NF4Tensor")
    assert dtypes["model.layers.0.mlp.down_proj.base_layer.weight"].startswith("NF4Tensor")
    for name in ("model.embed_tokens.weight", "model.norm.weight", "model.layers.0.self_attn.k_proj.weight"):
        assert dtypes[name] == "Tensortorch.bfloat16", f"{name} stays bf16, got {dtypes[name]}"


def test_qlora_losses_stay_within_the_bound_of_lora(adapter_gloo_run):
    results = adapter_gloo_run[0]
    for step, (qlora, lora) in enumerate(zip(results["qlora_losses"], results["lora_losses"])):
        assert abs(qlora - lora) <= QLORA_LOSS_BOUND * lora, f"step {step + 1}: qlora {qlora} against lora {lora}"


def test_nf4_shards_quantized_from_their_rows_equal_torchaos_whole_tensor_quantization(adapter_gloo_run):
    from workload.model.adapters import nf4

    results = adapter_gloo_run[0]
    reference = nf4.torchao_nf4().to_nf4(results["nf4_whole"], 64, 256).split(NF4_SHAPE[0] // WORLD)
    for rank, (shard, expected) in enumerate(zip(results["nf4_shards"], reference)):
        for name, value in shard.items():
            assert torch.equal(value, getattr(expected, name)), f"rank {rank}'s {name} against torchao's to_nf4"


def test_torchaos_nf4_levels_are_bitsandbytes_published_ones():
    from workload.model.adapters import nf4

    levels = nf4.torchao_nf4().to_nf4(torch.linspace(-1, 1, 16384)).nf4  # fp32: the table in the weight's dtype
    torch.testing.assert_close(levels, torch.tensor(BITSANDBYTES_NF4), atol=5e-5, rtol=0)
    assert nf4.NF4_CODES == tuple(round(level, 4) for level in levels.tolist())


def test_an_adapters_only_checkpoint_resumes_as_the_uninterrupted_run(adapter_gloo_run):
    from workload.checkpoint import reader

    results, root, _ = adapter_gloo_run
    assert results["resumed_step"] == STEPS
    assert results["resumed"] == pytest.approx(results["uninterrupted"], rel=1e-6)
    names = reader.read_metadata(root / "qlora-checkpoint").state_dict_metadata
    model_keys = [name for name in names if name.startswith("model.")]
    assert model_keys and all(".lora_A." in name or ".lora_B." in name for name in model_keys), model_keys[:3]
    assert all(".lora_" in name for name in names if name.startswith("optimizer.state."))


def test_the_jobs_qlora_export_loads_with_peft_on_its_written_base(adapter_gloo_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    results, root, _ = adapter_gloo_run
    directory = root / "qlora-export" / "model_000005"
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(root / "qlora-export" / "base_model")
    assert (config["r"], config["lora_alpha"]) == (BASE.lora_rank, BASE.lora_alpha)
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, str(directory))
    tokens = batch(BASE, 0, 99)
    with torch.no_grad():
        loss = loaded(input_ids=tokens, labels=tokens).loss
    assert loss.item() == pytest.approx(results["qlora_eval"], rel=1e-5), "the export computes the job's loss"


def test_export_writes_a_peft_directory_and_merges_to_equal_logits(adapter_gloo_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from workload.checkpoint.export import export

    results, root, pretrained = adapter_gloo_run
    export(str(root / "lora-checkpoint"), str(tmp_path / "adapters"))
    assert sorted(os.listdir(tmp_path / "adapters")) == ["adapter_config.json", "adapter_model.safetensors"]
    export(str(root / "lora-checkpoint"), str(tmp_path / "merged"), merge=True)
    tokens = batch(BASE, 0, 99)
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(pretrained, dtype=torch.float32)
        adapter_model = PeftModel.from_pretrained(base, str(tmp_path / "adapters"))
        expected = adapter_model(input_ids=tokens, labels=tokens)
        merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"), dtype=torch.float32)
        logits = merged(input_ids=tokens).logits
    assert expected.loss.item() == pytest.approx(results["pretrained_eval"], rel=1e-5)
    torch.testing.assert_close(logits, expected.logits, rtol=1e-4, atol=1e-4)
    job_export = root / "lora-export" / "model_000002" / "adapter_model.safetensors"
    assert job_export.read_bytes() == (tmp_path / "adapters" / "adapter_model.safetensors").read_bytes()


def test_a_tampered_adapter_checkpoint_is_refused_in_one_line(adapter_gloo_run, tmp_path):
    import shutil

    from workload.checkpoint.export import export
    from workload.checkpoint.reader import CheckpointRefused

    results, root, _ = adapter_gloo_run
    for name, change in (("rank", {"r": 0}), ("targets", {"target_modules": ["lm_head"]}),
                         ("shapes", {"r": BASE.lora_rank * 2})):
        copy = tmp_path / name
        shutil.copytree(root / "lora-checkpoint", copy)
        config = json.loads((copy / "adapter_config.json").read_text())
        (copy / "adapter_config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(CheckpointRefused) as refused:
            export(str(copy), str(tmp_path / f"{name}-out"))
        assert "adapter" in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_fp8_with_adapters_is_refused_naming_both_flags():
    from workload.config import TrainConfig

    with pytest.raises(ValueError, match="--fp8 is for --method full; with --method qlora"):
        TrainConfig(model_config="tiny", method="qlora", fp8=True)


def test_the_adapter_memory_benchmark_runs_its_smoke_path(capsys):
    """bench/record/adapter_memory.py's code on CPU at tiny shapes: one rank of a fake world of 8 in qlora, and the sharded
    NF4 load of a synthetic checkpoint (the H200 run is the lead's)."""
    from bench.record import adapter_memory

    assert adapter_memory.main(["--smoke", "--cases", "0", "--load_layers", "2"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines[0]["method"] == "qlora" and lines[0]["steps_done"] == adapter_memory.STEPS and not lines[0]["oom"]
    assert lines[1]["load_layers"] == 2 and lines[1]["host_rss_peak_gib"] > 0
