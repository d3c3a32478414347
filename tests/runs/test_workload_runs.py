"""Runs on a two-node Ray cluster of their own whose tests read only their own run: a chat fine-tune and a run that
diverges. They share nothing with tests/runs/test_workload_train.py's reference run, so they sit in a module of their
own, which the suite's other worker can take meanwhile. (The LoRA prompt-completion fine-tune is docs/adapters.md's
first LoRA run, which tests/docs/test_docs.py runs as written and checks as this module checks the chat run.)"""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from tests.runs.test_workload_train import BASE, REPO
from tests.support import fine_tune_checks
from workload import cli, train, trainer
from workload.config import SUMMARY_PREFIX


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
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)  # as Ray's job supervisor sets it for the job's driver
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


CHAT = dataclasses.replace(
    BASE, dataset=os.path.join(REPO, "data", "conversations.jsonl"), data_format="chat", seq_len=128,
    tokenizer=os.path.join(REPO, "data", "chat-tokenizer"), eval_fraction=0.2, eval_every=0, steps=10)


def test_a_chat_fine_tune_learns_the_answers_and_its_export_answers_through_the_template(ray_cluster, tmp_path):
    """The sample conversations on 2 CPU workers: the loss on the assistant's tokens falls, the summary counts the
    examples and trained tokens the steps really held, the held-out loss is over the assistant's tokens only, and the
    exported model answers a question through its own chat template, stopping at the end of its turn."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workload.run import local

    cfg = dataclasses.replace(CHAT, storage_path=str(tmp_path), run_name="chat")
    result, final = trainer.fit(cfg)
    summary = trainer.summarize(cfg, result, final)
    assert summary["examples"] == fine_tune_checks.example_counts(cfg, train_examples=96, eval_examples=24), (
        summary["examples"])
    assert summary["final_loss"] < 0.5 * summary["initial_loss"], summary

    exported = AutoModelForCausalLM.from_pretrained(summary["model"])
    # Hugging Face's own loss on the held-out blocks (labels -100 outside the assistant's turns), token-weighted.
    expected = fine_tune_checks.held_out_loss(exported, cfg)
    assert summary["eval_loss"] == pytest.approx(expected, rel=2e-2), "eval_loss: the assistant tokens' mean loss"

    prompt = local.CHAT_PROMPTS["chat"]
    answer = local.generate_chat(summary["model"], prompt)
    tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
    assert AutoTokenizer.from_pretrained(summary["model"]).chat_template == tokenizer.chat_template
    assert answer == fine_tune_checks.greedy_answer(exported, tokenizer, prompt, 2 * local.NEW_TOKENS), (
        "generate() on the export: the training template's prompt, greedy, stopping at the end of the assistant's turn")
