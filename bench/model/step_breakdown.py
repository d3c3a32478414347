"""The 70B QLoRA dev step by the step-time model, part by part, and what each lever on it would give (no GPU):

    python -m bench.model.step_breakdown          # JSON lines: the inputs, the step's parts, one line a lever

The plan is bench.record.seventy_b's: Llama-3.3-70B-Instruct, qlora, one rank of dev's 2 x 4 L4s, 2 x 2048 tokens,
the memory plan's levers (activation checkpointing, reshard_after_forward, full sharding), the forward/backward split
the H200 measured (bench/results/seventy_b-h200-2026-12-06.jsonl), the central L4 GEMM rate. Each lever's line has
the model's step and tokens/s, its gain over the current plan, and whether it fits the L4's memory and the node's
host memory; issue 45 asks for a lever of at least 15%.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from bench.model import offload, step_inputs, step_model, step_shapes
from bench.model.offload import Offload
from workload.model import architectures, flops, memory, memory_plan
from workload.model.adapters import compute as adapter_compute
from workload.model.adapters import memory as adapter_memory
from workload.model.memory import GIB

MODEL_ID = "meta-llama/Llama-3.3-70B-Instruct"
STRATEGY = "project-full"
BATCH, SEQ_LEN = 2, 2048
# The split the H200 measured on this plan (seventy_b-h200-2026-12-06.jsonl's compute-only line).
MEASURED_SPLIT = step_inputs.Split(0.34, 0.66, 0.001)
TARGET_GAIN = 1.15


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the model needs of the 70B plan: its shape, the hardware, the strategy, and the memory plan."""

    config: dict
    shape: step_shapes.ModelShape
    hardware: step_inputs.Hardware
    strategy: step_inputs.Strategy
    memory: memory_plan.MemoryPlan

    @property
    def gpu_spare_gib(self) -> float:
        """What the L4 has left under its usable memory, after the plan's peak and the allocator's margin."""
        usable = memory.usable_gib(round(self.hardware.gpu_memory_gib * 1024))
        return usable - memory.MARGIN_GIB - self.memory.peak_gib


def dev_plan(hardware: step_inputs.Hardware | None = None) -> Plan:
    hardware = hardware or step_inputs.saved_hardware("dev")
    config = architectures.published(MODEL_ID)
    chosen = memory_plan.choose(config, batch_size=BATCH, seq_len=SEQ_LEN,
                                world_size=hardware.nodes * hardware.gpus_per_node,
                                ranks_per_node=hardware.gpus_per_node,
                                gpu_memory_mib=round(hardware.gpu_memory_gib * 1024), reduce_dtype="auto",
                                method={"method": "qlora"})
    strategy = next(strategy for strategy in step_inputs.STRATEGIES if strategy.name == STRATEGY)
    return Plan(config, step_shapes.config_shape(config, "qlora"), hardware, strategy, chosen)


def predict(plan: Plan, lever: Offload | None = None, **overrides) -> dict:
    """step_model.predict of the plan, with an offload lever and any of predict's keywords overridden."""
    keywords = {"shape": plan.shape, "split": MEASURED_SPLIT, "activation_checkpointing": True,
                "reshard_after_forward": True, "offload": lever, **overrides}
    return step_model.predict(plan.strategy, plan.hardware, BATCH, SEQ_LEN, **keywords)


def parts(plan: Plan) -> dict:
    """The current step's seconds by part: the base's matmuls, the adapters', attention's (forward and backward,
    split by their FLOPs), the dequantization's passes, the recomputation (the same parts again for a layer's
    forward), the optimizer, and the link the compute does not hide."""
    compute = step_model.step_compute(plan.strategy, plan.hardware, BATCH, SEQ_LEN, shape=plan.shape,
                                      split=MEASURED_SPLIT, activation_checkpointing=True)
    step = predict(plan)["step_s"]
    bare = step_model.compute_seconds(plan.strategy, plan.hardware, BATCH, SEQ_LEN, shape=plan.shape)
    per_flop = bare / (BATCH * SEQ_LEN * plan.shape.token_flops(SEQ_LEN))  # seconds a FLOP
    tokens = BATCH * SEQ_LEN
    matmul, head = flops.matmul_parameters(plan.config), flops.head_parameters(plan.config)
    adapters, attention = plan.shape.adapter_parameters, flops.attention_flops_per_token(plan.config, SEQ_LEN)
    dequantize_pass = adapter_compute.dequantize_seconds(plan.shape.quantized_parameters, plan.hardware.gpu_name,
                                                         activation_checkpointing=False) / 2
    # The recomputation is recompute_share of (model FLOPs + two dequantization passes): split the same way, the
    # FLOPs' part by the recomputed forward's FLOPs.
    recompute_flops = 2 * (matmul - head) + 2 * adapters + attention / 3
    flops_part = compute.recompute * bare / (bare + 2 * dequantize_pass)
    line = {
        "base_matmuls_forward_s": 2 * matmul * tokens * per_flop,
        "base_matmuls_backward_s": 2 * matmul * tokens * per_flop,
        "adapters_forward_backward_s": 6 * adapters * tokens * per_flop,
        "attention_forward_backward_s": attention * tokens * per_flop,
        "dequantize_forward_s": dequantize_pass, "dequantize_backward_s": dequantize_pass,
        "recompute_base_matmuls_s": flops_part * 2 * (matmul - head) / recompute_flops,
        "recompute_adapters_s": flops_part * 2 * adapters / recompute_flops,
        "recompute_attention_s": flops_part * attention / 3 / recompute_flops,
        "recompute_dequantize_s": compute.recompute - flops_part,
        "optimizer_s": compute.optimizer, "compute_s": compute.total, "exposed_link_s": step - compute.total,
        "step_s": step, "gpu_effective_tflops": 1 / per_flop / 1e12,
    }
    return {name: round(value, 3) for name, value in line.items()}


