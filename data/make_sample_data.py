"""Writes the repository's sample data: a learnable corpus and a tokenizer trained on it, and for supervised
fine-tuning a chat dataset, a prompt-completion dataset and the same tokenizer with a chat template.

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
# ChatML's turn markers, as Qwen2.5-Instruct's tokenizer has them (special tokens; <|im_end|> is its eos).
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = os.path.join(HERE, "..", "workload", "data", "templates", "qwen2.5.jinja")
SYSTEM = "answer in one line ."
CONVERSATIONS = 120


def answer(subject: int, verb: int) -> str:
    """What the assistant says: the object is a function of the subject and the verb, so it can be learnt."""
    return f"the {SUBJECTS[subject]} {VERBS[verb]} the {OBJECTS[(subject + 2 * verb) % 5]} ."


def question(subject: int, verb: int) -> str:
    return f"the {SUBJECTS[subject]} {VERBS[verb]} what ?"


def conversations() -> list[dict]:
    """Chat records in the OpenAI / Hugging Face shape; every third has a second question."""
    records = []
    for i in range(CONVERSATIONS):
        subject, verb = i % 6, (i // 6) % 4
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question(subject, verb)},
                    {"role": "assistant", "content": answer(subject, verb)}]
        if i % 3 == 0:
            other = (subject + 1) % 6
            messages += [{"role": "user", "content": question(other, verb)},
                         {"role": "assistant", "content": answer(other, verb)}]
        records.append({"messages": messages})
    return records


def instructions() -> list[dict]:
    """Prompt-completion records (TRL's shape): the same questions and answers, one a record."""
    return [{"prompt": question(i % 6, (i // 6) % 4), "completion": answer(i % 6, (i // 6) % 4)}
            for i in range(CONVERSATIONS)]


def chat_tokenizer(tokenizer: Qwen2Tokenizer) -> Qwen2Tokenizer:
    """The sample tokenizer with ChatML's markers and Qwen2.5-Instruct's chat template (workload/data/templates), as
    Qwen2.5-Instruct's tokenizer has them: <|im_end|> ends a turn and the text, <|endoftext|> pads."""
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tokenizer.eos_token = IM_END
    with open(CHAT_TEMPLATE, encoding="utf-8") as file:
        tokenizer.chat_template = file.read()
    return tokenizer


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
    for name, records in (("conversations.jsonl", conversations()), ("instructions.jsonl", instructions())):
        with open(os.path.join(HERE, name), "w") as file:
            file.writelines(json.dumps(record) + "\n" for record in records)
    chat_tokenizer(train_tokenizer(lines)).save_pretrained(os.path.join(HERE, "chat-tokenizer"))


if __name__ == "__main__":
    main()
