"""A step-time model: the tokens/s each sharding strategy should reach on each stack's hardware, against the recipe.

    python -m bench.model.step_model        # prints JSON lines and writes them to bench/results/step_model.jsonl

No GPU needed. The bytes come from the collectives each step issues: workload.model.layout.step_collectives for the
project's FSDP2, recipe_collectives (bench/model/step_shapes.py) for the recipe's FSDP1; tests/runs/test_parallel.py records
both on a gloo mesh and checks them against these functions. The compute comes from the H200 measurement
(bench/results), scaled by each GPU's dense bf16 peak at the MFU measured there. The bandwidths come from the instance
facts (tests/support/instance_facts.py) and the assumptions in bench/model/step_inputs.py. Every assumption is written next to the
figures. The lines below are of Qwen2.5-1.5B, the model measured; predict takes any decoder's shape from its
config.json (config_shape: its FSDP units and FLOPs per token from workload.model.memory, without building it) at the
same measured MFU and split (bench/model/model_table.py, docs/models.md's model x stack table, uses it so).

One step, per GPU (all GPUs in step):
- compute: tokens x FLOPs per token / (peak x MFU), split into forward, backward and optimizer (clipping + AdamW)
  by the shares bench/record/emulate_rank.py measured on the real step (SPLIT). The MFU on each GPU is the H200's
  batch-8 one scaled by a compute factor per GPU (compute_scale): for the L4, its published sustained bf16 GEMM
  rate over the H200's measured one; for the H100, the H200's own MFU at the same per-GPU batch.
- communication: each collective sends busbw-factor x S bytes per rank (nccl-tests' convention); between nodes at a
  node's bandwidth, inside a node at the GPUs' link bandwidth; a collective over all ranks runs at its slowest link.
- overlap: FSDP's prefetch hides the forward's gathers under the forward's compute, and the backward's gathers and
  reductions under the backward's compute. With two-level collectives (workload.model.two_level) the step's first
  gather is issued under the previous step's optimizer instead. The step's first gather (nothing to compute yet) and its last reduction
  (nothing left to compute) are exposed. With k micro-batches, the gathers overlap the first micro-batch's forward,
  the reductions the last one's backward, and the k-1 compute phases in between hide nothing.
      step = first + max(forward compute, forward comm - first) + middle compute
             + max(backward compute, backward comm - last) + last + optimizer
- links: "concurrent" (the headline) lets the traffic between nodes and the traffic inside a node run at once, since
  FSDP2 reduce-scatters (inside a node under HSDP) and all-reduces (between nodes) on separate streams: a phase's
  communication takes as long as its busier link's share. "serialized" adds them: a pessimistic bound, in the
  range of the G-family stacks only, whose NCCL SHM traffic and EFA traffic both cross host memory on the same
  PCIe links (no GPUDirect RDMA there).
- every uncertain input is a range (Assumptions; LOW_HIGH): each stack's line gives the central prediction and
  the lowest and highest over the corners of those ranges.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import replace

from bench.model import offload as offload_figures
from bench.model import step_shapes
from bench.model.step_inputs import (
    CENTRAL,
    G_FAMILY,
    H200_BATCH,
    H200_BATCH2_TOKENS_PER_S,
    H200_SEQ_LEN,
    H200_SUSTAINED_GEMM_TFLOPS,
    H200_TOKENS_PER_S,
    INTRA_NODE_GBYTES_PER_S,
    L4_PEAK_TFLOPS,
    LOW_HIGH,
    MODEL_CONFIG,
    RECOMPUTE_SHARE,
    RESULTS,
    SPLIT,
    STACK_HARDWARE,
    STRATEGIES,
    Assumptions,
    Hardware,
    Split,
    Strategy,
    assumed_links,
    stack_hardware,
)
from bench.model.step_shapes import ModelShape, bytes_by_collective, collectives, default_shape, meta_model
from workload.model import architectures, layout, memory, memory_plan
from workload.model.adapters import compute as adapter_compute
from workload.model.flops import model_flops_utilization
from workload.model.gpu_peaks import peak_flops_of
from workload.model.layout import Collective, total_traffic
from workload.model.memory import GIB


def h200_mfu(step: str, tokens_per_s: dict = H200_TOKENS_PER_S) -> float:
    flops = default_shape().token_flops(H200_SEQ_LEN)
    return model_flops_utilization(tokens_per_s[step], flops, peak_flops_of("H200"), 1)


def compute_scale(step: str, gpu_name: str, assumptions: Assumptions) -> float:
    """The factor on the H200's batch-8 MFU for `step` on `gpu_name` at the stacks' per-GPU batch.

    L4: its sustained GEMM share of peak over the H200's (the step is matmul-bound on both). H100: the H200's own
    MFU at batch 2 (the same chip; two sequences do not fill it). L40S and A100: the batch-8 MFU (assumed: they have
    a third or less of the H200's FLOP/s, so two sequences fill them about as eight fill an H200)."""
    if gpu_name == "L4":
        return (assumptions.l4_gemm_tflops / L4_PEAK_TFLOPS) / (H200_SUSTAINED_GEMM_TFLOPS / 989.0)
    if gpu_name == "H100":
        return H200_BATCH2_TOKENS_PER_S[step] / H200_TOKENS_PER_S[step]
    return 1.0


def gemm_cases(gpu_name: str) -> dict[str, float]:
    """The compute cases bench/record/emulate_rank.py scales its delays for: the L4's GEMM range, else the central
    one."""
    if gpu_name != "L4":
        return {"central compute": CENTRAL.l4_gemm_tflops}
    low, high = LOW_HIGH["l4_gemm_tflops"]
    return {f"L4 at {low:g} TFLOP/s": low, f"L4 at {CENTRAL.l4_gemm_tflops:g} TFLOP/s (central)": CENTRAL.l4_gemm_tflops,
            f"L4 at {high:g} TFLOP/s": high}


def compute_seconds(strategy: Strategy, hardware: Hardware, batch_size: int, seq_len: int,
                    assumptions: Assumptions = CENTRAL, shape: ModelShape | None = None) -> float:
    """One step's compute per GPU (all micro-batches) of `strategy` on `hardware`'s GPU, of Qwen2.5-1.5B unless
    `shape` says another model, without activation checkpointing's recomputation (predict adds it)."""
    flops = (shape or default_shape()).token_flops(seq_len)
    mfu = h200_mfu(strategy.step) * compute_scale(strategy.step, hardware.gpu_name, assumptions)
    return batch_size * strategy.batch_multiple * seq_len * flops / (peak_flops_of(hardware.gpu_name) * mfu)


def link_seconds(parts: list[Collective], hardware: Hardware) -> tuple[float, float]:
    """Seconds the collectives keep (the network between nodes, the links inside a node) busy."""
    traffic = total_traffic(parts, hardware.nodes, hardware.gpus_per_node)
    return (traffic.inter_node_bytes_per_node / (hardware.inter_node_gbytes_per_s * 1e9),
            traffic.intra_node_bytes_per_gpu / (hardware.intra_node_gbytes_per_s * 1e9))


def comm_seconds(parts: list[Collective], hardware: Hardware, concurrent: bool) -> float:
    """Seconds `parts` take on `hardware`'s links: a phase's links busy at once (concurrent) or in turn."""
    if concurrent:
        return max(link_seconds(parts, hardware))
    # One collective at a time, each at its slowest link.
    return sum(max(link_seconds([part], hardware)) for part in parts)


@dataclasses.dataclass(frozen=True)
class StepCompute:
    """One step's compute per GPU, seconds: what predict times and what bench.record.emulate_rank scales its delays
    to (its target), so the emulation and the prediction it checks start from the same figure."""

    forward: float
    backward: float
    optimizer: float
    recompute: float = 0.0
    """Activation checkpointing's second forward of the checkpointed layers, their dequantization included."""
    copy_back: float = 0.0
    """Offloaded activations' host-to-GPU copies in backward that the compute waits for (bench.model.offload)."""

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.optimizer + self.recompute + self.copy_back


def step_compute(strategy: Strategy, hardware: Hardware, batch_size: int, seq_len: int,
                 assumptions: Assumptions = CENTRAL, shape: ModelShape | None = None, split: Split | None = None,
                 compute_factor: float = 1.0, activation_checkpointing: bool = False,
                 offload: offload_figures.Offload | None = None) -> StepCompute:
    """The step's compute: model FLOPs at the GPU's MFU (compute_seconds, times `compute_factor`), qlora's
    dequantization (workload.model.adapters.compute), split into forward, backward and optimizer; with activation
    checkpointing each checkpointed layer's forward again (RECOMPUTE_SHARE, or the shape's recompute_share, of the
    forward and backward compute, dequantization included). `offload`'s layers (a lever of the emulation,
    bench.model.offload) skip checkpointing: the recomputation shrinks by their share of the layers and their saved
    activations' copies back to the GPU that the compute waits for are added; nothing else changes."""
    shape = shape or default_shape()
    compute = compute_seconds(strategy, hardware, batch_size, seq_len, assumptions, shape) * compute_factor
    if shape.quantized_parameters:
        # qlora's dequantization: per step, memory-bound; a pass per forward and backward here, the recomputed
        # forward's pass in `recompute` below.
        compute += adapter_compute.dequantize_seconds(shape.quantized_parameters, hardware.gpu_name,
                                                      activation_checkpointing=False)
    split = split or SPLIT[strategy.step]
    optimizer = split.optimizer * compute
    if shape.method != "full":
        # AdamW and clipping over the adapters only: their share of the parameters full training updates.
        optimizer *= shape.adapter_parameters / shape.matmul_parameters
    forward_share = split.forward / (split.forward + split.backward)
    recompute = copy_back = 0.0
    if activation_checkpointing:
        offloaded = offload.layers if offload else 0
        recompute = shape.recompute_share(seq_len) * (compute - optimizer) * (shape.layers - offloaded) / shape.layers
        if offloaded:
            per_layer = (1 - forward_share) * (compute - optimizer) / (shape.layers * strategy.grad_accum_steps)
            copy_back = offload_figures.copy_back_seconds(
                shape.config, offload, batch_size * strategy.batch_multiple // strategy.grad_accum_steps, seq_len,
                hardware.gpu_name, strategy.grad_accum_steps, backward_per_layer_s=per_layer)
    return StepCompute(forward_share * (compute - optimizer), (1 - forward_share) * (compute - optimizer), optimizer,
                       recompute, copy_back)


def predict(strategy: Strategy, hardware: Hardware, batch_size: int, seq_len: int,
            assumptions: Assumptions = CENTRAL, split: Split | None = None, links_override=None,
            compute_factor: float = 1.0, hide_under_step: bool = False, shape: ModelShape | None = None,
            activation_checkpointing: bool = False, reshard_after_forward: bool = False,
            offload: offload_figures.Offload | None = None) -> dict:
    """Step time and tokens/s of `strategy` on `hardware` (documented bandwidths; `assumptions` scale them):
    batch_size x batch_multiple sequences of seq_len tokens per GPU per step, in grad_accum_steps micro-batches; of
    Qwen2.5-1.5B unless `shape` says another model (its FLOPs and collectives; the split and MFU are the measured
    ones). `links_override` (bench.record.emulate_rank.Links) gives the bandwidths directly; `compute_factor` scales the
    compute (fp8's measured gain). `hide_under_step` is a lever the workload does not have: every collective but the
    exposed two hides under the whole step's compute (reductions under the optimizer and the next forward too).
    The compute is step_compute's (activation checkpointing's recomputation and the offloaded layers' copies in
    backward); with reshard_after_forward backward gathers every layer again."""
    parts_of_compute = step_compute(strategy, hardware, batch_size, seq_len, assumptions, shape, split,
                                    compute_factor, activation_checkpointing, offload)
    compute, optimizer = parts_of_compute.total, parts_of_compute.optimizer
    forward_total = parts_of_compute.forward
    backward_total = parts_of_compute.backward + parts_of_compute.recompute + parts_of_compute.copy_back
    links = assumed_links(hardware, assumptions)
    if links_override is not None:
        links = replace(hardware, inter_node_gbytes_per_s=links_override.inter_node_gbytes_per_s,
                        intra_node_gbytes_per_s=links_override.intra_node_gbytes_per_s)
    micro_forward, micro_backward = (total / strategy.grad_accum_steps for total in (forward_total, backward_total))
    parts = collectives(strategy, hardware, shape, reshard_after_forward)
    phases = {phase: [part for part in parts if part.phase == phase] for phase in ("forward", "backward")}
    first = [part for part in parts if part.exposed and part.phase == "forward"]
    last = [part for part in parts if part.exposed and part.phase == "backward"]
    concurrent = assumptions.links == "concurrent"
    # The exposed tail is a chain (HSDP's all-reduce waits for its reduce-scatter): one after the other.
    exposed_first, exposed_last = (comm_seconds(group, links, False) for group in (first, last))
    forward = max(micro_forward, comm_seconds(phases["forward"], links, concurrent) - exposed_first)
    backward = max(micro_backward, comm_seconds(phases["backward"], links, concurrent) - exposed_last)
    middle = compute - optimizer - micro_forward - micro_backward
    step = exposed_first + forward + middle + backward + exposed_last + optimizer
    if hide_under_step:
        step = exposed_first + exposed_last + max(compute, comm_seconds(parts, links, concurrent) - exposed_first
                                                  - exposed_last)
    if strategy.sharding == layout.TWO_LEVEL:
        # workload.model.two_level.optimizer_step updates the root and layer 0 first and gathers them under the rest
        # of the update: the step's first gather hides under the optimizer.
        step -= min(optimizer, exposed_first)
    traffic = total_traffic(parts, hardware.nodes, hardware.gpus_per_node)
    world = hardware.nodes * hardware.gpus_per_node
    return {
        "compute_s": compute,
        "step_s": step,
        "tokens_per_s": batch_size * strategy.batch_multiple * seq_len * world / step,
        "inter_node_gb_per_node": traffic.inter_node_bytes_per_node / 1e9,
        "intra_node_gb_per_gpu": traffic.intra_node_bytes_per_gpu / 1e9,
        "mfu": h200_mfu(strategy.step) * compute_scale(strategy.step, hardware.gpu_name, assumptions),
    }


def corners(hardware: Hardware) -> list[Assumptions]:
    """Every combination of the ranges' ends that applies to `hardware` (the L4's GEMM rate on L4s, the SHM range
    and serialized links on the G family), with the central values elsewhere."""
    names = ["network_efficiency"]
    if hardware.gpu_name == "L4":
        names.append("l4_gemm_tflops")
    if hardware.instance_type in G_FAMILY:
        names += ["g_intra_node_gbytes_per_s", "links"]
    cases = [CENTRAL]
    for name in names:
        cases = [replace(case, **{name: value}) for case in cases for value in LOW_HIGH[name]]
    return cases


def predict_range(strategy: Strategy, hardware: Hardware, batch_size: int, seq_len: int, **levers) -> dict:
    """Central tokens/s and speed-up over the recipe, and their lowest and highest over the ranges' corners (the
    recipe under the same assumptions in each corner)."""
    central = predict(strategy, hardware, batch_size, seq_len, **levers)
    recipe = predict(STRATEGIES[0], hardware, batch_size, seq_len)
    tokens, speedups = [], []
    for case in corners(hardware):
        ours = predict(strategy, hardware, batch_size, seq_len, case, **levers)["tokens_per_s"]
        tokens.append(ours)
        speedups.append(ours / predict(STRATEGIES[0], hardware, batch_size, seq_len, case)["tokens_per_s"])
    return {"tokens_per_s": round(central["tokens_per_s"]),
            "tokens_per_s_range": [round(min(tokens)), round(max(tokens))],
            "speedup_vs_recipe": round(central["tokens_per_s"] / recipe["tokens_per_s"], 3),
            "speedup_vs_recipe_range": [round(min(speedups), 3), round(max(speedups), 3)],
            "step_s": round(central["step_s"], 4), "compute_s": round(central["compute_s"], 4),
            "mfu": round(central["mfu"], 3)}


def auto_strategy(hardware: Hardware, batch_size: int, seq_len: int, shape: ModelShape | None = None,
                  requested: str = "auto") -> tuple[Strategy, layout.Plan]:
    """What the workload's --sharding `requested` --reduce_dtype auto picks on this hardware
    (workload.model.layout.choose with the figures a worker has: the instance's bandwidth, its compute estimate at
    ASSUMED_MFU, the GPU's memory)."""
    shape = shape or default_shape()
    compute = (batch_size * seq_len * shape.token_flops(seq_len)
               / (peak_flops_of(hardware.gpu_name) * layout.ASSUMED_MFU))
    plan = layout.choose(requested, "auto", hardware.nodes * hardware.gpus_per_node, hardware.gpus_per_node,
                         list(shape.units), node_gbytes_per_s=hardware.inter_node_gbytes_per_s,
                         bandwidth_source="instance facts", compute_seconds=compute,
                         gpu_memory_bytes=int(hardware.gpu_memory_gib * GIB), costs=shape.costs)
    name = {("full", "fp32"): "project-full", ("full", "bf16"): "full-bf16", ("hybrid", "fp32"): "hybrid",
            ("hybrid", "bf16"): "hybrid-bf16", ("two-level", "fp32"): "two-level",
            ("two-level", "bf16"): "two-level-bf16"}[plan.sharding, plan.reduce_dtype]
    return next(strategy for strategy in STRATEGIES if strategy.name == name), plan


def memory_lines(hardware: Hardware, batch_size: int, seq_len: int) -> list[dict]:
    """Projected peak per GPU of the project's layouts on this stack (workload.model.memory.estimate, the preview's and
    the job's projection, compiled as the job runs on a GPU), with accumulation's unsharded gradients."""
    config = architectures.published("Qwen/Qwen2.5-1.5B")
    usable = memory.usable_gib(round(hardware.gpu_memory_gib * 1024))
    lines = []
    for strategy in STRATEGIES:
        if strategy.step == "recipe":
            continue
        shards = hardware.gpus_per_node if strategy.sharding == "hybrid" else hardware.nodes * hardware.gpus_per_node
        micro = batch_size * strategy.batch_multiple // strategy.grad_accum_steps
        estimate = memory.estimate(config, micro_batch=micro, seq_len=seq_len, shards=shards,
                                   grad_accum_steps=strategy.grad_accum_steps, reduce_dtype=strategy.reduce_dtype,
                                   compiled=True, ranks=hardware.nodes * hardware.gpus_per_node)
        lines.append({"stack": hardware.name, "memory": strategy.name, "shards": shards,
                      "micro_batch_sequences": micro,
                      "unsharded_accumulated_gradients_gib": round(estimate.accumulated_gradients_gib, 2),
                      "projected_peak_gib": round(estimate.peak_gib, 2), "usable_gib": round(usable, 1),
                      "margin_gib": round(usable - estimate.peak_gib, 2),
                      "fits": memory.fits(estimate.peak_gib, usable)})
    return lines


# issue 32's speed lines: the models and methods the dev stack's tokens/s are predicted for, each at the per-GPU batch
# its memory plan takes (the 70B's qlora plan fits 1 x 2048 on an L4, not 2: docs/seventy-b.md).
METHOD_CASES = (("Qwen/Qwen2.5-1.5B", ("full", "lora", "qlora"), None), ("Qwen/Qwen2.5-7B", ("full", "lora", "qlora"),
                                                                          None),
                ("meta-llama/Llama-3.3-70B-Instruct", ("full", "lora", "qlora"), 1))


def method_line(model_id: str, method: str, hardware: Hardware, batch_size: int, seq_len: int) -> dict:
    """The memory plan (workload.model.memory_plan.choose, the job's and the preview's) of `model_id` trained by
    `method` on `hardware`, and predict's tokens/s for it with --sharding auto's layout: FLOPs of a frozen base
    (workload.model.adapters.compute), the frozen base's gathers and the adapters' reductions, qlora's
    dequantization."""
    config = architectures.published(model_id)
    world = hardware.nodes * hardware.gpus_per_node
    plan = memory_plan.choose(config, batch_size=batch_size, seq_len=seq_len, world_size=world,
                              ranks_per_node=hardware.gpus_per_node,
                              gpu_memory_mib=round(hardware.gpu_memory_gib * 1024), reduce_dtype="auto",
                              method={"method": method})
    line = {"stack": hardware.name, "model": model_id, "method": method, "per_gpu_batch": batch_size,
            "fits": plan.fits, "peak_gib": round(plan.peak_gib, 1), "plan": plan.describe()}
    if not plan.fits:
        return line
    shape = step_shapes.config_shape(config, method)
    strategy, layout = auto_strategy(hardware, plan.micro_batch, seq_len, shape, requested=plan.settings.sharding)
    strategy = replace(strategy, grad_accum_steps=plan.settings.grad_accum_steps)
    figures = predict(strategy, hardware, batch_size, seq_len, shape=shape,
                      activation_checkpointing=plan.settings.activation_checkpointing,
                      reshard_after_forward=plan.settings.reshard_after_forward)
    return {**line, "layout": layout.describe(), "tokens_per_s": round(figures["tokens_per_s"]),
            "step_s": round(figures["step_s"], 2), "compute_s": round(figures["compute_s"], 2),
            "flops_per_token": shape.token_flops(seq_len),
            "inter_node_gb_per_node": round(figures["inter_node_gb_per_node"], 2)}


def method_lines(stack: str, batch_size: int, seq_len: int) -> list[dict]:
    hardware = stack_hardware(stack)
    return [method_line(model_id, method, hardware, batch or batch_size, seq_len)
            for model_id, methods, batch in METHOD_CASES for method in methods]


def assumptions(batch_size: int, seq_len: int) -> dict:
    return {
        "assumptions": "inputs of every line below",
        "model": MODEL_CONFIG,
        "parameters": sum(parameter.numel() for parameter in meta_model().parameters()),
        "per_gpu_batch": f"{batch_size} x {seq_len} tokens (Pulumi.yaml's trainBatchSize and trainSeqLen), the "
                         "recipe's and every strategy's unless its batch_multiple says otherwise",
        "compute": f"measured on 1 H200 at {H200_BATCH} x {H200_SEQ_LEN} tokens: {H200_TOKENS_PER_S} tokens/s "
                   f"(bench/results/step_bench-h200-2026-11-29.log), MFU recipe {h200_mfu('recipe'):.3f}, project "
                   f"{h200_mfu('project'):.3f} against {peak_flops_of('H200'):.3g} FLOP/s, times "
                   "compute_scale per GPU: L4 (its sustained GEMM share of peak) / (the H200's, "
                   f"{H200_SUSTAINED_GEMM_TFLOPS:g} of 989 TFLOP/s in the step's profile); H100 the H200's batch-2 "
                   f"MFU ({H200_BATCH2_TOKENS_PER_S} tokens/s, step_bench-h200-2026-12-01-batch2.log); L40S, A100 1.0",
        "central": dataclasses.asdict(CENTRAL),
        "ranges": LOW_HIGH,
        "sources": {
            "l4_gemm_tflops": "zzc0721/torch-performance-test-data issue #120: square bf16 matmuls of 4096, 8192 and "
                              "10240 on an L4 at 54.91, 59.40 and 56.90 TFLOP/s, 45-49% of its 121 TFLOP/s dense "
                              "peak (72 W power cap); the step's GEMMs are of those sizes (70.89 at 2048 left out)",
            "network_efficiency": "no GPUDirect RDMA on G-family instances (aws/aws-ofi-nccl#547): EFA traffic is "
                                  "staged through host memory; 70-90% of the documented figure, which AWS gives per "
                                  "direction",
            "g_intra_node_gbytes_per_s": "g6/g6e have no usable PCIe P2P, so NCCL uses SHM through host DRAM, on the "
                                         "same PCIe links as EFA; no published figure: 6-16 GB/s (16: nccl-tests' "
                                         "P2P order on PCIe, NVIDIA/nccl-tests#128, optimistic)",
            "links": "serialized in the range of the G family only (SHM and EFA share host memory and PCIe)",
        },
        "split_forward_backward_optimizer": {step: dataclasses.astuple(split) for step, split in SPLIT.items()},
        "split_source": "bench/record/emulate_rank.py, compute-only runs at the stacks' per-GPU batch",
        "activation_checkpointing": f"backward recomputes each layer's forward: {RECOMPUTE_SHARE:.3f} more of the "
                                    "forward and backward compute (2 of 6 FLOPs per parameter per token)",
        "intra_node_gbytes_per_s": {**INTRA_NODE_GBYTES_PER_S, **{name: "g_intra_node_gbytes_per_s"
                                                                  for name in G_FAMILY}},
        "algorithms": "NCCL rings: per rank, busbw factor x S (all-reduce 2(n-1)/n, all-gather and reduce-scatter "
                      "(n-1)/n); a ring over all ranks crosses each node boundary once per direction",
        "overlap": "first gather and last reduction exposed; the rest hidden under forward (gathers) and backward "
                   "(gathers, reductions) compute up to its length; the optimizer hides nothing; with k "
                   "micro-batches only the first forward and the last backward hide anything. "
                   "bench/record/emulate_rank.py checks this against FSDP's real streams",
        "bytes": "from the collectives each step issues: workload.model.layout.step_collectives (FSDP2) and "
                 "bench.model.step_shapes.recipe_collectives (FSDP1), checked against a recorded step on a gloo "
                 "mesh in tests/runs/test_parallel.py",
    }


def rows(batch_size: int, seq_len: int) -> list[dict]:
    from tests.support.pulumi_mocks import STACKS

    lines: list[dict] = [assumptions(batch_size, seq_len)]
    for stack in STACKS:
        hardware = stack_hardware(stack)
        world = hardware.nodes * hardware.gpus_per_node
        links = assumed_links(hardware, CENTRAL)
        hardware_text = (f"{hardware.nodes} x {hardware.gpus_per_node} {hardware.gpu_name}, central "
                         f"{links.inter_node_gbytes_per_s:g} GB/s between nodes, "
                         f"{links.intra_node_gbytes_per_s:g} GB/s inside, per direction")
        for strategy in STRATEGIES:
            figures = predict(strategy, hardware, batch_size, seq_len)
            lines.append({
                "stack": stack, "strategy": strategy.name, "description": strategy.description,
                "hardware": hardware_text, "same_global_batch": strategy.batch_multiple == 1,
                "global_batch_sequences": batch_size * strategy.batch_multiple * world,
                "grad_accum_steps": strategy.grad_accum_steps,
                **predict_range(strategy, hardware, batch_size, seq_len),
                "inter_node_gb_per_node": round(figures["inter_node_gb_per_node"], 3),
                "intra_node_gb_per_gpu": round(figures["intra_node_gb_per_gpu"], 3),
                "bytes_per_step": bytes_by_collective(collectives(strategy, hardware), hardware),
            })
        chosen, plan = auto_strategy(hardware, batch_size, seq_len)
        lines.append({"stack": stack, "strategy": f"auto: {chosen.name}", "same_global_batch": True,
                      **predict_range(chosen, hardware, batch_size, seq_len),
                      "recipe_tokens_per_s": predict_range(STRATEGIES[0], hardware, batch_size, seq_len)[
                          "tokens_per_s_range"], "plan": plan.as_dict()})
        lines.append({"stack": stack, "strategy": f"ceiling (not built): {chosen.name} with every collective but "
                                                  "the first gather and the last reduction hidden under the whole step",
                      "same_global_batch": True, **predict_range(chosen, hardware, batch_size, seq_len,
                                                                 hide_under_step=True)})
        lines += memory_lines(hardware, batch_size, seq_len)
    return lines + method_lines("dev", batch_size, seq_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args()
    from tests.support.pulumi_mocks import STACKS, stack_settings

    defaults = stack_settings(None)
    STACK_HARDWARE.write_text(json.dumps({stack: dataclasses.asdict(stack_hardware(stack)) for stack in STACKS},
                                         indent=1) + "\n")
    lines = rows(defaults["trainBatchSize"], defaults["trainSeqLen"])
    with open(args.output, "w") as file:
        for line in lines:
            file.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
