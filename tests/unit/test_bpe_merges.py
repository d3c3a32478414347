"""A BPE tokenizer.json whose merges name a token outside its vocabulary (issue 44): refused from the JSON alone
(workload/data/bpe_merges.py) exactly when tokenizers itself cannot build the model, naming the merge's index and
never the token; and a tokenizer that tokenizers or transformers still cannot load is one line naming --tokenizer."""
from __future__ import annotations

import json

import pytest

from workload.data import bpe_merges, tokenizer_size
from workload.data.tokenizer import load_tokenizer

VOCAB = {"[UNK]": 0, "l": 1, "o": 2, "w": 3, "##o": 4, "##w": 5, "lo": 6, "low": 7, "ow": 8, "l##o": 9}


def _document(merges, prefix: str | None = "##", vocab=None) -> dict:
    model = {"type": "BPE", "dropout": None, "unk_token": "[UNK]", "continuing_subword_prefix": prefix,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab or VOCAB,
             "merges": merges}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model}


def _tokenizers_builds(document: dict) -> bool:
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(json.dumps(document))
    except Exception:  # noqa: BLE001 - tokenizers raises a plain Exception
        return False
    return True


CASES = {
    "pairs, the prefix cut from the second": ([["l", "##o"], ["lo", "##w"]], "##", None),
    "legacy strings": (["l ##o", "lo ##w"], "##", None),
    "no prefix: joined as they are": ([["o", "w"], ["l", "o"]], None, None),
    "first token outside": ([["l", "##o"], ["q", "##o"]], "##", "merges[1] whose first token"),
    "second token outside": ([["l", "##q"]], "##", "merges[0] whose second token"),
    "their concatenation outside": ([["w", "##o"]], "##", "merges[0] whose concatenation"),
    "the prefix cut: o + ##w is ow": ([["o", "##w"]], "##", None),
    "no prefix to cut: o + ##w is o##w": ([["o", "##w"]], None, "merges[0] whose concatenation"),
    "no prefix to cut: l + ##o is l##o": ([["l", "##o"]], None, None),
    "a legacy string of three parts": (["l ##o x"], "##", "merges[0] that is not two tokens"),
    "a legacy string of one part": (["lo"], "##", "merges[0] that is not two tokens"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_rule_refuses_what_tokenizers_cannot_build_and_only_that(case):
    merges, prefix, words = CASES[case]
    document = _document(merges, prefix)
    why = bpe_merges.problem(document["model"], document["model"]["vocab"])
    assert (why is None) == _tokenizers_builds(document), f"{case}: ours {why!r} vs tokenizers' own build"
    assert (why is None) == (words is None) and (words is None or words in why), why
    if why is None:
        assert tokenizer_size.size_of(json.dumps(document).encode()) == len(VOCAB)
    else:
        with pytest.raises(ValueError, match=r"merges\[\d+\]"):
            tokenizer_size.size_of(json.dumps(document).encode())


def test_the_refusal_names_the_index_never_the_token(tmp_path):
    hidden = "hf_abcdefghijklmnopqrstuvwxyz012345"
    merges = [["l", "##o"]] * 40 + [[hidden, "##o"]]
    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "tokenizer.json").write_text(json.dumps(_document(merges)))
    with pytest.raises(ValueError) as refused:
        tokenizer_size.size_in_directory(str(directory))
    message = str(refused.value)
    assert "merges[40]" in message and hidden not in message and "\n" not in message, message


def test_a_tokenizer_that_does_not_load_is_one_line_naming_the_flag_without_its_tokens(tmp_path):
    """load_tokenizer's own answer, past the JSON checks: tokenizers' plain Exception quoting the token (its
    "Token `...` out of vocabulary") and one it raises for a component it does not know."""
    hidden = "hf_zyxwvutsrqponmlkjihgfedcba987654"
    broken = _document([["l", hidden]])
    broken["model"]["vocab"] = {**VOCAB, hidden: 10}  # the pair is in, their concatenation is not
    unknown = _document([["l", "##o"]])
    unknown["pre_tokenizer"] = {"type": "NoSuchPreTokenizer"}
    for name, document in (("merge", broken), ("component", unknown)):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "tokenizer.json").write_text(json.dumps(document))
        with pytest.raises(ValueError) as refused:
            load_tokenizer(str(directory))
        message = str(refused.value)
        assert message.startswith(f"--tokenizer '{directory}'") and "cannot be loaded" in message, message
        assert "\n" not in message and hidden not in message and len(message) < 500, message


def test_the_local_run_answers_a_tokenizer_that_does_not_load_in_one_line(tmp_path):
    """tokenizers' plain Exception for a component it does not know, or a pre-tokenizer regex Oniguruma refuses, from
    the tokenizers library's own load of tokenizer.json before torch (tokenizer_size.file_load_problem), is exit 2
    and one line naming --tokenizer, not a traceback after seconds of imports."""
    from tests.support.cli_process import run_cli
    from workload import cli

    for pre_tokenizer, words in (({"type": "NoSuchPreTokenizer"}, "PreTokenizer"),
                                 ({"type": "Split", "pattern": {"Regex": "[a-z"}, "behavior": "Isolated",
                                   "invert": False}, "Oniguruma error")):
        document = _document([["l", "##o"]])
        document["pre_tokenizer"] = pre_tokenizer
        directory = tmp_path / words.split()[0]
        directory.mkdir()
        (directory / "tokenizer.json").write_text(json.dumps(document))
        code, stderr, loaded, _ = run_cli("workload.local", [
            "--tokenizer", str(directory), "--dataset", "data/corpus.txt", "--storage_path", str(tmp_path / "runs"),
            "--steps", "1"])
        assert (code, loaded) == (cli.USAGE, []) and "Traceback" not in stderr, f"exit {code}: {stderr[-800:]}"
        refusal = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(refusal) == 1 and f"--tokenizer {directory}: its tokenizer.json does not load in the tokenizers " \
            f"library" in refusal[0] and words in refusal[0], stderr[-800:]
