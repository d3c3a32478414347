"""Writes the repository's sample data: a learnable corpus and a tokenizer trained on it.

`python -m workload.local` trains on them by default, and the tests use them. Run from the repository root:
`python data/make_sample_data.py`. The outputs are committed, so neither the local run nor the tests need the
network or this script.

The tokenizer is a byte-level BPE built exactly as Qwen2's (its pre-tokenizer regex, NFC, byte-level decoding,
`<|endoftext|>` as end of text) and saved as a Qwen2Tokenizer: a model exported with it says `model_type: qwen2`,
and transformers 5's AutoTokenizer then builds a Qwen2Tokenizer from the saved vocabulary and merges whatever the
saved class, so only a tokenizer of that very shape gives the training ids back. Its 318 tokens (256 bytes, one
special token, 61 merges that make every corpus word one token) fit the `tiny` architecture's 512.
"""
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import Qwen2Tokenizer
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

HERE = os.path.dirname(os.path.abspath(__file__))
SUBJECTS = ("cat", "dog", "bird", "fish", "horse", "mouse")
VERBS = ("sees", "likes", "chases", "follows")
OBJECTS = ("ball", "tree", "house", "river", "stone")
END_OF_TEXT = "<|endoftext|>"  # Qwen2's end-of-text token, and Qwen2Tokenizer's default eos, unk and pad


def corpus_lines() -> list[str]:
    # Cycles of fixed patterns: most next tokens are predictable, so a tiny model's loss falls fast.
    return [f"the {SUBJECTS[i % 6]} {VERBS[i % 4]} the {OBJECTS[i % 5]} ." for i in range(240)]


def train_tokenizer(lines: list[str]) -> Qwen2Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=512, special_tokens=[END_OF_TEXT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    bpe = json.loads(tokenizer.to_str())["model"]
    return Qwen2Tokenizer(vocab=bpe["vocab"], merges=[tuple(merge) for merge in bpe["merges"]])


def main() -> None:
    lines = corpus_lines()
    with open(os.path.join(HERE, "corpus.txt"), "w") as file:
        file.write("\n".join(lines) + "\n")
    with open(os.path.join(HERE, "corpus.jsonl"), "w") as file:
        for index, line in enumerate(lines[:60]):
            file.write(json.dumps({"id": index, "body": line}) + "\n")
    train_tokenizer(lines).save_pretrained(os.path.join(HERE, "tokenizer"))


if __name__ == "__main__":
    main()
