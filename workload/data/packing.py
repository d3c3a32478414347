"""Examples packed into fixed-length blocks without leakage between them.

A block is a (3, seq_len) tensor: token ids, labels (IGNORE_INDEX where nothing is learned) and position ids. Examples
are laid one after another (first fit in their order, which was shuffled with the run's seed); one that does not fit
the rest of a block starts the next, and the rest is padding (labels ignored, positions continuing the last example's,
so it is no new document and nothing attends to it: it comes last, and attention is causal).

Positions restart at 0 for every example. That is what keeps examples apart in attention: given position_ids and no
attention mask, transformers (masking_utils.find_packed_sequence_indices, 4.53 and later, so in 5.13 to 5.24) starts
a new document wherever a position does not follow its predecessor and builds a block-diagonal causal mask, for sdpa,
eager and flex_attention alike. The first token of each example is never a target (its label is IGNORE_INDEX), so no
example learns to predict across a boundary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from workload.data.chat import IGNORE_INDEX, Example

ROWS = 3  # input ids, labels, position ids


@dataclass(frozen=True)
class Packed:
    blocks: torch.Tensor
    """(n, 3, seq_len): input ids, labels, position ids."""
    examples: int
    """Examples trained on (those dropped below not counted)."""
    over_long: int
    """Examples longer than seq_len (truncated at either end, or split into pieces of seq_len tokens)."""
    untrained: int = 0
    """Examples dropped that had no trained token at all (a conversation without an assistant turn)."""
    cut: int = 0
    """Examples (or pieces of a split one) dropped because --truncation cut away every trained token."""


def trains(example: Example) -> bool:
    """Whether any token of the example carries loss (the first never does: packing ignores it, see above)."""
    return any(label != IGNORE_INDEX for label in example.labels[1:])


def fit(examples: Iterable[Example], seq_len: int, truncation: str) -> tuple[list[Example], int]:
    """Every example at most seq_len tokens: the over-long ones truncated (keeping the first seq_len tokens, or with
    keep_end the last, TRL's truncation_mode names) or split. Returns (examples, over-long)."""
    fitted, over_long = [], 0
    for example in examples:
        length = len(example.input_ids)
        if length <= seq_len:
            fitted.append(example)
            continue
        over_long += 1
        starts = (range(0, length, seq_len) if truncation == "split" else
                  (length - seq_len,) if truncation == "keep_end" else (0,))
        fitted += [Example(example.input_ids[start:start + seq_len], example.labels[start:start + seq_len])
                   for start in starts]
    return fitted, over_long


def pack_examples(examples: Sequence[Example], seq_len: int, pad_id: int) -> torch.Tensor:
    """(n, 3, seq_len) blocks of examples of at most seq_len tokens each."""
    blocks: list[list[list[int]]] = []
    ids: list[int] = []
    labels: list[int] = []
    positions: list[int] = []

    def close() -> None:
        padding = seq_len - len(ids)
        last = positions[-1] if positions else -1
        blocks.append([ids + [pad_id] * padding, labels + [IGNORE_INDEX] * padding,
                       positions + list(range(last + 1, last + 1 + padding))])

    for example in examples:
        assert 0 < len(example.input_ids) <= seq_len, "fit() bounds every example by seq_len"
        if len(ids) + len(example.input_ids) > seq_len:
            close()
            ids, labels, positions = [], [], []
        ids += example.input_ids
        labels += [IGNORE_INDEX] + example.labels[1:]
        positions += range(len(example.input_ids))
    if ids:
        close()
    return torch.tensor(blocks, dtype=torch.long).view(-1, ROWS, seq_len)


def pack(examples: Sequence[Example], seq_len: int, pad_id: int, truncation: str) -> Packed:
    """Examples that carry loss, fitted and packed; those without a trained token (none to begin with, or none left
    after truncation) are dropped and counted, as TRL drops them: they would cost compute and teach nothing."""
    training = [example for example in examples if trains(example)]
    fitted, over_long = fit(training, seq_len, truncation)
    kept = [example for example in fitted if example.input_ids and trains(example)]
    cut = len(fitted) - len(kept)
    return Packed(pack_examples(kept, seq_len, pad_id) if kept else torch.empty(0, ROWS, seq_len, dtype=torch.long),
                  len(training) - (cut if truncation != "split" else 0), over_long, len(examples) - len(training), cut)


@dataclass(frozen=True)
class TokenBatch:
    """A batch of packed blocks, with the few tensor methods the training step uses on a batch of token ids."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor

    @classmethod
    def of(cls, blocks: torch.Tensor) -> "TokenBatch":
        return cls(blocks[:, 0], blocks[:, 1], blocks[:, 2])

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def __len__(self) -> int:
        return len(self.input_ids)

    def to(self, device) -> "TokenBatch":
        return TokenBatch(self.input_ids.to(device), self.labels.to(device), self.position_ids.to(device))

    def chunk(self, chunks: int) -> list["TokenBatch"]:
        return [TokenBatch(*parts) for parts in zip(*(tensor.chunk(chunks) for tensor in
                                                       (self.input_ids, self.labels, self.position_ids)))]

    def trained_tokens(self) -> torch.Tensor:
        """Targets that carry loss: labels past the first position that are not ignored."""
        return (self.labels[:, 1:] != IGNORE_INDEX).sum()

    def examples(self) -> torch.Tensor:
        """Examples that start in this batch (pieces of a split example count once each)."""
        return (self.position_ids == 0).sum()
