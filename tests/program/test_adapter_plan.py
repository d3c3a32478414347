"""trainMethod lora/qlora at preview and in the plans (issue 32, its infrastructure half): the keys, the job's flags and
pip, the memory model's terms per method, the preview's verdicts on a 70B model, the layout's collectives and the
step-time model's FLOPs. Each relation below is derived from counts stated here, not copied from an output."""
from __future__ import annotations

import dataclasses
import math

import pytest

from infra import config
from infra.job import job_config
from tests.support.pulumi_mocks import run_program, run_program_expecting_error, stack_settings
from workload.model import architectures, layout, memory, parallel
from workload.model.adapters import compute as adapter_compute
from workload.model.adapters import memory as adapter_memory

JOB = "pulumi-python:dynamic/raytrain:TrainingJob"
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
# The 70B path of docs/seventy-b.md: qlora at one 2048-token sequence per GPU.
SEVENTY_B = {"trainEnabled": True, "trainModelId": LLAMA_70B, "trainMethod": "qlora", "trainBatchSize": 1}


def llama_70b() -> dict:
    return architectures.published(LLAMA_70B)


# ---- the keys -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, words", [
    ({"trainMethod": "dora"}, ["trainMethod", "'dora'", "full", "lora", "qlora"]),
    ({"trainLoraRank": 0}, ["trainLoraRank", "at least 1 and at most 1024"]),
    ({"trainLoraAlpha": "big"}, ["trainLoraAlpha", "not a number"]),
    ({"trainLoraAlpha": "0"}, ["trainLoraAlpha", "above 0 and at most 4096"]),
    ({"trainLoraDropout": "1"}, ["trainLoraDropout", "below 1"]),
    ({"trainLoraTargets": "q_proj,lm_head"}, ["trainLoraTargets", "all-linear", "q_proj", "down_proj"]),
])
def test_a_bad_method_key_is_refused_naming_it_and_the_allowed_values(overrides, words):
    with pytest.raises(ValueError) as refusal:
        config.parse(stack_settings("dev") | overrides)
    message = str(refusal.value)
    assert message.startswith(f"config key '{next(iter(overrides))}'"), message
    assert all(word in message for word in words), f"{overrides}: {message} should name {words}"
    assert "--" not in message, f"the refusal names the stack key, not the job's flag: {message}"


def test_the_method_keys_become_the_jobs_flags_and_pip():
    run = run_program("dev", {"trainEnabled": True, "trainMethod": "qlora", "trainLoraRank": 8,
                              "trainLoraAlpha": "16", "trainLoraTargets": "q_proj,v_proj"})
    job = run.one(JOB)
    args = job.inputs["train_args"]
    flags = dict(zip(args[::2], args[1::2]))
    assert (flags["--method"], flags["--lora_rank"], flags["--lora_alpha"], flags["--lora_targets"]) == \
        ("qlora", "8", "16.0", "q_proj,v_proj"), flags
    names = [entry.split("==")[0] for entry in job.inputs["pip"]]
    assert names.count("torchao") == 1 and "peft" in names, f"qlora needs peft and torchao: {job.inputs['pip']}"
    refused = run_program_expecting_error("dev", {"trainEnabled": True, "trainMethod": "qlora", "trainFp8": True})
    assert str(refused.error).startswith("config keys 'trainFp8', 'trainMethod'"), \
        f"fp8 trains the weights that adapters freeze: refused naming both keys: {refused.error}"
    full = run_program("dev", {"trainEnabled": True}).one(JOB).inputs["pip"]
    assert not any(entry.startswith(("peft", "torchao")) for entry in full), f"full installs neither: {full}"


def test_a_workload_refusal_of_a_method_flag_names_the_key():
    cfg = config.parse(stack_settings("dev") | {"trainEnabled": True})
    assert job_config.stack_message("--lora_rank must be an integer from 1 to 1024, got 0").startswith(
        "config key 'trainLoraRank'")
    assert job_config.STACK_KEYS["method"] == "trainMethod" and hasattr(cfg.train, "lora_targets")


# ---- the memory model -----------------------------------------------------------------------------------------------

def test_nf4_bytes_follow_torchaos_layout():
    # 4-bit codes, one int8 scaler per 64 weights, one bf16 factor per 256 scalers.
    assert adapter_memory.NF4_BYTES_PER_PARAMETER == pytest.approx(4 / 8 + 8 / 8 / 64 + 16 / 8 / (64 * 256))
    assert 0.5 < adapter_memory.NF4_BYTES_PER_PARAMETER < 0.53


