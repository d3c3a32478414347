"""tokenizer_config.json's typed fields (workload/data/tokenizer_fields.py): one rule for the fields
AutoTokenizer.from_pretrained reads with a type, checked against transformers' own load of the same file, and
answered by workload.local before torch or transformers is imported, naming --tokenizer and the field."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.support.cli_process import REPO, run_cli
from workload.data import tokenizer_fields

BASE = json.loads((REPO / "data" / "tokenizer" / "tokenizer_config.json").read_text())

# (case, fields over the sample tokenizer's, the field a refusal names or None)
CASES = [
    ("an id written in hex", {"added_tokens_decoder": {"0x2a": {"content": "<sep>"}}}, "added_tokens_decoder"),
    ("an id with spaces, which int() reads", {"added_tokens_decoder": {" 12 ": {"content": "<sep>"}}}, None),
    ("a token given as a bare string", {"added_tokens_decoder": {"12": "<sep>"}}, "added_tokens_decoder"),
    ("a flag written as a word", {"added_tokens_decoder": {"12": {"content": "<sep>", "rstrip": "no"}}},
     "added_tokens_decoder"),
    ("a key AddedToken ignores", {"added_tokens_decoder": {"12": {"content": "<sep>", "colour": "red"}}}, None),
    ("the decoder as a list", {"added_tokens_decoder": [{"content": "<sep>"}]}, "added_tokens_decoder"),
    ("a template as a number", {"chat_template": 7}, "chat_template"),
    ("a template list without its text", {"chat_template": [{"name": "default", "text": "{{ 1 }}"}]}, "chat_template"),
    ("a template list", {"chat_template": [{"name": "default", "template": "{{ messages[0]['content'] }}"}]}, None),
    ("a length as text", {"model_max_length": "4k"}, "model_max_length"),
    ("a length as null", {"model_max_length": None}, None),
    ("a side that is neither", {"truncation_side": "middle"}, "truncation_side"),
    ("a special token as a plain object", {"eos_token": {"content": "</s>", "special": True}}, "eos_token"),
    ("a special token as a saved AddedToken", {"eos_token": {"__type": "AddedToken", "content": "</s>"}}, None),
]


@pytest.mark.parametrize("case, fields, named", CASES, ids=[case[0] for case in CASES])
def test_the_rule_names_the_field_and_what_it_allows(case, fields, named):
    found = tokenizer_fields.problem({**BASE, **fields})
    if named is None:
        assert found is None, found
    else:
        assert found is not None and f"field {named}" in found and "allowed:" in found, found


def test_the_repo_sample_tokenizers_pass():
    for name in ("tokenizer", "chat-tokenizer"):
        assert tokenizer_fields.problem(json.loads((REPO / "data" / name / "tokenizer_config.json").read_text())) is None


@pytest.mark.parametrize("case, fields, named", CASES, ids=[case[0] for case in CASES])
def test_the_rule_agrees_with_transformers_own_load(tmp_path, case, fields, named):
    """What the rule refuses, AutoTokenizer cannot load (or render with, or measure a text against); what it passes
    loads and works."""
    from transformers import AutoTokenizer

    shutil.copytree(REPO / "data" / "tokenizer", tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({**BASE, **fields}))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
        tokenizer("a few words to measure")
        if "chat_template" in fields:
            tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    except Exception as error:  # noqa: BLE001 - whatever transformers raises for it
        assert named is not None, f"transformers fails on what the rule passes: {error!r}"
        return
    assert named is None, "transformers loads what the rule refuses"


def test_the_local_run_refuses_it_before_the_heavy_imports(tmp_path):
    shutil.copytree(REPO / "data" / "tokenizer", tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps(
        {**BASE, "added_tokens_decoder": {"third": {"content": "<sep>"}}}))
    code, stderr, loaded, _ = run_cli("workload.local", [
        "--tokenizer", str(tmp_path / "tok"), "--dataset", str(REPO / "data" / "corpus.txt"),
        "--storage_path", str(tmp_path / "runs")])
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) <= 2, stderr
    assert "--tokenizer" in stderr and "added_tokens_decoder" in stderr and "'third'" in stderr, stderr
    assert loaded == [], f"refused before {loaded} were imported"


@pytest.mark.parametrize("document", [["PreTrainedTokenizerFast"], "PreTrainedTokenizerFast", 7])
def test_a_tokenizer_config_that_is_no_object_is_named_before_the_heavy_imports(tmp_path, document):
    # tokenizer_fields.directory_problem: transformers reads the file with .get, and failed with an AttributeError
    # that named neither the file nor what it must be.
    shutil.copytree(REPO / "data" / "tokenizer", tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps(document))
    code, stderr, loaded, _ = run_cli("workload.local", [
        "--tokenizer", str(tmp_path / "tok"), "--dataset", str(REPO / "data" / "corpus.txt"),
        "--storage_path", str(tmp_path / "runs")])
    assert code == 2 and f"tokenizer_config.json is a JSON {type(document).__name__}, not the JSON object" in stderr, stderr
    assert "Traceback" not in stderr and "AttributeError" not in stderr and loaded == [], stderr
