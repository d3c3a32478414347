"""A tokenizer directory whose only tokenizer file is a *.model that is neither a sentencepiece model nor a tiktoken
file (workload/data/sentencepiece_size.py unloadable): nothing loads it, so the local run and the job's driver refuse
it before the imports, in one line naming the flag; genuine models, and files that may be tiktoken's, are not."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.sentencepiece_files import sentencepiece_model
from workload.data import sentencepiece_size, tokenizer_size

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Bytes no sentencepiece parse nor tiktoken read accepts: an unterminated varint, a field of wire type 7, a
# well-formed protobuf message without pieces (field 2, trainer_spec, empty), text of one field a line.
NOTHING_LOADS = {
    "an unterminated number": b"\x80" * 300,
    "wire type 7": bytes([0x0F]) + b"\x01" * 40,
    "a message without pieces": b"\x12\x00",
    "prose": b"this is not a tokenizer\nnor is this\n",
}


@pytest.mark.parametrize("name", sorted(NOTHING_LOADS))
def test_bytes_nothing_loads_are_named(name):
    why = sentencepiece_size.unloadable(NOTHING_LOADS[name])
    assert why and why.startswith("is neither a sentencepiece model (it ") and "nor a tiktoken file" in why, why


def test_a_genuine_model_and_a_tiktoken_file_are_loadable():
    assert sentencepiece_size.unloadable(sentencepiece_model(["<unk>", "▁a", "b"])) is None
    assert sentencepiece_size.unloadable(b"IQ== 0\nIg== 1\n\nIw== 2\n") is None  # tiktoken/load.py's lines
    # a piece that is not UTF-8: sentencepiece's C++ parse (proto2) does not check it, so not certain to fail
    assert sentencepiece_size.unloadable(b"\x0a\x04\x0a\x02\xc3\x28") is None


def _directory(tmp_path, model: bytes, *extra: str):
    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "tokenizer.model").write_bytes(model)
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer"}))
    for name in extra:
        (directory / name).write_text("")
    return directory


def test_a_directory_with_only_that_model_is_refused_and_with_another_loader_it_is_not(tmp_path):
    directory = _directory(tmp_path, NOTHING_LOADS["wire type 7"])
    with pytest.raises(ValueError, match="tokenizer.model is neither a sentencepiece model"):
        tokenizer_size.size_in_directory(str(directory))
    (directory / "o200k.tiktoken").write_text("")  # tiktoken's own file beside it: left to the libraries
    with pytest.raises(tokenizer_size.NotSized):
        tokenizer_size.size_in_directory(str(directory))


def test_transformers_cannot_load_it_either(tmp_path):
    from transformers import AutoTokenizer

    with pytest.raises(Exception):  # noqa: B017 - sentencepiece's parse, then tiktoken's (or its absence)
        AutoTokenizer.from_pretrained(str(_directory(tmp_path, NOTHING_LOADS["wire type 7"])))


def test_the_local_run_refuses_it_in_one_line_naming_the_flag(tmp_path):
    directory = _directory(tmp_path, NOTHING_LOADS["an unterminated number"])
    dataset = tmp_path / "texts.jsonl"
    dataset.write_text("".join(json.dumps({"text": f"sample line {i}"}) + "\n" for i in range(30)))
    done = subprocess.run([sys.executable, "-m", "workload.local", "--tokenizer", str(directory), "--dataset",
                           str(dataset), "--storage_path", str(tmp_path / "runs")], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1"})
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert errors[0].startswith(f"error: --tokenizer {directory}: {directory}/tokenizer.model is neither"), errors
