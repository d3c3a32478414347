"""A model or tokenizer directory that only custom code loads (auto_map, workload/model/remote_code.py): refused before
transformers is imported, naming the flag, in one line; and the directories transformers loads with its own classes
(an auto_map beside a class it has) are not. The facts are checked against transformers itself."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from workload.model import compatibility, remote_code

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_TOKENIZER = os.path.join(REPO, "data", "tokenizer", "tokenizer.json")


def _tokenizer(directory, tokenizer_class: str | None, auto_map=None, model_type: str | None = None,
               marker=None) -> str:
    directory.mkdir()
    shutil.copyfile(SAMPLE_TOKENIZER, directory / "tokenizer.json")
    config = {"eos_token": "<|endoftext|>"}
    if tokenizer_class:
        config["tokenizer_class"] = tokenizer_class
    if auto_map is not None:
        config["auto_map"] = auto_map
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    if model_type:
        (directory / "config.json").write_text(json.dumps({"model_type": model_type}))
    if marker is not None:  # the custom code: creates the marker when imported
        (directory / "acme_tokenization.py").write_text(
            f"open({str(marker)!r}, 'w').write('ran')\n"
            "from transformers import PreTrainedTokenizerFast as AcmeTokenizerFast\n")
    return str(directory)


CUSTOM = {"AutoTokenizer": [None, "acme_tokenization.AcmeTokenizerFast"]}


def test_an_auto_map_to_a_class_transformers_lacks_is_refused(tmp_path):
    why = remote_code.tokenizer_problem(_tokenizer(tmp_path / "acme", "AcmeTokenizerFast", CUSTOM))
    assert why and "auto_map" in why and "'AcmeTokenizerFast' is not a class transformers" in why, why
    assert "trust_remote_code is off" in why, why
    # the older list form of auto_map, and no tokenizer_class at all
    why = remote_code.tokenizer_problem(_tokenizer(tmp_path / "old", None, ["acme_tokenization.AcmeTokenizer", None]))
    assert why and "names no tokenizer_class" in why, why


def test_an_auto_map_beside_a_class_transformers_has_is_not_refused(tmp_path):
    for name, tokenizer_class, model_type in (("native", "PreTrainedTokenizerFast", None),
                                              ("qwen", "Qwen2TokenizerFast", None),
                                              ("typed", "AcmeTokenizerFast", "llama")):
        assert remote_code.tokenizer_problem(_tokenizer(tmp_path / name, tokenizer_class, CUSTOM, model_type)) is None
    assert remote_code.tokenizer_problem(_tokenizer(tmp_path / "plain", "AcmeTokenizerFast")) is None  # no auto_map


def test_model_types_as_transformers_knows_them():
    assert [remote_code.known_model_type(name) for name in ("llama", "qwen2", "gemma3_text", "gpt-sw3")] == [True] * 4
    assert remote_code.known_model_type("acme_lm") is False
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    assert all(remote_code.known_model_type(name) for name in CONFIG_MAPPING_NAMES), "a known model_type not found"


def test_tokenizer_classes_as_transformers_knows_them():
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    classes = {name for name in TOKENIZER_MAPPING_NAMES.values() if isinstance(name, str)}
    assert classes and all(remote_code.known_tokenizer_class(name) for name in classes), \
        sorted(name for name in classes if not remote_code.known_tokenizer_class(name))
    assert remote_code.known_tokenizer_class("AcmeTokenizerFast") is False


def test_the_refusals_are_transformers_own(tmp_path):
    # What AutoTokenizer does with the same directories: refuses the first without running its code, loads the
    # second with its own class (the custom code not run either).
    from transformers import AutoTokenizer

    marker = tmp_path / "ran"
    refused = _tokenizer(tmp_path / "acme", "AcmeTokenizerFast", CUSTOM, marker=marker)
    with pytest.raises(ValueError, match="trust_remote_code"):
        AutoTokenizer.from_pretrained(refused)
    loaded = AutoTokenizer.from_pretrained(_tokenizer(tmp_path / "native", "PreTrainedTokenizerFast", CUSTOM,
                                                      marker=marker))
    assert type(loaded).__module__.startswith("transformers."), type(loaded)
    assert not marker.exists(), "the custom code ran"


_CHECK_RAW = r"""
import json, sys
from workload.model import compatibility
try:
    compatibility.check_raw(json.loads(sys.argv[1]), "--model_id m")
    said = None
except ValueError as error:
    said = str(error)
print(json.dumps({"said": said, "transformers": "transformers" in sys.modules, "torch": "torch" in sys.modules}))
"""


def test_a_model_type_transformers_lacks_is_refused_before_it_is_imported():
    config = {"model_type": "acme_lm", "auto_map": {"AutoModelForCausalLM": "acme_modeling.AcmeForCausalLM"}}
    done = subprocess.run([sys.executable, "-c", _CHECK_RAW, json.dumps(config)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    report = json.loads(done.stdout)
    assert report["said"] and report["said"].startswith("--model_id m: model_type 'acme_lm' is not one transformers"), \
        report
    assert "auto_map points at custom code" in report["said"], report
    assert not report["transformers"] and not report["torch"], report
    # the same words after the imports (the preview's gate, check_config_dict)
    with pytest.raises(ValueError) as after:
        compatibility.check_config_dict(dict(config, model_type="acme_lm2"), "--model_id m")
    assert "model_type 'acme_lm2' is not one transformers" in str(after.value)


def test_the_local_run_refuses_a_custom_code_tokenizer_in_one_line(tmp_path):
    marker = tmp_path / "ran"
    tokenizer = _tokenizer(tmp_path / "acme", "AcmeTokenizerFast", CUSTOM, marker=marker)
    dataset = tmp_path / "texts.jsonl"
    dataset.write_text("".join(json.dumps({"text": f"line {i} of the sample"}) + "\n" for i in range(30)))
    done = subprocess.run([sys.executable, "-m", "workload.local", "--tokenizer", tokenizer, "--dataset", str(dataset),
                           "--storage_path", str(tmp_path / "runs")], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1"})
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert errors[0].startswith(f"error: --tokenizer {tokenizer}: its tokenizer_config.json's auto_map"), errors
    assert "Traceback" not in done.stderr and not marker.exists(), done.stderr


def test_a_model_type_that_may_be_a_token_is_not_echoed():
    token = "hf_" + "Zq8Yx7Wv6Ut5Sr4Qp3On2"
    with pytest.raises(ValueError) as refused:
        compatibility.check_raw({"model_type": token}, "--model_id m")
    assert token not in str(refused.value) and "is not one transformers" in str(refused.value), refused.value
