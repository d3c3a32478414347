"""The 70B QLoRA dev rank on one GPU, its current plan beside selective activation offloading: one rank of dev's
2 x 4 L4s (bench.record.emulate_rank: a fake process group of 8, collectives as timed delays), Llama-3.3-70B with
random NF4 weights at the memory plan's levers (activation checkpointing, reshard_after_forward, full sharding), then
the same with the first layers un-recomputed (workload.model.activation_offload): each keeps only its base matmuls'
and attention's outputs, in pinned host memory, copied back ahead of its backward (bench.model.step_breakdown's
chosen lever: as many layers as a g6.12xlarge's host memory holds per GPU).

    python -m bench.record.seventy_b --output $OUT/seventy_b.jsonl      # one H100 or H200, torchao (seventy_b_runs.sh)
    python -m bench.record.seventy_b --device cpu --smoke               # a reduced copy on the CPU: both plans build,
                                                                        # step and record their collectives
    python -m bench.record.seventy_b --compare seventy_b.jsonl          # the lever's gain, emulated and predicted

Per plan: the step on the stack, tokens/s per GPU and per stack, step_model's prediction (its compute is the
emulation's target: step_model.step_compute) and the ratio, the compute measured on this GPU against the model's
for this GPU, peak GPU memory and the host memory the offloaded activations held.
"""
from __future__ import annotations

import dataclasses
import json

from bench.common import announce, benchmark_parser, device_and_delay
from bench.model import step_breakdown, step_inputs
from bench.model.offload import Offload

MODEL_ID = "meta-llama/Llama-3.3-70B-Instruct"
STRATEGY = "project-full"  # full sharding: what the memory plan takes for the 70B on dev


def plans(smoke: bool) -> dict[str, Offload]:
    """Plan name -> its offload lever: the current plan (every layer recomputed), and the chosen lever at dev's host
    memory (one layer on the smoke run's tiny model)."""
    lever = Offload(1, "matmuls", True) if smoke else step_breakdown.chosen_lever()
    return {"recompute (current plan)": Offload(0), f"selective offload {lever.layers} layers": lever}


def summary(plan: str, lever: Offload, lines: list[dict]) -> dict:
    """One line a plan, from emulate_rank's compute-only and central emulated lines: the model's prediction for the
    lever beside its emulated figures."""
    compute = next((line for line in lines if line.get("run", "").startswith("compute")), lines[0])
    emulated = next((line for line in lines if line.get("run", "").startswith("emulated")), {})
    world = compute.get("world_size", 8)
    return {"plan": plan, "lever": lever.describe() if lever.layers else "none", **{key: compute.get(key) for key in ("error", "run", "h200_step_s", "peak_memory_gib",
                                                                "host_peak_gib", "model_compute_this_gpu_s",
                                                                "measured_over_model_compute") if key in compute},
            "stack_step_s": emulated.get("stack_step_s"),
            "tokens_per_s_per_gpu": round(emulated["stack_tokens_per_s"] / world) if emulated else None,
            "tokens_per_s_per_stack": emulated.get("stack_tokens_per_s"),
            "model_step_s": emulated.get("model_step_s"), "model_tokens_per_s": emulated.get("model_tokens_per_s"),
            "emulated_over_model": emulated.get("emulated_over_model")}


def compare(lines: list[dict]) -> dict:
    """The lever against the current plan from two summary lines: tokens/s emulated and by the model, and the
    compute measured on this GPU against the model's for it (the emulated step is the model's compute where the
    links hide, so this ratio is what the GPU itself says of the lever)."""
    current, lever = (next((line for line in lines if line.get("plan", "").startswith(prefix)), {})
                      for prefix in ("recompute", "selective"))

    def ratio(key: str, invert: bool = False):
        if not current.get(key) or not lever.get(key):
            return None
        return round(current[key] / lever[key] if invert else lever[key] / current[key], 3)

    emulated = ratio("tokens_per_s_per_stack")
    return {"compare": f"{lever.get('plan')} over {current.get('plan')}", "emulated_gain": emulated,
            "model_gain": ratio("model_tokens_per_s"), "measured_compute_gain_here": ratio("h200_step_s", True),
            "model_compute_gain_here": ratio("model_compute_this_gpu_s", True),
            "reaches_15_percent": emulated is not None and emulated >= 1.15,
            "peak_memory_gib": [current.get("peak_memory_gib"), lever.get("peak_memory_gib")],
            "host_peak_gib": lever.get("host_peak_gib"), "errors": [line["error"] for line in (current, lever)
                                                                    if line.get("error")] or None}


def build_parser():
    parser = benchmark_parser(__doc__, batch_size=2, warmup=1, steps=3)
    parser.add_argument("--smoke", action="store_true", help="a reduced copy (--model_config tiny, lora) on any device")
    parser.add_argument("--output", default="")
    parser.add_argument("--compare", default="", metavar="JSONL", help="print the summary lines of a recorded run "
                        "and the lever against the current plan, then exit")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.compare:
        with open(args.compare) as file:
            lines = [line for line in map(json.loads, file) if "plan" in line]
        for line in [*lines, compare(lines)]:
            print(json.dumps(line))
        return
    announce()
    import torch

    from bench.record import adapter_memory, emulate_rank
    from workload.config import TrainConfig

    device, delay = device_and_delay(args.device)
    if args.smoke:
        cfg = TrainConfig(model_config="tiny", method="lora", batch_size=args.batch_size, seq_len=args.seq_len,
                          activation_checkpointing=True, reshard_after_forward=True, compile=False)
    else:
        cfg, source, _ = adapter_memory.job_config(MODEL_ID, "qlora", args.batch_size, args.seq_len, False)
        print(json.dumps({"model": MODEL_ID, "levers": source}), flush=True)
    strategy = next(strategy for strategy in step_inputs.STRATEGIES if strategy.name == STRATEGY)
    cases = {case: gemm for case, gemm in emulate_rank.step_model.gemm_cases("L4").items()
             if gemm == step_inputs.CENTRAL.l4_gemm_tflops}
    output = open(args.output, "w") if args.output else None
    for plan, lever in plans(args.smoke).items():
        try:
            lines = emulate_rank.emulate("dev", strategy, dataclasses.replace(cfg), device, delay, args.warmup,
                                         args.steps, cases, lever=lever)
        except Exception as error:  # the other plan's line still comes
            lines = [{"error": f"{type(error).__name__}: {error}"}]
        for line in [*lines, summary(plan, lever, lines)]:
            print(json.dumps(line), flush=True)
            if output:
                output.write(json.dumps(line) + "\n")
        if device.type == "cuda":
            __import__("gc").collect()
            torch.cuda.empty_cache()
    torch.distributed.destroy_process_group() if torch.distributed.is_initialized() else None


if __name__ == "__main__":
    main()
