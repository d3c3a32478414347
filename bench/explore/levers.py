"""Exploratory: time training-step levers for Qwen2.5-1.5B on one GPU, standalone (no project code).

Used once to choose the workload's defaults; bench/record/step_bench.py is the benchmark of record.
    python bench/explore/levers.py --variants recipe,fsdp2,fsdp2-compile,... --batch 8 --seq 2048
"""
import argparse
import functools
import json
import math
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from transformers import AutoModelForCausalLM, Qwen2Config

PEAK = 989e12
QWEN_1_5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                 rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True)


@torch.compile(dynamic=False)
def _ce_chunk(logits, targets):
    """Loss sum and d(loss sum)/d(logits) of one chunk, fused by inductor into one pass over the logits."""
    lf = logits.float()
    lse = torch.logsumexp(lf, dim=-1)
    loss = (lse - lf.gather(1, targets[:, None]).squeeze(1)).sum()
    onehot = torch.arange(lf.shape[1], device=lf.device)[None, :] == targets[:, None]
    grad = torch.exp(lf - lse[:, None]) - onehot.float()
    return loss, grad.to(logits.dtype)


class LinearCrossEntropyCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk):
        n = hidden.shape[0]
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk):
            h, t = hidden[s:s + chunk], targets[s:s + chunk]
            loss, g = _ce_chunk(h @ weight.T, t)
            total += loss
            grad_hidden[s:s + chunk] = g @ weight
            grad_weight += (g.T @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.n = n
        ctx.wdtype = weight.dtype
        return total / n

    @staticmethod
    def backward(ctx, grad_out):
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_out / ctx.n
        return grad_hidden * scale.to(grad_hidden.dtype), (grad_weight * scale).to(ctx.wdtype), None, None


class WithLoss(torch.nn.Module):
    """Root module whose forward returns the loss, so FSDP2's root hooks cover embed, norm and lm_head."""

    def __init__(self, lm, variant):
        super().__init__()
        self.lm, self.variant = lm, variant

    def forward(self, ids):
        lm = self.lm
        hidden = lm.model(input_ids=ids).last_hidden_state[:, :-1].reshape(-1, lm.config.hidden_size)
        targets = ids[:, 1:].reshape(-1)
        w = lm.lm_head.weight
        if "liger" in self.variant:
            from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
            return liger_fused_linear_cross_entropy(hidden, w, targets)
        if "chunkedc" in self.variant:
            return LinearCrossEntropyCompiled.apply(hidden, w, targets, 16376 if "c16k" in self.variant else 8188 if "c8k" in self.variant else 4094)
        return LinearCrossEntropy.apply(hidden, w, targets, 4094)


class LinearCrossEntropy(torch.autograd.Function):
    """Mean CE of (hidden @ weight.T) over chunks of tokens, gradients computed in forward: no full logits."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk):
        n = hidden.shape[0]
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk):
            h, t = hidden[s:s + chunk], targets[s:s + chunk]
            logits = (h @ weight.T).float()
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, t[:, None]).squeeze(1)).sum()
            probs = torch.exp(logits.sub_(lse[:, None]))
            probs[torch.arange(len(t), device=t.device), t] -= 1
            g = probs.to(h.dtype)
            grad_hidden[s:s + chunk] = g @ weight
            grad_weight += (g.T @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.n = n
        ctx.wdtype = weight.dtype
        return total / n

    @staticmethod
    def backward(ctx, grad_out):
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_out / ctx.n
        return grad_hidden * scale.to(grad_hidden.dtype), (grad_weight * scale).to(ctx.wdtype), None, None


def build(variant, device):
    torch.manual_seed(0)
    cfg = Qwen2Config(**QWEN_1_5B, torch_dtype=torch.bfloat16)
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    if variant == "recipe":
        model = FSDP(model, device_id=device,
                     auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=int(1e7)))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.config.use_cache = False
    fp32_master = "fp32" in variant
    if fp32_master:
        model = model.float()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        if "compile" in variant:
            layer.compile(mode="max-autotune-no-cudagraphs" if "maxat" in variant else None)
        if "nofsdp" not in variant:
            fully_shard(layer, mp_policy=mp, reshard_after_forward="nors" not in variant)
    if "chunked" in variant or "liger" in variant:
        model = WithLoss(model, variant)
    if "nofsdp" not in variant:
        fully_shard(model, mp_policy=mp)
    fused = "nofused" not in variant
    return model, torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused)


def loss_of(variant, model, ids):
    if isinstance(model, WithLoss):
        return model(ids)
    return model(input_ids=ids, labels=ids).loss


def attention_backends(variant):
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel
    if "cudnn" not in variant:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION],
                       set_priority=True)


def run(variant, args, device):
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    model, opt = build(variant, device)
    n_params = sum(p.numel() for p in model.parameters())
    flops_per_token = 6 * 1543714304 + 12 * 28 * 1536 * args.seq
    losses, times = [], []
    for step in range(args.warmup + args.steps):
        g = torch.Generator().manual_seed(step)
        ids = torch.randint(0, 151936, (args.batch, args.seq), generator=g).to(device)
        torch.cuda.synchronize(); s = time.perf_counter()
        with attention_backends(variant):
            loss = loss_of(variant, model, ids)
            loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize(); times.append(time.perf_counter() - s)
    if variant in args.phases.split(","):
        # CPU time to issue each phase (no sync inside) against GPU time of each phase (events).
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        cpu = []
        for _ in range(3):
            torch.cuda.synchronize()
            t = [time.perf_counter()]; ev[0].record()
            with attention_backends(variant):
                loss = loss_of(variant, model, ids)
                t.append(time.perf_counter()); ev[1].record()
                loss.backward()
            t.append(time.perf_counter()); ev[2].record()
            opt.step(); opt.zero_grad(set_to_none=True)
            t.append(time.perf_counter()); ev[3].record()
            torch.cuda.synchronize()
            t.append(time.perf_counter())
            cpu = [round((b - a) * 1e3, 1) for a, b in zip(t, t[1:])]
            gpu = [round(ev[i].elapsed_time(ev[i + 1]), 1) for i in range(3)]
        print(json.dumps(dict(variant=variant, phases="forward,backward,optimizer,(drain)", cpu_issue_ms=cpu,
                              gpu_event_ms=gpu)), flush=True)
    if variant == args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            with attention_backends(variant):
                loss = loss_of(variant, model, ids)
                loss.backward()
            opt.step(); opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        if os.environ.get("OUT"):
            import gzip
            import shutil
            prof.export_chrome_trace("/tmp/trace.json")
            with open("/tmp/trace.json", "rb") as src, gzip.open(os.environ["OUT"] + "/trace.json.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70), flush=True)
    dt = sorted(times[args.warmup:])[len(times[args.warmup:]) // 2]
    tps = args.batch * args.seq / dt
    # Throughput with no sync between steps: losses are read after the timed run, as a training loop that logs
    # the previous step's loss would.
    batches = [torch.randint(0, 151936, (args.batch, args.seq), generator=torch.Generator().manual_seed(100 + i))
               for i in range(args.steps)]
    torch.cuda.synchronize(); s = time.perf_counter()
    pending = []
    for ids in batches:
        with attention_backends(variant):
            loss = loss_of(variant, model, ids.to(device, non_blocking=True))
            loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
        pending.append(loss.detach())
    torch.cuda.synchronize()
    run_tps = args.batch * args.seq * args.steps / (time.perf_counter() - s)
    assert all(math.isfinite(l.item()) for l in pending)
    res = dict(variant=variant, tokens_per_s=round(tps), run_tokens_per_s=round(run_tps),
               run_mfu=round(run_tps * flops_per_token / PEAK, 3), mfu=round(tps * flops_per_token / PEAK, 3),
               peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1), first_losses=[round(l, 4) for l in losses[:5]],
               setup_s=round(time.time() - t0 - sum(times), 1), n_params=n_params)
    print(json.dumps(res), flush=True)
    del model, opt
    return res


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="recipe,fsdp2-compile")
    p.add_argument("--batch", type=int, default=8); p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=3); p.add_argument("--steps", type=int, default=6)
    p.add_argument("--profile", default="")
    p.add_argument("--phases", default="")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    device = torch.device("cuda", 0); torch.cuda.set_device(device)
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    for v in args.variants.split(","):
        try:
            run(v, args, device)
        except Exception as e:
            print(json.dumps(dict(variant=v, error=repr(e)[:500])), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
