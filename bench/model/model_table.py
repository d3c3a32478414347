"""docs/models.md's table of models x stacks: what the preview says of each model on each stack's GPUs, and the
step-time model's tokens/s for the plan it chose.

    python -m bench.model.model_table            # prints the table
    python -m bench.model.model_table --write    # and puts it into docs/models.md between its markers

Each cell is the preview's own verdict: the memory plan infra.preview.job_plan.check_job_shape refuses on
(workload.model.memory_plan.for_job), for the job the stack file would run (Pulumi.yaml's defaults and the stack's
file, trainModelId and trainMethod set, through infra.config.parse and infra.job.job_config.workload_config as
`pulumi up` does), so "no" is the refusal `pulumi preview` prints. A column per trainMethod: full, lora, qlora. The
tokens/s are bench.model.step_model.predict's for that plan (its sharding as the job's --sharding auto would choose
it, its activation checkpointing, reshard_after_forward and micro-batches, the method's FLOPs and bytes), its central
figure: the H200's measured MFU and step split for Qwen2.5-1.5B carried to each GPU (the L4 at its sustained GEMM rate)
and the central bandwidths of bench.model.step_inputs.Assumptions; a prediction until a cluster measures it.
tests/docs/test_docs.py checks that docs/models.md holds exactly this table.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from bench.model import step_inputs, step_model, step_shapes
from infra import config as stack_config
from infra.job import job_config
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import STACKS, stack_settings
from workload.model import adapters, architectures, memory, memory_plan

PAGE = Path(__file__).resolve().parents[2] / "docs" / "models.md"
BEGIN, END = "<!-- model-table: python -m bench.model.model_table --write -->", "<!-- /model-table -->"
MODELS = ("Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B",
          "mistralai/Mistral-7B-v0.3", "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B", "meta-llama/Llama-3.3-70B-Instruct")
LEVER_NAMES = {"activation_checkpointing": "AC", "reshard_after_forward": "RAF", "sharding": "full",
               "reduce_dtype": "bf16"}  # in plan order


def cell(model_id: str, stack: str, method: str = "full") -> dict:
    """The preview's verdict on `model_id` trained by `method` with the stack's default job, and the predicted tokens/s
    of its plan."""
    settings = stack_settings(stack)
    facts = INSTANCE_FACTS[settings["gpuInstanceType"]]
    cfg = stack_config.parse(settings | {"trainEnabled": True, "trainModelId": model_id, "trainMethod": method})
    workload = job_config.workload_config(cfg, facts)
    workers = facts.gpus * cfg.gpu_node_count
    config = architectures.published(model_id)
    # check_job_shape's own plan (it refuses exactly when this does not fit), without its refusal's alternatives.
    plan = memory_plan.for_job(workload, config, world_size=workers, ranks_per_node=facts.gpus,
                               gpu_memory_mib=facts.gpu_memory_mib, compiled=workload.compile is not False)
    if not plan.fits:
        return {"fits": False, "text": f"no: {plan.peak_gib:.1f} GiB/GPU"}
    hardware = step_inputs.stack_hardware(stack)
    shape = step_shapes.config_shape(config, method, workload.lora_rank, workload.lora_targets)
    strategy, _ = step_model.auto_strategy(hardware, plan.micro_batch, workload.seq_len, shape,
                                           requested=plan.settings.sharding)
    strategy = dataclasses.replace(strategy, grad_accum_steps=plan.settings.grad_accum_steps)
    predicted = step_model.predict(strategy, hardware, workload.batch_size, workload.seq_len, shape=shape,
                                   activation_checkpointing=plan.settings.activation_checkpointing,
                                   reshard_after_forward=plan.settings.reshard_after_forward)
    levers = [LEVER_NAMES[name] for name in plan.changed if name in LEVER_NAMES]
    if plan.settings.grad_accum_steps > 1:
        levers.append(f"{plan.settings.grad_accum_steps}x{plan.micro_batch}")
    return {"fits": True, "plan": levers, "peak_gib": plan.peak_gib, "tokens_per_s": predicted["tokens_per_s"],
            "text": f"{'+'.join(levers) or 'as is'}, {plan.peak_gib:.0f} GiB, "
                    f"{predicted['tokens_per_s'] / 1000:,.1f}k tok/s"}


def markdown() -> str:
    header = ["model", "parameters", "stack", *(f"`{method}`" for method in adapters.METHODS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model_id in MODELS:
        billions = memory.parameter_count(architectures.published(model_id)) / 1e9
        for stack in STACKS:
            settings = stack_settings(stack)
            hardware = f"`{stack}` ({settings['gpuNodeCount']} x {settings['gpuInstanceType']})"
            cells = [cell(model_id, stack, method)["text"] for method in adapters.METHODS]
            lines.append(f"| `{model_id}` | {billions:.2f} B | {hardware} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def in_readme(text: str) -> str:
    """The table between the page's markers."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END, start)].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the table in docs/models.md")
    args = parser.parse_args()
    table = markdown()
    print(table)
    if args.write:
        text = PAGE.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        PAGE.write_text(f"{text[:start]}\n{table}\n{text[end:]}")


if __name__ == "__main__":
    main()
