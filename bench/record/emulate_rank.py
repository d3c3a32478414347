"""One rank of a stack's cluster, emulated on one GPU: the real training step at the cluster's world size, each
collective replaced by a timed delay on the stream that issued it.

    python3 -m bench.record.emulate_rank --output $OUT/emulate_rank.jsonl     # on one GPU (torch + transformers)
    python -m bench.record.emulate_rank --device cpu --stacks dev --strategies hybrid-bf16 --model_config tiny \\
        --seq_len 32 --steps 2                                           # a smoke run: collectives recorded, no delay
    python3 -m bench.record.emulate_rank --stacks dev --strategies recipe,hybrid,two-level-bf16 \
        --methods full,lora,qlora --central_only                         # issue 32: the adapter methods beside full

A fake process group (torch.testing._internal.distributed.fake_pg) at the cluster's world size (dev: 2 x 4 = 8,
p5: 2 x 8 = 16) stands in for NCCL, so FSDP sizes every shard, gather buffer and reduce-scatter input as rank 0 of
that cluster: the peak memory is the rank's real one. Each collective the step issues (FSDP2's all-gather,
reduce-scatter and HSDP all-reduce, FSDP1's all-gather and reduce-scatter) is intercepted: its output is filled
with this rank's data (a gather copies the rank's shard into every slot, a reduce-scatter keeps the rank's chunk),
and a delay kernel then holds the issuing stream for as long as the collective would take on the stack's links:
nccl-tests' bus bytes (workload.model.layout.network_traffic) over each link's per-direction bandwidth, inside a node
or between nodes, the slower of the two for a ring that crosses both. FSDP2's real prefetch, its separate
all-gather, reduce-scatter and all-reduce streams and their events then decide what overlaps.

The compute is an H200's, not the stack's GPU's. Every delay is scaled by (this step's compute on the H200,
measured here with no delay) / (the same step's compute on the stack's GPU, bench.model.step_model's figure), so compute
and communication keep the stack's ratio; the emulated step divided by that scale is the stack's step. Each run's
line carries bench.model.step_model's prediction for the same inputs (links, compute, the forward/backward/optimizer
split measured here) and their ratio.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import json
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from bench.common import GIB, GpuDelay, announce, benchmark_parser, device_and_delay, recipe_model
from bench.model import step_inputs, step_model, step_shapes
from bench.model.offload import Offload
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import architectures, layout
from workload.model.activation_offload import ActivationOffload
from workload.model.adapters import lora
from workload.model.build import NAMED_CONFIGS, build_model
from workload.model.layout import Collective
from workload.model.loss import loss_fn
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import train_step

# The functions FSDP2 (torch 2.11: *_into_tensor / *_tensor; 2.13: *_single) and FSDP1 call through
# `torch.distributed` for their collectives, by the argument that holds S (nccl-tests' size): the gather's output,
# the reduce-scatter's input, the all-reduce's buffer.
INTERCEPTED = {
    "all_gather": ("all_gather", "tensor_list"),  # FSDP1 on CPU (the smoke run)
    "all_gather_into_tensor": ("all_gather", "output_tensor"),
    "all_gather_single": ("all_gather", "output_tensor"),
    "reduce_scatter_tensor": ("reduce_scatter", "input"),
    "reduce_scatter_single": ("reduce_scatter", "input"),
    "all_reduce": ("all_reduce", "tensor"),
}


@dataclass(frozen=True)
class Links:
    """A stack's links, GB/s in each direction at once (a NIC's and a PCIe or NVLink link's figure both hold per
    direction): between nodes, per node (shared by its GPUs); inside a node, per GPU."""

    nodes: int
    gpus_per_node: int
    inter_node_gbytes_per_s: float
    intra_node_gbytes_per_s: float

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def group_of(self, ranks: int) -> str:
        """world | shard | replicate, from a group's size (FSDP2's mesh groups; FSDP1 uses the world)."""
        names = {self.world_size: "world", self.gpus_per_node: "shard", self.nodes: "replicate"}
        assert len(names) == 3 or self.nodes == 1, f"group sizes of {self} are ambiguous"
        return names[ranks]


def collective_seconds(operation: str, ranks: int, size: int, links: Links) -> float:
    """How long one collective keeps its ring busy on `links`: bus bytes over the slower link the ring crosses."""
    return max(_link_times(operation, ranks, size, links))


def slower_link(operation: str, ranks: int, size: int, links: Links) -> str:
    """between | inside: the link whose time collective_seconds is, which the collective holds meanwhile."""
    between, inside = _link_times(operation, ranks, size, links)
    return "between" if between >= inside else "inside"


def _link_times(operation: str, ranks: int, size: int, links: Links) -> tuple[float, float]:
    traffic = layout.network_traffic(Collective(operation, links.group_of(ranks), ranks, size, "forward"),
                                     links.nodes, links.gpus_per_node)
    return (traffic.inter_node_bytes_per_node / (links.inter_node_gbytes_per_s * 1e9),
            traffic.intra_node_bytes_per_gpu / (links.intra_node_gbytes_per_s * 1e9))


class TimedCollectives:
    """While active, every intercepted collective fills its output with this rank's data, then (with a delay)
    holds its stream for collective_seconds x scale. Records each one as (operation, group, ranks, size).

    With `link_queues` (the default on a GPU) each link is a queue: the delay runs on a stream of the link it holds
    (its slower one), after the issuing stream's work and after every delay queued on that link before it, and the
    issuing stream waits for it. Two collectives on different streams over the same link (FSDP1's backward gathers
    and reduce-scatters, or any two cross-node ones) then take their sum, as on a real link, not the longer of the
    two; collectives on different links still overlap. The runs before 2026-12-03's second one had no queues."""

    def __init__(self, links: Links, delay: Callable[[float], None] | None, link_queues: bool = True) -> None:
        self.links, self.delay, self.scale = links, delay, 0.0
        self.recorded: list[tuple[str, str, int, int]] = []
        self.link_seconds = 0.0
        self.link_queues = link_queues and delay is not None and torch.cuda.is_available()
        self._link_streams: dict[str, torch.cuda.Stream] = {}

    @contextlib.contextmanager
    def active(self) -> Iterator["TimedCollectives"]:
        originals = {name: getattr(dist, name) for name in INTERCEPTED if hasattr(dist, name)}
        for name, original in originals.items():
            setattr(dist, name, self._wrap(original, *INTERCEPTED[name]))
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(dist, name, original)

    def _wrap(self, original: Callable, operation: str, size_argument: str) -> Callable:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def collective(*args, **kwargs):
            arguments = signature.bind(*args, **kwargs).arguments
            group = arguments.get("group") or dist.group.WORLD
            ranks = dist.get_world_size(group)
            work = original(*args, **kwargs)  # the fake group's: nothing moves, a Work where async_op asks for one
            if ranks == 1:
                return work
            sized = arguments[size_argument]
            sized = sized if isinstance(sized, list) else [sized]
            size = sum(tensor.numel() * tensor.element_size() for tensor in sized)
            with torch.no_grad():
                if operation == "all_gather":
                    source = arguments.get("input_tensor", arguments.get("tensor"))
                    slots = sized if len(sized) > 1 else list(sized[0].view(ranks, -1))
                    for slot in slots:  # FSDP2's input is a view of its own slot: skip that one
                        if slot.data_ptr() != source.data_ptr():
                            slot.view(-1).copy_(source.view(-1))
                elif operation == "reduce_scatter":
                    arguments["output"].view(-1).copy_(arguments["input"].view(ranks, -1)[0])
            self.recorded.append((operation, self.links.group_of(ranks), ranks, size))
            seconds = collective_seconds(operation, ranks, size, self.links)
            self.link_seconds += seconds
            if self.delay is not None and self.link_queues:
                link = slower_link(operation, ranks, size, self.links)
                issuing = torch.cuda.current_stream()
                queue = self._link_streams.setdefault(link, torch.cuda.Stream(issuing.device))
                queue.wait_stream(issuing)
                with torch.cuda.stream(queue):
                    self.delay(seconds * self.scale)
                issuing.wait_stream(queue)
            elif self.delay is not None:
                self.delay(seconds * self.scale)
            return work

        return collective