def test_adapter_parameters_are_rank_times_in_plus_out_of_each_targeted_linear():
    config = llama_70b()
    hidden, kv, intermediate, layers = 8192, 8 * 128, 28672, 80
    per_layer = (2 * (hidden + hidden) + 2 * (hidden + kv)  # q, o; k, v
                 + 2 * (hidden + intermediate) + (intermediate + hidden))  # gate, up; down
    assert adapter_memory.adapter_parameters(config, 16) == 16 * per_layer * layers
    assert adapter_memory.adapter_parameters(config, 16, "q_proj,v_proj") == 16 * layers * (2 * hidden + hidden + kv)
    assert adapter_memory.quantized_parameters(config) * layers + 2 * 128256 * hidden + (2 * layers + 1) * hidden \
        == memory.parameter_count(config), "every decoder weight but the norms is a linear layer qlora quantizes"


def _state_at_optimizer(method: str, shards: int) -> float:
    return memory.estimate(llama_70b(), micro_batch=1, seq_len=2048, shards=shards, activation_checkpointing=True,
                           reshard_after_forward=True, compiled=True, method=method).state_gib


def test_the_sharded_state_is_the_base_as_stored_plus_the_adapters_sixteen_bytes():
    config = llama_70b()
    parameters, adapters = memory.parameter_count(config), adapter_memory.adapter_parameters(config, 16)
    quantized = 80 * adapter_memory.quantized_parameters(config)
    lora = (2 * parameters + 16 * adapters) / 8 / memory.GIB
    qlora = (adapter_memory.NF4_BYTES_PER_PARAMETER * quantized + 2 * (parameters - quantized)
             + 16 * adapters) / 8 / memory.GIB
    # The peak's moment may be the loss's (12 bytes an adapter parameter): within the adapters' 4 bytes.
    slack = 4 * adapters / 8 / memory.GIB
    assert lora - slack - 1e-9 <= _state_at_optimizer("lora", 8) <= lora + 1e-9
    assert qlora - slack - 1e-9 <= _state_at_optimizer("qlora", 8) <= qlora + 1e-9
    assert _state_at_optimizer("lora", 16) == pytest.approx(_state_at_optimizer("lora", 8) / 2), "sharded over 16"
    assert _state_at_optimizer("full", 8) > 7 * _state_at_optimizer("lora", 8), "16 bytes against 2 a parameter"


def test_adapter_activations_add_their_low_rank_intermediates_only():
    config, tokens = architectures.published("Qwen/Qwen2.5-7B"), 2048
    settings = dict(micro_batch=1, seq_len=tokens, shards=8, compiled=True)
    full = memory.estimate(config, **settings).activations_gib
    lora = memory.estimate(config, **settings, method="lora", lora_rank=32).activations_gib
    expected = 2 * 32 * 7 * tokens * config["num_hidden_layers"] / memory.GIB  # bf16, r wide, 7 linears a layer
    assert lora - full == pytest.approx(expected, rel=1e-6)
    with_dropout = memory.estimate(config, **settings, method="lora", lora_rank=32, lora_dropout=0.1).activations_gib
    assert with_dropout > lora, "dropout keeps its own copy of each adapter's input"


def test_qlora_holds_one_linear_dequantized_and_more_when_eager():
    config = llama_70b()
    settings = dict(micro_batch=1, seq_len=2048, shards=8, activation_checkpointing=True, reshard_after_forward=True)
    eager = memory.estimate(config, **settings, method="qlora").gathered_weights_gib
    compiled = memory.estimate(config, **settings, method="qlora", compiled=True).gathered_weights_gib
    largest = 8192 * 28672  # gate_proj / up_proj
    assert (eager - compiled) * memory.GIB == pytest.approx(13 * largest), "15 against 2 bytes of the largest linear"
    lora = memory.estimate(config, **settings, method="lora", compiled=True).gathered_weights_gib
    assert compiled < lora, "two NF4 layers and one dequantized linear are less than two bf16 layers"


def test_frozen_methods_peak_lower_than_full_and_qlora_lowest():
    config = architectures.published("Qwen/Qwen2.5-7B")
    peaks = {method: memory.estimate(config, micro_batch=2, seq_len=2048, shards=8, activation_checkpointing=True,
                                     reshard_after_forward=True, compiled=True, method=method).peak_gib
             for method in ("full", "lora", "qlora")}
    assert peaks["full"] > peaks["lora"] > peaks["qlora"], peaks


