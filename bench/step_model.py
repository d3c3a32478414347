"""A step-time model: the tokens/s each sharding strategy should reach on each stack's hardware, against the recipe.

    python -m bench.step_model        # prints JSON lines and writes them to bench/results/step_model.jsonl

No GPU needed. The bytes come from the collectives each step issues: workload.parallel.step_collectives for the
project's FSDP2, recipe_collectives below for the recipe's FSDP1; tests/test_parallel.py records both on a gloo mesh
and checks them against these functions. The compute comes from the H200 measurement (bench/results), scaled by each
GPU's dense bf16 peak at the MFU measured there. The bandwidths come from the instance facts (tests/stacks.py) and
the assumptions below. Every assumption is written next to the figures.

One step, per GPU (all GPUs in step):
- compute: tokens x FLOPs per token / (peak x MFU); the forward is a third of it and the backward two thirds (2N and
  4N FLOPs per token).
- communication: each collective sends busbw-factor x S bytes per rank (nccl-tests' convention); between nodes at a
  node's bandwidth, inside a node at the GPUs' link bandwidth; a collective over all ranks runs at its slowest link.
- overlap: FSDP's prefetch hides the forward's gathers under the forward's compute, and the backward's gathers and
  reductions under the backward's compute. The step's first gather (nothing to compute yet) and its last reduction
  (nothing left to compute) are exposed. With k micro-batches, the gathers overlap the first micro-batch's forward,
  the reductions the last one's backward, and the k-1 compute phases in between hide nothing.
      step = first + max(forward compute, forward comm - first) + middle compute
             + max(backward compute, backward comm - last) + last
- links: "concurrent" (the headline) lets the traffic between nodes and the traffic inside a node run at once, since
  FSDP2 reduce-scatters (inside a node under HSDP) and all-reduces (between nodes) on separate streams: a phase's
  communication takes as long as its busier link's share. "serialized" adds them: a pessimistic bound.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from bench.step_bench import GIB, RECIPE_MIN_NUM_PARAMS
from tests.pulumi_mocks import STACKS, stack_settings
from tests.stacks import INSTANCE_FACTS
from workload import architectures, memory, parallel
from workload import model as project
from workload.config import TrainConfig
from workload.parallel import Collective, step_collectives, total_traffic

RESULTS = Path(__file__).resolve().parent / "results" / "step_model.jsonl"
MODEL_CONFIG = "qwen2.5-1.5b"
# One H200, 8 x 2048 tokens per step, median step (bench/results/step_bench-h200-2026-11-29.log; RESULTS.md).
H200_TOKENS_PER_S = {"recipe": 37_989, "project": 51_069}
H200_BATCH, H200_SEQ_LEN = 8, 2048
# The same steps at the stacks' per-GPU batch of 2 x 2048 (bench/results/step_bench-h200-2026-12-01-batch2.log):
# two sequences do not fill an H200 (MFU 0.30 and 0.22 against 0.53 and 0.40 at 8). An L4 has an eighth of its
# FLOP/s, so two sequences fill it far better; the headline scales the batch-8 MFU, and the sensitivity rows say
# what the batch-2 one would give, the pessimistic end.
H200_BATCH2_TOKENS_PER_S = {"recipe": 21_299, "project": 28_936}
# nccl-tests busbw between the GPUs of one node (GB/s); assumptions until a one-node fabric check measures them.
# L4 and L40S sit on PCIe Gen4 x16 without NVLink: of the order nccl-tests shows for such GPUs (e.g. 17 GB/s
# all-reduce busbw in NVIDIA/nccl-tests#128). A100 (NVSwitch, 600 GB/s NVLink) and H100 (900 GB/s NVLink): the
# all-reduce busbw NVIDIA's nccl-tests reach on 8 GPUs, about 230 and 450 GB/s.
INTRA_NODE_GBYTES_PER_S = {"g6.12xlarge": 16.0, "g6e.12xlarge": 16.0, "p4d.24xlarge": 230.0, "p5.48xlarge": 450.0}
# busbw between nodes as a share of the instance's documented bandwidth: the documented figure itself, until a
# cluster's fabric check measures it (the sensitivity lines show 80%).
NETWORK_EFFICIENCY = 1.0
FORWARD_SHARE = 1 / 3


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str
    step: str  # recipe | project: whose H200 MFU applies
    sharding: str  # full | hybrid
    reduce_dtype: str
    grad_accum_steps: int = 1
    batch_multiple: int = 1  # the global batch over the recipe's


STRATEGIES = (
    Strategy("recipe", "the original recipe: FSDP1 full shard over all GPUs, size-based wrap (1e7), bf16 weights "
                       "and gradients, every unit gathered in forward and again in backward", "recipe", "full", "bf16"),
    Strategy("project-full", "the project's default before this issue: FSDP2 full shard over all GPUs, weights kept "
                             "from forward to backward, fp32 gradient reduction", "project", "full", "fp32"),
    Strategy("full-bf16", "FSDP2 full shard, bf16 gradient reduction", "project", "full", "bf16"),
    Strategy("hybrid", "HSDP: FSDP2 inside each node, replicas across nodes, fp32 reduction", "project", "hybrid",
             "fp32"),
    Strategy("hybrid-bf16", "HSDP with bf16 reduction", "project", "hybrid", "bf16"),
    Strategy("hybrid-bf16-accum2", "HSDP, bf16, 2 micro-batches of half the batch: the same global batch",
             "project", "hybrid", "bf16", grad_accum_steps=2),
    Strategy("hybrid-bf16-accum4-4x", "HSDP, bf16, 4 micro-batches of the default batch: 4x the global batch",
             "project", "hybrid", "bf16", grad_accum_steps=4, batch_multiple=4),
    Strategy("project-full-accum4-4x", "FSDP2 full shard, fp32, 4 micro-batches of the default batch: 4x the "
                                       "global batch", "project", "full", "fp32", grad_accum_steps=4, batch_multiple=4),
)


@dataclass(frozen=True)
class Hardware:
    name: str
    gpu_name: str
    nodes: int
    gpus_per_node: int
    inter_node_gbytes_per_s: float
    intra_node_gbytes_per_s: float
    gpu_memory_gib: float


def stack_hardware(stack: str) -> Hardware:
    """A stack's GPU nodes from its Pulumi.<stack>.yaml over Pulumi.yaml's defaults, and their instance facts."""
    settings = stack_settings(stack)
    facts = INSTANCE_FACTS[settings["gpuInstanceType"]]
    return Hardware(stack, facts.gpu_name, settings["gpuNodeCount"], facts.gpus,
                    facts.network_gbps / 8 * NETWORK_EFFICIENCY, INTRA_NODE_GBYTES_PER_S[facts.instance_type],
                    facts.gpu_memory_mib * 2**20 / GIB)


@functools.cache
def meta_model() -> project.CausalLMWithLoss:
    """Qwen2.5-1.5B as the workload builds it, on the meta device (no memory)."""
    return project.build_model(TrainConfig(model_config=MODEL_CONFIG), torch.device("meta"))


@dataclass(frozen=True)
class ModelShape:
    """What the step's time depends on: the FSDP units' shapes, the parameters in matmuls, layers and width."""

    units: tuple
    matmul_parameters: int
    layers: int
    hidden: int

    def flops_per_token(self, seq_len: int) -> float:
        return project.flops_per_token(SimpleNamespace(num_hidden_layers=self.layers, hidden_size=self.hidden),
                                       self.matmul_parameters, seq_len)


def config_shape(config: dict) -> ModelShape:
    """Any decoder from its config.json, without building it (workload.memory.unit_shapes, which tests/test_memory.py
    checks against the model transformers builds)."""
    untied_input_embedding = 0 if config.get("tie_word_embeddings", True) else (
        config["vocab_size"] * config["hidden_size"])
    return ModelShape(tuple(memory.unit_shapes(config)), memory.parameter_count(config) - untied_input_embedding,
                      config["num_hidden_layers"], config["hidden_size"])


@functools.cache
def default_shape() -> ModelShape:
    """Qwen2.5-1.5B, the architecture the H200 measurements are of."""
    return config_shape(project.NAMED_CONFIGS[MODEL_CONFIG])


def recipe_units(module: nn.Module, min_num_params: int) -> list[tuple[str, int]]:
    """FSDP1's units under size_based_auto_wrap_policy(min_num_params), in forward (pre-)order, as (name, numel).

    The policy's walk (torch.distributed.fsdp.wrap._recursive_wrap): a module whose subtree holds at least
    min_num_params parameters is descended into; after its children, it is wrapped if the parameters its wrapped
    children did not take still number at least min_num_params (never a ModuleList or ModuleDict). Subtrees are
    counted per module, so a weight tied between the embedding and the lm_head is counted, and flattened, by both:
    FSDP1 wraps each with its own copy (recorded on the gloo mesh). The root keeps what no unit took."""
    order: list[str] = []
    wrapped: dict[str, nn.Module] = {}
    numels: dict[str, int] = {}

    def walk(name: str, current: nn.Module) -> int:
        order.append(name)
        subtree = sum(parameter.numel() for parameter in current.parameters())
        if subtree < min_num_params:
            return 0
        taken = sum(walk(f"{name}.{child_name}".lstrip("."), child) for child_name, child in current.named_children())
        if name and subtree - taken >= min_num_params and not isinstance(current, (nn.ModuleList, nn.ModuleDict)):
            wrapped[name], numels[name] = current, subtree - taken
            return subtree
        return taken

    walk("", module)
    in_units = {id(parameter) for unit in wrapped.values() for parameter in unit.parameters()}
    root = sum(parameter.numel() for parameter in module.parameters() if id(parameter) not in in_units)
    units = [(name, numels[name]) for name in order if name in wrapped]
    return ([("<root>", root)] if root else []) + units


def recipe_collectives(units: list[tuple[str, int]], world_size: int) -> list[Collective]:
    """What one step of the recipe issues: FSDP1 pads each unit's flat bf16 parameter to a multiple of the world
    size; every unit but the root is gathered in forward, freed, gathered again in backward, and reduce-scattered
    once, in bf16 (the model is bf16, without a mixed-precision policy)."""
    def padded(numel: int) -> int:
        return math.ceil(numel / world_size) * world_size

    forward = [Collective("all_gather", "world", world_size, padded(numel) * 2, "forward") for _, numel in units]
    backward = [Collective("all_gather", "world", world_size, padded(numel) * 2, "backward")
                for name, numel in units if name != "<root>"]
    backward += [Collective("reduce_scatter", "world", world_size, padded(numel) * 2, "backward")
                 for _, numel in reversed(units)]
    forward[0] = replace(forward[0], exposed=True)
    backward[-1] = replace(backward[-1], exposed=True)
    return forward + backward


def collectives(strategy: Strategy, hardware: Hardware, shape: ModelShape | None = None,
                reshard_after_forward: bool = False) -> list[Collective]:
    world = hardware.nodes * hardware.gpus_per_node
    if strategy.step == "recipe":
        return recipe_collectives(recipe_units(meta_model().lm, RECIPE_MIN_NUM_PARAMS), world)
    mesh = parallel.mesh_shape(strategy.sharding, world, hardware.gpus_per_node)
    return step_collectives((shape or default_shape()).units, mesh, strategy.reduce_dtype, reshard_after_forward)


def h200_mfu(step: str) -> float:
    flops = default_shape().flops_per_token(H200_SEQ_LEN)
    return project.model_flops_utilization(H200_TOKENS_PER_S[step], flops, project.peak_flops_of("H200"), 1)


def link_seconds(parts: list[Collective], hardware: Hardware) -> tuple[float, float]:
    """Seconds the collectives keep (the network between nodes, the links inside a node) busy."""
    traffic = total_traffic(parts, hardware.nodes, hardware.gpus_per_node)
    return (traffic.inter_node_bytes_per_node / (hardware.inter_node_gbytes_per_s * 1e9),
            traffic.intra_node_bytes_per_gpu / (hardware.intra_node_gbytes_per_s * 1e9))


def comm_seconds(parts: list[Collective], hardware: Hardware, concurrent: bool) -> float:
    if concurrent:
        return max(link_seconds(parts, hardware))
    # One collective at a time, each at its slowest link.
    return sum(max(link_seconds([part], hardware)) for part in parts)


def predict(strategy: Strategy, hardware: Hardware, batch_size: int, seq_len: int, mfu_scale: float = 1.0,
            shape: ModelShape | None = None, activation_checkpointing: bool = False,
            reshard_after_forward: bool = False) -> dict:
    """Step time and tokens/s of `strategy` on `hardware`: batch_size x batch_multiple sequences of seq_len tokens
    per GPU per step, in grad_accum_steps micro-batches; of Qwen2.5-1.5B unless `shape` says another model. With
    activation checkpointing backward recomputes each layer's forward (the compute grows by the forward's share);
    with reshard_after_forward backward gathers every layer again."""
    flops = (shape or default_shape()).flops_per_token(seq_len)
    mfu = h200_mfu(strategy.step) * mfu_scale
    tokens_per_gpu = batch_size * strategy.batch_multiple * seq_len
    compute = tokens_per_gpu * flops / (project.peak_flops_of(hardware.gpu_name) * mfu)
    recompute = FORWARD_SHARE if activation_checkpointing else 0.0
    compute *= 1 + recompute
    micro = compute / strategy.grad_accum_steps
    parts = collectives(strategy, hardware, shape, reshard_after_forward)
    phases = {phase: [part for part in parts if part.phase == phase] for phase in ("forward", "backward")}
    first = [part for part in parts if part.exposed and part.phase == "forward"]
    last = [part for part in parts if part.exposed and part.phase == "backward"]
    result = {}
    for links in ("concurrent", "serialized"):
        concurrent = links == "concurrent"
        # The exposed tail is a chain (HSDP's all-reduce waits for its reduce-scatter): one after the other.
        exposed_first, exposed_last = (comm_seconds(group, hardware, False) for group in (first, last))
        forward_share = FORWARD_SHARE / (1 + recompute)  # of the micro-batch's compute, recomputation included
        forward = max(forward_share * micro, comm_seconds(phases["forward"], hardware, concurrent) - exposed_first)
        backward = max((1 - forward_share) * micro,
                       comm_seconds(phases["backward"], hardware, concurrent) - exposed_last)
        result[links] = exposed_first + forward + (compute - micro) + backward + exposed_last
    traffic = total_traffic(parts, hardware.nodes, hardware.gpus_per_node)
    world = hardware.nodes * hardware.gpus_per_node
    return {
        "compute_s": compute,
        "step_s": result["concurrent"],
        "step_s_serialized": result["serialized"],
        "tokens_per_s": tokens_per_gpu * world / result["concurrent"],
        "tokens_per_s_serialized": tokens_per_gpu * world / result["serialized"],
        "inter_node_gb_per_node": traffic.inter_node_bytes_per_node / 1e9,
        "intra_node_gb_per_gpu": traffic.intra_node_bytes_per_gpu / 1e9,
        "mfu": mfu,
    }


def bytes_by_collective(parts: list[Collective], hardware: Hardware) -> dict:
    """GB per step by (operation, group): nccl-tests' size S summed, and what crosses the node boundary."""
    table: dict[str, dict] = {}
    for part in parts:
        key = f"{part.operation}/{part.group}"
        row = table.setdefault(key, {"count": 0, "size_gb": 0.0, "inter_node_gb_per_node": 0.0,
                                     "intra_node_gb_per_gpu": 0.0})
        traffic = total_traffic([part], hardware.nodes, hardware.gpus_per_node)
        row["count"] += 1
        row["size_gb"] += part.size / 1e9
        row["inter_node_gb_per_node"] += traffic.inter_node_bytes_per_node / 1e9
        row["intra_node_gb_per_gpu"] += traffic.intra_node_bytes_per_gpu / 1e9
    return {key: {name: round(value, 4) for name, value in row.items()} for key, row in table.items()}


