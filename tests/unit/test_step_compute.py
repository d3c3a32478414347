"""bench.model.step_model.step_compute, the one compute the prediction times and the emulation scales its delays to
(bench.record.emulate_rank's target): for the 70B QLoRA dev plan it holds the recomputation and the dequantization,
and activation offloading (bench.model.offload) changes its recompute term only, besides its own copies back. The
offload hooks (bench.common.ActivationOffload) train as the checkpointed step does, on the CPU."""
from __future__ import annotations

import pytest
import torch

from bench.common import ActivationOffload
from bench.model import offload, step_inputs, step_model, step_shapes
from bench.record import seventy_b
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import architectures
from workload.model.adapters import compute as adapter_compute
from workload.model.build import build_model
from workload.model.loss import loss_fn

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
    current, lever = (step_model.step_compute(strategy, hardware, 2, 2048, shape=shape, activation_checkpointing=True,
                                              offloaded_layers=k) for k in (0, layers))
    for name in ("forward", "backward", "optimizer"):
        assert getattr(lever, name) == getattr(current, name), name
    assert lever.recompute == pytest.approx(current.recompute * (80 - layers) / 80)
    assert current.copy_back == 0 and lever.copy_back == pytest.approx(
        layers * offload.layer_bytes(config, 2, 2048) / 25e9)
    assert seventy_b.plans(2, 2048, smoke=False) == {"recompute (current plan)": 0, f"offload {layers} layers": layers}


def test_offloaded_activations_train_as_recomputed_ones():
    cfg = TrainConfig(model_config="tiny", batch_size=2, seq_len=32, activation_checkpointing=True, compile=False)
    batch = random_batches(cfg, 512, rank=0)(0)
    grads = []
    for layers in (0, 1):
        torch.manual_seed(0)
        model = build_model(cfg, torch.device("cpu"))
        hooks = ActivationOffload(model, layers, torch.device("cpu"), 2, 32)
        hooks.MIN_BYTES = 0
        with hooks.active():
            loss_fn(model, batch).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        if layers:
            assert hooks.peak_host_bytes > 0 and hooks.held_bytes == 0, "every offloaded tensor came back"
            assert not list(model.layers)[0].gradient_checkpointing and list(model.layers)[1].gradient_checkpointing
    for plain, offloaded in zip(*grads):
        torch.testing.assert_close(plain, offloaded)


def test_the_seventy_b_smoke_runs_both_plans_on_the_cpu(capsys):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group of another test is live in this process")
    seventy_b.main(["--device", "cpu", "--smoke", "--seq_len", "32", "--steps", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert '"plan": "recompute (current plan)"' in out and '"plan": "offload 1 layers"' in out, out
    assert '"error"' not in out, out
