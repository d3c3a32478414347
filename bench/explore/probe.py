"""Exploratory (issue 7, second round): where the project's step still spends its time, on one GPU.

Used to look for the last 5% to 1.4x; bench/record/step_bench.py stays the benchmark of record. The `+name` variants
monkeypatch workload.model's modules or transformers for the rest of the process: one per run, after any unpatched
variants.
    python3 -m bench.explore.probe gemm             # each projection's matmuls alone, separate and fused
    python3 -m bench.explore.probe profile          # one default step's kernels, grouped
    python -m bench.explore.probe bf16_updates      # on CPU: weights that AdamW at lr 1e-5 moves, bf16 vs fp32
    python3 -m bench.explore.probe gaps             # one step's GPU idle gaps and the CPU ops behind them
    python3 -m bench.explore.probe steps default max_grad_norm=0  # TrainConfig overrides (k=v,k=v), beside the recipe
    python3 -m bench.explore.probe steps +fused_cat # a patch: fused_cat, reduce_bf16, clip_fold, gc_off,
                                                    # no_fsdp_autocast, bf16_params
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json

import torch
import torch.distributed as dist

from bench import common
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import build as build_module
from workload.model import sharding
from workload.model import step as step_module
from workload.model.build import NAMED_CONFIGS
from workload.model.loss import CausalLMWithLoss, LinearCrossEntropy, loss_fn

T = 8 * 2048


def timed(fn, reps=30) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def gemm() -> None:
    """Forward, input-gradient and weight-gradient matmuls of a linear (out x in) at T tokens."""
    def three(out, inp, tokens=T):
        x = torch.randn(tokens, inp, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(out, inp, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(tokens, out, device="cuda", dtype=torch.bfloat16)
        ms = [timed(lambda: x @ w.T), timed(lambda: dy @ w), timed(lambda: dy.T @ x)]
        flops = 2 * tokens * out * inp
        return {"ms": [round(m, 3) for m in ms], "tflops": [round(flops / m / 1e9) for m in ms], "sum_ms": sum(ms)}

    shapes = {"q": (1536, 1536), "k": (256, 1536), "qkv": (2048, 1536), "o": (1536, 1536),
              "gate": (8960, 1536), "gate_up": (17920, 1536), "down": (1536, 8960)}
    res = {name: three(*shape) for name, shape in shapes.items()}
    res["lm_head_8k"] = three(151936, 1536, tokens=8192)
    for name, r in res.items():
        print(json.dumps({"gemm": name, **r}), flush=True)
    separate = res["q"]["sum_ms"] + 2 * res["k"]["sum_ms"] + 2 * res["gate"]["sum_ms"]
    fused = res["qkv"]["sum_ms"] + res["gate_up"]["sum_ms"]
    print(json.dumps({"per_layer_separate_ms": round(separate, 3), "per_layer_fused_ms": round(fused, 3),
                      "saved_per_step_ms_28_layers": round(28 * (separate - fused), 2)}), flush=True)

    # Attention: SDPA's backends, GQA expanded (as HF does for sdpa) against enable_gqa.
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(8, 12, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(8, 2, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(8, 2, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        for gqa in (False, True):
            def fwd_bwd():
                kk, vv = (k, v) if gqa else (k.repeat_interleave(6, 1), v.repeat_interleave(6, 1))
                out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
                out.sum().backward()
            try:
                with sdpa_kernel([backend]):
                    ms = timed(fwd_bwd, reps=10)
                print(json.dumps({"attention": str(backend), "enable_gqa": gqa, "fwd_bwd_ms_per_layer": round(ms, 3),
                                  "per_step_ms": round(28 * ms, 1)}), flush=True)
            except RuntimeError as error:
                print(json.dumps({"attention": str(backend), "enable_gqa": gqa, "error": str(error)[:200]}))


def bf16_updates() -> None:
    """Share of weights that three AdamW steps at the workload's learning rate change, bf16 against fp32 weights,
    in one decoder layer of Qwen2.5-1.5B's shape (a 4k vocabulary, so it runs on a CPU)."""
    from transformers import AutoModelForCausalLM, Qwen2Config
    shape = dict(NAMED_CONFIGS["qwen2.5-1.5b"], num_hidden_layers=1, vocab_size=4096)
    lr = TrainConfig.learning_rate
    for dtype in (torch.bfloat16, torch.float32):
        torch.manual_seed(0)
        lm = AutoModelForCausalLM.from_config(Qwen2Config(**shape), torch_dtype=dtype)
        before = [parameter.detach().clone() for parameter in lm.parameters()]
        optimizer = torch.optim.AdamW(lm.parameters(), lr=lr)
        ids = torch.randint(0, shape["vocab_size"], (2, 128))
        for _ in range(3):
            lm(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        changed = sum(int((old != new).sum()) for old, new in zip(before, lm.parameters()))
        total = sum(parameter.numel() for parameter in lm.parameters())
        print(json.dumps({"weights": str(dtype), "learning_rate": lr, "changed_share": round(changed / total, 4)}))


def category(name: str) -> str:
    lowered = name.lower()
    for key, words in (("gemm", ("gemm", "nvjet", "cutlass", "xmma", "sm90")), ("attention", ("cudnn", "flash", "fmha", "attn")),
                       ("nccl", ("nccl",)), ("adam", ("adam",)), ("triton", ("triton",)),
                       ("copy/cast", ("copy", "cast", "cat", "split")), ("reduce", ("reduce", "norm")),
                       ("embedding", ("embedding", "index", "scatter"))):
        if any(word in lowered for word in words):
            return key
    return "other"


def profiled_step(cfg: TrainConfig, device, activities):
    """The profiler's record of one project step, after four warm-up steps (compile, allocator)."""
    from torch.profiler import profile as torch_profile
    step = common.project_step(cfg, device)
    batch = random_batches(cfg, NAMED_CONFIGS[cfg.model_config]["vocab_size"], rank=0)(0).to(device)
    for _ in range(4):
        step(batch).item()
    torch.cuda.synchronize()
    with torch_profile(activities=activities) as prof:
        step(batch).item()
        torch.cuda.synchronize()
    return prof


def profile(cfg: TrainConfig, device) -> None:
    from torch.profiler import ProfilerActivity
    prof = profiled_step(cfg, device, [ProfilerActivity.CUDA])
    kernels = collections.Counter()
    counts = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name] += event.device_time_total / 1e3
            counts[event.name] += 1
    groups = collections.Counter()
    for name, ms in kernels.items():
        groups[category(name)] += ms
    print(json.dumps({"total_kernel_ms": round(sum(kernels.values()), 1),
                      "by_group_ms": {k: round(v, 1) for k, v in groups.most_common()}}), flush=True)
    for name, ms in kernels.most_common(45):
        print(f"{ms:8.2f} ms {counts[name]:5d}x  {name[:150]}", flush=True)