def auto_strategy(hardware: Hardware, batch_size: int, seq_len: int, shape: ModelShape | None = None,
                  requested: str = "auto") -> tuple[Strategy, parallel.Plan]:
    """What the workload's --sharding `requested` --reduce_dtype auto picks on this hardware
    (workload.parallel.choose with the figures a worker has: the instance's bandwidth, its compute estimate at
    ASSUMED_MFU, the GPU's memory)."""
    shape = shape or default_shape()
    compute = (batch_size * seq_len * shape.flops_per_token(seq_len)
               / (project.peak_flops_of(hardware.gpu_name) * parallel.ASSUMED_MFU))
    plan = parallel.choose(requested, "auto", hardware.nodes * hardware.gpus_per_node, hardware.gpus_per_node,
                           list(shape.units), node_gbytes_per_s=hardware.inter_node_gbytes_per_s,
                           bandwidth_source="instance facts", compute_seconds=compute,
                           gpu_memory_bytes=int(hardware.gpu_memory_gib * GIB))
    name = {("full", "fp32"): "project-full", ("full", "bf16"): "full-bf16", ("hybrid", "fp32"): "hybrid",
            ("hybrid", "bf16"): "hybrid-bf16"}[plan.sharding, plan.reduce_dtype]
    return next(strategy for strategy in STRATEGIES if strategy.name == name), plan


