"""A local --model_id directory as a new user gives it to the local run (the tenth fresh audit's classes): taken by the
path they typed, relative or not, and its config.json's mistakes answered in one line before Ray starts, through the
command's own main with the harness of tests/unit/test_mistakes_before_ray.py (its `here` fixture fails a case that
would start the local Ray cluster)."""
from __future__ import annotations

import json
import os
import re

import pytest
import torch

from tests.unit.test_mistakes_before_ray import LOCAL, _run, here  # noqa: F401  (here: the fixture)
from workload import cli
from workload.model import build, compatibility, config_json, weights
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


@pytest.mark.parametrize("config, accepted", [
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 0.5}}, False),
    ({"rope_parameters": {"rope_type": "linear", "factor": "4"}}, False),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "factor": 0}}}, False),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, True), ({"rope_scaling": {"rope_type": "default"}}, True),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}}, True),
])
def test_a_rotary_scaling_factor_below_one_is_refused_as_the_file_is_read(config, accepted):
    """transformers only logs "factor field must be a float or int >= 1" and trains the positions scaled by it."""
    text = json.dumps({**TINY_LLAMA, **config})
    if accepted:
        config_json.loads(text)
        return
    with pytest.raises(config_json.Refused, match=r"its rotary scaling's factor is .*; allowed: a number of at least 1"):
        config_json.loads(text)


MISTAKES = [
    ("a dtype typed by hand", {"torch_dtype": "fp32"}, ["--model_id", "finetuned"],
     "--model_id finetuned: finetuned/config.json is not a config transformers builds: its torch_dtype is 'fp32', "
     "which names no torch dtype"),
    ("a LoRA rank above the model's width", {}, ["--model_config", "tiny", "--method", "lora", "--lora_rank", "96"],
     "--lora_rank 96 is above the rank any targeted layer's update can have (at most 64, "),
    ("a config.json without its model_type", {"model_type": ""}, ["--model_id", "finetuned"],
     "--model_id finetuned: its config.json has no model_type, so transformers cannot tell what it is"),
    ("a quantized model's config.json", {"quantization_config": {"quant_method": "awq", "bits": 4}},
     ["--model_id", "finetuned"], "--model_id finetuned: its config.json has a quantization_config"),
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


def _weights(directory, config: dict, change=None, shards: bool = False):
    """A tiny model's directory as save_pretrained writes it, its state dict changed by `change` first."""
    from safetensors.torch import save_file

    lm = compatibility.build(config_json_config(config), "--model_id tiny")
    state = {name: torch.zeros(tensor.shape, dtype=torch.bfloat16) for name, tensor in lm.state_dict().items()}
    names = sorted(state)  # what the index names: a shard re-saved after it, without a tensor, is one change
    if change:
        change(state)
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    if not shards:
        save_file(state, str(directory / "model.safetensors"))
        return lm
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file_name, held in halves.items():
        save_file({name: state[name] for name in held if name in state}, str(directory / file_name))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        name: file_name for file_name, held in halves.items() for name in held}}))
    return lm


def config_json_config(config: dict):
    return compatibility.check_config_dict(config, "--model_id tiny")


def _drop(name):
    return lambda state: state.pop(name)


@pytest.mark.parametrize("config, change, shards, words", [
    ({}, None, False, None),
    ({"tie_word_embeddings": True}, _drop("lm_head.weight"), False, None),  # a tied head is the embedding's
    ({"tie_word_embeddings": False}, _drop("lm_head.weight"), False, "lack the tensor lm_head.weight"),
    ({}, lambda state: state.update({"model.norm.weight": torch.zeros(47)}), False,
     "model.norm.weight in model.safetensors has shape [47]; the model's config.json gives [48]"),
    ({}, lambda state: state.update({"model.layers.0.mlp.up_proj.weight": torch.zeros(96, 48, dtype=torch.int8)}),
     False, "model.layers.0.mlp.up_proj.weight in model.safetensors is I8; only floating-point weights"),
    ({}, None, True, None),
    ({}, _drop("model.embed_tokens.weight"), True,
     "lack the tensor model.embed_tokens.weight, which the architecture of its config.json needs (its index puts it "
     "in model-00002-of-00002.safetensors, which does not hold it)"),
], ids=["as saved", "tied", "untied without lm_head", "a shape", "int8", "sharded", "a shard without its tensor"])
def test_the_files_hold_every_tensor_the_model_needs_before_any_worker_loads_them(tmp_path, config, change, shards,
                                                                                  words):
    """What each worker's load (workload.model.weights.load_sharded) refused inside Ray, read from the headers."""
    raw = {**TINY_LLAMA, **config}
    lm = _weights(tmp_path / "model", raw, change, shards)
    if words is None:
        weights.check_files(lm, str(tmp_path / "model"), "--model_id model")
        return
    with pytest.raises(ValueError, match=re.escape(words)):
        weights.check_files(lm, str(tmp_path / "model"), "--model_id model")


@pytest.mark.parametrize("names, accepted", [(("tool_use",), False), (("rag", "tool_use"), False),
                                             (("default", "tool_use"), True)])