def gaps(cfg: TrainConfig, device) -> None:
    """Wall time of one step against the union of its GPU kernels; the longest idle gaps and the CPU ops that
    were running when each gap ended."""
    from torch.profiler import ProfilerActivity
    prof = profiled_step(cfg, device, [ProfilerActivity.CUDA, ProfilerActivity.CPU])
    prof.export_chrome_trace("/tmp/trace.json")
    events = json.load(open("/tmp/trace.json"))["traceEvents"]
    gpu = sorted((e["ts"], e["ts"] + e["dur"], e["name"], e["args"].get("stream")) for e in events
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    cpu = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                 if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "python_function", "user_annotation"))
    busy, found, end = 0.0, [], gpu[0][0]
    for start, stop, name, stream in gpu:
        if start > end:
            found.append((start - end, end, start, name))
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    span = end - gpu[0][0]
    streams = collections.Counter()
    for start, stop, name, stream in gpu:
        streams[stream] += (stop - start) / 1e3
    print(json.dumps({"gpu_span_ms": round(span / 1e3, 1), "gpu_busy_ms": round(busy / 1e3, 1),
                      "idle_ms": round((span - busy) / 1e3, 1), "kernel_ms_by_stream": dict(streams)}), flush=True)
    for gap, gap_start, gap_end, next_kernel in sorted(found, reverse=True)[:25]:
        running = [name for start, stop, name in cpu if start <= gap_end <= stop][-4:]
        print(f"gap {gap / 1e3:6.2f} ms at +{(gap_start - gpu[0][0]) / 1e3:6.1f} ms  next {next_kernel[:60]}  cpu: {running}",
              flush=True)


def fused_attention_forward(self, hidden_states, position_embeddings, attention_mask=None, **kwargs):
    """Qwen2Attention.forward for training (no KV cache) with q, k and v from one matmul of concatenated weights."""
    from transformers.models.qwen2 import modeling_qwen2 as qwen2
    for name in ("past_key_values", "past_key_value", "cache", "cache_position", "position_ids", "use_cache"):
        kwargs.pop(name, None)
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    projections = (self.q_proj, self.k_proj, self.v_proj)
    qkv = torch.nn.functional.linear(hidden_states, torch.cat([p.weight for p in projections]),
                                     torch.cat([p.bias for p in projections]))
    q, k, v = qkv.split([p.out_features for p in projections], dim=-1)
    q, k, v = (t.reshape(hidden_shape).transpose(1, 2) for t in (q, k, v))
    cos, sin = position_embeddings
    q, k = qwen2.apply_rotary_pos_emb(q, k, cos, sin)
    interface = qwen2.ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
    out, weights = interface(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling,
                             sliding_window=self.sliding_window, **kwargs)
    return self.o_proj(out.reshape(*input_shape, -1).contiguous()), weights


