"""Writes the repository's sample data: a learnable corpus and a word-level tokenizer trained on it.

`python -m workload.local` trains on them by default, and the tests use them. Run from the repository root:
`python data/make_sample_data.py`. The outputs are committed, so neither the local run nor the tests need the
network or this script.
"""
import json
import os

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
SUBJECTS = ("cat", "dog", "bird", "fish", "horse", "mouse")
VERBS = ("sees", "likes", "chases", "follows")
OBJECTS = ("ball", "tree", "house", "river", "stone")


def corpus_lines() -> list[str]:
    # Cycles of fixed patterns: most next tokens are predictable, so a tiny model's loss falls fast.
    return [f"the {SUBJECTS[i % 6]} {VERBS[i % 4]} the {OBJECTS[i % 5]} ." for i in range(240)]


def main() -> None:
    lines = corpus_lines()
    with open(os.path.join(HERE, "corpus.txt"), "w") as file:
        file.write("\n".join(lines) + "\n")
    with open(os.path.join(HERE, "corpus.jsonl"), "w") as file:
        for index, line in enumerate(lines[:60]):
            file.write(json.dumps({"id": index, "body": line}) + "\n")
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"]))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<eos>").save_pretrained(
        os.path.join(HERE, "tokenizer")
    )


if __name__ == "__main__":
    main()
