"""The shipped architectures, the memory model against its H200 measurements, and the memory plan.

Pure functions (no Pulumi, no Ray) but for one meta-device build per model family and the job's plan, which imports
the trainer.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from infra.preview import instance_facts
from tests.support.instance_facts import INSTANCE_FACTS
from workload.config import ARCHITECTURES, TrainConfig
from workload.model import architectures, memory, memory_plan

REPO = Path(__file__).resolve().parents[2]
MEASUREMENTS = REPO / "bench" / "results" / "memory_bench-h200-2026-12-01-run2.log"
# bench/record/memory_cap.py's runs of the planner's plans under the target GPU's memory: run 1 with the planner before this
# calibration, run 2 with it, and the dev plans with two-level collectives (issue 33: `--cases 0,1,5 --sharding
# two-level`; Llama-3.1-8B's plan is full sharding, which two-level's staging would not fit).
CAP_RUNS = [REPO / "bench" / "results" / f"memory_cap-h200-2026-12-03-{run}.jsonl" for run in ("run1", "run2",
                                                                                               "two-level")]

# Published parameter totals. Exact where the figure is published to the parameter (Meta's and Mistral's model
# cards and papers, the Qwen2.5 report's tables); else as the model card rounds it (Qwen3's "Number of Parameters"
# and "Number of Parameters (Non-Embedding)", which leaves out the embedding and an untied lm_head).
EXACT = {
    "Qwen/Qwen2.5-0.5B": 494_032_768,
    "Qwen/Qwen2.5-1.5B": 1_543_714_304,
    "Qwen/Qwen2.5-3B": 3_085_938_688,
    "Qwen/Qwen2.5-7B": 7_615_616_512,
    "Qwen/Qwen2.5-14B": 14_770_033_664,
    "Qwen/Qwen2.5-32B": 32_763_876_352,
    "Qwen/Qwen2.5-72B": 72_706_203_648,
    "meta-llama/Llama-3.1-8B": 8_030_261_248,
    "meta-llama/Llama-3.1-70B": 70_553_706_496,
    "meta-llama/Llama-3.3-70B-Instruct": 70_553_706_496,
    "meta-llama/Llama-3.2-1B": 1_235_814_400,
    "meta-llama/Llama-3.2-3B": 3_212_749_824,
    "mistralai/Mistral-7B-v0.3": 7_248_023_552,
}
ROUNDED = {  # billions: (total, non-embedding), as the Qwen3 model cards give them
    "Qwen/Qwen3-0.6B": (0.6, 0.44),
    "Qwen/Qwen3-1.7B": (1.7, 1.4),
    "Qwen/Qwen3-4B": (4.0, 3.6),
    "Qwen/Qwen3-8B": (8.2, 6.95),
    "Qwen/Qwen3-14B": (14.8, 13.2),
    "Qwen/Qwen3-32B": (32.8, 31.2),
}
# Published configs of families the project does not ship (tests/fixtures/model_configs/SOURCES.md): dense decoders the
# job trains, and a mixture of experts, counted (46.7 B, Mistral AI's announcement of Mixtral 8x7B) and refused.
FIXTURES = REPO / "tests" / "fixtures" / "model_configs"
FIXTURE_MODELS = ("google/gemma-2-2b-it", "google/gemma-3-1b-pt", "microsoft/Phi-3-mini-4k-instruct",
                  "allenai/OLMo-2-1124-7B", "mistralai/Mixtral-8x7B-v0.1")


def fixture_config(model_id: str) -> dict:
    return json.loads((FIXTURES / (model_id.replace("/", "--") + ".json")).read_text())


ISSUE_FAMILIES = ("Qwen/Qwen2.5-", "Qwen/Qwen3-", "meta-llama/Llama-3.1-", "meta-llama/Llama-3.2-",
                  "meta-llama/Llama-3.3-", "mistralai/Mistral-7B")


def test_every_shipped_config_is_a_published_file_with_a_provenance_line():
    sources = (REPO / "workload" / "model" / "architectures" / "SOURCES.md").read_text()
    ids = architectures.shipped_ids()
    assert len(ids) >= 18 and all(any(i.startswith(f) for i in ids) for f in ISSUE_FAMILIES), ids
    for model_id in ids:
        config = architectures.published(model_id)
        assert config["architectures"][0].endswith("ForCausalLM") and "transformers_version" in config, \
            f"{model_id}: a config.json as published carries its architecture and transformers version"
        assert f"`{model_id}`" in sources, f"SOURCES.md must say where {model_id}'s file came from"
    assert set(EXACT) | set(ROUNDED) == set(ids), "every shipped config is checked against its published total"


@pytest.mark.parametrize("model_id", sorted(set(EXACT) | set(ROUNDED)))
def test_parameter_count_is_the_published_total(model_id):
    config = architectures.published(model_id)
    counted = memory.parameter_count(config)
    if model_id in EXACT:
        assert counted == EXACT[model_id], f"{model_id}: counted {counted:,}, published {EXACT[model_id]:,}"
        return
    total, non_embedding = ROUNDED[model_id]
    embeddings = memory.root_parameters(config) - config["hidden_size"]
    for label, value, published in (("total", counted, total), ("non-embedding", counted - embeddings, non_embedding)):
        digits = len(str(published).split(".")[1])
        assert round(value / 1e9, digits) == published, f"{model_id}: {label} {value:,} is not the card's {published}B"


def test_parameters_and_fsdp_units_are_what_transformers_builds_for_each_family():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config

    from workload.model.build import matmul_parameters
    from workload.model.flops import attention_flops_per_token, flops_per_token
    from workload.model.loss import CausalLMWithLoss
    from workload.model.parallel import fsdp_units

    # One layer of each family (biases, head_dim, q/k norms, norms a layer, fused projections, experts, tied or not),
    # on the meta device: no memory, no time. The families the project does not ship are published configs too.
    for model_id in ("Qwen/Qwen2.5-7B", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B", "mistralai/Mistral-7B-v0.3",
                     *FIXTURE_MODELS):
        config = dict(architectures.published(model_id) or fixture_config(model_id), num_hidden_layers=1)
        fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")}
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields))
        built = sum(p.numel() for p in model.parameters())
        assert memory.parameter_count(config) == built, f"{model_id} (1 layer): counted {memory.parameter_count(config)}, built {built}"
        wrapped = CausalLMWithLoss(model, chunked_loss=True)
        units = fsdp_units(wrapped)
        assert [(name, sorted(shapes)) for name, shapes in units] == \
            [(name, sorted(shapes)) for name, shapes in memory.unit_shapes(config)], f"{model_id}: FSDP units {units}"
        # The layout's compute estimate from the config (the preview's and the job's) is the built model's FLOPs.
        built_flops = 6 * matmul_parameters(wrapped) + attention_flops_per_token(config, 2048)
        assert flops_per_token(config, 2048, "full") == built_flops, f"{model_id}: FLOPs per token"
    with torch.device("meta"):  # the random-weight architectures are Qwen2Config keyword arguments
        model = AutoModelForCausalLM.from_config(Qwen2Config(**ARCHITECTURES["tiny"]))
    assert memory.parameter_count(ARCHITECTURES["tiny"]) == sum(p.numel() for p in model.parameters())


def test_the_projection_is_within_ten_percent_of_every_measured_peak():
    """bench/results' H200 run: each rank's real peak at world size 8 or 16, against the projection with today's
    constants (a change to workload.model.memory that moves a projection out of 10% fails here)."""
    rows = [json.loads(line) for line in MEASUREMENTS.read_text().splitlines() if line.startswith('{"model"')]
    architectures_measured = {row["model"] for row in rows}
    assert len(rows) >= 20 and len(architectures_measured) >= 3, "three or more architectures, measured"
    assert {True, False} == {row["activation_checkpointing"] for row in rows} == {row["compiled"] for row in rows}
    for row in rows:
        projected = memory.estimate(
            architectures.published(row["model"]), micro_batch=row["micro_batch"], seq_len=row["seq_len"],
            shards=row["world_size"], activation_checkpointing=row["activation_checkpointing"],
            reshard_after_forward=row["reshard_after_forward"], grad_accum_steps=row["grad_accum_steps"],
            compiled=row["compiled"]).allocated_gib
        ratio = projected / row["measured_max_allocated_gib"]
        assert abs(ratio - 1) <= 0.10, f"{row['model']} {row}: projected {projected:.2f} GiB, ratio {ratio:.3f}"


def _cap_runs() -> list[dict]:
    return [json.loads(line) for path in CAP_RUNS for line in path.read_text().splitlines() if line.strip()]


def test_no_plan_measured_under_the_gpus_cap_exceeds_its_projection():
    """Every run of memory_cap that completed its steps allocated no more than today's projection of its settings;
    and every plan run as the job runs it (expandable segments) at the GPU's usable memory less NCCL's buffers ran."""
    runs = _cap_runs()
    today = _planned_today(runs)
    assert len(runs) >= 50 and {(2, 4), (2, 8)} <= {tuple(run["mesh"]) for run in runs}, "HSDP's 2-D meshes measured"
    assert {8, 16} <= {run["world_size"] for run in runs}
    for run in runs:
        two_level = run.get("sharding") == "two-level"  # memory_cap --sharding two-level: every rank's share
        projected = memory.estimate(
            architectures.published(run["model"]), micro_batch=run["micro_batch"], seq_len=run["seq_len"],
            shards=run["world_size"] if two_level else run["mesh"][-1], ranks=run["world_size"],
            activation_checkpointing=run["activation_checkpointing"],
            reshard_after_forward=run["reshard_after_forward"], grad_accum_steps=run["grad_accum_steps"],
            reduce_dtype=run.get("reduce_dtype", "fp32"), compiled=True,
            two_level_ranks_per_node=run["mesh"][-1] if two_level else 0).allocated_gib
        if not run["oom"]:
            assert run["allocated_gib"] <= projected, f"{run}: projected {projected:.2f} GiB"
        if run["alloc_conf"] == "expandable_segments:True" and run["fits"] and run in today:
            assert not run["oom"], f"{run['model']} ran out of memory under {run['cap_gib']} GiB"


def _planned_today(runs: list[dict], larger_share: bool = False) -> list[dict]:
    """The runs whose settings are what the planner picks today for their case; with `larger_share`, also those with
    the same levers on fewer shards (a larger share of the state per GPU: HSDP's per-node share, measured before full
    training's auto was planned with full sharding's, issue 33)."""
    from bench.record.memory_cap import planned

    keys = ("micro_batch", "activation_checkpointing", "reshard_after_forward", "grad_accum_steps", "reduce_dtype")
    today = {}
    for run in runs:
        case = (run["model"], run["batch"], run["seq_len"], run["world_size"], run["instance"])
        today.setdefault(case, planned(case))

    def covered(run: dict) -> bool:
        plan = today[(run["model"], run["batch"], run["seq_len"], run["world_size"], run["instance"])]
        shards = run["world_size"] if run.get("sharding") == "two-level" else run["mesh"][-1]
        shards_ok = shards <= plan["mesh"][-1] if larger_share else run["mesh"] == plan["mesh"]
        return shards_ok and all(run.get(key, "fp32") == plan[key] for key in keys)

    return [run for run in runs if covered(run)]


def test_every_case_the_planner_picks_today_was_measured_under_its_cap():
    from bench.record.memory_cap import CASES, planned

    # A case measured before full training's auto kept full sharding's share counts with the same levers on a larger
    # share; the dev 7B plans were measured again with two-level's collectives and their staging (CAP_RUNS).
    runs = _planned_today(_cap_runs(), larger_share=True)
    for case in CASES:
        measured = [run for run in runs if (run["model"], run["batch"], run["seq_len"], run["world_size"],
                                            run["instance"]) == case and run["alloc_conf"]]
        assert measured and all(not run["oom"] for run in measured), f"{case}: {planned(case)} not measured as run"


def test_the_root_gradient_reduction_is_a_peak_no_micro_batch_lowers():
    """The dev stack's 7B with checkpointing and reshard: its peak is the root's gradient reduction, the same at one
    sequence as at two, and bf16 reduction is the lever that lowers it (and is turned only when nothing else fits)."""
    qwen = architectures.published("Qwen/Qwen2.5-7B")
    settings = dict(seq_len=2048, shards=8, activation_checkpointing=True, reshard_after_forward=True, compiled=True)
    one, two = (memory.estimate(qwen, micro_batch=batch, **settings) for batch in (1, 2))
    assert one.allocated_gib == two.allocated_gib and one.root_gradients_gib > 6, (one, two)
    in_bf16 = memory.estimate(qwen, micro_batch=2, reduce_dtype="bf16", **settings)
    assert in_bf16.allocated_gib < two.allocated_gib - 0.9
    dev = memory_plan.choose(qwen, batch_size=2, seq_len=2048, world_size=8, ranks_per_node=4, gpu_memory_mib=22888)
    assert dev.fits and dev.settings.reduce_dtype == "bf16" and "reduce_dtype" in dev.changed, dev.describe()
    assert memory_plan.apply(TrainConfig(model_id="Qwen/Qwen2.5-7B"), dev).reduce_dtype == "bf16"
    p5 = memory_plan.choose(architectures.published("meta-llama/Llama-3.1-8B"), batch_size=2, seq_len=2048,
                            world_size=16, ranks_per_node=8, gpu_memory_mib=81920)
    assert p5.changed == () and p5.settings.reduce_dtype == "fp32", p5.describe()


def test_the_memory_model_chunks_the_loss_as_the_model_does():
    from workload.model.loss import LOSS_CHUNK_TOKENS

    assert memory.LOSS_CHUNK_TOKENS == LOSS_CHUNK_TOKENS


def test_shards_needed_is_the_fewest_that_fit():
    config = architectures.published("meta-llama/Llama-3.1-70B")
    settings = dict(micro_batch=2, seq_len=2048, activation_checkpointing=True, reshard_after_forward=True,
                    grad_accum_steps=1, reduce_dtype="fp32", compiled=True)
    usable = memory.usable_gib(40960)
    needed = memory.shards_needed(config, usable=usable, **settings)
    assert memory.fits(memory.estimate(config, shards=needed, **settings).peak_gib, usable)
    assert not memory.fits(memory.estimate(config, shards=needed - 1, **settings).peak_gib, usable), needed
    assert memory.shards_needed(config, usable=memory.usable_gib(8192), **settings) is None, \
        "on an 8 GiB GPU what FSDP does not shard (the root's weights, a layer's activations) is already too much"


def test_a_huge_batch_is_planned_in_a_few_estimates(monkeypatch):
    calls = []
    estimate = memory.estimate
    monkeypatch.setattr(memory, "estimate", lambda *a, **k: calls.append(1) or estimate(*a, **k))
    batch = 2**20 * 3 * 5 * 7  # 110 million sequences, 252 divisors
    plan = memory_plan.choose(architectures.published("Qwen/Qwen2.5-0.5B"), batch_size=batch, seq_len=2048,
                              world_size=16, ranks_per_node=8, gpu_memory_mib=81920)
    assert plan.fits and plan.micro_batch * plan.settings.grad_accum_steps == batch, plan
    assert len(calls) < 40, f"binary search over the divisors, not a walk over batch sizes: {len(calls)} estimates"


def test_the_levers_come_in_order_and_only_when_needed():
    llama = architectures.published("meta-llama/Llama-3.1-8B")

    def plan(gpu_memory_mib, ranks_per_node=8, **requested):
        return memory_plan.choose(llama, batch_size=2, seq_len=2048, world_size=2 * ranks_per_node,
                                  ranks_per_node=ranks_per_node, gpu_memory_mib=gpu_memory_mib,
                                  requested=memory_plan.Settings(**requested))

    assert plan(81920).changed == (), "fits an H100 as asked"
    assert plan(40960).changed == ("activation_checkpointing",), "an A100 40GB: checkpointing is enough"
    assert plan(40960, activation_checkpointing=True).changed == (), "a lever already on is no change"
    l4 = plan(22888, ranks_per_node=4)
    assert l4.changed == ("activation_checkpointing", "reshard_after_forward", "sharding", "reduce_dtype") \
        and l4.fits and l4.settings.reduce_dtype == "bf16", \
        f"2 x 4 L4s: checkpointing, reshard_after_forward, full sharding over all 8, then bf16 reduction: {l4.describe()}"
    assert not plan(22888, ranks_per_node=4, sharding="hybrid").fits, "HSDP's 4-way shards, asked for, cannot fit"


def test_the_job_applies_the_plan_the_preview_exports():
    import torch

    from infra import config as stack_config
    from infra.job import job_config
    from infra.preview import job_plan
    from tests.support.pulumi_mocks import stack_settings
    from workload import trainer

    raw = stack_settings("dev") | {"trainEnabled": True, "trainModelId": "meta-llama/Llama-3.1-8B"}
    cfg = stack_config.parse(raw)
    workload = job_config.workload_config(cfg, INSTANCE_FACTS["g6.12xlarge"])
    preview = job_plan.check_job_shape(workload, architectures.published(workload.model_id),
                                          INSTANCE_FACTS["g6.12xlarge"], 8, model=workload.model_id, node_count=2)
    # On a GPU the job plans before it builds the model; the device's memory comes from the flag the stack sets.
    applied, job = trainer._plan_memory(workload, 8, 4, torch.device("cuda", 0))
    assert job.as_dict() == preview.as_dict(), "the job runs the plan the preview showed"
    assert (applied.activation_checkpointing, applied.reshard_after_forward, applied.sharding) == (True, True, "full")
    assert trainer._plan_memory(workload, 8, 4, torch.device("cpu")) == (workload, None), "no plan on CPU"
    with pytest.raises(ValueError, match="does not fit 8 GPUs of 22888 MiB"):
        trainer._plan_memory(dataclasses.replace(workload, model_id="meta-llama/Llama-3.1-70B"), 8, 4,
                             torch.device("cuda", 0))


def test_the_known_instance_types_are_the_stacks_facts():
    for instance_type, known in instance_facts.KNOWN_GPU_INSTANCE_TYPES.items():
        facts = INSTANCE_FACTS[instance_type]
        assert (facts.gpus, facts.gpu_memory_mib, facts.gpu_name) == tuple(known), instance_type
    assert math.isclose(memory.usable_gib(1024), 0.5)


def test_each_familys_terms_follow_its_config():
    """Families not shipped: their totals (the Hub's figures), their norms, q/k norms, tied defaults, eager attention
    and experts, each a term of the projection."""
    totals = {"google/gemma-2-2b-it": 2_614_341_888, "google/gemma-3-1b-pt": 999_885_952,
              "microsoft/Phi-3-mini-4k-instruct": 3_821_079_552, "allenai/OLMo-2-1124-7B": 7_298_617_344,
              "mistralai/Mixtral-8x7B-v0.1": 46_702_792_704}
    for model_id, total in totals.items():
        assert memory.parameter_count(fixture_config(model_id)) == total, model_id
    gemma2, olmo2 = fixture_config("google/gemma-2-2b-it"), fixture_config("allenai/OLMo-2-1124-7B")
    assert "tie_word_embeddings" not in gemma2 and len(memory.root_shapes(gemma2)) == 2, "Gemma ties by default"
    mixtral = fixture_config("mistralai/Mixtral-8x7B-v0.1")
    assert len(memory.root_shapes(mixtral)) == 3 and memory.experts(mixtral) == 8, "Mixtral does not, and has 8"
    # Gemma 2: four norms of the hidden width instead of two, and eager attention's scores, which grow with the
    # sequence; as a Llama-shaped config it would be counted without both.
    plain = dict(gemma2, model_type="llama", attn_logit_softcapping=None)
    extra = memory.activation_bytes_per_token(gemma2, 2048) - memory.activation_bytes_per_token(plain, 2048)
    assert extra == 2 * memory.NORM_ACTIVATION_BYTES_PER_HIDDEN * 2304 + 8 * 8 * 2048, extra
    # OLMo 2's q/k norms over all heads: what Qwen3's add per width, and (untied) a second vocabulary matrix.
    olmo_extra = memory.activation_bytes_per_token(olmo2) - memory.activation_bytes_per_token(dict(olmo2, model_type="llama"))
    assert olmo_extra == 8 * 4096 + 8 * 4096 and len(memory.root_shapes(olmo2)) == 3, olmo_extra
