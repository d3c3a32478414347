"""The training function on a real Ray cluster in this process: 2 CPU workers, gloo, FSDP2, sharded checkpoints.

One uninterrupted run on a learnable corpus is the reference: its training and held-out losses must fall, its
learning rates follow the schedule, and a run whose worker's node disappears mid-way (a new node joins; Ray Train
restarts the workers) and which then fails past its retries and is run again must end with exactly its parameters
and log exactly its learning rates and losses (every batch and every learning rate is a function of its step, so
nothing depends on where a run restarted). The model it exports is its weights exactly, and loads with
from_pretrained.

The cluster has two Ray nodes of one CPU each (ray.cluster_utils.Cluster: a real GCS and two real raylets), so the
two workers run on different nodes, as ranks do on GPU nodes, and one node can be taken away under its worker.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import stat
import threading

import pytest
import ray
import ray.train
import torch
from ray.cluster_utils import Cluster

from workload import cli, trainer
from workload.checkpoint import sharded as checkpoint
from workload.config import TrainConfig
from workload.data import batches as data
from workload.metrics import tensorboard as metrics
from workload.model.build import build_model
from workload.model.loss import loss_fn
from workload.model.optimizer import learning_rate_at
from workload.model.step import evaluate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = TrainConfig(
    model_config="tiny",
    dataset=os.path.join(REPO, "data", "corpus.txt"),
    tokenizer=os.path.join(REPO, "data", "tokenizer"),
    steps=16,
    batch_size=4,
    seq_len=32,
    learning_rate=1e-2,
    warmup_steps=2,  # then the default cosine decay
    eval_fraction=0.1,
    eval_every=8,
    num_workers=2,
)
KILL_AFTER_STEP = 8
FAIL_AFTER_STEP = 12


@pytest.fixture(scope="module")
def reference(ray_cluster, tmp_path_factory, mlflow_server):
    # Every tracker: MLflow on a running tracking server, as a team's (tests/support/local_mlflow.py), W&B offline. A run
    # without a tracking URI keeps a store of its own: tests/runs/test_tracking.py.
    cfg = dataclasses.replace(BASE, storage_path=str(tmp_path_factory.mktemp("reference")), run_name="reference",
                              report_to="tensorboard,mlflow,wandb", mlflow_tracking_uri=mlflow_server)
    return cfg, trainer.fit(cfg)


def _untrained_losses(cfg: TrainConfig) -> tuple[float, float]:
    """The untrained model's loss on the first step's batches (both ranks') and on the held-out set, without Ray."""
    with torch.no_grad():
        untrained = build_model(cfg, torch.device("cpu"))
        first = [loss_fn(untrained, data.make_data(cfg, 0, rank, 2).train(0)).item() for rank in (0, 1)]
        _, held = data.text_blocks(cfg)
        return sum(first) / 2, evaluate(untrained, list(held.split(cfg.batch_size))).item()


def _logged(cfg: TrainConfig) -> dict[str, list[tuple[int, float]]]:
    """What the run logged to TensorBoard, as TensorBoard shows it."""
    return metrics.read_scalars(os.path.join(cfg.storage_path, cfg.run_name, metrics.DIRECTORY))


def _assert_same_parameters(got: dict, expected: dict, run: str) -> None:
    assert got.keys() == expected.keys(), f"{run}: checkpoint keys differ from the uninterrupted run's"
    differing = [name for name in expected if not torch.equal(got[name], expected[name])]
    assert not differing, f"{run}: parameters must equal the uninterrupted run's exactly; differ: {differing[:5]}"


def test_two_cpu_workers_learn_the_corpus(reference):
    cfg, (result, final) = reference
    summary = trainer.summarize(cfg, result, final)
    assert (summary["world_size"], summary["device"], summary["steps"]) == (2, "cpu", cfg.steps), (
        f"summary: expected 2 cpu workers and {cfg.steps} steps, got {summary}"
    )
    initial, _ = _untrained_losses(cfg)
    # The job computes in bf16 (FSDP's mixed precision), this check in fp32.
    assert summary["initial_loss"] == pytest.approx(initial, rel=2e-2), (
        f"initial_loss is the untrained model's loss on the first batches, {initial:.3f}: {summary}")
    assert summary["final_loss"] < 0.5 * initial, (
        f"loss on the learnable corpus must fall below half its untrained value {initial:.3f}, "
        f"got {summary['final_loss']:.3f}"
    )
    assert (summary["effective_batch"], summary["tokens_seen"]) == (2 * cfg.batch_size, 16 * 8 * cfg.seq_len), (
        f"effective batch: 2 ranks x {cfg.batch_size} sequences; tokens seen: 16 steps of 8 x 32: {summary}")
    assert summary["tokens_per_s"] > 0 and summary["mfu"] is None, f"CPU run: tokens/s > 0 and mfu null, got {summary}"
    assert summary["nccl_logs"] == {}, "no NCCL_DEBUG_FILE: nccl_logs must be {}"
    assert checkpoint.read_step(summary["checkpoint"]) == cfg.steps, "final checkpoint must record the last step"
    assert summary["model"] == os.path.join(cfg.storage_path, cfg.run_name, "model_000016"), summary["model"]
    assert summary["tensorboard"] == os.path.join(cfg.storage_path, cfg.run_name, "tensorboard"), summary


def test_the_held_out_loss_falls_and_the_learning_rate_follows_the_schedule(reference):
    cfg, (result, final) = reference
    logged = _logged(cfg)
    _, untrained = _untrained_losses(cfg)
    evaluations = logged["eval/loss"]
    assert [step for step, _ in evaluations] == [8, 16], f"--eval_every 8 of 16 steps: {evaluations}"
    assert untrained > evaluations[0][1] > evaluations[1][1], (
        f"the held-out loss must fall from the untrained model's {untrained:.3f}: {evaluations}")
    assert final["eval_loss"] == pytest.approx(evaluations[-1][1], rel=1e-6), "the summary's eval_loss is the last"
    steps, rates = zip(*logged["train/learning_rate"])
    assert steps == tuple(range(1, cfg.steps + 1)), f"one learning rate per step: {steps}"
    assert rates == pytest.approx([learning_rate_at(cfg, step) for step in range(cfg.steps)], rel=1e-6), (
        f"warmup then cosine decay, step by step (TensorBoard keeps float32): {rates}")
    assert [step for step, _ in logged["train/loss"]] == list(range(1, cfg.steps + 1)), logged["train/loss"]
    assert logged["train/loss"][-1][1] == pytest.approx(final["final_loss"], rel=1e-6), "the last loss logged"


def test_the_run_is_in_mlflow_and_wandb_as_in_tensorboard(reference):
    """Each tracker of --report_to has every step's loss as TensorBoard has it, the run's flags and its plan."""
    from mlflow import MlflowClient

    from tests.support import wandb_files
    from workload.metrics.mlflow_tracker import RUN_NAME_TAG

    cfg, (result, final) = reference
    run_directory = os.path.join(cfg.storage_path, cfg.run_name)
    losses = _logged(cfg)["train/loss"]
    client = MlflowClient(cfg.mlflow_tracking_uri)  # the server, read back through MLflow's client
    (run,) = client.search_runs([client.get_experiment_by_name("ray-train-fsdp-llm").experiment_id],
                                filter_string=f"tags.`{RUN_NAME_TAG}` = '{cfg.run_name}'")
    logged = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert [step for step, _ in logged] == list(range(1, cfg.steps + 1)), logged
    assert [value for _, value in logged] == pytest.approx([value for _, value in losses], rel=1e-6), (
        f"MLflow's losses are TensorBoard's (which keeps float32): {logged} {losses}")
    params = run.data.params
    assert (params["steps"], params["learning_rate"], params["world_size"], params["sharding.sharding"]) == (
        str(cfg.steps), str(cfg.learning_rate), "2", final["sharding"]["sharding"]), params
    assert run.data.tags["model"] == final["model"] and run.info.status == "FINISHED", run.data.tags
    history = wandb_files.history(wandb_files.offline_run(run_directory))
    assert [step for step, _ in history["train/loss"]] == list(range(1, cfg.steps + 1)), history["train/loss"]
    assert wandb_files.summary(wandb_files.offline_run(run_directory))["model"] == final["model"]


class _Stopped(Exception):
    pass


def _loses_its_node_then_fails(marker: str, head_node_id: str, config: dict) -> None:
    """train_func, except that:
    - right after its checkpoint of KILL_AFTER_STEP, the rank on the node that is not the head names its node in
      `marker` (once per marker) and waits there for the node to be taken away;
    - in the attempt after that (Ray Train's restart), rank 0 writes the step of the checkpoint it restarts from to
      `marker`.restart, and every rank raises right after its checkpoint of FAIL_AFTER_STEP, which fails the run
      once its one retry is spent."""
    real_report = ray.train.report
    restored = ray.train.get_checkpoint()
    if os.path.exists(marker) and ray.train.get_context().get_world_rank() == 0:
        with open(marker + ".restart", "w") as file:
            file.write(str(checkpoint.read_step(restored.path) if restored else 0))

    def report(metrics, checkpoint=None, **kwargs):
        real_report(metrics, checkpoint=checkpoint, **kwargs)
        node_id = ray.get_runtime_context().get_node_id()
        if metrics.get("step") == KILL_AFTER_STEP and node_id != head_node_id and not os.path.exists(marker):
            with open(marker + ".partial", "w") as file:
                file.write(node_id)
            os.rename(marker + ".partial", marker)
            threading.Event().wait()  # until its node, and this process with it, is gone
        if metrics.get("step") == FAIL_AFTER_STEP and os.path.exists(marker):
            raise _Stopped(f"stopped after step {FAIL_AFTER_STEP}")

    ray.train.report = report
    trainer.train_func(config)


def _replace_the_node_named_in(cluster: Cluster, marker: str, training: concurrent.futures.Future) -> str:
    """Once a worker names its node: that node disappears (its raylet and every process on it killed, as when an
    instance is terminated) and a new node of the same size joins, as a repaired GPU node does. From the main
    thread: starting a node sets signal handlers."""
    while not os.path.exists(marker):
        if training.done():
            training.result()  # raises what the training raised
            raise AssertionError("the run ended without any worker losing its node")
        concurrent.futures.wait([training], timeout=0.05)
    node_id = open(marker).read()
    (node,) = [node for node in cluster.worker_nodes if node.node_id == node_id]
    cluster.remove_node(node, allow_graceful=False)
    cluster.add_node(num_cpus=1)
    return node_id


def test_a_lost_node_and_a_failed_run_both_resume_to_the_uninterrupted_result(ray_cluster, reference, tmp_path):
    """A worker's node disappears mid-run and a new one joins: Ray Train (trainMaxFailures 1) restarts the workers
    from the last checkpoint, on the new node. That attempt then fails too, past its one retry, and the run fails.
    Run again, as a retried `pulumi up` runs the job again, it resumes where it stopped. In the end: the learning
    rates, the losses and the parameters of the run that never stopped."""
    reference_cfg, (reference_result, _) = reference
    marker = str(tmp_path / "node-lost")
    cfg = dataclasses.replace(BASE, storage_path=str(tmp_path / "storage"), run_name="interrupted",
                              checkpoint_every=4, max_failures=1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        training = pool.submit(trainer.fit, cfg, train_loop=functools.partial(
            _loses_its_node_then_fails, marker, ray_cluster.head_node.node_id))
        lost = _replace_the_node_named_in(ray_cluster, marker, training)
        with pytest.raises(ray.train.TrainingFailedError, match=f"stopped after step {FAIL_AFTER_STEP}"):
            training.result()
    alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert lost not in alive and len(alive) == 2, f"the lost node is gone and a new one serves: {alive}"
    # Step 4's report is consumed before step 8's can be queued, so the restart resumes from 4 or 8, never 0.
    restarted = int(open(marker + ".restart").read())
    assert restarted in (4, KILL_AFTER_STEP), (
        f"the restarted workers must resume from a checkpoint (step 4 or 8), started at {restarted}")

    resumed, final = trainer.fit(cfg)
    assert final["start_step"] == FAIL_AFTER_STEP, (
        f"run again with the same storage_path and run_name, it must resume at step {FAIL_AFTER_STEP}, "
        f"started at {final['start_step']}")
    _assert_same_parameters(
        checkpoint.read_model_state(resumed.checkpoint.path),
        checkpoint.read_model_state(reference_result.checkpoint.path),
        "node lost, then failed, then run again",
    )
    # Steps an attempt logged past the checkpoint the next one started from are purged, then logged again.
    logged, expected = _logged(cfg), _logged(reference_cfg)
    for tag in ("train/learning_rate", "train/loss", "eval/loss"):
        assert logged[tag] == expected[tag], f"{tag}: the resumed run must log the uninterrupted run's, once each"


def test_the_job_exports_its_weights_and_so_does_the_export_command(reference, tmp_path, capsys):
    """The model the job wrote after its last step (gathered from its 2 FSDP2 ranks, right after an evaluation) and
    `python -m workload.export` on its last checkpoint: both hold the unsharded weights exactly, load with
    from_pretrained to the trained model's logits, and with AutoTokenizer to the training ids; and both are made
    for generate(): the KV cache on, the tokenizer's end of text in the generation config."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workload.checkpoint import export

    cfg, (result, final) = reference
    out = tmp_path / "model"
    assert export.main([result.checkpoint.path, str(out)]) == cli.OK
    assert "from_pretrained" in capsys.readouterr().out

    unsharded = {name.removeprefix("lm."): tensor
                 for name, tensor in checkpoint.read_model_state(result.checkpoint.path).items()}
    trained = build_model(cfg, torch.device("cpu")).lm
    trained.load_state_dict(unsharded)
    batch = data.dataset_batches(cfg, rank=0, world_size=2)(0)
    text = open(cfg.dataset).read()[:2000]
    training_ids = AutoTokenizer.from_pretrained(cfg.tokenizer)(text).input_ids
    for directory, made_by in ((final["model"], "the job"), (str(out), "workload.export")):
        exported = load_file(os.path.join(directory, "model.safetensors"))
        tied = set(unsharded) - set(exported)
        assert tied <= {"lm_head.weight"}, f"{made_by}: only the tied lm_head may be left to its embedding: {tied}"
        _assert_same_parameters(exported, {name: unsharded[name] for name in exported}, f"exported by {made_by}")
        loaded = AutoModelForCausalLM.from_pretrained(directory)
        with torch.no_grad():
            assert torch.equal(loaded(batch).logits, trained(batch).logits), f"{made_by}: the logits differ"
        tokenizer = AutoTokenizer.from_pretrained(directory)
        assert tokenizer(text).input_ids == training_ids, f"{made_by}: AutoTokenizer must give the training ids"
        modes = {name: os.stat(os.path.join(directory, name)).st_mode & 0o777 for name in os.listdir(directory)}
        assert len(set(modes.values())) == 1 and modes["model.safetensors"] & stat.S_IRGRP, (
            f"{made_by}: every file as readable as config.json, by the group too (umask 022): {modes}")
        assert loaded.config.use_cache and loaded.generation_config.eos_token_id == tokenizer.eos_token_id, (
            f"{made_by}: made for generate(): {loaded.config.use_cache}, {loaded.generation_config}")
