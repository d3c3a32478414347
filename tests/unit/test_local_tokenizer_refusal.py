"""`python -m workload.local` with a --tokenizer directory larger than a --model_id directory's vocabulary: refused
from the two directories' files (config.json's vocab_size, tokenizer.json; workload.run.preflight), before torch or
transformers load, so stderr holds the refusal and nothing a library prints as it imports."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

from workload.config import ARCHITECTURES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _safetensors(path, name: str = "model.norm.weight") -> None:
    """A one-tensor safetensors file whose header the early checks read (a norm: its shape is checked after the
    build, so the header-shape check before the imports leaves it to the vocabulary rule here)."""
    header = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)


def _tokenizer(directory, tokens: int) -> None:
    vocab = {f"t{index}": index for index in range(tokens - 2)}
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    added = [{"id": tokens - 2, "content": "<s>", **flags}, {"id": tokens - 1, "content": "</s>", **flags}]
    directory.mkdir()
    (directory / "tokenizer.json").write_text(json.dumps(
        {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}, "added_tokens": added}))


def test_a_tokenizer_past_a_model_directorys_vocabulary_is_refused_in_its_lines_only(tmp_path):
    model, tokenizer = tmp_path / "model", tmp_path / "tok"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(ARCHITECTURES["tiny"], vocab_size=1000, model_type="qwen2")))
    _safetensors(model / "model.safetensors")
    _tokenizer(tokenizer, 1200)
    done = subprocess.run([sys.executable, "-m", "workload.local", "--model_id", str(model), "--tokenizer",
                           str(tokenizer), "--storage_path", str(tmp_path / "runs")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, f"exit 2 (bad input), got {done.returncode}: {done.stderr[-2000:]}"
    lines = done.stderr.splitlines()
    assert 1 <= len(lines) <= 2, f"the refusal's one or two lines, nothing a library printed before it: {lines}"
    assert lines[0].startswith(f"error: --tokenizer {tokenizer}: the tokenizer has 1,200 tokens, more than "
                               f"--model_id {model}'s vocabulary of 1,000"), lines
    assert "Traceback" not in done.stderr and "deprecated" not in done.stderr, done.stderr
