"""The training function on a real Ray cluster in this process: 2 CPU workers, gloo, FSDP2, sharded checkpoints.

One uninterrupted run on a learnable corpus is the reference: its loss must fall, and both a checkpoint-then-resume
run and a run whose worker is killed mid-way must end with exactly its parameters (every batch is a function of
its step, so nothing depends on where a run restarted).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os

import pytest
import ray
import ray.train
import torch

from workload import checkpoint, cli, data, model, train, trainer
from workload.config import SUMMARY_PREFIX, TrainConfig

HERE = os.path.dirname(os.path.abspath(__file__))
FAST_RAY_TRAIN = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    "RAY_DEDUP_LOGS": "0",
}
BASE = TrainConfig(
    model_config="tiny",
    dataset=os.path.join(HERE, "..", "data", "corpus.txt"),
    tokenizer=os.path.join(HERE, "..", "data", "tokenizer"),
    steps=16,
    batch_size=4,
    seq_len=32,
    learning_rate=1e-2,
    num_workers=2,
)
KILL_AFTER_STEP = 8


@pytest.fixture(scope="module")
def ray_cluster():
    patch = pytest.MonkeyPatch()
    for name, value in FAST_RAY_TRAIN.items():
        patch.setenv(name, value)
    # ray.init turns token auth on (Ray 2.60's default) by writing RAY_AUTH_MODE into this process's environment;
    # recording it here lets undo() give the tests that follow the environment they had.
    patch.delenv("RAY_AUTH_MODE", raising=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    yield
    ray.shutdown()
    patch.undo()


@pytest.fixture(scope="module")
def reference(ray_cluster, tmp_path_factory):
    cfg = dataclasses.replace(BASE, storage_path=str(tmp_path_factory.mktemp("reference")), run_name="reference")
    return cfg, trainer.fit(cfg)


def _initial_loss(cfg: TrainConfig) -> float:
    with torch.no_grad():
        untrained = model.build_model(cfg, torch.device("cpu"))
        return model.loss_fn(untrained, data.dataset_batches(cfg, rank=0, world_size=2)(0)).item()


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
    initial = _initial_loss(cfg)
    assert summary["final_loss"] < 0.5 * initial, (
        f"loss on the learnable corpus must fall below half its untrained value {initial:.3f}, "
        f"got {summary['final_loss']:.3f}"
    )
    assert summary["tokens_per_s"] > 0 and summary["mfu"] is None, f"CPU run: tokens/s > 0 and mfu null, got {summary}"
    assert summary["nccl_logs"] == {}, "no NCCL_DEBUG_FILE: nccl_logs must be {}"
    assert checkpoint.read_step(summary["checkpoint"]) == cfg.steps, "final checkpoint must record the last step"


def test_checkpoint_then_resume_matches_an_uninterrupted_run(reference, tmp_path):
    _, (reference_result, _) = reference
    cfg = dataclasses.replace(BASE, storage_path=str(tmp_path), run_name="resumed")
    halfway, _ = trainer.fit(dataclasses.replace(cfg, steps=cfg.steps // 2))
    assert checkpoint.read_step(halfway.checkpoint.path) == cfg.steps // 2, "first run must checkpoint its last step"

    resumed, final = trainer.fit(cfg)
    assert final["start_step"] == cfg.steps // 2, (
        f"a run with the same storage_path and run_name must resume at step {cfg.steps // 2}, "
        f"started at {final['start_step']}"
    )
    _assert_same_parameters(
        checkpoint.read_model_state(resumed.checkpoint.path),
        checkpoint.read_model_state(reference_result.checkpoint.path),
        "checkpoint then resume",
    )


def _dies_once_after_step(marker: str, config: dict) -> None:
    """train_func, except that rank 1 exits right after its checkpoint of KILL_AFTER_STEP, once per marker."""
    real_report = ray.train.report

    def report(metrics, checkpoint=None, **kwargs):
        real_report(metrics, checkpoint=checkpoint, **kwargs)
        if (metrics.get("step") == KILL_AFTER_STEP and ray.train.get_context().get_world_rank() == 1
                and not os.path.exists(marker)):
            open(marker, "w").close()
            os._exit(1)

    ray.train.report = report
    trainer.train_func(config)


def test_killed_worker_is_restarted_and_finishes_with_the_same_result(reference, tmp_path):
    _, (reference_result, _) = reference
    marker = str(tmp_path / "worker-died")
    cfg = dataclasses.replace(BASE, storage_path=str(tmp_path / "storage"), run_name="killed",
                              checkpoint_every=4, max_failures=1)
    result, final = trainer.fit(cfg, train_loop=functools.partial(_dies_once_after_step, marker))

    assert os.path.exists(marker), "rank 1 must have been killed once"
    # Step 4's report is consumed before step 8's can be queued, so the restart resumes from 4 or 8, never 0.
    assert final["start_step"] in (4, KILL_AFTER_STEP), (
        f"the restarted workers must resume from a checkpoint (step 4 or 8), started at {final['start_step']}"
    )
    _assert_same_parameters(
        checkpoint.read_model_state(result.checkpoint.path),
        checkpoint.read_model_state(reference_result.checkpoint.path),
        "killed and restarted",
    )


def _strict_json(text: str) -> dict:
    def refuse(constant: str):
        raise AssertionError(f"the summary must be strict JSON, but holds {constant}: {text}")

    return json.loads(text, parse_constant=refuse)


def test_a_diverging_run_stops_at_its_first_non_finite_loss_and_fails_the_job(ray_cluster, tmp_path, capsys,
                                                                               monkeypatch):
    # A learning rate of 1e6 sends the tiny model's loss to NaN within a few steps; retries are allowed, and a
    # checkpoint is saved every step, so a retry (which a raised error would cause) would resume from one.
    cfg = dataclasses.replace(BASE, learning_rate=1e6, steps=12, checkpoint_every=1, max_failures=2,
                              storage_path=str(tmp_path), run_name="diverges")
    monkeypatch.setattr(trainer, "connect_to_cluster", lambda: None)  # this process is already connected
    with pytest.raises(cli.CheckFailed, match="training diverged") as failure:
        train.main(cfg.to_args())
    assert failure.value.exit_code == cli.CHECK_FAILED
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(SUMMARY_PREFIX)]
    assert len(lines) == 1, f"the job prints its summary exactly once, got {lines}"
    summary = _strict_json(lines[0][len(SUMMARY_PREFIX):])
    diverged = summary["diverged_at_step"]
    assert isinstance(diverged, int) and 1 < diverged < cfg.steps, f"expected a step inside the run: {summary}"
    assert (summary["final_loss"], summary["steps"], summary["start_step"]) == (None, diverged, 0), (
        f"the run stops at the diverged step, with a null loss, in its first attempt (no retry): {summary}")
    saved = sorted(path.name for path in (tmp_path / "diverges").glob("checkpoint_0*"))
    assert saved and saved[-1] == f"checkpoint_{diverged - 1:06d}", (
        f"checkpoints up to the last finite step, none of the diverged weights: {saved}")


def test_export_turns_the_two_rank_checkpoint_into_the_trained_model(reference, tmp_path, capsys):
    """`python -m workload.export` on the reference run's last checkpoint (written by 2 FSDP2 ranks): the weights are
    the unsharded ones exactly, from_pretrained gives the trained model's logits, and the tokenizer comes along."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workload import export

    cfg, (result, _) = reference
    out = tmp_path / "model"
    assert export.main([result.checkpoint.path, str(out)]) == cli.OK
    assert "from_pretrained" in capsys.readouterr().out

    unsharded = {name.removeprefix("lm."): tensor
                 for name, tensor in checkpoint.read_model_state(result.checkpoint.path).items()}
    exported = load_file(out / "model.safetensors")
    tied = set(unsharded) - set(exported)
    assert tied <= {"lm_head.weight"}, f"only the tied lm_head may be left to its embedding: {tied}"
    _assert_same_parameters(exported, {name: unsharded[name] for name in exported}, "exported")

    trained = model.build_model(cfg, torch.device("cpu")).lm
    trained.load_state_dict(unsharded)
    loaded = AutoModelForCausalLM.from_pretrained(out)
    batch = data.dataset_batches(cfg, rank=0, world_size=2)(0)
    with torch.no_grad():
        assert torch.equal(loaded(batch).logits, trained(batch).logits), "the exported model's logits differ"
    # The tokenizer's own files come along. (AutoTokenizer on OUT picks Qwen2Tokenizer from config.json's model type
    # in transformers 5, which rebuilds a byte-level BPE around the sample tokenizer's word-level vocabulary; hence
    # the explicit class here. A Qwen tokenizer, the cluster's, round-trips through AutoTokenizer as it is.)
    from transformers import PreTrainedTokenizerFast

    text = open(cfg.dataset).read()[:2000]
    assert PreTrainedTokenizerFast.from_pretrained(out)(text).input_ids == \
        AutoTokenizer.from_pretrained(cfg.tokenizer)(text).input_ids, "the tokenizer must come along"
