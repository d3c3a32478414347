"""`workload.export --merge` builds the adapters' base at --dtype before merging: a base this machine cannot hold (a
70B model's 140 GB in bfloat16 on a laptop) is exit 3 naming both figures, before from_pretrained downloads or
allocates a byte of it. The base's size comes from its files' headers (a directory) or its config.json's arithmetic
(a Hub id)."""
from __future__ import annotations

import json

import pytest
import torch

from workload import cli
from workload.checkpoint import export, export_room

SEVENTY_B = "meta-llama/Llama-3.3-70B-Instruct"  # shipped config: 70,553,706,496 parameters on its model card


def _adapters(tmp_path, base: str) -> str:
    directory = tmp_path / "adapters"
    directory.mkdir()
    (directory / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
    return str(directory)


def test_a_base_this_machine_cannot_hold_is_exit_3_before_its_load(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(export_room, "available_memory", lambda: 64 * export_room.GIB)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("the base was loaded"))
    with pytest.raises(cli.EnvironmentProblem) as refused:
        export.merge(_adapters(tmp_path, SEVENTY_B), str(tmp_path / "merged"), dtype="bfloat16")
    assert str(refused.value) == ("the checkpoint's model has 70.55 billion parameters: the export builds them in "
                                  "bfloat16, 131.7 GiB of memory with the load's buffers, and this machine has 64.0 "
                                  "GiB available"), refused.value
    assert not (tmp_path / "merged").exists()


def test_a_directory_base_is_counted_from_its_safetensors_headers(tmp_path):
    from transformers import AutoModelForCausalLM, Qwen2Config

    from workload.config import TINY

    lm = AutoModelForCausalLM.from_config(Qwen2Config(**TINY), dtype=torch.bfloat16)
    lm.save_pretrained(tmp_path / "base")
    # tied weights (the tiny model's embedding and head) are saved, and allocated, once
    assert export_room.base_parameters(str(tmp_path / "base")) == sum(p.numel() for p in lm.parameters())


def test_a_base_whose_size_cannot_be_told_is_left_to_its_load(tmp_path, monkeypatch):
    """No safetensors in the directory (a pickled base), or a Hub id the Hub does not answer for: no refusal here;
    from_pretrained's own error says what is wrong with it."""
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"\0" * 16)
    assert export_room.base_parameters(str(tmp_path / "pickled")) is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert export_room.base_parameters("someone/not-shipped-model-9") is None