def fake_world(world_size: int) -> None:
    """The default process group: rank 0 of `world_size`, every collective a no-op (torch's fake backend)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)


def build_step(strategy: step_inputs.Strategy, cfg: TrainConfig, device: torch.device, links: Links,
               lever: Offload | None = None):
    """(timed step, phased step) of `strategy` on the current fake world: the recipe's FSDP1 step, or
    workload.model's with the strategy's mesh and reduction. The phased step returns its forward, backward and
    optimizer seconds (device events), for the split the model uses. `lever`: that many layers' saved activations
    to host memory instead of recomputed (workload.model.activation_offload, `timed.offload`), the selective set
    or all, copies back prefetched or not."""
    offload = None
    if strategy.step == "recipe":
        model, optimizer = recipe_model(cfg, device)

        def forward(batch):
            return model(input_ids=batch, labels=batch).loss

        def tail():
            optimizer.step()
            optimizer.zero_grad()
    else:
        shape = layout.mesh_shape(strategy.sharding, links.world_size, links.gpus_per_node)
        if cfg.model_config:
            built = lora.apply(build_model(cfg, device), cfg)  # --method lora/qlora: adapters, frozen base
            two_level = strategy.sharding == "two-level"
            sharded = shard_model(built, build_mesh(device, shape), cfg,
                                          reduce_dtype=strategy.reduce_dtype, two_level=two_level)
        else:  # a published shape (--model_id) with random values, as bench.record.adapter_memory builds one rank of it
            from bench.record import adapter_memory

            shards = shape[-1] if strategy.sharding == "hybrid" else links.world_size
            sharded = adapter_memory.adapter_model(architectures.published(cfg.model_id), cfg, device, shards)
        model, optimizer = sharded, build_optimizer(sharded, cfg)
        if lever and lever.layers:
            offload = ActivationOffload(model, lever.layers, device, selective=lever.saved == "matmuls",
                                        prefetch=lever.prefetch)

        def forward(batch):
            return loss_fn(model, batch)

        def tail():
            if cfg.max_grad_norm:
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    def timed(batch):
        if strategy.step == "recipe":
            loss = forward(batch)
            loss.backward()
            tail()
            return loss.detach()
        return train_step(model, optimizer, batch, cfg)  # the workload's own step

    def phased(batch) -> tuple[float, float, float]:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        events[0].record()
        loss = forward(batch)
        events[1].record()
        loss.backward()
        events[2].record()
        tail()
        events[3].record()
        events[3].synchronize()
        return tuple(events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(3))

    timed.offload = offload
    return timed, phased


def median_step(step, batches, device: torch.device, warmup: int, steps: int) -> tuple[float, list[float]]:
    times = []
    for index in range(warmup + steps):
        batch = batches(index).to(device)
        torch.cuda.synchronize(device) if device.type == "cuda" else None
        started = time.perf_counter()
        step(batch).item()  # waits for the step
        times.append(time.perf_counter() - started)
    return statistics.median(times[warmup:]), times


def emulate(stack: str, strategy: step_inputs.Strategy, cfg: TrainConfig, device: torch.device, delay: GpuDelay | None,
            warmup: int, steps: int, l4_cases: dict[str, float], bf16_compute_s: float | None = None,
            link_queues: bool = True, lever: Offload | None = None) -> list[dict]:
    """Lines for one (stack, strategy): the compute-only run (no delay: the H200's step at shard size, its split and
    peak memory), then one delayed run per compute case of the stack's GPU.

    With fp8, `bf16_compute_s` is the same strategy's bf16 compute-only step: the stack's GPU is assumed to gain what
    the H200 gains (both double their matmul rate in fp8), so the delays keep bf16's scale and the model's compute
    takes fp8's measured factor. The target each delay scales to is step_model.step_compute's, the prediction's own
    compute (activation checkpointing's recomputation and qlora's dequantization included, as the measured step
    has them), and the compute-only line has that figure for this GPU beside the measured one."""
    hardware = step_inputs.saved_hardware(stack)
    central = step_inputs.CENTRAL
    links = Links(hardware.nodes, hardware.gpus_per_node, hardware.inter_node_gbytes_per_s * central.network_efficiency,
                  step_inputs.intra_node_gbytes_per_s(hardware, central))
    fake_world(links.world_size)
    collectives = TimedCollectives(links, delay, link_queues)
    label = strategy.name + ("+fp8" if cfg.fp8 else "") + ("" if cfg.method == "full" else f"+{cfg.method}") + (
        f"+offload{lever.layers}{'-selective' if lever.saved == 'matmuls' else ''}" if lever and lever.layers
        else "")
    levers = {"activation_checkpointing": cfg.activation_checkpointing, "offload": lever}
    # The step model's shape for an adapter method (its FLOPs, gathers and reductions); None: Qwen2.5-1.5B, full.
    config = ({**NAMED_CONFIGS[cfg.model_config], "model_type": "qwen2"} if cfg.model_config
              else architectures.published(cfg.model_id))
    shape = None if (cfg.method == "full" and cfg.model_config) or strategy.step == "recipe" else \
        step_shapes.config_shape(config, cfg.method, cfg.lora_rank, cfg.lora_targets)
    batches = random_batches(cfg, config["vocab_size"], rank=0)
    with collectives.active():
        timed, phased = build_step(strategy, cfg, device, links, lever)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        compute_s, times = median_step(timed, batches, device, warmup, steps)
        per_step = len(collectives.recorded) // (warmup + steps)
        recorded = collectives.recorded[-per_step:]
        link_seconds = collectives.link_seconds / (warmup + steps)
        base = {"stack": stack, "strategy": label, "world_size": links.world_size,
                "per_gpu_batch": f"{cfg.batch_size} x {cfg.seq_len}", "links": dataclasses.asdict(links),
                "collectives_per_step": per_step, "link_seconds_per_step_unscaled": round(link_seconds, 4),
                "link_queues": collectives.link_queues}
        if device.type != "cuda":
            return [{**base, "run": "smoke", "recorded": recorded}]
        peak = torch.cuda.max_memory_allocated(device) / GIB
        split = [statistics.median(values) for values in zip(*(phased(batches(100 + i).to(device)) for i in range(3)))]
        shares = step_inputs.Split(*(part / sum(split) for part in split))
        lines = [{**base, "run": "compute only (no delay)", "h200_step_s": round(compute_s, 4),
                  "h200_tokens_per_s_per_gpu": round(cfg.batch_size * cfg.seq_len / compute_s),
                  "split_forward_backward_optimizer": [round(share, 3) for share in dataclasses.astuple(shares)],
                  "peak_memory_gib": round(peak, 2), "step_times_s": [round(t, 4) for t in times]}]
        factor = compute_s / bf16_compute_s if bf16_compute_s else 1.0
        here = next(name for name in ("H200", "H100", "A100", "L40S", "L4") if name in torch.cuda.get_device_name())
        model_here = step_model.step_compute(strategy, dataclasses.replace(hardware, gpu_name=here), cfg.batch_size,
                                             cfg.seq_len, central, shape, shares, factor, **levers).total
        lines[0].update(model_compute_this_gpu_s=round(model_here, 4), measured_over_model_compute=round(
            compute_s / model_here, 3), host_peak_gib=round(timed.offload.peak_host_bytes / GIB, 2) if timed.offload
            else 0.0)
        if bf16_compute_s:
            lines[0]["fp8_compute_over_bf16"] = round(factor, 3)
        for case, gemm in l4_cases.items():
            assumptions = dataclasses.replace(central, l4_gemm_tflops=gemm)
            target = step_model.step_compute(strategy, hardware, cfg.batch_size, cfg.seq_len, assumptions, shape,
                                             shares, factor, **levers).total
            collectives.scale = compute_s / target
            emulated_s, times = median_step(timed, batches, device, warmup, steps)
            stack_step = emulated_s / collectives.scale
            model = step_model.predict(strategy, hardware, cfg.batch_size, cfg.seq_len, assumptions,
                                       split=shares, links_override=links, compute_factor=factor, shape=shape,
                                       reshard_after_forward=cfg.reshard_after_forward, **levers)
            lines.append({**base, "run": f"emulated, {case}", "target_compute_s": round(target, 4),
                          "delay_scale": round(collectives.scale, 4), "emulated_step_s": round(emulated_s, 4),
                          "stack_step_s": round(stack_step, 4),
                          "stack_tokens_per_s": round(cfg.batch_size * cfg.seq_len * links.world_size / stack_step),
                          "model_step_s": round(model["step_s"], 4), "model_tokens_per_s": round(
                              model["tokens_per_s"]),
                          "emulated_over_model": round(stack_step / model["step_s"], 3),
                          "step_times_s": [round(t, 4) for t in times]})
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, batch_size=2, warmup=2, steps=5)
    parser.add_argument("--stacks", default="dev,p5")
    parser.add_argument("--strategies", default="recipe,project-full,full-bf16,hybrid,hybrid-bf16")
    parser.add_argument("--fp8_strategies", default="", help="also run these with --fp8 (dev only)")
    parser.add_argument("--model_id", default="", help="a shipped published shape (random values) instead of "
                        "--model_config, with the memory plan's levers and reduction for dev "
                        "(bench.record.adapter_memory.job_config); strategies hybrid or full sharding only")
    parser.add_argument("--methods", default="full", help="comma list of --method values for the project's strategies "
                        "(the recipe is always full training)")
    parser.add_argument("--output", default="")
    parser.add_argument("--central_only", action="store_true", help="only the central compute case per strategy")
    parser.add_argument("--offload_layers", type=int, default=0, help="that many decoder layers' saved activations "
                        "to pinned host memory instead of recomputed (bench.model.offload; with a checkpointed plan)")
    parser.add_argument("--offload_saved", default="all", choices=("all", "matmuls"), help="what an offloaded layer "
                        "saves: all that the compiled layer saves, or the selective policy's matmul and attention "
                        "outputs (workload.model.activation_offload)")
    parser.add_argument("--offload_prefetch", action="store_true", help="copy each offloaded layer's tensors back "
                        "while the layer after it runs its backward")
    parser.add_argument("--no_link_queues", action="store_true",
                        help="delays on the issuing streams only, as before 2026-12-03 (TimedCollectives)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()
    device, delay = device_and_delay(args.device)
    if delay is not None:
        print(json.dumps({"delay_kernel": delay.kind, "measured_over_asked_10ms": round(delay.accuracy(), 4),
                          "torch": torch.__version__, "device": torch.cuda.get_device_name(device)}), flush=True)
    cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len)
    output = open(args.output, "w") if args.output else None
    runs = [(stack, name, False, method) for stack in args.stacks.split(",") for method in args.methods.split(",")
            for name in args.strategies.split(",") if method == args.methods.split(",")[0] or name != "recipe"]
    runs += [("dev", name, True, "full") for name in args.fp8_strategies.split(",") if name]
    compute_only: dict[tuple[str, str], float] = {}  # (stack, strategy): the bf16 compute-only step
    for stack, name, fp8, method in runs:
        strategy = next(strategy for strategy in step_inputs.STRATEGIES if strategy.name == name)
        gpu = step_inputs.saved_hardware(stack).gpu_name
        cases = step_model.gemm_cases(gpu)
        if args.central_only:
            cases = {case: gemm for case, gemm in cases.items() if gemm == step_inputs.CENTRAL.l4_gemm_tflops}
        try:
            method = "full" if strategy.step == "recipe" else method
            run_cfg = dataclasses.replace(cfg, fp8=fp8, method=method)
            if args.model_id:
                from bench.record import adapter_memory

                run_cfg, _, _ = adapter_memory.job_config(args.model_id, method, args.batch_size, args.seq_len, False)
                run_cfg = dataclasses.replace(run_cfg, compile=cfg.compile)
            lines = emulate(stack, strategy, run_cfg, device, delay,
                            args.warmup, args.steps, cases, compute_only.get((stack, name)) if fp8 else None,
                            link_queues=not args.no_link_queues,
                            lever=Offload(args.offload_layers, args.offload_saved, args.offload_prefetch))
            if not fp8 and method == "full" and "h200_step_s" in lines[0]:
                compute_only[stack, name] = lines[0]["h200_step_s"]
        except Exception as error:  # one failed run must not lose the others' lines
            lines = [{"stack": stack, "strategy": name, "fp8": fp8, "error": f"{type(error).__name__}: {error}"}]
        for line in lines:
            print(json.dumps(line), flush=True)
            if output:
                output.write(json.dumps(line) + "\n")
                output.flush()
        __import__("gc").collect()
        torch.cuda.empty_cache() if device.type == "cuda" else None
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
