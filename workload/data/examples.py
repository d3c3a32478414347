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


@dataclass(frozen=True)
class SftBlocks:
    train: packing.Packed
    eval: packing.Packed | None

    def describe(self, cfg: TrainConfig) -> str:
        """One progress line: what the examples became."""
        held = f", {self.eval.examples} held out for evaluation" if self.eval else ""
        over_long = self.train.over_long + (self.eval.over_long if self.eval else 0)
        verb = "truncated to" if cfg.truncation == "truncate" else "split into pieces of"
        trained = "every token" if cfg.train_on_prompt else (
            "assistant tokens only" if cfg.data_format == "chat" else "completion tokens only")
        return (f"{cfg.data_format} data: {self.train.examples} training examples{held}, packed into "
                f"{len(self.train.blocks)} blocks of {cfg.seq_len} tokens; {over_long} longer than that, {verb} "
                f"{cfg.seq_len} tokens; loss on {trained}")

    def summary(self) -> dict:
        return {"examples": self.train.examples, "eval_examples": self.eval.examples if self.eval else 0,
                "over_long": self.train.over_long + (self.eval.over_long if self.eval else 0)}


def tokenize(cfg: TrainConfig, tokenizer, split: str = "") -> list[chat.Example]:
    return [chat.tokenize_conversation(tokenizer, turns, trained, cfg.train_on_prompt,
                                       f"record {index} of {cfg.dataset}")
            for index, (turns, trained) in enumerate(records.conversations(cfg, records.read_records(cfg, split)))]


def dataset_blocks(cfg: TrainConfig) -> SftBlocks:
    tokenizer = load_chat_tokenizer(cfg)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pad = pad if pad is not None else 0  # padding carries no loss and nothing attends to it: any id does

    def packed(examples: list[chat.Example]) -> packing.Packed:
        return packing.pack(examples, cfg.seq_len, pad, cfg.truncation)

    examples = tokenize(cfg, tokenizer)
    if cfg.eval_split:
        return SftBlocks(packed(examples), packed(tokenize(cfg, tokenizer, cfg.eval_split)))
    order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    shuffled = [examples[index] for index in order]
    if not cfg.eval_fraction:
        return SftBlocks(packed(shuffled), None)
    held = max(1, math.ceil(len(shuffled) * cfg.eval_fraction))
    return SftBlocks(packed(shuffled[held:]), packed(shuffled[:held]))
