"""workload/data/tokenizer_size.py: a tokenizer's size from its tokenizer.json alone, as transformers counts it, bounded
before it is parsed, and the rule against the model's vocab_size."""
from __future__ import annotations

import json
import os

import pytest

from tests.support.sentencepiece_files import sentencepiece_model
from workload.data import sentencepiece_size, tokenizer_size
from workload.model import architectures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("directory", ["data/tokenizer", "data/chat-tokenizer"])
def test_the_size_is_len_of_the_tokenizer_transformers_loads(directory):
    from transformers import AutoTokenizer

    path = os.path.join(REPO, directory)
    assert tokenizer_size.size_in_directory(path) == len(AutoTokenizer.from_pretrained(path)), directory


def test_added_tokens_past_the_vocabulary_count_and_those_inside_it_do_not():
    document = {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "c": 2}},
                "added_tokens": [{"id": 2, "content": "c"}, {"id": 3, "content": "<pad>"}, {"id": 9, "content": "<x>"}]}
    assert tokenizer_size.size_of(json.dumps(document).encode()) == 10, "the highest id + 1: the embedding's rows"
    unigram = {"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["a", -1.0]]}, "added_tokens": []}
    assert tokenizer_size.size_of(json.dumps(unigram).encode()) == 2


@pytest.mark.parametrize("text, words", [
    (b"\xff\xfe", "not UTF-8 JSON"), (b"[" * 100_000, "not UTF-8 JSON"), (b"[1, 2]", "no model.vocab"),
    (b'{"model": {"vocab": {"a": -1}}}', "non-negative integer"), (b'{"model": {"vocab": {"a": true}}}', "integer"),
    (b'{"model": {"vocab": {}}, "added_tokens": [{"id": 1}]}', "without its content"),
])
def test_a_tokenizer_json_that_is_not_one_is_refused_in_words(text, words):
    with pytest.raises(ValueError, match=words):
        tokenizer_size.size_of(text)


def test_a_huge_or_sparse_file_is_refused_before_a_byte_is_read(tmp_path):
    with open(tmp_path / "tokenizer.json", "wb") as file:
        file.truncate(tokenizer_size.MAX_TOKENIZER_BYTES + 1)  # sparse: nothing stored, a size claimed
    with pytest.raises(ValueError, match="at most 67,108,864"):
        tokenizer_size.size_in_directory(str(tmp_path))
    with pytest.raises(tokenizer_size.NotSized):
        tokenizer_size.size_in_directory(str(tmp_path / "none"))


def test_every_shipped_models_own_tokenizer_is_known_and_fits_its_vocabulary():
    for model in architectures.shipped_ids():
        tokens = tokenizer_size.KNOWN_SIZES[model]
        assert tokenizer_size.vocabulary_problem(tokens, architectures.published(model)["vocab_size"]) is None, model


def test_the_rule_gives_both_sizes():
    assert tokenizer_size.vocabulary_problem(512, 512) is None
    why = tokenizer_size.vocabulary_problem(151_665, 128_256)
    assert "151,665 tokens" in why and "128,256" in why, why


def test_a_slow_bpe_tokenizers_vocab_json_and_added_tokens_are_sized_as_transformers_counts(tmp_path):
    from transformers import AutoTokenizer, GPT2Tokenizer

    vocab = {token: index for index, token in enumerate(["<|endoftext|>", "a", "b", "Ġ", "ab"])}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    tokenizer = GPT2Tokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    tokenizer.add_special_tokens({"pad_token": "<pad>", "unk_token": "a"})  # one new, one already in vocab.json
    tokenizer.save_pretrained(str(tmp_path))
    (tmp_path / "tokenizer.json").unlink(missing_ok=True)
    assert tokenizer_size.size_in_directory(str(tmp_path)) == len(AutoTokenizer.from_pretrained(str(tmp_path))) == 6
    files = {name: (tmp_path / name).read_bytes() if (tmp_path / name).exists() else None
             for name in ("vocab.json", "tokenizer_config.json", "added_tokens.json")}
    assert tokenizer_size.size_of_vocab(*files.values()) == 6, "the Hub's files counted by the directory's rules"
    named = json.dumps({"eos_token": "<|eos|>", "unk_token": "a"}).encode()  # named, one missing from vocab.json
    assert tokenizer_size.size_of_vocab(files["vocab.json"], named) == 6, "a special token named is added as it loads"


def test_a_wordpiece_vocabulary_is_sized_as_transformers_loads_it(tmp_path):
    """BERT's vocab.txt, one token a line (transformers' load_vocab: a repeated line keeps one id), with the added
    tokens of tokenizer_config.json: the size transformers' BertTokenizer gives, in the directory and on the Hub."""
    from transformers import BertTokenizer

    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(40)], "w3"]
    (tmp_path / "vocab.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "added_tokens_decoder": {"45": {"content": "<extra>", "special": True}}}))
    expected = len(BertTokenizer.from_pretrained(str(tmp_path)))
    assert tokenizer_size.size_in_directory(str(tmp_path)) == expected == 46
    assert tokenizer_size.size_of_wordpiece((tmp_path / "vocab.txt").read_bytes(),
                                            (tmp_path / "tokenizer_config.json").read_bytes()) == expected


def test_a_sentencepiece_models_pieces_are_read_as_protobuf_wrote_them():
    pieces = ["<unk>", "<s>", "</s>", "▁the", "▁Straße", "東京", "x" * 300] + [f"▁w{i}" for i in range(20_000)]
    assert sentencepiece_size.pieces(sentencepiece_model(pieces)) == pieces


def test_a_sentencepiece_tokenizer_counts_its_pieces_and_the_added_tokens_past_them(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(sentencepiece_model(["<unk>", "<s>", "</s>"] + [f"▁{i}" for i in range(597)]))
    assert tokenizer_size.size_in_directory(str(tmp_path)) == 600
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {
        "1": {"content": "<s>"}, "600": {"content": "<pad>"}, "601": {"content": "<|im_end|>"}}}))
    assert tokenizer_size.size_in_directory(str(tmp_path)) == 602, "<s> is a piece already; two added past them"
    assert "602 tokens" in tokenizer_size.vocabulary_problem(602, 600)


@pytest.mark.parametrize("data", [b"\0", b"\x0a\xff", b"\x0a\x05\x0a\x03ab", b"\x0b\x00", b"\x12\x02\x18\x01",
                                  b"\x0a" + b"\xff" * 11, b"\x0a\x03\x0a\x01\xff"])
def test_a_file_that_is_no_sentencepiece_model_is_left_to_the_tokenizers_load(tmp_path, data):
    """Bytes the walk cannot read (field 0, a cut-off field, a group's wire type, no pieces, a number past 10 bytes,
    a piece not UTF-8) are NotSized as the preview sizes a Hub repo's model, a warning there. A directory's only
    tokenizer file that nothing loads is refused instead (sentencepiece_size.unloadable): all of them but the piece
    that is not UTF-8, which sentencepiece's own parse may take."""
    with pytest.raises(tokenizer_size.NotSized, match="its sentencepiece model"):
        tokenizer_size.size_of_sentencepiece(data)
    (tmp_path / "spiece.model").write_bytes(data)
    if data == b"\x0a\x03\x0a\x01\xff":
        with pytest.raises(tokenizer_size.NotSized, match="its sentencepiece model"):
            tokenizer_size.size_in_directory(str(tmp_path))
    else:
        with pytest.raises(ValueError, match="spiece.model is neither a sentencepiece model"):
            tokenizer_size.size_in_directory(str(tmp_path))
