"""A plan that fits: when the requested per-GPU batch does not fit a GPU, the cheapest change of the job's memory
levers that does, by workload.model.memory's projection.

The levers, cheapest first (each later one is tried with the earlier ones on):
1. activation checkpointing: a layer keeps only its input, at about a third more compute;
2. reshard_after_forward, only if it lowers the peak (it does not while accumulating): the layers' gathered weights
   are freed after their forward, at one more all-gather per layer per step;
3. full sharding instead of HSDP (--sharding auto with --method lora or qlora on two or more nodes, where auto may
   choose HSDP): the state over every GPU rather than one node's, at more traffic between nodes. For full training
   auto chooses full sharding or two-level (workload.model.layout), both with full sharding's share, so it is
   projected with that share and stays auto: setting full would switch two-level off where the network needs it;
4. micro-batches with --grad_accum_steps: the largest micro-batch that divides the per-GPU batch and fits, so the
   global batch and the optimizer's steps stay what was asked; the accumulated unsharded gradients cost memory too.
   For lora and qlora too: their frozen base is resharded after each micro-batch (workload.model.step), so
   accumulation lowers the activations without keeping the whole base gathered, at one all-gather of the base per
   micro-batch (Llama-3.3-70B qlora at 2 x 2048 on dev's L4s: 2 micro-batches of 1);
5. for full training with --sharding auto on two or more nodes: full sharding instead of two-level, whose staging of
   the root's gradients (workload.model.memory) it then saves, at HSDP's bytes between nodes no longer half under the
   forward (auto keeps full sharding anyway where the network is fast enough);
6. only when nothing above fits: gradients reduced in bf16 (--reduce_dtype bf16, as auto chooses on a slow network):
   the root's gradient reduction, a peak no micro-batch lowers (workload.model.memory), then needs no fp32 copy of the
   embedding's and lm_head's gradients, and the levers above are tried again with it. The dev stack's Qwen2.5-7B at
   2 x 2048 on 8 L4s is such a plan, and keeps two-level (bench/results/memory_cap-h200-2026-12-03-run1.log measured
   it with full sharding); Llama-3.1-8B there needs full sharding too.
A lever already on stays on. --method (full, lora, qlora) is not a lever: the plan is for the job's method
(workload.model.adapters.memory counts it), and the preview's refusal names a lighter method that would fit. The
search is a handful of estimates: binary search over the batch's divisors (the peak grows with the micro-batch),
never a walk over batch sizes.

`choose` is what the job (workload/trainer.py, before it builds the model) and the preview
(infra/preview/feasibility.py, which exports it as the stack output jobMemoryPlan) both call, with the same inputs, so
both say the same. Standard library only: the Pulumi program imports this.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from workload.config import TrainConfig
from workload.model import memory

# The levers as Settings and TrainConfig name them, in the order a plan's `changed` lists them.
LEVERS = ("activation_checkpointing", "reshard_after_forward", "sharding", "grad_accum_steps", "reduce_dtype")


@dataclass(frozen=True)
class Settings:
    """The memory levers of one job, as TrainConfig names them."""

    activation_checkpointing: bool = False
    reshard_after_forward: bool = False
    grad_accum_steps: int = 1
    sharding: str = "auto"
    reduce_dtype: str = "fp32"


@dataclass(frozen=True)
class MemoryPlan:
    """What the job runs with, its projected peak per GPU, and why."""

    fits: bool
    settings: Settings
    changed: tuple[str, ...]
    """The levers the plan turned (TrainConfig field names); empty when the request fits as it is."""
    batch_size: int
    micro_batch: int
    shards: int
    peak_gib: float
    usable_gib: float
    reason: str
    estimate: memory.MemoryEstimate = field(repr=False, compare=False)
    method: str = "full"
    """--method the plan is for (workload.model.adapters): not a lever, the plan never changes it."""

    def as_dict(self) -> dict:
        return {"fits": self.fits, "method": self.method, "changed": list(self.changed),
                "activation_checkpointing": self.settings.activation_checkpointing,
                "reshard_after_forward": self.settings.reshard_after_forward,
                "grad_accum_steps": self.settings.grad_accum_steps, "sharding": self.settings.sharding,
                "reduce_dtype": self.settings.reduce_dtype,
                "batch_size": self.batch_size, "micro_batch": self.micro_batch, "shards": self.shards,
                "peak_gib": round(self.peak_gib, 1), "usable_gib": round(self.usable_gib, 1), "reason": self.reason}

    def describe(self) -> str:
        levers = []
        if self.settings.activation_checkpointing:
            levers.append("activation checkpointing")
        if self.settings.reshard_after_forward:
            levers.append("reshard_after_forward")
        if self.settings.sharding == "full" and "sharding" in self.changed:
            levers.append("full sharding")
        if self.settings.grad_accum_steps > 1:
            levers.append(f"{self.settings.grad_accum_steps} micro-batches of {self.micro_batch}")
        if "reduce_dtype" in self.changed:
            levers.append(f"gradients reduced in {self.settings.reduce_dtype}")
        return (f"{', '.join(levers) or 'as requested'}: {self.peak_gib:.1f} GiB of {self.usable_gib:.1f} GiB "
                f"per GPU ({self.reason})")


def divisors(number: int) -> list[int]:
    """The divisors of `number`, ascending (found up to its square root)."""
    small = [d for d in range(1, int(number**0.5) + 1) if number % d == 0]
    return small + [number // d for d in reversed(small) if d * d != number]


def choose(config: dict, *, batch_size: int, seq_len: int, world_size: int, ranks_per_node: int,
           gpu_memory_mib: int, requested: Settings = Settings(), reduce_dtype: str = "fp32",
           compiled: bool = True, method: dict | None = None) -> MemoryPlan:
    """The cheapest plan that fits one GPU of `gpu_memory_mib` (see the module's docstring), or, when none does, the
    most frugal one with fits=False. `ranks_per_node`: the ranks that share a node (HSDP's shard group); `compiled`:
    the layers and the loss are compiled (the job's default on a GPU); `method`: --method and its lora_* flags as
    memory.estimate's keywords (method_settings), full training when None."""
    method = method or {}
    usable = memory.usable_gib(gpu_memory_mib)
    nodes = max(1, world_size // max(1, ranks_per_node))
    requested = dataclasses.replace(requested, reduce_dtype=reduce_dtype)
    full_training = method.get("method", "full") == "full"

    def shards_of(sharding: str) -> int:
        # HSDP keeps a node's share; full sharding and two-level every rank's. auto chooses HSDP only for an adapter
        # method (workload.model.layout.choose), so only there is it projected with HSDP's larger per-node share.
        hybrid = sharding == "hybrid" or (sharding == "auto" and not full_training)
        return ranks_per_node if hybrid and nodes > 1 else world_size

    def two_level_ranks(sharding: str) -> int:
        # Full training's auto may choose two-level on two or more nodes of several ranks: its staging is counted.
        two_level = full_training and sharding in ("auto", "two-level") and nodes > 1 and ranks_per_node > 1
        return ranks_per_node if two_level else 0

    def evaluate(settings: Settings) -> tuple[memory.MemoryEstimate, int, int]:
        shards = shards_of(settings.sharding)
        micro = batch_size // settings.grad_accum_steps
        return (memory.estimate(config, micro_batch=micro, seq_len=seq_len, shards=shards, ranks=world_size,
                                activation_checkpointing=settings.activation_checkpointing,
                                reshard_after_forward=settings.reshard_after_forward,
                                grad_accum_steps=settings.grad_accum_steps, reduce_dtype=reduce_dtype,
                                compiled=compiled, two_level_ranks_per_node=two_level_ranks(settings.sharding),
                                **method), micro, shards)

    def plan(settings: Settings, fits: bool, reason: str) -> MemoryPlan:
        settings = dataclasses.replace(settings, reduce_dtype=reduce_dtype)
        estimate, micro, shards = evaluate(settings)
        changed = tuple(name for name in LEVERS if getattr(settings, name) != getattr(requested, name))
        return MemoryPlan(fits, settings, changed, batch_size, micro, shards, estimate.peak_gib, usable, reason,
                          estimate, method.get("method", "full"))

    def fits(settings: Settings) -> bool:
        return memory.fits(evaluate(settings)[0].peak_gib, usable)

    requested_peak = evaluate(requested)[0].peak_gib
    if fits(requested):
        return plan(requested, True, "the request fits")
    why = f"as requested it projects to {requested_peak:.1f} GiB"
    candidates: list[tuple[Settings, str]] = []
    current = requested
    if not current.activation_checkpointing:
        current = Settings(True, current.reshard_after_forward, current.grad_accum_steps, current.sharding)
        candidates.append((current, "activation checkpointing"))
    if not current.reshard_after_forward:
        with_reshard = Settings(current.activation_checkpointing, True, current.grad_accum_steps, current.sharding)
        if evaluate(with_reshard)[0].peak_gib < evaluate(current)[0].peak_gib:
            current = with_reshard
            candidates.append((current, "reshard_after_forward"))
    if requested.sharding == "auto" and nodes > 1 and not full_training:
        current = Settings(current.activation_checkpointing, current.reshard_after_forward,
                           current.grad_accum_steps, "full")
        candidates.append((current, "full sharding (HSDP's per-node shards do not fit)"))
    for index, (settings, _) in enumerate(candidates):
        if fits(settings):
            levers = [lever for _, lever in candidates[:index + 1]]
            return plan(settings, True, f"{why}; {' and '.join(levers)} bring{'s' if len(levers) == 1 else ''} it "
                                        "under the GPU's memory")

    # Micro-batches: the largest micro-batch dividing the batch that fits, by binary search (the peak grows with it).
    # reshard_after_forward saves nothing while accumulating (the weights stay gathered), so it goes back as asked.
    # For an adapter method the frozen base is resharded after each micro-batch (workload.model.step), so
    # reshard_after_forward keeps its saving and stays on.
    accumulate = Settings(current.activation_checkpointing,
                          requested.reshard_after_forward if full_training else current.reshard_after_forward, 1,
                          current.sharding)
    micro_batches = [d for d in divisors(batch_size) if d < batch_size // current.grad_accum_steps]
    low, high, found = 0, len(micro_batches) - 1, None
    while low <= high:
        middle = (low + high) // 2
        trial = Settings(accumulate.activation_checkpointing, accumulate.reshard_after_forward,
                         batch_size // micro_batches[middle], accumulate.sharding)
        if fits(trial):
            found, low = trial, middle + 1
        else:
            high = middle - 1
    if found is not None:
        levers = " and ".join(lever for _, lever in candidates if lever != "reshard_after_forward")
        return plan(found, True, f"{why}; {levers + ' and ' if levers else ''}{found.grad_accum_steps} micro-batches "
                                 f"of {batch_size // found.grad_accum_steps} fit and keep the per-GPU batch of "
                                 f"{batch_size}")
    def with_lever(lever: str, value: str, because: str) -> MemoryPlan:
        """The plan for the request with `lever` set to `value` (and whatever that plan turns besides), as this
        request's plan: `lever` among the changed, its reason after this request's projection, then `because`."""
        nested = choose(config, batch_size=batch_size, seq_len=seq_len, world_size=world_size,
                        ranks_per_node=ranks_per_node, gpu_memory_mib=gpu_memory_mib,
                        requested=dataclasses.replace(requested, **{lever: value}),
                        reduce_dtype=value if lever == "reduce_dtype" else reduce_dtype, compiled=compiled,
                        method=method)
        changed = {*nested.changed, lever}
        return dataclasses.replace(nested, changed=tuple(name for name in LEVERS if name in changed),
                                   reason=f"{why}; {nested.reason.split('; ', 1)[-1]} {because}")

    if full_training and requested.sharding == "auto" and two_level_ranks("auto"):
        as_full = with_lever("sharding", "full", "with full sharding (two-level's staging of the root's gradients "
                                                 "does not fit)")
        if as_full.fits and "reduce_dtype" not in as_full.changed:  # bf16 comes last: with two-level first
            return as_full
    if reduce_dtype != "bf16":
        in_bf16 = with_lever("reduce_dtype", "bf16", f"with gradients reduced in bf16 (in {reduce_dtype} the root's "
                                                     "gradient reduction alone needs more)")
        if in_bf16.fits:
            return in_bf16
    frugal = candidates[-1][0] if candidates else requested
    return plan(frugal, False, f"{why}; no lever brings it under {usable - memory.MARGIN_GIB:.1f} GiB")


def largest_micro_batch(config: dict, *, seq_len: int, shards: int, world_size: int, gpu_memory_mib: int,
                        below: int, compiled: bool = True, method: dict | None = None) -> int:
    """The largest batch under `below` that fits one GPU as a single micro-batch with activation checkpointing and
    reshard_after_forward (the most frugal levers that keep one optimizer step per batch), by binary search; 0 when
    not even one sequence does."""
    usable = memory.usable_gib(gpu_memory_mib)
    low, high, best = 1, below - 1, 0
    while low <= high:
        middle = (low + high) // 2
        peak = memory.estimate(config, micro_batch=middle, seq_len=seq_len, shards=shards, ranks=world_size,
                               activation_checkpointing=True, reshard_after_forward=True,
                               compiled=compiled, **(method or {})).peak_gib
        if memory.fits(peak, usable):
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best


def method_settings(cfg: TrainConfig, method: str | None = None) -> dict:
    """--method (or `method` instead) and its lora_* flags, as memory.estimate's keywords."""
    return {"method": method or cfg.method, "lora_rank": cfg.lora_rank, "lora_targets": cfg.lora_targets,
            "lora_dropout": cfg.lora_dropout}


def for_job(cfg: TrainConfig, architecture: dict, *, world_size: int, ranks_per_node: int, gpu_memory_mib: int,
            compiled: bool, method: str | None = None) -> MemoryPlan:
    """`choose` for a job's flags: what workload/trainer.py runs before it builds the model, and what the preview
    (infra/preview/feasibility.py) projects for the stack's job with the instance's figures. `method`: another
    --method than the job's (the preview's refusal asks which would fit)."""
    requested = Settings(cfg.activation_checkpointing, cfg.reshard_after_forward, cfg.grad_accum_steps, cfg.sharding,
                         cfg.reduce_dtype)
    return choose(architecture, batch_size=cfg.batch_size, seq_len=cfg.seq_len, world_size=world_size,
                  ranks_per_node=min(ranks_per_node, world_size), gpu_memory_mib=gpu_memory_mib,
                  requested=requested, reduce_dtype=cfg.reduce_dtype, compiled=compiled,
                  method=method_settings(cfg, method))


def apply(cfg: TrainConfig, plan: MemoryPlan) -> TrainConfig:
    """The job's flags with the plan's levers."""
    return dataclasses.replace(cfg, **{name: getattr(plan.settings, name) for name in plan.changed})
