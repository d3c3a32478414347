"""--method lora and qlora measured as one rank of the dev stack (2 x g6.12xlarge: 8 L4 of 22888 MiB), for issue 32.

    python -m bench.record.adapter_memory --out adapter_memory.jsonl   # on one GPU (the H200): every case, the load
    python -m bench.record.adapter_memory --cases 0 --load_layers 0    # the 70B qlora step alone
    python -m bench.record.adapter_memory --smoke                      # tiny shapes on CPU: the same code, in seconds

Each case is one rank of a world of 8 (a fake process group, as bench/record/memory_bench.py and
bench/record/memory_cap.py run one: its collectives return without moving data, so the rank holds exactly what a real
one holds) with the model's published shape, built on the meta device, given --method's adapters
(workload.model.adapters.lora.apply: NF4 base weights for qlora), sharded by the job's shard_model, materialised with
random values (NF4 shards quantized from random bf16 rows by the loader's own
workload.model.adapters.nf4.quantized_shard), and trained for STEPS real steps of the job's train_step under
torch.cuda.set_per_process_memory_fraction at an L4's usable memory (workload.model.memory.usable_gib of EC2's 22888
MiB). The levers are the memory plan's (workload.model.memory_plan.for_job, which knows the methods once issue 32's
infra half is in), else LEVERS. Each case runs in a process of its own (the allocator's peaks are per process) and
prints torch.cuda.max_memory_allocated and max_memory_reserved over steps 2..STEPS beside
workload.model.memory.estimate's projection for the method (`projection: n/a` where estimate does not take method= yet).

The load: a 70B-shaped safetensors checkpoint written on disk in pieces (one file per decoder layer and one for the
embeddings and head, bf16 random values, --load_layers of the 80 layers: the whole model is 141 GB, more than the
benchmark machine's disk), then this rank's shards of it loaded by the job's loader (workload.model.build's
load_pretrained: each tensor's rows read with safe_open's get_slice and quantized to NF4 as they arrive) in a process
of its own: its seconds and its peak resident memory (ru_maxrss, which counts the file pages it mapped), and the
seconds scaled to 80 layers.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from bench.common import GIB, announce, benchmark_parser
from workload.config import TINY, TrainConfig
from workload.model import architectures, memory

WORLD_SIZE = 8  # the dev stack: 2 x g6.12xlarge, 4 L4 each
L4_MIB = 22888  # EC2 DescribeInstanceTypes' g6.12xlarge GPU memory (bench/record/memory_cap.py's INSTANCE_GPUS)
# (Hub id, --method, per-GPU batch, seq_len): the 70B on dev in qlora, and the 7B the full method only just
# fits on dev, in lora and in full.
CASES = (
    ("meta-llama/Llama-3.3-70B-Instruct", "qlora", 1, 2048),
    ("Qwen/Qwen2.5-7B", "lora", 2, 2048),
    ("Qwen/Qwen2.5-7B", "full", 2, 2048),
)
# Levers where the memory plan gives none: a 70B's gathered layers do not stay on an L4 from forward to backward.
LEVERS = {"qlora": {"activation_checkpointing": True, "reshard_after_forward": True},
          "lora": {"activation_checkpointing": True}, "full": {"activation_checkpointing": True}}
STEPS = 3
LOAD_MODEL = "meta-llama/Llama-3.3-70B-Instruct"
SMOKE_CONFIG = {**TINY, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}


def published(model_id: str, smoke: bool) -> dict:
    return dict(SMOKE_CONFIG) if smoke else architectures.published(model_id)


def job_config(model_id: str, method: str, batch: int, seq_len: int, smoke: bool) -> tuple[TrainConfig, str, int]:
    """The job's flags for a case with the memory plan's levers (or LEVERS), where the levers came from, and the
    shards the state is split over (all the ranks, or a node's 4 where the plan takes HSDP)."""
    cfg = TrainConfig(model_id=model_id, method=method, batch_size=batch, seq_len=64 if smoke else seq_len,
                      compile=not smoke, lora_rank=16, steps=STEPS)
    if smoke:
        return cfg, "smoke", WORLD_SIZE
    try:
        from workload.model import memory_plan

        plan = memory_plan.for_job(cfg, published(model_id, smoke), world_size=WORLD_SIZE, ranks_per_node=4,
                                   gpu_memory_mib=L4_MIB, compiled=True)
        if plan.fits:
            return memory_plan.apply(cfg, plan), f"plan: {plan.describe()}", plan.as_dict().get("shards", WORLD_SIZE)
        source = f"the plan does not fit ({plan.reason}); LEVERS"
    except Exception as error:  # noqa: BLE001 - a plan that does not know the methods yet
        source = f"no plan ({type(error).__name__}: {error}); LEVERS"
    import dataclasses

    return dataclasses.replace(cfg, **LEVERS[method]), source, WORLD_SIZE


def adapter_model(config: dict, cfg: TrainConfig, device, shards: int = WORLD_SIZE):
    """One rank's model: meta-built, --method's adapters, sharded over `shards` ranks (HSDP's (replicas, shards) mesh
    where fewer than the world), materialised with random values."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from workload.model.adapters import lora, nf4
    from workload.model.loss import CausalLMWithLoss
    from workload.model.sharding import build_mesh, shard_model

    fields = {key: value for key, value in config.items()
              if key not in ("architectures", "model_type", "torch_dtype", "transformers_version", "use_cache")}
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields, use_cache=False),
                                              dtype=torch.float32)
    if cfg.activation_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lm.train()
    model = CausalLMWithLoss(lm, chunked_loss=cfg.chunked_loss, compiled_loss=bool(cfg.compile))
    model = lora.apply(model, cfg)
    mesh = (WORLD_SIZE // shards, shards) if shards < WORLD_SIZE else None
    model = shard_model(model, build_mesh(device, mesh), cfg)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            local = parameter.to_local()
            if nf4.is_nf4(parameter):
                rows = (torch.randn(local.shape, device=device) * 0.02).to(torch.bfloat16)
                parameter._local_tensor = nf4.quantized_shard(local, rows)
            elif parameter.requires_grad and cfg.method != "full":
                continue  # the adapters: lora.initialize below
            else:
                local.normal_(0.0, 0.02)
        for name, buffer in model.named_buffers():
            if name.endswith("inv_freq"):
                buffer.copy_(torch.linspace(1.0, 1e-4, buffer.numel(), device=device))
    lora.initialize(model, cfg.seed)
    return model


def projection(config: dict, cfg: TrainConfig, shards: int = WORLD_SIZE) -> dict | str:
    """workload.model.memory.estimate for the case, with method= and lora_rank= (issue 32's infra half)."""
    try:
        estimate = memory.estimate(config, micro_batch=cfg.batch_size // cfg.grad_accum_steps, seq_len=cfg.seq_len,
                                   shards=shards, activation_checkpointing=cfg.activation_checkpointing,
                                   reshard_after_forward=cfg.reshard_after_forward,
                                   grad_accum_steps=cfg.grad_accum_steps, compiled=bool(cfg.compile),
                                   reduce_dtype="bf16" if cfg.reduce_dtype == "bf16" else "fp32", ranks=WORLD_SIZE,
                                   method=cfg.method, lora_rank=cfg.lora_rank, lora_targets=cfg.lora_targets)
    except TypeError:
        return "n/a"
    return {"allocated_gib": round(estimate.allocated_gib, 2), "peak_gib": round(estimate.peak_gib, 2)}


def run_one(case: tuple, smoke: bool) -> dict:
    """One case as one rank of the fake world, in this process."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from workload.model.optimizer import build_optimizer
    from workload.model.step import train_step

    model_id, method, batch, seq_len = case
    config = published(model_id, smoke)
    cfg, levers, shards = job_config(model_id, method, batch, seq_len, smoke)
    device = torch.device("cpu") if smoke else torch.device("cuda", 0)
    cap_gib = memory.usable_gib(L4_MIB)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(cap_gib * GIB / total, device)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD_SIZE)
    started, oom, steps_done = time.perf_counter(), "", 0
    try:
        model = adapter_model(config, cfg, device, shards)
        optimizer = build_optimizer(model, cfg)
        generator = torch.Generator(device=device).manual_seed(0)
        for step in range(STEPS):
            if step == 1 and device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            tokens = torch.randint(config["vocab_size"], (cfg.batch_size, cfg.seq_len), device=device,
                                   generator=generator)
            loss = train_step(model, optimizer, tokens, cfg)
            steps_done = step + 1
        loss = loss.item()
    except torch.OutOfMemoryError as error:
        oom, loss = str(error).split("\n")[0][:300], None
    finally:
        dist.destroy_process_group()
    result = {"model": model_id, "method": method, "batch": batch, "seq_len": seq_len, "world_size": WORLD_SIZE,
              "cap_gib": round(cap_gib, 2), "levers": levers, "activation_checkpointing": cfg.activation_checkpointing,
              "reshard_after_forward": cfg.reshard_after_forward, "grad_accum_steps": cfg.grad_accum_steps,
              "shards": shards, "reduce_dtype": cfg.reduce_dtype, "oom": oom, "steps_done": steps_done,
              "last_loss": loss, "projection": projection(config, cfg, shards),
              "seconds": round(time.perf_counter() - started, 1), "torch": torch.__version__}
    if device.type == "cuda":
        result["allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 2)
        result["reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / GIB, 2)
    return result


def write_checkpoint(config: dict, layers: int, directory: str) -> float:
    """A safetensors checkpoint of `config`'s shape with `layers` decoder layers, one file per layer (and one for the
    embeddings, final norm and head) and its index, bf16 random values, written a tensor at a time. Its GB."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {key: value for key, value in config.items()
              if key not in ("architectures", "model_type", "torch_dtype", "transformers_version", "use_cache")}
    hf_config = AutoConfig.for_model(config["model_type"], **{**fields, "num_hidden_layers": layers})
    with torch.device("meta"):
        shapes = {name: tuple(tensor.shape) for name, tensor in AutoModelForCausalLM.from_config(hf_config)
                  .state_dict().items()}
    files: dict[str, list[str]] = {}
    for name in shapes:
        index = name.split(".")[2] if name.startswith("model.layers.") else "root"
        files.setdefault(f"model-{index}.safetensors", []).append(name)
    written = 0
    generator = torch.Generator().manual_seed(0)
    for file_name, names in files.items():
        tensors = {name: (torch.randn(shapes[name], generator=generator) * 0.02).to(torch.bfloat16) for name in names}
        save_file(tensors, os.path.join(directory, file_name), metadata={"format": "pt"})
        written += sum(tensor.numel() * 2 for tensor in tensors.values())
        del tensors
    weight_map = {name: file_name for file_name, names in files.items() for name in names}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as file:
        json.dump({"metadata": {"total_size": written}, "weight_map": weight_map}, file)
    hf_config.save_pretrained(directory)
    return written / 1e9


