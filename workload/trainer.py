"""Ray Train + FSDP2 fine-tuning: `train_func` runs on every worker; `fit` runs the TorchTrainer from the driver.

`python -m workload.train` (workload/train.py) is the command that calls these: it validates the flags, joins the
running cluster, and `run` sizes the workers from its GPUs, fits, and returns the summary it prints.
The same code runs on CPU processes (gloo) and on GPUs (NCCL).

Under the run's directory (storage_path/run_name) Ray Train keeps the checkpoints; rank 0 adds the TensorBoard event
files (tensorboard/, workload/metrics/tensorboard.py; MLflow and W&B too with --report_to, metrics/trackers.py) and the model as a Hugging Face directory (model_<step>/, gathered
from every rank's shards, workload/checkpoint/export.py).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import sys
import time
from typing import Callable

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.util.queue import Queue
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from workload import cli, storage
from workload.checkpoint import sharded as checkpoints
from workload.checkpoint.export import write_model
from workload.checkpoint.saver import CheckpointSaver
from workload.config import CPU_WORKERS_WITHOUT_GPUS, TRANSPORT_PREFIX, TrainConfig
from workload.data import stage
from workload.data.batches import make_data, steps_for_epochs
from workload.fabric import bandwidth as fabric
from workload.fabric.nccl_logs import gather_transport_lines
from workload.gc_control import StepCollector
from workload.metrics import trackers
from workload.metrics.live import LiveMetrics
from workload.model import compatibility, layout, memory_plan, parallel, structure
from workload.model import files as model_files
from workload.model.adapters import lora
from workload.model.build import build_model, compile_enabled, hf_config, load_pretrained
from workload.model.flops import model_flops_utilization, run_flops_per_token
from workload.model.optimizer import build_optimizer, learning_rate_at, set_learning_rate
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import evaluate, peak_flops, train_step

# How long the driver waits for RAY_ADDRESS's GCS port to accept a connection before saying nothing is there.
GCS_PROBE_TIMEOUT_S = 5
# The transport report comes after this many steps of an attempt: NCCL sets up its channels in the first step's
# collectives, and a second step shows the speed without the first one's warm-up.
TRANSPORT_REPORT_AFTER_STEPS = 2


def train_func(config: dict) -> None:
    """config: {"train": TrainConfig fields, "final": a ray.util.queue.Queue that rank 0 hands its final metrics to,
    "data": where the data stage left --dataset's token shards (None: random tokens, or the data read here)}."""
    cfg = TrainConfig(**config["train"])
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    # Before any weights load, so a slow fabric fails the job in seconds.
    fabric_check = fabric.run_before_training(cfg.fabric_check_seconds, cfg.min_bus_gbytes_per_s, device,
                                              _progress if rank == 0 else lambda line: None)

    # The memory levers before the model is built (activation checkpointing is set at build time).
    cfg, fit_plan = _plan_memory(cfg, world_size, context.get_local_world_size(), device)
    # A pretrained model's files, downloaded once per node (its local rank 0) and read by all its ranks.
    directory = None if cfg.model_config else model_files.for_this_node(
        cfg.model_id, context.get_local_rank(), _progress if rank == 0 else lambda line: None)
    model = build_model(cfg, device, directory)  # on the meta device for a pretrained model
    model = lora.apply(model, cfg)  # --method lora/qlora: adapters on a frozen bf16 or NF4 base; full: unchanged
    # What this run computes per token: a frozen base's (lora, qlora) skips its weight gradients.
    # What the built model computes: its own linear layers and adapters (workload.model.structure), for any family.
    flops = run_flops_per_token(structure.attach(model.lm.config.to_dict(), model.lm), cfg)
    peak = peak_flops(device)
    plan = parallel.plan_for_worker(cfg, model, device, world_size, context.get_node_rank(),
                                    context.get_local_world_size(), fabric_check)
    model = shard_model(model, build_mesh(device, plan.mesh_shape), cfg, reduce_dtype=plan.reduce_dtype,
                        two_level=plan.sharding == layout.TWO_LEVEL)
    if directory:
        started = time.perf_counter()
        load_pretrained(model, directory, device, cfg)
        if rank == 0:
            _progress(f"loaded {cfg.model_id}'s weights into this rank's shards in {time.perf_counter() - started:.1f}s")
    optimizer = build_optimizer(model, cfg)
    data = make_data(cfg, model.lm.config.vocab_size, rank, world_size, config.get("data"))
    cfg, epochs_line = steps_for_epochs(cfg, data.train_blocks, world_size)  # --epochs: the steps, now the data is known
    eval_set = [rows.to(device) for rows in data.eval]

    start_step = 0
    if (restored := ray.train.get_checkpoint()) is not None:
        directory = storage.node_local_checkpoint(restored.filesystem, restored.path,
                                                  _progress if rank == 0 else lambda line: None)
        start_step = checkpoints.load(directory, model, optimizer)
        dist.barrier()  # every rank of the node has read the copy
        if context.get_local_rank() == 0:
            storage.remove_node_local_checkpoint(directory, restored.path)
    batch = cfg.batch_size * world_size  # the effective batch: sequences per optimizer step, over all ranks
    tokens_per_step = batch * cfg.seq_len
    # Rank 0's record of the run: TensorBoard, MLflow, W&B as --report_to says (workload/metrics/trackers.py).
    metrics = trackers.for_run(cfg, run_directory(cfg), start_step) if rank == 0 else None
    live = LiveMetrics(cfg.run_name) if rank == 0 else None
    # What rank 0 reports in any case; the steps reached, the losses and the speed are added when the run ends.
    report = {"world_size": world_size, "device": device.type, "start_step": start_step, "effective_batch": batch,
              "diverged_at_step": None, "model": None, "sharding": plan.as_dict(), "fabric": fabric_check,
              "memory_plan": fit_plan.as_dict() if fit_plan else None,
              "tensorboard": metrics.destination if rank == 0 else None}
    if rank == 0:
        metrics.params({**dataclasses.asdict(cfg), "world_size": world_size, "sharding": plan.as_dict(),
                        "memory_plan": fit_plan.as_dict() if fit_plan else None})
        if epochs_line:
            _progress(epochs_line)
        method = f"{cfg.method} rank {cfg.lora_rank}" if cfg.method != "full" else "full fine-tune"
        _progress(f"training {cfg.model_config or cfg.model_id} ({method}) on {world_size} x {device.type}, "
                  f"steps {start_step + 1}..{cfg.steps}; sharding {plan.describe()}")
        if fit_plan:
            _progress(f"memory plan: {fit_plan.describe()}")
        decay = "constant" if cfg.lr_schedule == "constant" else f"{cfg.lr_schedule} decay"
        held_out = sum(len(rows) for rows in data.eval) * world_size
        per_rank = (f"{cfg.grad_accum_steps} micro-batches of {cfg.batch_size // cfg.grad_accum_steps}"
                    if cfg.grad_accum_steps > 1 else str(cfg.batch_size))
        _progress(f"effective batch {batch} sequences of {cfg.seq_len} tokens ({world_size} ranks x {per_rank}); "
                  f"learning rate {cfg.learning_rate:g}, {cfg.warmup_steps} warmup steps, then {decay}"
                  + (f"; evaluation on {held_out} held-out sequences" if held_out else ""))
        if data.description:
            _progress(data.description)

    step_times: list[float] = []
    loss_value = initial_loss = eval_loss = None
    examples = {"examples_seen": 0, "trained_tokens_seen": 0}  # over all ranks, this attempt's steps
    # Python's collector on the loop's schedule: every rank collects at the same steps (workload/gc_control.py).
    collector = StepCollector(cfg.gc_every)
    # --checkpoint_mode async: a save holds the step for the copy to host memory only (workload/checkpoint/saver.py).
    saver = CheckpointSaver(cfg.checkpoint_mode, _publish, _progress if rank == 0 else lambda line: None) \
        if cfg.storage_path else None
    try:
        for step in range(start_step, cfg.steps):
            if saver:
                saver.raise_if_failed()  # a background write or upload that failed stops the run here, loudly
            learning_rate = learning_rate_at(cfg, step)
            set_learning_rate(optimizer, learning_rate)
            started = time.perf_counter()
            step_batch = data.train(step).to(device)
            loss = train_step(model, optimizer, step_batch, cfg)
            loss_value = _mean_over_ranks(loss, world_size)  # .item() also waits for the GPU
            examples_text = _count_examples(step_batch, examples) if data.summary is not None else ""
            done = step + 1
            collector.after_step(done)  # inside the step's time: what it costs, the tokens/s pays
            step_times.append(time.perf_counter() - started)
            initial_loss = loss_value if initial_loss is None else initial_loss
            if not math.isfinite(loss_value):
                # Every rank sees the same mean, so all stop here together (none is left waiting in a collective).
                # They return rather than raise: a diverged run fails the same way on every retry, so it must not
                # spend trainMaxFailures restarting from the last checkpoint, and nothing more is saved.
                if rank == 0:
                    _progress(f"step {done}/{cfg.steps} loss {loss_value}: training diverged, stopping")
                    diverged = {
                        **report, "steps": done, "tokens_seen": done * tokens_per_step, "initial_loss": initial_loss,
                        "final_loss": None, "eval_loss": None, "diverged_at_step": done, "tokens_per_s": None,
                        "mfu": None, "nccl_logs": {}}
                    metrics.close(diverged)
                    config["final"].put(diverged)
                if saver:
                    saver.close()
                return

            tokens_per_s = tokens_per_step / step_times[-1]
            mfu = model_flops_utilization(tokens_per_s, flops, peak, world_size)
            if rank == 0:
                mfu_text = f"{mfu:.1%}" if mfu is not None else "n/a"
                if done % cfg.log_every == 0 or done in (start_step + 1, cfg.steps):  # --log_every: fewer lines
                        _progress(f"step {done}/{cfg.steps} loss {loss_value:.4f} lr {learning_rate:.2e} batch {batch}"
                              f"{examples_text} step_time {step_times[-1]:.3f}s tokens/s {tokens_per_s:,.0f} "
                              f"mfu {mfu_text}")
                metrics.scalars(done, {"train/loss": loss_value, "train/learning_rate": learning_rate,
                                       "train/tokens_per_s": tokens_per_s, "train/mfu": mfu})
                live.record(tokens_per_s, step_times[-1])
            if eval_set and (done == cfg.steps or (cfg.eval_every and done % cfg.eval_every == 0)):
                collector.at_pause()
                eval_loss = _mean_over_ranks(evaluate(model, eval_set), world_size)  # equal shares: the mean of means
                if rank == 0:
                    _progress(f"step {done}/{cfg.steps} eval_loss {eval_loss:.4f}")
                    metrics.scalars(done, {"eval/loss": eval_loss})
            if done == min(start_step + TRANSPORT_REPORT_AFTER_STEPS, cfg.steps):
                _report_transport(rank, world_size, device, done)
            # Only checkpoints go through ray.train.report: each report is a barrier that can wait up to a controller
            # poll interval (2 s by default), which would throttle a fast step.
            if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
                collector.at_pause()
                if cfg.export == "checkpoints":
                    _export_model(cfg, model, done, rank)
                if rank == 0:
                    metrics.sync()
                held = saver.save({"step": done, "loss": loss_value, "start_step": start_step}, model, optimizer, done,
                                  tokenizer_of(cfg), chat_template_of(cfg))
                if rank == 0:
                    _progress(f"step {done}/{cfg.steps} checkpoint held training {held:.2f}s ({cfg.checkpoint_mode})")
    finally:
        collector.close()
    if saver:
        saver.wait()  # the last background save is stored before the run's end is reported

    # A run resumed after its last step has nothing new to save; its model, if any, is the earlier attempt's.
    trained = start_step < cfg.steps
    model_path = None
    if cfg.storage_path and cfg.export != "none":
        model_path = _export_model(cfg, model, cfg.steps, rank) if trained else model_directory(cfg, cfg.steps)
    # The first step of an attempt pays for warm-up (allocator, compile), so it is left out when there are others.
    timed = step_times[1:] or step_times
    tokens_per_s = tokens_per_step * len(timed) / sum(timed) if timed else None
    final = {
        **report,
        "steps": cfg.steps,
        "tokens_seen": cfg.steps * tokens_per_step,
        "initial_loss": initial_loss,
        "final_loss": loss_value,
        "eval_loss": eval_loss,
        "model": model_path,
        "tokens_per_s": tokens_per_s,
        "mfu": model_flops_utilization(tokens_per_s, flops, peak, world_size),
        "nccl_logs": gather_transport_lines(rank, world_size),
        "examples": {**data.summary, **examples} if data.summary is not None else None,
    }
    if rank == 0:
        metrics.close(final)
        config["final"].put(final)
    if saver and trained:
        saver.save(final, model, optimizer, cfg.steps, tokenizer_of(cfg), chat_template_of(cfg), last=True)
    else:
        ray.train.report(final)
    if saver:
        saver.close()


def _plan_memory(cfg: TrainConfig, world_size: int, ranks_per_node: int,
                 device: torch.device) -> tuple[TrainConfig, memory_plan.MemoryPlan | None]:
    """The flags with workload.model.memory_plan's levers on a GPU (the preview chose the same for a stack's job); none
    on CPU, whose memory is the host's. A request that nothing makes fit stops here, before any weights load."""
    if device.type != "cuda":
        return cfg, None
    gpu_memory_mib = cfg.gpu_memory_mib or torch.cuda.get_device_properties(device).total_memory // 2**20
    # The structure of the model as built (on the meta device, under a second even for 70B): the plan counts every
    # module it has, whatever its family (workload.model.structure).
    config = hf_config(cfg)
    architecture = structure.attach(cfg.architecture or config.to_dict(),
                                    compatibility.build(config, f"--model_id {cfg.model_config or cfg.model_id}"))
    plan = memory_plan.for_job(cfg, architecture, world_size=world_size,
                               ranks_per_node=cfg.ranks_per_node or ranks_per_node, gpu_memory_mib=gpu_memory_mib,
                               compiled=compile_enabled(cfg, device))
    if not plan.fits:
        raise ValueError(f"--model_id {cfg.model_config or cfg.model_id} with --batch_size {cfg.batch_size} x "
                         f"--seq_len {cfg.seq_len} does not fit {world_size} GPUs of {gpu_memory_mib} MiB: "
                         f"{plan.reason}")
    return memory_plan.apply(cfg, plan), plan


def run_directory(cfg: TrainConfig) -> str | None:
    """Where Ray Train keeps this run's checkpoints, and the job its models and metrics: storage_path/run_name."""
    return storage.join(cfg.storage_path, cfg.run_name) if cfg.storage_path else None


def model_directory(cfg: TrainConfig, step: int) -> str:
    return storage.join(run_directory(cfg), storage.model_name(step))


def _export_model(cfg: TrainConfig, model, step: int, rank: int) -> str:
    """Every rank: gather the full weights (--method lora/qlora: the adapters) to rank 0, which writes them as a
    Hugging Face (or PEFT adapter) directory under the run's storage path. Returns that directory."""
    destination = model_directory(cfg, step)
    notes = write_model(model, destination, run_directory(cfg), rank == 0, tokenizer=tokenizer_of(cfg),
                        chat_template=chat_template_of(cfg))
    if rank == 0:
        for note in notes:
            _progress(f"note: {note}")
        _progress(f"step {step}/{cfg.steps} model written to {destination}")
    return destination


def tokenizer_of(cfg: TrainConfig) -> str:
    """The tokenizer that goes with the trained model: the one training used, or a hub model's own; none for a
    random-weight architecture trained on random tokens."""
    return cfg.tokenizer_name if (cfg.dataset or not cfg.model_config) else ""


def chat_template_of(cfg: TrainConfig) -> str:
    """The text of --chat_template, which the exported tokenizer keeps; empty keeps the tokenizer's own."""
    from workload.data.chat import template_text

    return template_text(cfg.chat_template) if cfg.chat_template else ""


def _report_transport(rank: int, world_size: int, device: torch.device, step: int) -> None:
    """Every rank's NCCL transport lines so far, printed by rank 0 as one TRAIN_TRANSPORT line. A collective."""
    nccl_logs = gather_transport_lines(rank, world_size)
    if rank == 0:
        report = {"step": step, "world_size": world_size, "device": device.type, "nccl_logs": nccl_logs}
        _progress(TRANSPORT_PREFIX + json.dumps(report))


def _progress(line: str) -> None:
    # Straight to stdout: Ray Train's patched print() (on by default) writes each line twice into the job log.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _count_examples(batch, seen: dict) -> str:
    """Chat and prompt-completion steps: the examples that started in the step and the targets that carried loss,
    over all ranks (a collective), added to `seen`; returned as the progress line's words."""
    counts = torch.stack([batch.examples(), batch.trained_tokens()])
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    examples, trained = counts.tolist()
    seen["examples_seen"] += examples
    seen["trained_tokens_seen"] += trained
    return f" examples {examples} trained_tokens {trained}"


def _mean_over_ranks(value: torch.Tensor, world_size: int) -> float:
    # gloo has no AVG reduction, so sum and divide.
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value.item() / world_size


def _publish(metrics: dict, directory: str, step: int) -> None:
    """A rank's written checkpoint to the run's storage path: Ray Train uploads the directory and, once every rank
    has, registers it as the run's latest (a barrier over the ranks, through Ray, not the training's collectives, so
    the save's thread may call it while the steps go on)."""
    ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory),
                     checkpoint_dir_name=storage.checkpoint_name(step))


