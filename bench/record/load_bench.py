"""Load-time memory of a model whose fp32 copy does not fit the memory a rank is allowed, loaded as the job loads it.

    python -m bench.record.load_bench --directory /tmp/llama-8b-shape --cap_gib 20 --world_size 8 --ranks 0,7

1. Writes (once) a random-weight model of Llama-3.1-8B's shape (8.03 B parameters, LLAMA_3_1_8B below) as bf16
   safetensors shards with their model.safetensors.index.json, as the Hub publishes such a model: 16 GB on disk.
2. For each of --ranks, in a fresh process: that rank of a --world_size job on a fake process group
   (torch.testing._internal.distributed.fake_pg: FakeStore, backend "fake"; the collectives return at once, the
   shards are the real rank's), under torch.cuda.set_per_process_memory_fraction at --cap_gib GiB (below the
   model's fp32 size, 30 GiB), loads it through the job's path (workload.model.build.build_model on the meta device,
   shard_model, load_pretrained) and prints one JSON line: the GPU's peak (max_memory_allocated), the process's
   RSS before the load and its peak (VmHWM, file pages of the memory-mapped safetensors included), the rank's fp32 shard
   bytes, the seconds taken, a spot check of the loaded rows against the file, and whether the cap holds (a tensor of
   the fp32 model's size cannot be allocated under it).

The job's earlier path, from_pretrained(dtype=float32).to(device) on every rank, needs the whole fp32 model on every
GPU (and in every rank's host memory first): 32 GB, above the cap.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

from bench.common import announce, benchmark_parser

# Llama-3.1-8B's published config.json (huggingface.co/meta-llama/Llama-3.1-8B), the fields that shape the model.
LLAMA_3_1_8B = dict(
    model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=128256, hidden_size=4096,
    intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
    rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    bos_token_id=128000, eos_token_id=128001,
)
SHARD_BYTES = 4 * 2**30  # per safetensors file, about the Hub's usual 5 GB


def shape(layers: int | None) -> dict:
    return dict(LLAMA_3_1_8B, num_hidden_layers=layers or LLAMA_3_1_8B["num_hidden_layers"])


def write(directory: str, device: torch.device, layers: int | None) -> dict:
    """The model's files: random bf16 tensors made on the GPU, written shard file by shard file."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**shape(layers))
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        return {"written": False}
    os.makedirs(directory, exist_ok=True)
    with torch.device("meta"):
        shapes = {name: tensor.shape for name, tensor in AutoModelForCausalLM.from_config(config).state_dict().items()}
    started, weight_map, shard, shard_bytes, files = time.perf_counter(), {}, {}, 0, 0
    generator = torch.Generator(device).manual_seed(0)

    def flush():
        nonlocal shard, shard_bytes, files
        files += 1
        name = f"model-{files:05d}.safetensors"
        save_file(shard, os.path.join(directory, name), metadata={"format": "pt"})
        weight_map.update({key: name for key in shard})
        shard, shard_bytes = {}, 0

    for name, size in shapes.items():
        tensor = torch.randn(size, generator=generator, device=device, dtype=torch.bfloat16) * 0.02
        shard[name] = tensor.cpu()
        shard_bytes += shard[name].numel() * 2
        if shard_bytes >= SHARD_BYTES:
            flush()
    if shard:
        flush()
    with open(index, "w") as file:
        json.dump({"metadata": {"total_size": sum(2 * size.numel() for size in shapes.values())},
                   "weight_map": weight_map}, file)
    config.save_pretrained(directory)
    return {"written": True, "files": files, "seconds": round(time.perf_counter() - started, 1),
            "parameters": sum(size.numel() for size in shapes.values())}


