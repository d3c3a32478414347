"""fp8 (--fp8, workload/model/fp8.py) against bf16 on one GPU: tokens/s of the project's step, and the loss of a real
fine-tune on the repository's sample corpus, side by side in one process.

    python3 -m bench.record.fp8_bench --output $OUT/fp8_bench.jsonl       # on a GPU with fp8 (L4, L40S, H100, H200)

- speed: workload.model's default step on Qwen2.5-1.5B (random weights, random tokens), bf16 then fp8, at each
  --speed_batches per-GPU batch of --seq_len tokens; median step after warm-up (bench.common.measure).
- loss: a small Qwen2-shaped model (LOSS_ARCHITECTURE) trained for --loss_steps on data/corpus.txt with
  data/tokenizer (workload.data.batches's packing, 20% held out), through workload.model's own shard_model and
  train_step: bf16 with seeds 0 and 1 (their difference is the seed-to-seed noise), fp8 with the same seeds. The verdict
  compares fp8's difference from bf16 at the same seed with that noise.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, Qwen2Config

from bench.common import announce, benchmark_parser, fresh, measure, project_step, single_process_group
from workload.config import TrainConfig
from workload.data.batches import make_data
from workload.model.loss import CausalLMWithLoss
from workload.model.optimizer import build_optimizer, learning_rate_at, set_learning_rate
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import evaluate, train_step

# Qwen2's shape at 8 layers of 512: every linear dimension a multiple of 16 (torch._scaled_mm's rule), so every
# decoder linear runs in fp8; big enough that the matmuls, not the launches, dominate a step.
LOSS_ARCHITECTURE = dict(vocab_size=512, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                         rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
CORPUS, TOKENIZER = "data/corpus.txt", "data/tokenizer"


def loss_run(seed: int, fp8: bool, steps: int, device: torch.device) -> dict:
    """One fine-tune on the sample corpus: the per-step training losses and the held-out loss at the end."""
    cfg = TrainConfig(dataset=CORPUS, tokenizer=TOKENIZER, seq_len=64, batch_size=8, eval_fraction=0.2, seed=seed,
                      steps=steps, learning_rate=1e-3, warmup_steps=min(20, steps), lr_schedule="cosine", fp8=fp8)
    torch.manual_seed(seed)
    with torch.device(device):
        lm = AutoModelForCausalLM.from_config(Qwen2Config(**LOSS_ARCHITECTURE, use_cache=False), dtype=torch.float32)
    model = CausalLMWithLoss(lm, chunked_loss=True, compiled_loss=True)
    model = shard_model(model, build_mesh(device), cfg)
    optimizer = build_optimizer(model, cfg)
    data = make_data(cfg, LOSS_ARCHITECTURE["vocab_size"], rank=0, world_size=1)
    losses = []
    for step in range(steps):
        set_learning_rate(optimizer, learning_rate_at(cfg, step))
        losses.append(train_step(model, optimizer, data.train(step).to(device), cfg))
    losses = [loss.item() for loss in losses]
    held_out = evaluate(model, [batch.to(device) for batch in data.eval]).item()
    return {"run": "loss", "seed": seed, "fp8": fp8, "steps": steps, "held_out_loss": round(held_out, 4),
            "mean_train_loss_last_50": round(statistics.mean(losses[-50:]), 4),
            "train_losses_every_10": [round(loss, 4) for loss in losses[::10]]}


def curve_gap(a: dict, b: dict) -> float:
    """Largest gap between two runs' training losses, each smoothed over 10 steps, after the first 50 steps."""
    return max(abs(x - y) for x, y in zip(a["train_losses_every_10"][5:], b["train_losses_every_10"][5:]))


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, step_flags=False)
    parser.add_argument("--speed_batches", default="2,8")
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--loss_steps", type=int, default=300)
    parser.add_argument("--skip", default="", help="speed or loss")
    parser.add_argument("--output", default="")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()
    device = torch.device("cuda", 0)
    single_process_group(device, port=29513)
    output = open(args.output, "w") if args.output else None

    def emit(line: dict) -> None:
        print(json.dumps(line), flush=True)
        if output:
            output.write(json.dumps(line) + "\n")
            output.flush()

    emit({"torch": torch.__version__, "device": torch.cuda.get_device_name(device)})
    if "speed" not in args.skip:
        for batch in (int(b) for b in args.speed_batches.split(",")):
            results = {}
            for fp8 in (False, True):
                fresh(device)
                cfg = TrainConfig(model_config="qwen2.5-1.5b", batch_size=batch, seq_len=args.seq_len, fp8=fp8)
                results[fp8] = measure("fp8" if fp8 else "bf16", project_step(cfg, device), cfg, device, 3, 8)
                emit({**results[fp8], "batch_size": batch})
            emit({"run": "speed", "batch_size": batch,
                  "fp8_over_bf16_tokens_per_s": round(results[True]["tokens_per_s"] / results[False]["tokens_per_s"], 3),
                  "first_losses": {"bf16": results[False]["losses"][:4], "fp8": results[True]["losses"][:4]}})
    if "loss" not in args.skip:
        runs = {}
        for fp8 in (False, True):
            for seed in (0, 1):
                runs[fp8, seed] = loss_run(seed, fp8, args.loss_steps, device)
                emit(runs[fp8, seed])
        noise = {key: abs(runs[False, 0][key] - runs[False, 1][key])
                 for key in ("held_out_loss", "mean_train_loss_last_50")}
        gaps = {seed: {key: abs(runs[True, seed][key] - runs[False, seed][key]) for key in noise} for seed in (0, 1)}
        emit({"run": "loss verdict", "bf16_seed_to_seed": {k: round(v, 4) for k, v in noise.items()},
              "bf16_seed_to_seed_curve_gap": round(curve_gap(runs[False, 0], runs[False, 1]), 4),
              "fp8_vs_bf16_same_seed": {seed: {k: round(v, 4) for k, v in gap.items()} for seed, gap in gaps.items()},
              "fp8_vs_bf16_curve_gap": {seed: round(curve_gap(runs[True, seed], runs[False, seed]), 4)
                                        for seed in (0, 1)},
              "within_noise": all(gap[key] <= noise[key] for gap in gaps.values() for key in noise)})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