def worker_count(cfg: TrainConfig) -> tuple[int, bool]:
    """(num_workers, use_gpu): the flag, else one per GPU of the cluster, else CPU workers."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if cfg.num_workers:
        return cfg.num_workers, gpus > 0
    if gpus:
        return gpus, True
    return CPU_WORKERS_WITHOUT_GPUS, False


def fit(cfg: TrainConfig, train_loop: Callable[[dict], None] = train_func) -> tuple[ray.train.Result, dict]:
    """Run the TorchTrainer on the Ray cluster this process is connected to; returns Ray's result and rank 0's
    final metrics. `train_loop` gets {"train": ..., "final": ...} on every worker (a variant can wrap train_func)."""
    num_workers, use_gpu = worker_count(cfg)
    # --dataset tokenized once on the cluster's CPUs (or found in the cache), before any worker holds a GPU.
    shards_at = stage.prepare(cfg, num_workers, say=_progress) if cfg.dataset else None
    # Ray Train's Result keeps only the metrics reported with a checkpoint, and a run without storage_path has
    # none, so the final metrics come back through a queue. No CPU: the training workers may need them all. On this
    # driver's node (the Ray head, which node repair never replaces): left to the scheduler it may land on a GPU
    # node, and a node that is replaced mid-run then takes the run's result with it after the workers resumed.
    final_queue = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False)})
    trainer = ray.train.torch.TorchTrainer(
        train_loop,
        train_loop_config={"train": dataclasses.asdict(cfg), "final": final_queue, "data": shards_at},
        scaling_config=ray.train.ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
        run_config=ray.train.RunConfig(
            name=cfg.run_name,
            storage_path=cfg.storage_path or None,
            failure_config=ray.train.FailureConfig(max_failures=cfg.max_failures),
        ),
    )
    result = trainer.fit()
    # An attempt that failed after handing over its metrics is followed by one that hands over its own: keep the
    # last.
    finals = [final_queue.get() for _ in range(final_queue.qsize())]
    ray.kill(final_queue.actor)
    return result, finals[-1]


def summarize(cfg: TrainConfig, result: ray.train.Result, final: dict) -> dict:
    """The driver's summary: rank 0's final metrics plus the latest checkpoint's location."""
    return {
        "world_size": final["world_size"],
        "device": final["device"],
        "steps": final["steps"],
        "initial_loss": final["initial_loss"],
        "final_loss": final["final_loss"],
        "eval_loss": final["eval_loss"],
        "effective_batch": final["effective_batch"],
        "tokens_seen": final["tokens_seen"],
        "tokens_per_s": final["tokens_per_s"],
        "mfu": final["mfu"],
        "start_step": final["start_step"],
        "diverged_at_step": final["diverged_at_step"],
        "checkpoint": _checkpoint_uri(cfg, result),
        "model": final["model"],
        "tensorboard": final["tensorboard"],
        "nccl_logs": final["nccl_logs"],
        "sharding": final["sharding"],
        "fabric": final["fabric"],
        "examples": final.get("examples"),
        "memory_plan": final["memory_plan"],
    }


