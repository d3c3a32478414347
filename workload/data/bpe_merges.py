"""Whether a BPE tokenizer.json's merges can be built: the rule "every merge names tokens of the vocabulary" that
tokenizers applies as it loads the file, checked here from the parsed JSON so that a broken file is refused at
preview (trainTokenizer) and by the local run before its imports, rather than as tokenizers' plain `Exception: Error
while initializing BPE: Token `...` out of vocabulary` after seconds of imports.

tokenizers (huggingface/tokenizers, tokenizers/src/models/bpe/model.rs, BpeBuilder::build): for each merge (a, b) at
rank i, a and b must be in the vocab, and so must a + b[len(continuing_subword_prefix):] (the prefix's length in
bytes, cut from b), else Error::MergeTokenOutOfVocabulary. The merges come (models/bpe/serialization.rs, MergeType)
as [a, b] pairs or, in the legacy form, as "a b" strings split on ' ' into exactly two parts (convert_merges_to_
hashmap: else Error::BadMerges). A merge's tokens are not echoed: a file of this machine's may hold anything.
Standard library only (the Pulumi program imports it).
"""
from __future__ import annotations

from typing import Any

# The parts of a merge, as the refusal names the one missing from the vocabulary.
PARTS = ("first token", "second token", "concatenation")


def _pair(merge: Any) -> tuple[str, str] | None:
    if isinstance(merge, str):
        parts = merge.split(" ")
    elif isinstance(merge, list):
        parts = merge
    else:
        return None
    if len(parts) != 2 or not all(isinstance(part, str) for part in parts):
        return None
    return parts[0], parts[1]


def problem(model: dict, vocab: dict) -> str | None:
    """Why tokenizers cannot build the BPE model of a tokenizer.json's `model` whose {token: id} map is `vocab`
    (the words after '<path>'), or None; None for a model that is not BPE."""
    if model.get("type", "BPE") != "BPE" or "merges" not in model:
        return None
    merges = model.get("merges")
    if not isinstance(merges, list):
        return "has a model.merges that is not a list (allowed: [a, b] pairs or \"a b\" strings)"
    prefix = model.get("continuing_subword_prefix")
    cut = len(prefix.encode("utf-8")) if isinstance(prefix, str) else 0
    for index, merge in enumerate(merges):
        pair = _pair(merge)
        if pair is None:
            return (f"has model.merges[{index}] that is not two tokens (allowed: an [a, b] pair or an \"a b\" "
                    "string with one space)")
        first, second = pair
        try:
            joined = first + second.encode("utf-8")[cut:].decode("utf-8")
        except UnicodeDecodeError:
            joined = None  # the prefix's length cuts a character: tokenizers cannot join them either
        for part, token in zip(PARTS, (first, second, joined)):
            if token is None or token not in vocab:
                return (f"has model.merges[{index}] whose {part} is not in model.vocab "
                        "(tokenizers' BPE refuses it as it loads: MergeTokenOutOfVocabulary); allowed: merges of "
                        "tokens in model.vocab whose concatenation is in it too")
    return None