def memory_lines(hardware: Hardware, batch_size: int, seq_len: int) -> list[dict]:
    """Projected peak per GPU of the project's layouts on this stack (workload.memory.estimate, the preview's and the
    job's projection, compiled as the job runs on a GPU), with accumulation's unsharded gradients."""
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


def assumptions(batch_size: int, seq_len: int) -> dict:
    return {
        "assumptions": "inputs of every line below",
        "model": MODEL_CONFIG,
        "parameters": sum(parameter.numel() for parameter in meta_model().parameters()),
        "per_gpu_batch": f"{batch_size} x {seq_len} tokens (Pulumi.yaml's trainBatchSize and trainSeqLen), the "
                         "recipe's and every strategy's unless its batch_multiple says otherwise",
        "compute": f"measured on 1 H200 at {H200_BATCH} x {H200_SEQ_LEN} tokens: {H200_TOKENS_PER_S} tokens/s "
                   f"(bench/results/step_bench-h200-2026-11-29.log), MFU recipe {h200_mfu('recipe'):.3f}, project "
                   f"{h200_mfu('project'):.3f} against {project.peak_flops_of('H200'):.3g} FLOP/s; the same MFU at "
                   "each GPU's dense bf16 peak (workload.model.PEAK_BF16_FLOPS), at this batch and with the optimizer "
                   "over all parameters as measured (sharded, each GPU updates fewer)",
        "forward_share_of_compute": FORWARD_SHARE,
        "inter_node": f"the instance's documented bandwidth (tests/stacks.py) / 8 x {NETWORK_EFFICIENCY} GB/s per "
                      "node, shared by its GPUs",
        "intra_node_gbytes_per_s": INTRA_NODE_GBYTES_PER_S,
        "intra_node_source": "assumed nccl-tests busbw: PCIe Gen4 x16 without NVLink for L4 and L40S (the order "
                             "NVIDIA/nccl-tests#128 shows, 17 GB/s), NVSwitch A100 and H100 all-reduce busbw on 8 GPUs",
        "inter_node_source": "AWS's documented instance bandwidth, Gbit/s: "
                             + ", ".join(f"{facts.instance_type} {facts.network_gbps:g}" for facts in
                                         INSTANCE_FACTS.values() if facts.instance_type in INTRA_NODE_GBYTES_PER_S),
        "algorithms": "NCCL rings: per rank, busbw factor x S (all-reduce 2(n-1)/n, all-gather and reduce-scatter "
                      "(n-1)/n); a ring over all ranks crosses each node boundary once per direction",
        "overlap": "first gather and last reduction exposed; the rest hidden under forward (gathers) and backward "
                   "(gathers, reductions) compute up to its length; with k micro-batches only the first forward "
                   "and the last backward hide anything",
        "links": "headline 'concurrent': a phase's traffic between nodes and inside a node run at once; "
                 "'serialized' adds them",
        "bytes": "from the collectives each step issues: workload.parallel.step_collectives (FSDP2) and "
                 "bench.step_model.recipe_collectives (FSDP1), checked against a recorded step on a gloo mesh in "
                 "tests/test_parallel.py",
    }