def host_gib_cases(plan: Plan) -> dict[str, float]:
    """Pinned host memory a rank may take: bench.model.offload's figure (the node's memory less Ray's object store
    share and the ranks' processes), and the Ray worker pod's limit (infra.kubernetes.devices.worker_resources: 160
    GiB of the node's 192) less the same, the figure a Guaranteed pod is held to."""
    gpus = plan.hardware.gpus_per_node
    instance = plan.hardware.instance_type or "g6.12xlarge"
    node = offload.HOST_GIB.get(instance, 0.0)
    pod = node - (8 + node // 8)
    return {"node": offload.host_gib_per_gpu(instance, gpus),
            "pod limit": max(0.0, pod * (1 - offload.RAY_OBJECT_STORE_SHARE) / gpus - offload.RANK_PROCESS_GIB)}


def lever_line(plan: Plan, name: str, current_step: float, step_s: float, fits_gpu: bool, fits_host: bool,
               **extra) -> dict:
    tokens = BATCH * SEQ_LEN * plan.hardware.nodes * plan.hardware.gpus_per_node / step_s
    return {"lever": name, "step_s": round(step_s, 3), "tokens_per_s_per_stack": round(tokens),
            "gain": round(current_step / step_s, 3), "reaches_15_percent": current_step / step_s >= TARGET_GAIN,
            "fits_gpu": fits_gpu, "fits_host": fits_host, **extra}


def offload_lever(plan: Plan, host_gib: float, saved: str, prefetch: bool) -> Offload:
    return Offload(offload.offloadable_layers(plan.config, BATCH, SEQ_LEN, host_gib, saved=saved), saved, prefetch)


def levers(plan: Plan) -> list[dict]:
    """One line a lever the numbers allow on this plan, by the model (see each line's `how`)."""
    current = predict(plan)["step_s"]
    spare = plan.gpu_spare_gib
    lines = [lever_line(plan, "current plan (every layer recomputed)", current, current, True, True)]
    hosts = host_gib_cases(plan)
    for host_case, host in hosts.items():
        for saved, prefetch in (("all", False), ("all", True), ("matmuls", False), ("matmuls", True)):
            lever = offload_lever(plan, host, saved, prefetch)
            per_layer = offload.layer_bytes(plan.config, BATCH, SEQ_LEN, saved=saved) / GIB
            # Prefetching holds the next layer's set on the GPU beside the one computing; the offloaded layers'
            # inputs, which checkpointing kept on the GPU, move to the host with the rest.
            freed = lever.layers * memory.CHECKPOINTED_BYTES_PER_HIDDEN * plan.config["hidden_size"] * BATCH * \
                SEQ_LEN / GIB
            gpu_needs = (per_layer if prefetch else 0.0) + per_layer - offload.layer_bytes(
                plan.config, BATCH, SEQ_LEN) / GIB - freed
            lines.append(lever_line(plan, f"offload ({host_case} host budget {host:.1f} GiB): {lever.describe()}",
                                    current, predict(plan, lever)["step_s"], gpu_needs <= spare, True,
                                    layer_gib=round(per_layer, 3), host_gib=round(lever.layers * per_layer, 1)))
    # Un-recomputed layers kept on the GPU, in what the plan leaves of the L4: the selective set.
    on_gpu = int(max(0.0, spare) // (offload.layer_bytes(plan.config, BATCH, SEQ_LEN, saved="matmuls") / GIB))
    step = predict(plan, Offload(on_gpu, "matmuls", True))["step_s"] if on_gpu else current
    copy = step_model.step_compute(plan.strategy, plan.hardware, BATCH, SEQ_LEN, shape=plan.shape,
                                   split=MEASURED_SPLIT, activation_checkpointing=True,
                                   offload=Offload(on_gpu, "matmuls", True)).copy_back if on_gpu else 0.0
    lines.append(lever_line(plan, f"{on_gpu} layers un-recomputed on the GPU (selective set, no copies)", current,
                            step - copy, True, True, gpu_spare_gib=round(spare, 2)))
    dequantize_pass = adapter_compute.dequantize_seconds(plan.shape.quantized_parameters, plan.hardware.gpu_name,
                                                         activation_checkpointing=False) / 2
    # A layer's bf16 weights kept from its recomputation to its backward: one dequantization pass fewer, at a whole
    # layer's bf16 weights (not one linear's) on the GPU while it runs backward.
    layer_bf16 = 2 * adapter_memory.quantized_parameters(plan.config) / GIB
    largest = 2 * max(a * b for a, b in adapter_memory.linear_shapes(plan.config).values()) / GIB
    lines.append(lever_line(plan, "keep a layer's dequantized weights from its recomputation to its backward",
                            current, current - dequantize_pass, layer_bf16 - largest <= spare, True,
                            gpu_needs_gib=round(layer_bf16 - largest, 2), gpu_spare_gib=round(spare, 2)))
    fused = dequantize_pass * 3 * (1 - adapter_memory.NF4_BYTES_PER_PARAMETER / adapter_compute.DEQUANTIZED_BYTES_MOVED)
    lines.append(lever_line(plan, "a fused NF4 dequant-GEMM (reads NF4, writes no bf16 weight; not built)",
                            current, current - fused, True, True))
    # Same global batch in 2 micro-batches of 1: the base gathered and dequantized once a micro-batch.
    accumulate = dataclasses.replace(plan.strategy, grad_accum_steps=2)
    step = step_model.predict(accumulate, plan.hardware, BATCH, SEQ_LEN, shape=plan.shape, split=MEASURED_SPLIT,
                              activation_checkpointing=True, reshard_after_forward=True)["step_s"] + 3 * dequantize_pass
    lines.append(lever_line(plan, "2 micro-batches of 1 (same global batch)", current, step, True, True))
    usable = memory.usable_gib(round(plan.hardware.gpu_memory_gib * 1024))
    for name, batch, reshard in (("micro-batch 4 (twice the global batch)", 4, True),
                                 ("no reshard_after_forward (the base kept gathered)", BATCH, False)):
        estimate = memory.estimate(plan.config, micro_batch=batch, seq_len=SEQ_LEN,
                                   shards=plan.hardware.nodes * plan.hardware.gpus_per_node,
                                   activation_checkpointing=True, reshard_after_forward=reshard,
                                   compiled=True, method="qlora", reduce_dtype="auto")
        step = step_model.predict(plan.strategy, plan.hardware, batch, SEQ_LEN, shape=plan.shape,
                                  split=MEASURED_SPLIT, activation_checkpointing=True,
                                  reshard_after_forward=reshard)["step_s"]
        # Per BATCH sequences, so tokens/s compare.
        lines.append(lever_line(plan, name, current, step * BATCH / batch, memory.fits(estimate.peak_gib, usable),
                                True, peak_gib=round(estimate.peak_gib, 1), usable_gib=round(usable, 1)))
    return lines


def chosen_lever(plan: Plan | None = None) -> Offload:
    """The lever the emulation measures beside the current plan: the selective set offloaded, copies prefetched, as
    many layers as bench.model.offload's host budget holds."""
    plan = plan or dev_plan()
    host = offload.host_gib_per_gpu(plan.hardware.instance_type or "g6.12xlarge", plan.hardware.gpus_per_node)
    return offload_lever(plan, host, "matmuls", True)


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    plan = dev_plan()
    print(json.dumps({"plan": MODEL_ID, "memory_plan": plan.memory.describe(), "peak_gib": round(plan.memory.peak_gib, 2),
                      "gpu_spare_gib": round(plan.gpu_spare_gib, 2), "split": dataclasses.astuple(MEASURED_SPLIT),
                      "host_gib_per_gpu": {k: round(v, 1) for k, v in host_gib_cases(plan).items()}}))
    print(json.dumps({"parts": parts(plan)}))
    for line in levers(plan):
        print(json.dumps(line))


if __name__ == "__main__":
    main()
