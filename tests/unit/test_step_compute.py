"""bench.model.step_model.step_compute, the one compute the prediction times and the emulation scales its delays to
(bench.record.emulate_rank's target): for the 70B QLoRA dev plan it holds the recomputation and the dequantization,
and activation offloading (bench.model.offload) changes its recompute term only, besides its own copies back; the
breakdown (bench.model.step_breakdown) adds up to it, and its chosen lever is what bench.record.seventy_b measures.
The offload itself (workload.model.activation_offload) is tested in tests/unit/test_activation_offload.py."""
from __future__ import annotations

import json

import pytest

from bench.model import offload, step_breakdown, step_inputs, step_model, step_shapes
from bench.model.offload import Offload
from bench.record import seventy_b
from workload.model import architectures
from workload.model.adapters import compute as adapter_compute

MODEL = "meta-llama/Llama-3.3-70B-Instruct"


@pytest.fixture(scope="module")
def dev_plan():
    hardware = step_inputs.stack_hardware("dev")
    line = step_model.method_line(MODEL, "qlora", hardware, 2, 2048)
    assert line["fits"] and "activation checkpointing" in line["plan"], line
    shape = step_shapes.config_shape(architectures.published(MODEL), "qlora")
    strategy = next(s for s in step_inputs.STRATEGIES if s.name == "project-full")
    return hardware, shape, strategy, line


def test_the_emulation_targets_the_compute_the_prediction_times(dev_plan):
    hardware, shape, strategy, line = dev_plan
    plain = step_model.step_compute(strategy, hardware, 2, 2048, shape=shape)
    planned = step_model.step_compute(strategy, hardware, 2, 2048, shape=shape, activation_checkpointing=True)
    assert planned.total == pytest.approx(line["compute_s"], abs=0.01), "method_line's compute is step_compute's"
    predicted = step_model.predict(strategy, hardware, 2, 2048, shape=shape, activation_checkpointing=True,
                                   reshard_after_forward=True)
    assert predicted["compute_s"] == pytest.approx(planned.total)
    # What the old target (compute_seconds) left out: the recomputation and the dequantization.
    bare = step_model.compute_seconds(strategy, hardware, 2, 2048, shape=shape)
    dequantize = adapter_compute.dequantize_seconds(shape.quantized_parameters, "L4", activation_checkpointing=False)
    assert dequantize > 1.0 and planned.recompute > 0.25 * planned.total, planned
    assert plain.total == pytest.approx(bare + dequantize)
    assert planned.total == pytest.approx(bare + dequantize + planned.recompute)
    assert planned.recompute == pytest.approx(shape.recompute_share(2048) * (bare + dequantize - planned.optimizer))


def test_offloading_changes_the_recompute_term_only(dev_plan):
    hardware, shape, strategy, _ = dev_plan
    config = architectures.published(MODEL)
    host = offload.host_gib_per_gpu("g6.12xlarge", 4)
    layers = offload.offloadable_layers(config, 2, 2048, host)
    assert 0 < layers < config["num_hidden_layers"], "dev's host memory holds some of the 80 layers, not all"
    assert layers * offload.layer_bytes(config, 2, 2048) <= host * 2**30
    current, lever, prefetched = (
        step_model.step_compute(strategy, hardware, 2, 2048, shape=shape, activation_checkpointing=True,
                                offload=lever) for lever in (None, Offload(layers), Offload(layers, prefetch=True)))
    for name in ("forward", "backward", "optimizer"):
        assert getattr(lever, name) == getattr(current, name), name
    assert lever.recompute == pytest.approx(current.recompute * (80 - layers) / 80)
    assert current.copy_back == 0 and lever.copy_back == pytest.approx(
        layers * offload.layer_bytes(config, 2, 2048) / 25e9)
    # A 1.2 GB layer comes back in 0.05 s, under the 0.26 s of backward the layer after it computes.
    assert prefetched.copy_back == 0 and prefetched.recompute == lever.recompute