def rows(batch_size: int, seq_len: int) -> list[dict]:
    lines: list[dict] = [assumptions(batch_size, seq_len)]
    for stack in STACKS:
        hardware = stack_hardware(stack)
        recipe = predict(STRATEGIES[0], hardware, batch_size, seq_len)
        world = hardware.nodes * hardware.gpus_per_node
        hardware_text = (f"{hardware.nodes} x {hardware.gpus_per_node} {hardware.gpu_name}, "
                         f"{hardware.inter_node_gbytes_per_s:g} GB/s between nodes, "
                         f"{hardware.intra_node_gbytes_per_s:g} GB/s inside")
        for strategy in STRATEGIES:
            figures = predict(strategy, hardware, batch_size, seq_len)
            lines.append({
                "stack": stack, "strategy": strategy.name, "description": strategy.description,
                "hardware": hardware_text, "same_global_batch": strategy.batch_multiple == 1,
                "global_batch_sequences": batch_size * strategy.batch_multiple * world,
                "grad_accum_steps": strategy.grad_accum_steps,
                **{key: round(value, 4) for key, value in figures.items()},
                "predicted_speedup_vs_recipe": round(figures["tokens_per_s"] / recipe["tokens_per_s"], 3),
                "predicted_speedup_vs_recipe_serialized": round(
                    figures["tokens_per_s_serialized"] / recipe["tokens_per_s_serialized"], 3),
                "bytes_per_step": bytes_by_collective(collectives(strategy, hardware), hardware),
            })
        chosen, plan = auto_strategy(hardware, batch_size, seq_len)
        figures = predict(chosen, hardware, batch_size, seq_len)
        lines.append({
            "stack": stack, "strategy": f"auto: {chosen.name}", "predicted_speedup_vs_recipe":
                round(figures["tokens_per_s"] / recipe["tokens_per_s"], 3),
            "predicted_speedup_vs_recipe_serialized": round(
                figures["tokens_per_s_serialized"] / recipe["tokens_per_s_serialized"], 3),
            "predicted_tokens_per_s": round(figures["tokens_per_s"]), "recipe_tokens_per_s":
                round(recipe["tokens_per_s"]), "same_global_batch": True, "plan": plan.as_dict(),
        })
        lines += memory_lines(hardware, batch_size, seq_len)
        if stack == "dev":
            lines += sensitivity(hardware, chosen, batch_size, seq_len)
    return lines