# ---- the preview ----------------------------------------------------------------------------------------------------

def test_a_70b_model_with_qlora_passes_on_dev_with_a_plan():
    plan = run_program("dev", SEVENTY_B).exports["jobMemoryPlan"]
    assert plan["fits"] and plan["method"] == "qlora", plan
    # At 1 x 2048 a node's HSDP shards fit since the frozen head has no gradient (issue 45): 4 shards, not 8.
    assert plan["activation_checkpointing"] and plan["reshard_after_forward"] and plan["shards"] == 4, plan
    assert plan["peak_gib"] <= plan["usable_gib"] - memory.MARGIN_GIB, plan
    at_batch_2 = run_program("dev", {**SEVENTY_B, "trainBatchSize": 2}).exports["jobMemoryPlan"]
    assert at_batch_2["fits"] and at_batch_2["batch_size"] == 2 and at_batch_2["shards"] == 8, at_batch_2
    assert at_batch_2["peak_gib"] <= at_batch_2["usable_gib"] - memory.MARGIN_GIB, at_batch_2


def test_a_70b_model_in_full_is_refused_on_dev_naming_qlora():
    message = str(run_program_expecting_error("dev", {**SEVENTY_B, "trainMethod": "full"}).error)
    allowed = message.split("allowed: ", 1)[1]
    assert allowed.startswith("trainMethod: qlora ("), f"the first method that fits, qlora (not lora): {message}"
    at_batch_2 = str(run_program_expecting_error("dev", {**SEVENTY_B, "trainMethod": "full",
                                                         "trainBatchSize": 2}).error)
    assert at_batch_2.split("allowed: ", 1)[1].startswith("trainMethod: qlora ("), (
        f"qlora fits the stack's default batch of 2: {at_batch_2}")


@pytest.mark.parametrize("stack", ["p4d", "p5"])
def test_lora_on_a_70b_model_passes_where_bf16_shards_fit(stack):
    plan = run_program(stack, {**SEVENTY_B, "trainMethod": "lora", "trainBatchSize": 2}).exports["jobMemoryPlan"]
    assert plan["fits"] and plan["method"] == "lora", f"{stack}: {plan}"


def test_lora_is_named_before_qlora_where_it_fits():
    message = str(run_program_expecting_error("p4d", {**SEVENTY_B, "trainMethod": "full"}).error)
    assert "allowed: trainMethod: lora (" in message, message


# ---- the layout and the step-time model -----------------------------------------------------------------------------

def test_adapters_reduce_only_their_gradients_and_gather_the_base_as_stored():
    config = architectures.published("Qwen/Qwen2.5-1.5B")
    full_units, _ = layout.method_units(config, "full")
    units, costs = layout.method_units(config, "lora")
    collectives = layout.step_collectives(units, (8,), "fp32", costs=costs)
    reduced = sum(c.size for c in collectives if c.operation == "reduce_scatter")
    adapters = adapter_memory.adapter_parameters(config, 16)
    assert adapters * 4 <= reduced <= adapters * 4 * 1.01, "fp32 reduce-scatter of the adapters alone (padding aside)"
    gathered = sum(c.size for c in collectives if c.operation == "all_gather")
    full_gathered = sum(c.size for c in layout.step_collectives(full_units, (8,), "fp32")
                        if c.operation == "all_gather")
    assert gathered == pytest.approx(full_gathered + 2 * adapters, rel=1e-3), "the base in bf16, adapters with it"
    nf4_units, nf4_costs = layout.method_units(config, "qlora")
    nf4 = sum(c.size for c in layout.step_collectives(nf4_units, (8,), "fp32", costs=nf4_costs)
              if c.operation == "all_gather")
    assert nf4 < 0.5 * gathered, "NF4 decoder linears gather about a quarter of bf16's bytes"
    assert not any(c.operation == "reduce_scatter" and c.size == 0 for c in collectives), "no empty reduction"


def test_auto_layout_for_adapters_counts_the_frozen_base():
    config = llama_70b()
    units, costs = layout.method_units(config, "lora")
    plan = layout.choose("auto", "auto", 8, 4, units, node_gbytes_per_s=10.0, compute_seconds=20.0,
                         gpu_memory_bytes=22888 * 2**20, costs=costs)
    # HSDP would keep the bf16 base over 4 GPUs: 141 GB / 4, over half an L4.
    assert plan.sharding == "full" and "frozen base" in plan.reason and plan.reduce_dtype == "fp32", plan
    assert layout.state_bytes(units, costs) == pytest.approx(
        2 * memory.parameter_count(config) + 16 * adapter_memory.adapter_parameters(config, 16))
    small_units, small_costs = layout.method_units(architectures.published("Qwen/Qwen2.5-7B"), "lora")
    between = {sharding: layout.total_traffic(layout.step_collectives(
        small_units, layout.mesh_shape(sharding, 8, 4), "fp32", costs=small_costs), 2, 4).inter_node_bytes_per_node
        for sharding in ("full", "hybrid")}
    assert between["hybrid"] < 0.02 * between["full"], f"HSDP sends only the adapters between nodes: {between}"


