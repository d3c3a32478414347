"""Runs on a two-node Ray cluster of their own whose tests read only their own run: a chat fine-tune, a LoRA
prompt-completion fine-tune, and a run that diverges. They share nothing with tests/runs/test_workload_train.py's
reference run, so they sit in a module of their own, which the suite's other worker can take meanwhile."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from tests.runs.test_workload_train import BASE, REPO
from workload import cli, train, trainer
from workload.config import SUMMARY_PREFIX, TrainConfig
from workload.data import batches as data


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


def _trained_tokens_seen(cfg: TrainConfig) -> tuple[int, int]:
    """(examples, trained tokens) of every step's batches on both ranks, counted without Ray."""
    batches = [data.make_data(cfg, 0, rank, 2).train for rank in (0, 1)]
    steps = [batch(step) for batch in batches for step in range(cfg.steps)]
    return sum(int(b.examples()) for b in steps), sum(int(b.trained_tokens()) for b in steps)


def _fit_and_count(cfg: TrainConfig, train_examples: int, eval_examples: int) -> dict:
    """Fit on the Ray cluster; the summary must count the examples and trained tokens the steps really held."""
    result, final = trainer.fit(cfg)
    summary = trainer.summarize(cfg, result, final)
    examples, trained = _trained_tokens_seen(cfg)
    assert summary["examples"] == {"examples": train_examples, "eval_examples": eval_examples, "over_long": 0,
                                   "dropped": {"no_trained_turn": 0, "cut_by_truncation": 0},
                                   "examples_seen": examples, "trained_tokens_seen": trained}, summary["examples"]
    return summary


def test_a_chat_fine_tune_learns_the_answers_and_its_export_answers_through_the_template(ray_cluster, tmp_path):
    """The sample conversations on 2 CPU workers: the loss on the assistant's tokens falls, the summary counts the
    examples and trained tokens, the held-out loss is over the assistant's tokens only, and the exported model
    answers a question through its own chat template, stopping at the end of its turn."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workload.run import local

    cfg = dataclasses.replace(CHAT, storage_path=str(tmp_path), run_name="chat")
    summary = _fit_and_count(cfg, train_examples=96, eval_examples=24)
    assert summary["final_loss"] < 0.5 * summary["initial_loss"], summary

    exported = AutoModelForCausalLM.from_pretrained(summary["model"])
    held_out = data.make_data(cfg, 0, 0, 1).eval
    with torch.no_grad():
        # Hugging Face's own loss on the held-out blocks (labels -100 outside the assistant's turns), token-weighted.
        sums = [exported(input_ids=b.input_ids, labels=b.labels, position_ids=b.position_ids).loss * b.trained_tokens()
                for b in held_out]
    expected = float(sum(sums) / sum(b.trained_tokens() for b in held_out))
    assert summary["eval_loss"] == pytest.approx(expected, rel=2e-2), "eval_loss: the assistant tokens' mean loss"

    answer = local.generate_chat(summary["model"], local.CHAT_PROMPTS["chat"])
    assert AutoTokenizer.from_pretrained(summary["model"]).chat_template == chat_template(cfg.tokenizer)
    assert answer == _greedy_answer(exported, AutoTokenizer.from_pretrained(cfg.tokenizer), local.CHAT_PROMPTS["chat"],
                                    2 * local.NEW_TOKENS), "generate() on the export: the training template's prompt, " \
        "greedy, stopping at the end of the assistant's turn"


def chat_template(tokenizer: str) -> str:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer).chat_template


def _greedy_answer(lm, tokenizer, messages: list[dict], limit: int) -> str:
    """The model's greedy answer computed by hand: the training tokenizer's rendering of the prompt, one argmax
    at a time, until <|im_end|> (the turn's end) or `limit` tokens."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    end, answer = tokenizer.convert_tokens_to_ids("<|im_end|>"), []
    with torch.no_grad():
        while len(answer) < limit:
            token = int(lm(torch.tensor([ids + answer])).logits[0, -1].argmax())
            if token == end:
                break
            answer.append(token)
    return tokenizer.decode(answer, skip_special_tokens=True)


def test_a_lora_prompt_completion_fine_tune_exports_adapters_that_peft_and_the_local_run_load(ray_cluster,
                                                                                                tmp_path):
    """--method lora on instruction pairs through Ray Train, as `python -m workload.local --method lora --dataset
    data/instructions.jsonl --data_format prompt-completion` runs it (on this module's cluster rather than one of its
    own): the loss on the completions falls and the summary counts the examples; the export is a PEFT adapter
    directory with the training's chat template, beside the random-weight base it was trained on, which
    PeftModel.from_pretrained loads with the held-out loss the job reported (over the completions' tokens only), and
    which the local run's generate_chat() answers through that template as the loaded model does by hand."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workload.run import local

    cfg = dataclasses.replace(CHAT, dataset=os.path.join(REPO, "data", "instructions.jsonl"),
                              data_format="prompt-completion", method="lora", steps=6, warmup_steps=1,
                              learning_rate=5e-2, storage_path=str(tmp_path), run_name="pairs")
    summary = _fit_and_count(cfg, train_examples=96, eval_examples=24)
    # Rank-16 updates of a random-weight base whose embeddings stay frozen: the loss falls (6.34 -> 5.87 here, at
    # 2e-1 over 10 steps too), not as far as a full fine-tune's.
    assert summary["final_loss"] < 0.95 * summary["initial_loss"], summary
    adapters = summary["model"]
    assert sorted(name for name in os.listdir(adapters) if name.startswith("adapter")) == [
        "adapter_config.json", "adapter_model.safetensors"], os.listdir(adapters)
    assert chat_template(adapters) == chat_template(cfg.tokenizer), "the export keeps the chat template"
    config = json.loads(open(os.path.join(adapters, "adapter_config.json")).read())
    assert config["base_model_name_or_path"] == str(tmp_path / "pairs" / "base_model"), config
    tuned = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32), adapters)
    held_out = data.make_data(cfg, 0, 0, 1).eval
    with torch.no_grad():
        sums = [tuned(input_ids=b.input_ids, labels=b.labels, position_ids=b.position_ids).loss * b.trained_tokens()
                for b in held_out]
    expected = float(sum(sums) / sum(b.trained_tokens() for b in held_out))
    # The job evaluates in bf16, the loaded model in fp32.
    assert summary["eval_loss"] == pytest.approx(expected, rel=2e-2), "eval_loss: the completions' mean loss"
    prompt = local.CHAT_PROMPTS["prompt-completion"]
    assert local.generate_chat(adapters, prompt) == _greedy_answer(
        tuned, AutoTokenizer.from_pretrained(cfg.tokenizer), prompt, 2 * local.NEW_TOKENS), (
        "generate_chat() on the adapters: the training template's prompt, greedy, to the end of the turn")
