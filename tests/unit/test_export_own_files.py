"""`workload.export` on a checkpoint whose own files were tampered with: adapter_config.json, config.json (its typed
fields, and its sizes against the shapes .metadata lists), generation_config.json and .metadata's pickle stream are
refused in a fresh process before torch or transformers are imported, exit 2, one line naming CHECKPOINT, the file
and the key, without a Python exception's name and without the secret a value held."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_process import REPO, run_cli

SECRET = "s3cretPassw0rd"  # noqa: S105 - the value a refusal must not repeat
_BUILD = """
import json, os, sys, warnings, torch
import torch.distributed.checkpoint as dcp
from transformers import AutoModelForCausalLM, Qwen2Config
from workload.config import TINY
from workload.checkpoint import sharded
from workload.model.loss import LM_PREFIX
out = sys.argv[1]
torch.manual_seed(1)
config = Qwen2Config(**{**TINY, "num_hidden_layers": 3})
lm = AutoModelForCausalLM.from_config(config)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    dcp.save({sharded.MODEL_KEY: {LM_PREFIX + n: t for n, t in lm.state_dict().items()}}, checkpoint_id=out,
             no_dist=True)
config.save_pretrained(out)
json.dump({"step": 7, "tokenizer": ""}, open(os.path.join(out, sharded.STEP_FILE), "w"))
"""
ADAPTER = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.05,
           "target_modules": ["k_proj", "o_proj"], "base_model_name_or_path": "Qwen/Qwen2.5-1.5B"}


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> Path:
    """A tiny Qwen2 checkpoint of three layers and 512 rows of embedding, as the job saves one."""
    directory = tmp_path_factory.mktemp("export_own_files") / "checkpoint_000007"
    done = subprocess.run([sys.executable, "-c", _BUILD, str(directory)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return directory


def _json(name: str, value) -> tuple[str, bytes]:
    return name, json.dumps(value).encode()


def _config_with(**fields):
    def change(directory: Path) -> tuple[str, bytes]:
        return _json("config.json", {**json.loads((directory / "config.json").read_text()), **fields})
    return change


CASES = {
    # adapter_config.json: its values by the job's flags' rules, its base by the rule of every source
    "adapter rank above 1024": (lambda d: _json("adapter_config.json", {**ADAPTER, "r": 4096}),
                                ["adapter_config.json", "r is 4096", "--lora_rank", "from 1 to 1024"]),
    "adapter alpha a string": (lambda d: _json("adapter_config.json", {**ADAPTER, "lora_alpha": "8"}),
                               ["adapter_config.json", "lora_alpha is '8'", "--lora_alpha"]),
    "adapter config a string": (lambda d: _json("adapter_config.json", "LORA"),
                                ["adapter_config.json", "holds a JSON string, not an object"]),
    "adapter config without its keys": (lambda d: _json("adapter_config.json", {"peft_type": "LORA"}),
                                        ["adapter_config.json", "has no r, lora_alpha, target_modules"]),
    "adapter targets a number": (lambda d: _json("adapter_config.json", {**ADAPTER, "target_modules": 7}),
                                 ["adapter_config.json", "target_modules is 7"]),
    "adapter base with a password": (
        lambda d: _json("adapter_config.json", {**ADAPTER, "base_model_name_or_path":
                                                f"https://builder:{SECRET}@weights.example.org/qwen"}),
        ["adapter_config.json", "base_model_name_or_path", "credentials"]),
    # config.json: its sizes against the tensors .metadata lists, its typed fields as transformers' class types them
    "config vocabulary larger than the embedding": (_config_with(vocab_size=2048),
                                                    ["config.json", "vocab_size 2,048", "512 rows"]),
    "config one layer short": (_config_with(num_hidden_layers=2), ["config.json", "num_hidden_layers 2", "3 decoder"]),
    "config use_cache a number": (_config_with(use_cache=1), ["config.json", "use_cache is an integer",
                                                              "true or false"]),
    "config rms_norm_eps an integer": (_config_with(rms_norm_eps=1), ["config.json", "rms_norm_eps is an integer"]),
    "config tie_word_embeddings a string": (_config_with(tie_word_embeddings="true"),
                                            ["config.json", "tie_word_embeddings is a string"]),
    # generation_config.json: what transformers' GenerationConfig refuses at load, and generate() when sampling
    "generation temperature 0": (lambda d: _json("generation_config.json", {"do_sample": True, "temperature": 0}),
                                 ["generation_config.json", "temperature must be"]),
    "generation top_k negative": (lambda d: _json("generation_config.json", {"do_sample": True, "top_k": -3}),
                                  ["generation_config.json", "top_k must be"]),
    "generation early_stopping a word": (lambda d: _json("generation_config.json", {"early_stopping": "soon"}),
                                         ["generation_config.json", "early_stopping must be"]),
    "generation a list": (lambda d: _json("generation_config.json", [1]),
                          ["generation_config.json", "holds no JSON object"]),
    # .metadata: a pickle cut short (a copy interrupted)
    "metadata cut in half": (lambda d: (".metadata", (d / ".metadata").read_bytes()[:1000]),
                             [".metadata", "cut short or garbled after byte"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_checkpoints_own_file_is_refused_naming_it_before_the_imports(case, genuine, tmp_path):
    change, words = CASES[case]
    checkpoint = tmp_path / "checkpoint_000007"
    shutil.copytree(genuine, checkpoint)
    name, data = change(checkpoint)
    (checkpoint / name).write_bytes(data)
    code, err, loaded, _ = run_cli("workload.export", [str(checkpoint), str(tmp_path / "model")])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, f"{case}: exit {code}, {err}"
    assert lines[0].startswith(f"error: CHECKPOINT {checkpoint}") or f"checkpoint file {checkpoint}/" in lines[0], \
        f"{case}: {lines[0]}"
    for word in words:
        assert word in lines[0], f"{case}: {word!r} not in {lines[0]}"
    assert loaded == [], f"{case}: refused after importing {loaded}"
    assert SECRET not in err and "Error:" not in err and "Traceback" not in err, f"{case}: {err}"
    assert not (tmp_path / "model").exists(), case


def test_the_genuine_checkpoint_passes_the_checks_made_before_the_imports(genuine):
    """The same checks pass the checkpoint untouched (what export does next is the tiers' other tests')."""
    from workload.checkpoint.adapter_config import check_adapter_config
    from workload.checkpoint.export import _check_config_claims
    from workload.checkpoint.file_checks import check_files, check_metadata_stream
    from workload.checkpoint.generation_config import check_generation_config
    from workload.checkpoint.model_config import check_config_values

    check_files(str(genuine), str(genuine))
    check_config_values(str(genuine))
    _check_config_claims(str(genuine), str(genuine))
    check_metadata_stream(str(genuine), str(genuine))
    check_generation_config(str(genuine), str(genuine))
    adapter = genuine.parent / "with_adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(ADAPTER))
    assert check_adapter_config("CKPT", str(adapter))["r"] == 4


def test_the_models_prefix_is_where_the_job_saves_the_weights():
    from workload.checkpoint.model_config import MODEL_PREFIX
    from workload.checkpoint.sharded import MODEL_KEY
    from workload.model.loss import LM_PREFIX

    assert MODEL_PREFIX == f"{MODEL_KEY}.{LM_PREFIX}"
