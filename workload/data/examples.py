"""The examples of --dataset for supervised fine-tuning: read, rendered, tokenized, shuffled with the run's seed,
--eval_fraction of them held out (of the examples, not of the blocks: no example is cut between the two sets), and
each set packed."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workload.config import TrainConfig
from workload.data import chat, packing, records
from workload.data.tokenizer import load_chat_tokenizer

VERBS = {"truncate": "truncated to their first", "keep_end": "truncated to their last",
         "split": "split into pieces of"}


@dataclass(frozen=True)
class SftBlocks:
    train: packing.Packed
    eval: packing.Packed | None
    shape: str = ""
    """The records' shape when it is not the format's own (ShareGPT, Alpaca): said in the data line."""
    untrained: int = 0
    """Examples dropped before holding any out: no trained token at all (no assistant turn, no completion)."""

    def _sum(self, name: str) -> int:
        return getattr(self.train, name) + (getattr(self.eval, name) if self.eval else 0)

    def describe(self, cfg: TrainConfig) -> str:
        """One progress line: what the examples became, and which were dropped and why."""
        held = f", {self.eval.examples} held out for evaluation" if self.eval else ""
        trained = "every token" if cfg.train_on_prompt else (
            "assistant tokens only" if cfg.data_format == "chat" else "completion tokens only")
        untrained, cut = self.untrained + self._sum("untrained"), self._sum("cut")
        turn = "an assistant turn" if cfg.data_format == "chat" else "a completion"
        reasons = ([f"{untrained} without {turn}"] if untrained else []) + (
            [f"{cut} whose trained tokens --truncation {cfg.truncation} cut away"] if cut else [])
        why = f" ({', '.join(reasons)})" if reasons else ""
        shape = f" ({self.shape})" if self.shape else ""
        return (f"{cfg.data_format} data{shape}: {self.train.examples} training examples{held}, packed into "
                f"{len(self.train.blocks)} blocks of {cfg.seq_len} tokens; {self._sum('over_long')} longer than that, "
                f"{VERBS[cfg.truncation]} {cfg.seq_len} tokens; {untrained + cut} without a trained token "
                f"dropped{why}; loss on {trained}")

    def summary(self) -> dict:
        return {"examples": self.train.examples, "eval_examples": self.eval.examples if self.eval else 0,
                "over_long": self._sum("over_long"),
                "dropped": {"no_trained_turn": self.untrained + self._sum("untrained"),
                            "cut_by_truncation": self._sum("cut")}}


def tokenize(cfg: TrainConfig, tokenizer, split: str = "") -> tuple[list[chat.Example], str]:
    """The examples of --dataset (or `split`), and their shape when it is not the format's own."""
    found = records.read_records(cfg, split)
    shape = records.shape_of(cfg, found)
    examples = [chat.tokenize_conversation(tokenizer, turns, trained, cfg.train_on_prompt,
                                           f"record {number} of {cfg.dataset}")
                for number, (turns, trained) in enumerate(records.conversations(cfg, found), 1)]
    return examples, shape_label(shape)


def shape_label(shape) -> str:
    """The records' shape as the data line names it, when it is not the format's own (ShareGPT, Alpaca)."""
    return (shape.name.replace("sharegpt", "ShareGPT").replace("alpaca", "Alpaca")
            if shape and shape.name in ("sharegpt", "alpaca") else "")


def check_trainable(cfg: TrainConfig, blocks: SftBlocks) -> None:
    if not blocks.train.examples:
        raise ValueError(f"--dataset {cfg.dataset}: no example is left to train on ({blocks.describe(cfg)}); allowed: "
                         "records with assistant turns, a longer --seq_len, or --truncation keep_end or split")


def example_blocks(cfg: TrainConfig) -> SftBlocks:
    tokenizer = load_chat_tokenizer(cfg)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pad = pad if pad is not None else 0  # padding carries no loss and nothing attends to it: any id does

    def packed(examples: list[chat.Example]) -> packing.Packed:
        return packing.pack(examples, cfg.seq_len, pad, cfg.truncation)

    found, shape = tokenize(cfg, tokenizer)
    # Before any is held out, so that a held-out set is of examples that carry loss.
    examples = [example for example in found if packing.trains(example)]
    untrained = len(found) - len(examples)
    if cfg.eval_split:
        return SftBlocks(packed(examples), packed(tokenize(cfg, tokenizer, cfg.eval_split)[0]), shape, untrained)
    order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    shuffled = [examples[index] for index in order]
    if not cfg.eval_fraction:
        return SftBlocks(packed(shuffled), None, shape, untrained)
    held = max(1, math.ceil(len(shuffled) * cfg.eval_fraction))
    return SftBlocks(packed(shuffled[held:]), packed(shuffled[:held]), shape, untrained)