def test_the_selective_set_is_the_outputs_backward_needs():
    config = architectures.published(MODEL)
    # input 2h; q, k, v, o, gate, up outputs; attention's output 2q and log-sum-exp 4 x heads; not down_proj's.
    h, kv, i = 8192, 1024, 28672
    assert offload.selective_bytes_per_token(config) == 2 * h + 2 * (h + 2 * kv + h + 2 * i) + 2 * h + 4 * 64
    assert offload.layer_bytes(config, 2, 2048, saved="matmuls") < 0.7 * offload.layer_bytes(config, 2, 2048)


def test_the_breakdown_adds_up_to_the_compute_and_names_a_lever_of_15_percent():
    plan = step_breakdown.dev_plan(step_inputs.stack_hardware("dev"))
    parts = step_breakdown.parts(plan)
    summed = sum(value for name, value in parts.items() if name.endswith("_s") and name not in (
        "compute_s", "step_s", "exposed_link_s"))
    assert summed == pytest.approx(parts["compute_s"], abs=0.01)
    assert parts["compute_s"] + parts["exposed_link_s"] == pytest.approx(parts["step_s"], abs=0.002)
    assert parts["recompute_base_matmuls_s"] > 0.25 * parts["step_s"], "recomputation is the largest lever"
    lines = {line["lever"]: line for line in step_breakdown.levers(plan)}
    chosen = step_breakdown.chosen_lever(plan)
    assert chosen == Offload(36, "matmuls", True)
    line = next(line for name, line in lines.items() if name.startswith("offload (node") and chosen.describe() in name)
    assert line["gain"] >= 1.15 and line["fits_gpu"] and line["fits_host"], line
    # Every saved tensor offloaded (the lever tried first) gains under 10%; so does the pod-limit budget's selective
    # one reach under 15%: the report says so.
    assert all(line["gain"] < 1.10 for name, line in lines.items() if "every saved tensor" in name)
    assert all(not line["reaches_15_percent"] for name, line in lines.items() if not name.startswith("offload"))
    assert seventy_b.plans(smoke=False) == {"recompute (current plan)": Offload(0),
                                            "selective offload 36 layers": chosen}


def test_the_seventy_b_smoke_runs_both_plans_on_the_cpu(capsys, tmp_path):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group of another test is live in this process")
    output = tmp_path / "seventy_b.jsonl"
    seventy_b.main(["--device", "cpu", "--smoke", "--seq_len", "32", "--steps", "1", "--warmup", "0",
                    "--output", str(output)])
    out = capsys.readouterr().out
    assert '"plan": "recompute (current plan)"' in out and '"plan": "selective offload 1 layers"' in out, out
    assert '"strategy": "project-full+lora+offload1-selective"' in out, out
    assert '"error"' not in out, out
    seventy_b.main(["--compare", str(output)])
    compared = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("plan") for line in compared[:2]] == ["recompute (current plan)", "selective offload 1 layers"]
    assert compared[-1]["errors"] is None and compared[-1]["emulated_gain"] is None, "a smoke run times nothing"


def test_the_comparison_puts_the_emulated_gain_beside_the_model():
    current = {"plan": "recompute (current plan)", "tokens_per_s_per_stack": 684, "model_tokens_per_s": 689,
               "h200_step_s": 3.137, "model_compute_this_gpu_s": 3.557, "peak_memory_gib": 18.0}
    lever = {"plan": "selective offload 36 layers", "tokens_per_s_per_stack": 800, "model_tokens_per_s": 805,
             "h200_step_s": 2.9, "model_compute_this_gpu_s": 3.05, "peak_memory_gib": 18.5, "host_peak_gib": 25.3}
    line = seventy_b.compare([current, lever])
    assert line["emulated_gain"] == round(800 / 684, 3) and line["model_gain"] == round(805 / 689, 3)
    assert line["measured_compute_gain_here"] == round(3.137 / 2.9, 3) and line["reaches_15_percent"]
    assert line["host_peak_gib"] == 25.3 and line["errors"] is None
    failed = seventy_b.compare([current, {"plan": lever["plan"], "error": "AssertionError: stride"}])
    assert failed["emulated_gain"] is None and not failed["reaches_15_percent"]
    assert failed["errors"] == ["AssertionError: stride"]