def test_a_frozen_base_costs_two_thirds_of_full_trainings_flops():
    config = architectures.published("Qwen/Qwen2.5-7B")
    from workload.model import flops

    head = config["vocab_size"] * config["hidden_size"]
    matmul = memory.parameter_count(config) - head  # untied: the input embedding is a lookup
    adapters = adapter_memory.adapter_parameters(config, 16)
    full = flops.flops_per_token(config, 2048, "full")
    lora = flops.flops_per_token(config, 2048, "lora", 16)
    attention = 12 * 28 * 3584 * 2048
    assert full - lora == pytest.approx(2 * matmul - 6 * adapters), "no weight gradient for any frozen weight"
    assert head > 0
    assert 0.6 < (lora - attention) / (full - attention) < 0.75
    seconds = adapter_compute.dequantize_seconds(10**9, "L4", activation_checkpointing=True)
    assert seconds == pytest.approx(3 * 1e9 * (adapter_memory.NF4_BYTES_PER_PARAMETER + 2) / (300e9 * 0.7))
    assert adapter_compute.dequantize_seconds(10**9, "TPU", activation_checkpointing=False) == 0.0


def test_the_step_model_predicts_the_dev_stacks_methods():
    from bench.model import step_model

    hardware = step_model.stack_hardware("dev")
    lines = {(line["model"], line["method"]): line
             for line in (step_model.method_line(model, method, hardware, batch, 2048)
                          for model, method, batch in (("Qwen/Qwen2.5-7B", "full", 2), ("Qwen/Qwen2.5-7B", "lora", 2),
                                                       (LLAMA_70B, "qlora", 1), (LLAMA_70B, "full", 1)))}
    seven_full, seven_lora = lines["Qwen/Qwen2.5-7B", "full"], lines["Qwen/Qwen2.5-7B", "lora"]
    assert seven_lora["tokens_per_s"] > seven_full["tokens_per_s"], "fewer FLOPs and almost no gradient traffic"
    assert seven_lora["inter_node_gb_per_node"] < seven_full["inter_node_gb_per_node"] / 10, lines
    seventy = lines[LLAMA_70B, "qlora"]
    assert seventy["fits"] and seventy["tokens_per_s"] > 0 and not lines[LLAMA_70B, "full"]["fits"], lines
    assert seventy["step_s"] == pytest.approx(8 * 2048 / seventy["tokens_per_s"], rel=0.01)


def test_the_job_plan_takes_the_jobs_method():
    from workload.config import TrainConfig
    from workload.model import memory_plan

    cfg = TrainConfig(model_id=LLAMA_70B, batch_size=1, method="qlora")
    plan = memory_plan.for_job(cfg, llama_70b(), world_size=8, ranks_per_node=4, gpu_memory_mib=22888,
                               compiled=True)
    assert plan.fits and plan.method == "qlora" and plan.as_dict()["method"] == "qlora", plan
    full = memory_plan.for_job(dataclasses.replace(cfg, method="full"), llama_70b(), world_size=8, ranks_per_node=4,
                               gpu_memory_mib=22888, compiled=True)
    assert not full.fits and math.isclose(full.estimate.parameters, plan.estimate.parameters)


def test_a_worker_plans_an_adapter_jobs_layout_from_its_config():
    import torch

    from workload.config import TrainConfig
    from workload.model.build import build_model

    cfg = TrainConfig(model_config="tiny", method="lora", ranks_per_node=4, seq_len=256)
    model = build_model(cfg, torch.device("meta"))
    plan = parallel.plan_for_worker(cfg, model, torch.device("cpu"), 8, 0, 4, None)
    assert plan.reduce_dtype == "fp32" and "only the adapters' gradients" in plan.reason, plan
    full = parallel.plan_for_worker(dataclasses.replace(cfg, method="full"), model, torch.device("cpu"), 8, 0, 4, None)
    assert "adapters" not in full.reason, full