def _checkpoint_uri(cfg: TrainConfig, result: ray.train.Result) -> str | None:
    if result.checkpoint is None:
        return None
    scheme, separator, _ = cfg.storage_path.partition("://")
    # pyarrow paths drop the scheme (s3://bucket/x becomes bucket/x); put it back so the path is usable.
    return f"{scheme}://{result.checkpoint.path}" if separator else result.checkpoint.path


def connect_to_cluster() -> None:
    """Join the Ray cluster this process runs in (a Ray job's entrypoint has RAY_ADDRESS set)."""

    address = os.environ.get("RAY_ADDRESS", "")
    hint = "python -m workload.train runs as a Ray job; to train on this machine: python -m workload.local"
    if address and address != "auto" and "://" not in address:
        # ray.init waits minutes for a GCS that is not there; a refused or unroutable address is known in seconds.
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=GCS_PROBE_TIMEOUT_S).close()
        except (OSError, ValueError) as error:
            raise cli.EnvironmentProblem(f"no Ray cluster answers at RAY_ADDRESS={address} ({error})",
                                         hint=hint) from None
    try:
        ray.init(address="auto")
    except ConnectionError as error:
        raise cli.EnvironmentProblem(f"no running Ray cluster to join ({error})", hint=hint) from None


def run(cfg: TrainConfig) -> dict:
    """Fit on the Ray cluster this process is connected to and return the summary."""
    result, final = fit(cfg)
    return summarize(cfg, result, final)
