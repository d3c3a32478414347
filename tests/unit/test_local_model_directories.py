"""A local --model_id directory as a new user gives it to the local run (the tenth fresh audit's classes): taken by the
path they typed, relative or not, and its config.json's mistakes answered in one line before Ray starts, through the
command's own main with the harness of tests/unit/test_mistakes_before_ray.py (its `here` fixture fails a case that
would start the local Ray cluster)."""
from __future__ import annotations

import json

import pytest

from tests.unit.test_mistakes_before_ray import LOCAL, _run, here  # noqa: F401  (here: the fixture)
from workload import cli
from workload.model import build, config_json
from workload.run import local

NO_TENSORS = (2).to_bytes(8, "little") + b"{}"  # a safetensors file of no tensors: its header length, then "{}"
TINY_LLAMA = {"model_type": "llama", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256}


def _model(directory, **config) -> None:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({**TINY_LLAMA, **config}))
    (directory / "model.safetensors").write_bytes(NO_TENSORS)


def test_a_relative_model_directory_reaches_the_job_by_its_absolute_path(tmp_path, monkeypatch):
    """The job runs in a copy of workload/ elsewhere: `--model_id my-model` was read there as a Hub id, and failed
    inside Ray with "the Hugging Face Hub is not reachable"."""
    _model(tmp_path / "checkpoints" / "my-model")
    monkeypatch.chdir(tmp_path / "checkpoints")
    cfg = local.parse_args(["--model_id", "my-model", "--storage_path", ""])
    assert cfg.model_id == "my-model"  # the checks before Ray name it as typed
    args = local.job_config(cfg).to_args()
    assert args[args.index("--model_id") + 1] == str(tmp_path / "checkpoints" / "my-model")
    for hub in (["--model_id", "team/model"], ["--model_config", "tiny"]):
        cfg = local.parse_args([*hub, "--storage_path", ""])
        assert local.job_config(cfg) == cfg


@pytest.mark.parametrize("config, accepted", [
    ({"torch_dtype": "fp16"}, False), ({"dtype": "float8"}, False), ({"text_config": {"dtype": "bf16"}}, False),
    ({"torch_dtype": "bfloat16"}, True), ({"dtype": "float16", "torch_dtype": None}, True), ({}, True),
])
def test_a_dtype_torch_does_not_name_is_refused_as_the_file_is_read(config, accepted):
    """transformers builds its config by getattr(torch, dtype): a hand-typed "fp16" failed after seconds of imports,
    as "module 'torch' has no attribute 'fp16'"."""
    text = json.dumps({**TINY_LLAMA, **config})
    if accepted:
        config_json.loads(text)
        return
    with pytest.raises(config_json.Refused, match=r"not a config transformers builds: its (torch_)?dtype is '\w+', "
                                                  r"which names no torch dtype; allowed: bfloat16, float16 or float32"):
        config_json.loads(text)


MISTAKES = [
    ("a dtype typed by hand", {"torch_dtype": "fp32"}, ["--model_id", "finetuned"],
     "--model_id finetuned: finetuned/config.json is not a config transformers builds: its torch_dtype is 'fp32', "
     "which names no torch dtype"),
    ("a model path that names nothing", {}, ["--model_id", "./finetuned-v2"],
     "--model_id ./finetuned-v2: no such directory on this machine; a local model is a directory holding config.json"),
    ("a tokenizer path that names nothing", {}, ["--model_id", "finetuned", "--tokenizer", "../tokenizers/mine"],
     "--tokenizer ../tokenizers/mine: no such directory on this machine; a tokenizer is a directory of its files"),
]


@pytest.mark.parametrize("case, config, argv, words", MISTAKES, ids=[case[0] for case in MISTAKES])
def test_a_model_directory_mistake_is_one_line_before_ray(here, capsys, monkeypatch, case, config, argv,  # noqa: F811
                                                          words):
    _model(here / "finetuned", **config)
    # torch and transformers are not imported for these: importing them is what made such an answer take seconds
    monkeypatch.setattr(build, "hf_config", lambda *args: pytest.fail(f"{case}: answered after the imports"))
    code = _run(LOCAL, [*argv, "--steps", "2"])
    err = capsys.readouterr().err
    assert code == cli.USAGE and words in err, f"{case}: exited {code}, or not {words!r}:\n{err}"
    lines = err.splitlines()
    at = next(index for index, line in enumerate(lines) if line.startswith("error:"))
    assert len(lines[at:]) <= 2 and "Traceback" not in err, f"{case}: one line and a hint at most:\n{err}"