def load_one(directory: str, layers: int, smoke: bool) -> dict:
    """This rank's NF4 shards of the checkpoint in `directory`, loaded by the job's loader, in this process."""
    import dataclasses

    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from workload.model.adapters import lora
    from workload.model.build import load_pretrained
    from workload.model.loss import CausalLMWithLoss
    from workload.model.sharding import build_mesh, shard_model

    device = torch.device("cpu") if smoke else torch.device("cuda", 0)
    config = {**published(LOAD_MODEL, smoke), "num_hidden_layers": layers}
    cfg = TrainConfig(model_id=directory, method="qlora", compile=False)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD_SIZE)
    try:
        fields = {key: value for key, value in config.items()
                  if key not in ("architectures", "model_type", "torch_dtype", "transformers_version", "use_cache")}
        from transformers import AutoConfig

        from workload.model import compatibility

        # As the job builds it: parameters on meta, the rotary buffers computed (they are in no file).
        lm = compatibility.build(AutoConfig.for_model(config["model_type"], **fields, use_cache=False), LOAD_MODEL)
        model = CausalLMWithLoss(lm, chunked_loss=True)
        model = shard_model(lora.apply(model, dataclasses.replace(cfg)), build_mesh(device), cfg)
        started = time.perf_counter()
        load_pretrained(model, directory, device, cfg)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - started
        device_gib = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
    finally:
        dist.destroy_process_group()
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    return {"load_layers": layers, "load_seconds": round(seconds, 1),
            "load_seconds_scaled_to_all_layers": round(seconds * published(LOAD_MODEL, smoke)["num_hidden_layers"]
                                                       / layers, 1),
            "host_rss_peak_gib": round(rss_gib, 2), "device_allocated_gib": device_gib and round(device_gib, 2)}


