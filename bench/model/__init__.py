"""The step-time model, library code: step_model (the tokens/s each sharding strategy should reach on each stack's
hardware), its inputs (step_inputs: the H200 measurements, GPU and link figures, assumptions) and the model's shape
(step_shapes: FSDP units, FLOPs and collectives from a config.json), model_table (docs/models.md's table from it),
offload (activation offloading's host memory, saved bytes and copies) and step_breakdown (the 70B QLoRA dev step by
part, and each lever on it).

May import workload/ (and model_table: infra/ and tests' stack facts, to read the stacks as `pulumi up` does); never
bench.common, bench.record or bench.explore. Imported by tests, docs/models.md's table and the emulation
(bench.record.emulate_rank, bench.record.emulate), so an emulation and the prediction it checks share one model.
"""
