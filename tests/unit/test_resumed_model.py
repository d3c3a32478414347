"""A resumed local run's model against the checkpoint it resumes from, before Ray (workload/run/resumed_model.py): a
--model_id or --model_config whose vocab_size or decoder layers differ from the latest checkpoint's `.metadata` shapes
is one refusal naming the flag, whether or not the run recorded its flags; an adapter checkpoint is compared only by
what it holds; a Hub model whose config.json cannot be read is left to the job."""
from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.support import run_snapshot
from workload import cli
from workload.checkpoint import run_directory
from workload.checkpoint.model_config import MODEL_PREFIX, claims_problem
from workload.config import TINY
from workload.run import checks, local


def model_directory(tmp_path, name: str, **fields) -> str:
    """A local model directory's config.json: the tiny architecture with `fields` changed."""
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "qwen2", **TINY, **fields}))
    return str(directory)


def saved(run, step: int, vocab: int, layers: int, adapters: bool = False) -> None:
    """A checkpoint as the job saves it: under "model", the CausalLMWithLoss's `lm.` state (the whole model's
    embedding and layers, or with adapters only each layer's lora_A/lora_B), and AdamW's state under "optimizer"."""
    lm = {}
    if not adapters:
        lm["lm.model.embed_tokens.weight"] = torch.zeros(vocab, 8)
    for layer in range(layers):
        if adapters:
            lm[f"lm.model.layers.{layer}.self_attn.q_proj.lora_A.default.weight"] = torch.zeros(2, 8)
            lm[f"lm.model.layers.{layer}.self_attn.q_proj.lora_B.default.weight"] = torch.zeros(8, 2)
        else:
            lm[f"lm.model.layers.{layer}.mlp.up_proj.weight"] = torch.zeros(4, 8)
    # The optimizer's moments carry the parameters' names too, outside the model's prefix: never compared.
    optimizer = {f"state.{name}.exp_avg": torch.zeros(3, 3) for name in lm}
    directory = run / f"checkpoint_{step:06d}"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": lm, "optimizer": optimizer}, checkpoint_id=str(directory), no_dist=True)
    (directory / run_directory.STEP_FILE).write_text(json.dumps({"step": step, "tokenizer": ""}))
    run_snapshot.write(run, [step])  # reported to Ray Train, which resumes from it
    if adapters:
        (directory / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 4}))


def resume(storage, *flags: str, run_name: str = "ebb"):
    return checks.resume_step(local.parse_args(["--storage_path", str(storage), "--run_name", run_name, *flags]))


def refusal(storage, *flags: str) -> str:
    with pytest.raises(cli.UsageError) as refused:
        resume(storage, *flags)
    message = str(refused.value)
    assert "\n" not in message, message
    assert "a new --run_name" in refused.value.hint and "--model_id or --model_config" in refused.value.hint
    return message


def test_a_model_of_another_vocabulary_is_refused_naming_the_flag(tmp_path):
    saved(tmp_path / "ebb", 6, vocab=384, layers=3)
    other = model_directory(tmp_path, "wider", vocab_size=640, num_hidden_layers=3)
    message = refusal(tmp_path, "--model_id", other)
    assert message.startswith(f"--model_id {other}: its config.json gives vocab_size 640, and the checkpoint under "
                              f"--storage_path {tmp_path} --run_name ebb (checkpoint_000006) holds 384 rows"), message
    assert "model.embed_tokens.weight ([384, 8])" in message, message


def test_a_model_of_other_depth_is_refused(tmp_path):
    saved(tmp_path / "ebb", 3, vocab=384, layers=3)
    deeper = model_directory(tmp_path, "deeper", vocab_size=384, num_hidden_layers=5)
    message = refusal(tmp_path, "--model_id", deeper)
    assert "gives num_hidden_layers 5" in message and "holds 3 decoder layers" in message, message


def test_a_random_weight_architecture_is_named_by_its_flag(tmp_path):
    saved(tmp_path / "ebb", 2, vocab=384, layers=2)
    message = refusal(tmp_path, "--model_config", "tiny")
    assert message.startswith("--model_config tiny: its architecture gives vocab_size 512"), message


def test_the_run_s_own_model_resumes(tmp_path):
    saved(tmp_path / "ebb", 4, vocab=384, layers=3)
    same = model_directory(tmp_path, "same", vocab_size=384, num_hidden_layers=3)
    assert resume(tmp_path, "--model_id", same) == 4