def in_subprocess(argument: dict) -> dict:
    """A case or the load in a process of its own; its JSON line back."""
    done = subprocess.run([sys.executable, "-m", "bench.record.adapter_memory", "--one", json.dumps(argument)],
                          capture_output=True, text=True, env={**os.environ, "PYTORCH_CUDA_ALLOC_CONF":
                                                               "expandable_segments:True"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {**argument, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:500]}
    return json.loads(lines[-1])


def run(cases: list[int], load_layers: int, smoke: bool, out=None) -> list[dict]:
    results = []
    for index in cases:
        argument = {"case": list(CASES[index]), "smoke": smoke}
        result = run_one(tuple(CASES[index]), smoke) if smoke else in_subprocess(argument)
        results.append(result)
        _print(result, out)
    if load_layers:
        with tempfile.TemporaryDirectory(prefix="synthetic-70b-") as directory:
            started = time.perf_counter()
            gigabytes = write_checkpoint(published(LOAD_MODEL, smoke), load_layers, directory)
            argument = {"load": directory, "layers": load_layers, "smoke": smoke}
            result = load_one(directory, load_layers, smoke) if smoke else in_subprocess(argument)
            result.update(checkpoint_gb=round(gigabytes, 1), write_seconds=round(time.perf_counter() - started, 1))
            results.append(result)
            _print(result, out)
    return results


def _print(result: dict, out) -> None:
    line = json.dumps(result)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()
    if "method" in result:
        measured = (f"allocated {result.get('allocated_gib')} GiB, reserved {result.get('reserved_gib')} GiB"
                    if "allocated_gib" in result else "no GPU")
        projected = result["projection"] if result["projection"] == "n/a" else (
            f"{result['projection']['allocated_gib']} GiB allocated")
        print(f"# {result['model']} {result['method']}: {measured}; projection: {projected}; "
              f"oom: {bool(result.get('oom'))}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, step_flags=False)
    parser.add_argument("--cases", default="", help="comma-separated indices into CASES; empty: all")
    parser.add_argument("--load_layers", type=int, default=4, help="decoder layers of the synthetic 70B checkpoint "
                        "whose sharded NF4 load is measured (4: 11 GB of files); 0: no load")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, in this process")
    parser.add_argument("--out", default="", help="also append each JSON line to this file")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.one:
        argument = json.loads(args.one)
        if "load" in argument:
            print(json.dumps(load_one(argument["load"], argument["layers"], argument["smoke"])))
        else:
            print(json.dumps(run_one(tuple(argument["case"]), argument["smoke"])))
        return 0
    announce()
    cases = [int(index) for index in args.cases.split(",") if index] or list(range(len(CASES)))
    load_layers = min(args.load_layers, TINY["num_hidden_layers"]) if args.smoke else args.load_layers
    with open(args.out, "a") if args.out else open(os.devnull, "w") as out:
        run(cases, load_layers, args.smoke, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