def fused_mlp_forward(self, x):
    gate, up = torch.nn.functional.linear(x, torch.cat([self.gate_proj.weight, self.up_proj.weight])).chunk(2, -1)
    return self.down_proj(self.act_fn(gate) * up)


def patch(name: str) -> None:
    from transformers.models.qwen2 import modeling_qwen2 as qwen2
    if name == "reduce_bf16":
        sharding.MixedPrecisionPolicy = lambda **kw: torch.distributed.fsdp.MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    elif name == "fused_cat":
        qwen2.Qwen2Attention.forward = fused_attention_forward
        qwen2.Qwen2MLP.forward = fused_mlp_forward
    elif name == "clip_fold":
        def train_step(model, optimizer, batch, cfg):
            loss = loss_fn(model, batch)
            loss.backward()
            grads = [p.grad for p in model.parameters()]
            norm = torch.nn.utils.get_total_norm(grads, foreach=True)
            if isinstance(norm, torch.distributed.tensor.DTensor):
                norm = norm.full_tensor()
            # Fused AdamW divides every gradient by grad_scale inside its kernel (GradScaler's protocol).
            optimizer.grad_scale = torch.clamp(norm / cfg.max_grad_norm, min=1.0).float().reshape(())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()
        step_module.train_step = train_step  # bench.common.project_step reads it from there at each call
    elif name == "gc_off":
        import gc
        gc.collect()
        gc.disable()
    elif name == "no_fsdp_autocast":
        # torchtitan's single-device recipe: no FSDP, fp32 weights, bf16 autocast; the loss's matmuls on bf16
        # copies of the hidden states and the tied weight (the chunked loss keeps its own buffers in their dtype).
        def shard_model(model, mesh, cfg):
            for layer in model.layers:
                layer.compile()
            return model

        def forward(self, input_ids):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                hidden = self.lm.model(input_ids=input_ids, use_cache=False).last_hidden_state
            hidden = hidden[:, :-1].reshape(-1, hidden.shape[-1]).to(torch.bfloat16)
            return LinearCrossEntropy.apply(hidden, self.lm.lm_head.weight.to(torch.bfloat16),
                                            input_ids[:, 1:].reshape(-1), self.compiled_loss)
        sharding.shard_model = shard_model
        CausalLMWithLoss.forward = forward
    elif name == "bf16_params":
        build = build_module.build_model
        build_module.build_model = lambda cfg, device: build(cfg, device).to(torch.bfloat16)
    else:
        raise ValueError(name)


def parse(variant: str) -> dict:
    overrides = {}
    for item in filter(None, variant.split(",")):
        if item.startswith("+"):
            patch(item[1:])
            continue
        key, value = item.split("=")
        try:
            overrides[key] = json.loads(value)  # true, false, 0, 1.5
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def build_parser() -> argparse.ArgumentParser:
    parser = common.benchmark_parser(__doc__, step_flags=False)
    parser.add_argument("mode", choices=("gemm", "profile", "bf16_updates", "gaps", "steps"))
    parser.add_argument("variants", nargs="*", help="TrainConfig overrides k=v,k=v and +patches (see above)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    mode = args.mode
    if mode == "bf16_updates":
        return bf16_updates()
    device = torch.device("cuda", 0)
    common.single_process_group(device, port=29513)
    cfg = TrainConfig(model_config="qwen2.5-1.5b", batch_size=8, seq_len=2048)
    if mode == "gemm":
        gemm()
    elif mode == "profile":
        profile(dataclasses.replace(cfg, **parse(",".join(args.variants))), device)
    elif mode == "gaps":
        gaps(dataclasses.replace(cfg, **parse(",".join(args.variants))), device)
    elif mode == "steps":
        common.fresh(device)
        print(json.dumps(common.measure("recipe", common.recipe_step(cfg, device), cfg, device, 3, 10)))
        for variant in args.variants:
            common.fresh(device)
            varied = dataclasses.replace(cfg, **parse(variant.replace("default", "")))
            result = common.measure(variant, common.project_step(varied, device), varied, device, 3, 10)
            print(json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