def sensitivity(hardware: Hardware, chosen: Strategy, batch_size: int, seq_len: int) -> list[dict]:
    """The auto choice's speedup on dev when one assumption moves."""
    cases = {
        "L4 MFU 0.75x the H200's (its 300 GB/s memory slows the element-wise work and AdamW)": (hardware, 0.75),
        "L4 MFU 0.5x the H200's": (hardware, 0.5),
        "EFA at 80% of 40 Gbps": (replace(hardware, inter_node_gbytes_per_s=hardware.inter_node_gbytes_per_s * 0.8),
                                  1.0),
        "PCIe at 8 GB/s inside a node": (replace(hardware, intra_node_gbytes_per_s=8.0), 1.0),
    }
    # The H200's own MFU at batch 2, each step its own: a scale per step on the batch-8 MFU.
    batch2 = {step: H200_BATCH2_TOKENS_PER_S[step] / H200_TOKENS_PER_S[step] for step in H200_TOKENS_PER_S}
    cases["L4 at the H200's measured batch-2 MFU (project 0.30, recipe 0.22)"] = (hardware, batch2)
    lines = []
    for case, (varied, mfu_scale) in cases.items():
        scales = mfu_scale if isinstance(mfu_scale, dict) else {"recipe": mfu_scale, "project": mfu_scale}
        ours = predict(chosen, varied, batch_size, seq_len, scales[chosen.step])
        recipe = predict(STRATEGIES[0], varied, batch_size, seq_len, scales["recipe"])
        lines.append({"stack": hardware.name, "strategy": chosen.name, "sensitivity": case,
                      "predicted_speedup_vs_recipe": round(ours["tokens_per_s"] / recipe["tokens_per_s"], 3),
                      "predicted_speedup_vs_recipe_serialized": round(
                          ours["tokens_per_s_serialized"] / recipe["tokens_per_s_serialized"], 3)})
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args()
    defaults = stack_settings(None)
    lines = rows(defaults["trainBatchSize"], defaults["trainSeqLen"])
    with open(args.output, "w") as file:
        for line in lines:
            file.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