def load(directory: str, rank: int, world_size: int, cap_gib: float, device: torch.device) -> dict:
    import torch.distributed as dist
    from safetensors import safe_open
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from workload.config import TrainConfig
    from workload.model import weights
    from workload.model.build import build_model, load_pretrained
    from workload.model.sharding import build_mesh, shard_model

    on_gpu = device.type == "cuda"  # --device cpu is a smoke run of the code, with no cap and no GPU figures
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu and device.index is None else device
    torch.zeros(1, device=device)  # the CUDA context, before the baseline
    if on_gpu:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(cap_gib * 2**30 / total, device)
    rss_before = _status_bytes("VmRSS")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    cfg = TrainConfig(model_id=directory, compile=False)
    started = time.perf_counter()
    sharded = shard_model(build_model(cfg, device, directory), build_mesh(device), cfg)
    load_pretrained(sharded, directory, device, cfg)
    torch.cuda.synchronize() if on_gpu else None
    seconds = time.perf_counter() - started
    rss_peak = _status_bytes("VmHWM")
    parameters = sum(p.numel() for p in sharded.parameters())
    shard_bytes = sum(p.to_local().numel() * p.to_local().element_size() for p in sharded.parameters())

    # Spot check: this rank's first rows of the embedding and of the last layer's down_proj, against the file.
    files = weights.weight_files(directory, "check")
    checked = []
    last = sharded.lm.config.num_hidden_layers - 1
    for name in ("model.embed_tokens.weight", f"model.layers.{last}.mlp.down_proj.weight"):
        parameter = sharded.get_parameter("lm." + name)
        start, stop = weights.local_rows(parameter)
        with safe_open(files[name], framework="pt") as handle:
            rows = handle.get_slice(name)[start:min(stop, start + 4)]
        checked.append(torch.equal(parameter.to_local()[:len(rows)].cpu(), rows.float()))
    cap_holds = None
    if on_gpu:
        try:
            torch.empty(4 * parameters, dtype=torch.uint8, device=device)
            cap_holds = False
        except torch.OutOfMemoryError:
            cap_holds = True
    dist.destroy_process_group()
    return {"rank": rank, "world_size": world_size, "parameters": parameters, "fp32_model_gib": 4 * parameters / 2**30,
            "cap_gib": cap_gib, "cap_refuses_fp32_model": cap_holds, "rank_fp32_shard_gib": shard_bytes / 2**30,
            "gpu_peak_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30 if on_gpu else None,
            "host_rss_gib_before_load": rss_before / 2**30, "host_peak_rss_gib": rss_peak / 2**30,
            "load_seconds": round(seconds, 1), "rows_match_the_file": all(checked),
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device) if on_gpu else None}


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status: VmRSS now, VmHWM its peak. Not getrusage's
    ru_maxrss, which Linux carries over from the forked parent across exec (the writer's 16 GB here)."""
    with open("/proc/self/status") as status:
        line = next((line for line in status if line.startswith(field + ":")), None)
    if line is None:  # a kernel (gVisor's) without the field: the getrusage peak, an upper bound
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return int(line.split()[1]) * 1024


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, step_flags=False)
    parser.add_argument("--directory", default="/tmp/llama-8b-shape")
    parser.add_argument("--cap_gib", type=float, default=20.0)
    parser.add_argument("--world_size", type=int, default=8)
    parser.add_argument("--ranks", default="0,7")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the code (no cap, no GPU figures)")
    parser.add_argument("--layers", type=int, default=None, help="fewer decoder layers than the 8B's 32 (smoke)")
    parser.add_argument("--load_rank", type=int, default=None, help=argparse.SUPPRESS)  # the fresh process's
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.load_rank is not None:
        print(json.dumps(load(args.directory, args.load_rank, args.world_size, args.cap_gib,
                              torch.device(args.device))), flush=True)
        return
    announce()
    print(json.dumps({"write": write(args.directory, torch.device(args.device), args.layers)}), flush=True)
    for rank in (int(rank) for rank in args.ranks.split(",")):
        # A fresh process per rank: its peak RSS and GPU peak are the load's alone, not the writer's.
        subprocess.run([sys.executable, "-m", "bench.record.load_bench", "--directory", args.directory, "--cap_gib",
                        str(args.cap_gib), "--world_size", str(args.world_size), "--device", args.device,
                        "--load_rank", str(rank)],
                       check=True)


if __name__ == "__main__":
    main()