def test_named_chat_templates_without_a_default_are_refused_naming_them(names, accepted):
    """tokenizer_config.json's chat_template as a list of {name, template}: transformers renders with "default", and
    refused a set without one in a paragraph, cut off in the record's error."""
    from transformers import AutoTokenizer

    from workload.data import chat

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(local.REPO, "data", "chat-tokenizer"))
    text = tokenizer.chat_template
    tokenizer.chat_template = {name: text for name in names}
    if accepted:
        chat.apply_template(tokenizer, "", "team/chat-model")
        assert chat.render(tokenizer, [{"role": "user", "content": "hi"}])
        return
    with pytest.raises(ValueError, match=rf"the tokenizer 'team/chat-model' has named chat templates "
                                         rf"\({', '.join(names)}\) and none named 'default'.*--chat_template FILE"):
        chat.apply_template(tokenizer, "", "team/chat-model")


@pytest.mark.parametrize("targets, rank, widest", [
    ("all-linear", 64, None), ("all-linear", 65, 64), ("k_proj,v_proj", 32, None), ("k_proj,v_proj", 33, 32),
    ("k_proj,down_proj", 40, None),
])
def test_a_lora_rank_above_every_targeted_layer_is_refused(targets, rank, widest):
    """PEFT trains it, the update no richer than the layers' own rank and scaled by lora_alpha / lora_rank."""
    from workload.config import ARCHITECTURES
    from workload.model import adapters, structure

    shapes = structure.linear_shapes(ARCHITECTURES["tiny"])  # q/o 64 x 64, k/v 32 x 64, the MLP's 128 x 64
    why = adapters.rank_problem(shapes, adapters.resolve(targets, structure.linear_names(ARCHITECTURES["tiny"])), rank)
    assert (why is None) == (widest is None), why
    if widest is not None:
        assert f"--lora_rank {rank} is above" in why and f"give --lora_rank {widest} or less" in why


@pytest.mark.parametrize("data_format, dataset", [("text", "corpus.txt"), ("chat", "conversations.jsonl")])
def test_a_tokenizer_without_an_eos_token_is_refused_for_a_dataset(tmp_path, data_format, dataset):
    """Text is packed with eos between documents: without one they ran together, and the run exited 0."""
    import shutil

    from workload.config import TrainConfig
    from workload.data.batches import check_tokenizer

    source = os.path.join(local.REPO, "data", "chat-tokenizer")
    shutil.copytree(source, tmp_path / "tok")
    settings = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    cfg = TrainConfig(model_config="tiny", tokenizer=str(tmp_path / "tok"), data_format=data_format, seq_len=256,
                      dataset=os.path.join(local.REPO, "data", dataset))
    check_tokenizer(cfg, 512)
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({**settings, "eos_token": None,
                                                                         "pad_token": None}))
    with pytest.raises(ValueError, match=rf"--tokenizer {tmp_path}/tok: the tokenizer has no eos_token, which "
                                         r"separates the packed documents .* set eos_token in its tokenizer_config"):
        check_tokenizer(cfg, 512)


@pytest.mark.parametrize("chat_template, content, refused", [
    ("llama3", "fair winds", "--chat_template llama3 writes <|start_header_id|>, which the tokenizer "),
    ("", "fair winds", None),
    ("", "the marker <|eot_id|> in a record's text", None),  # a record about tokens: its contents are not the template
])
def test_a_template_whose_turn_markers_the_tokenizer_splits_is_refused(tmp_path, chat_template, content, refused):
    """Llama 3's template on a ChatML tokenizer (one with a bos_token, which the template needs): its markers were
    trained as pieces of text, and the model had no end-of-turn token to stop at."""
    import shutil

    from workload.config import TrainConfig
    from workload.data import template_check
    from workload.data.tokenizer import load_chat_tokenizer

    shutil.copytree(os.path.join(local.REPO, "data", "chat-tokenizer"), tmp_path / "tok")
    settings = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({**settings, "bos_token": "<|endoftext|>"}))
    turns = [{"role": "user", "content": content}, {"role": "assistant", "content": "aye"}]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps({"messages": turns}) + "\n" for _ in range(3)))
    cfg = TrainConfig(model_config="tiny", tokenizer=str(tmp_path / "tok"), data_format="chat", seq_len=512,
                      dataset=str(tmp_path / "log.jsonl"), chat_template=chat_template)
    tokenizer = load_chat_tokenizer(cfg)
    if refused is None:
        template_check.check_template_trains(cfg, tokenizer)
        return
    with pytest.raises(ValueError, match=re.escape(refused) + r".* give the template and the tokenizer of one model"):
        template_check.check_template_trains(cfg, tokenizer)


@pytest.mark.parametrize("model_type, architectures, accepted", [
    ("qwen2", ["Qwen3MoeForCausalLM"], False), ("mistral", ["LlamaForCausalLM", "Qwen2ForCausalLM"], False),
    ("llama", ["LlamaForCausalLM"], True), ("qwen2", ["Qwen2ForCausalLM", "LlamaForCausalLM"], True),
    ("llama", ["TeamLlamaForCausalLM"], True),  # a class transformers does not list: model_type decides
])
def test_architectures_of_another_model_type_are_refused(model_type, architectures, accepted):
    """AutoModelForCausalLM goes by model_type: an expert model's class over a dense model_type trained the dense
    model, exit 0."""
    raw = {**TINY_LLAMA, "model_type": model_type, "architectures": architectures}
    if accepted:
        compatibility.check_config_dict(raw, "trainModelId: team/model")
        return
    with pytest.raises(ValueError, match=rf"trainModelId: team/model: its config.json's architectures is "
                                         rf"{', '.join(architectures)}, while its model_type {model_type} builds "
                                         r"\w+ForCausalLM: one of the two was edited"):
        compatibility.check_config_dict(raw, "trainModelId: team/model")
