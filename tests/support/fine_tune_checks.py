"""What a chat or prompt-completion fine-tune's results are checked against, computed without Ray: the examples and
trained tokens its steps held, the tokenizer's chat template, the held-out loss of a loaded model, and a model's
greedy answer computed by hand (tests/runs/test_workload_runs.py's chat run, tests/docs/test_docs.py's LoRA run)."""
from __future__ import annotations

import torch

from workload.config import TrainConfig
from workload.data import batches as data


def trained_tokens_seen(cfg: TrainConfig, world_size: int = 2) -> tuple[int, int]:
    """(examples, trained tokens) of every step's batches on every rank, counted without Ray."""
    batches = [data.make_data(cfg, 0, rank, world_size).train for rank in range(world_size)]
    steps = [batch(step) for batch in batches for step in range(cfg.steps)]
    return sum(int(b.examples()) for b in steps), sum(int(b.trained_tokens()) for b in steps)


def example_counts(cfg: TrainConfig, train_examples: int, eval_examples: int, world_size: int = 2) -> dict:
    """The summary's "examples" of a run on the sample records: nothing over long or dropped, and what the steps held."""
    examples, trained = trained_tokens_seen(cfg, world_size)
    return {"examples": train_examples, "eval_examples": eval_examples, "over_long": 0,
            "dropped": {"no_trained_turn": 0, "cut_by_truncation": 0},
            "examples_seen": examples, "trained_tokens_seen": trained}


def chat_template(tokenizer: str) -> str:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer).chat_template


def held_out_loss(lm, cfg: TrainConfig) -> float:
    """Hugging Face's own loss of `lm` on the run's held-out blocks (labels -100 outside the trained turns),
    token-weighted."""
    held_out = data.make_data(cfg, 0, 0, 1).eval
    with torch.no_grad():
        sums = [lm(input_ids=b.input_ids, labels=b.labels, position_ids=b.position_ids).loss * b.trained_tokens()
                for b in held_out]
    return float(sum(sums) / sum(b.trained_tokens() for b in held_out))


def greedy_answer(lm, tokenizer, messages: list[dict], limit: int) -> str:
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