def test_recorded_flags_do_not_vouch_for_a_directory_that_now_holds_another_model(tmp_path):
    saved(tmp_path / "ebb", 4, vocab=384, layers=3)
    model = model_directory(tmp_path, "model", vocab_size=384, num_hidden_layers=3)
    checks.record_flags(local.parse_args(["--storage_path", str(tmp_path), "--run_name", "ebb",
                                          "--model_id", model]))
    assert resume(tmp_path, "--model_id", model) == 4
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2", **TINY, "vocab_size": 1024,
                                                                "num_hidden_layers": 3}))
    assert "gives vocab_size 1,024" in refusal(tmp_path, "--model_id", model)


def test_an_adapter_checkpoint_is_compared_by_what_it_holds(tmp_path):
    """No embedding (the frozen base is never saved): any vocabulary; adapters on 4 layers: a model of 2 is refused,
    one of 6 (whose last layers might hold no target) is left to DCP's planner."""
    saved(tmp_path / "ebb", 5, vocab=384, layers=4, adapters=True)
    lora = ("--method", "lora")
    assert resume(tmp_path, *lora, "--model_id", model_directory(tmp_path, "v", vocab_size=999,
                                                                  num_hidden_layers=4)) == 5
    assert resume(tmp_path, *lora, "--model_id", model_directory(tmp_path, "six", num_hidden_layers=6)) == 5
    message = refusal(tmp_path, *lora, "--model_id", model_directory(tmp_path, "two", num_hidden_layers=2))
    assert "gives num_hidden_layers 2" in message and "holds adapters of 4 decoder layers" in message, message


def test_a_hub_model_whose_config_cannot_be_read_here_is_left_to_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    saved(tmp_path / "ebb", 7, vocab=384, layers=3)
    assert resume(tmp_path, "--model_id", "someone/not-cached-model") == 7


def test_only_the_model_s_prefix_is_compared():
    shapes = {"optimizer.state.lm.model.embed_tokens.weight.exp_avg": (7, 8),
              MODEL_PREFIX + "model.embed_tokens.weight": (96, 8),
              MODEL_PREFIX + "model.layers.0.mlp.up_proj.weight": (4, 8)}
    assert claims_problem({"vocab_size": 96, "num_hidden_layers": 1}, shapes, MODEL_PREFIX) is None
    assert "holds 96 rows" in claims_problem({"vocab_size": 7, "num_hidden_layers": 1}, shapes, MODEL_PREFIX)


def test_the_job_s_driver_refuses_it_before_the_workers_load_the_checkpoint(tmp_path, monkeypatch):
    """`python -m workload.train` beside a cluster (RAY_ADDRESS set) with a local --storage_path: the same refusal,
    before preflight's checks and Ray; a run of the model's own shapes goes on to them."""
    from workload import train
    from workload.run import preflight

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setattr(preflight, "validate", lambda cfg: (_ for _ in ()).throw(RuntimeError("preflight reached")))
    saved(tmp_path / "ebb", 9, vocab=256, layers=2)
    flags = ["--storage_path", str(tmp_path), "--run_name", "ebb", "--model_id"]
    with pytest.raises(cli.UsageError, match="gives num_hidden_layers 4, and the checkpoint under --storage_path"):
        train.main([*flags, model_directory(tmp_path, "four", vocab_size=256, num_hidden_layers=4)])
    with pytest.raises(RuntimeError, match="preflight reached"):
        train.main([*flags, model_directory(tmp_path, "own", vocab_size=256, num_hidden_layers=2)])


def test_a_checkpoint_of_a_real_model_s_state_is_compared_by_its_names(tmp_path):
    """The names transformers gives the tiny Qwen2 (lm_head tied to embed_tokens, both listed), saved as the job saves
    them: --model_config tiny is the run's own, a directory of three layers is not."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from workload.checkpoint import sharded
    from workload.model.loss import LM_PREFIX

    lm = AutoModelForCausalLM.from_config(Qwen2Config(**TINY))
    directory = tmp_path / "ebb" / "checkpoint_000011"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({sharded.MODEL_KEY: {LM_PREFIX + name: t for name, t in lm.state_dict().items()}},
                 checkpoint_id=str(directory), no_dist=True)
    (directory / run_directory.STEP_FILE).write_text(json.dumps({"step": 11, "tokenizer": ""}))
    run_snapshot.write(tmp_path / "ebb", [11])
    assert resume(tmp_path, "--model_config", "tiny") == 11
    message = refusal(tmp_path, "--model_id", model_directory(tmp_path, "three", num_hidden_layers=3))
    assert "gives num_hidden_layers 3" in message and "holds 2 decoder layers" in message, message
