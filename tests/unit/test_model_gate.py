"""The model gate (workload.model.compatibility) on published config.json files of families the project does not ship
(tests/fixtures/model_configs, SOURCES.md there), served by a fake Hub as the preview reads them and from a local
directory as the job reads them: each is accepted and then trains (tests/runs/test_model_families.py takes the same files through
the job's path), or refused at preview naming trainModelId and in the job naming --model_id, with what it is. No
network: the Hub is tests/support/fake_hub.FakeHub."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from infra.preview import model_config
from tests.support.fake_hub import FakeHub, unreachable_hub
from tests.unit.test_sft import DATA
from workload.config import TrainConfig
from workload.model import architectures, compatibility, structure
from workload.model.build import build_model, hf_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"
ACCEPTED = ("google/gemma-2-2b-it", "google/gemma-3-1b-pt", "microsoft/Phi-3-mini-4k-instruct",
            "allenai/OLMo-2-1124-7B")
REFUSED = {  # Hub id -> what the refusal says the model is
    "google-bert/bert-base-uncased": "bert is an encoder",
    "google-t5/t5-small": "t5 is an encoder-decoder (sequence-to-sequence) model",
    "google/gemma-3-12b-it": "gemma3 is a multimodal model (vision_config) around a gemma3_text language model",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral is a mixture-of-experts model (num_local_experts 8)",
}


def published(model_id: str) -> dict:
    return json.loads((FIXTURES / (model_id.replace("/", "--") + ".json")).read_text())


@pytest.fixture(scope="module")
def hub():
    weights = {"model.safetensors": b"\0"}  # the file list's weights (the preview lists, and reads none)
    with FakeHub(repos={model_id: {"config.json": json.dumps(published(model_id)).encode(), **weights}
                        for model_id in (*ACCEPTED, *REFUSED)}) as server:
        patch = pytest.MonkeyPatch()
        patch.setenv("HF_ENDPOINT", server.url)
        yield server
        patch.undo()


@pytest.mark.parametrize("model_id", ACCEPTED)
def test_a_dense_decoder_of_a_family_not_shipped_passes_the_preview_with_a_plan(hub, model_id):
    found = model_config.resolve(model_id)
    assert isinstance(found, model_config.Known), found
    assert structure.without_structure(found.config) == published(model_id), found
    assert structure.STRUCTURE_FIELD in found.config, "the plan counts the meta-built model's structure"


@pytest.mark.parametrize("model_id", REFUSED)
def test_what_the_job_cannot_train_is_refused_at_preview_naming_the_key_and_what_it_is(hub, model_id):
    with pytest.raises(ValueError) as refused:
        model_config.resolve(model_id)
    message = str(refused.value)
    assert message.startswith(f"config key 'trainModelId': {model_id}: ") and REFUSED[model_id] in message, message
    assert "allowed: a dense decoder-only causal LM" in message and "\n" not in message, message


@pytest.mark.parametrize("model_id", REFUSED)
def test_the_job_refuses_the_same_config_with_the_same_words_before_any_weights(tmp_path, model_id):
    (tmp_path / "config.json").write_text(json.dumps(published(model_id)))
    cfg = TrainConfig(model_id=str(tmp_path), compile=False)
    with pytest.raises(ValueError) as refused:
        build_model(cfg, torch.device("cpu"), str(tmp_path))
    assert str(refused.value).startswith(f"--model_id {tmp_path}: ") and REFUSED[model_id] in str(refused.value)


def test_every_shipped_family_passes_the_gate_the_preview_skips_for_them():
    # One config of each model_type, one layer deep: the gate's checks are per family, and a layer builds as fast as
    # eighty do not.
    families = {architectures.published(model_id)["model_type"]: model_id for model_id in architectures.shipped_ids()}
    assert set(families) == {"qwen2", "qwen3", "llama", "mistral"}, families
    for model_id in families.values():
        compatibility.gate(dict(architectures.published(model_id), num_hidden_layers=1), model_id)


def test_the_gate_builds_no_weights_and_computes_the_buffers():
    lm = compatibility.build(compatibility.check_config_dict(published("google/gemma-2-2b-it"), "gemma"), "gemma")
    assert all(parameter.is_meta for parameter in lm.parameters()), "2.6 B parameters, none of them allocated"
    scale = lm.model.embed_tokens.embed_scale
    assert not scale.is_meta and scale.item() == pytest.approx(2304 ** 0.5), (
        "Gemma's embed_scale (a buffer whose module has no config) is computed at build, so the load can restore it")
    assert lm.lm_head.weight is lm.model.embed_tokens.weight, "a tied lm_head stays tied on the meta device"


@pytest.mark.parametrize("raw, words", [
    ({"hidden_size": 64}, "has no model_type"),
    ({"model_type": "acme_llm", "auto_map": {"AutoConfig": "x.Y"}}, "not one transformers"),
    ([1, 2], "is not a JSON object"),
])
def test_a_config_transformers_cannot_build_is_refused_in_one_line(raw, words):
    with pytest.raises(ValueError, match=f"^config key 'trainModelId': acme/x: .*{words}"):
        compatibility.gate(raw, "config key 'trainModelId': acme/x")


# Values transformers itself refuses while building (audit 44g D08/D09): one line naming the key, never the library's
# exception. A small Qwen2 config of 3 layers, not the audit's 0.5B one.
SMALL_QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 128,
               "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
               "vocab_size": 5000, "max_position_embeddings": 1024}


@pytest.mark.parametrize("fields, words", [
    ({"pad_token_id": 5000}, "pad_token_id 5000 is not below its vocab_size 5000"),
    ({"bos_token_id": 70_000}, "bos_token_id 70000 is not below its vocab_size 5000"),
    ({"eos_token_id": [3, 5001]}, "eos_token_id 5001 is not below its vocab_size 5000"),
    ({"layer_types": ["full_attention"] * 4}, "layer_types has 4 entries for its num_hidden_layers 3"),
])
def test_an_id_past_vocab_size_or_a_short_layer_list_is_refused_before_transformers(fields, words):
    with pytest.raises(ValueError, match="^--model_id lab/m: its config.json's ") as refused:
        compatibility.check_raw({**SMALL_QWEN2, **fields}, "--model_id lab/m")
    assert words in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_a_config_the_library_refuses_to_make_is_one_line_naming_the_key():
    raw = {**SMALL_QWEN2, "layer_types": ["full_attention", "full_attention", "no_such_attention"]}
    with pytest.raises(ValueError, match="^config key 'trainModelId': lab/m: its config.json does not make a qwen2 "
                                         "config") as refused:
        compatibility.gate(raw, "config key 'trainModelId': lab/m")
    message = str(refused.value)
    assert "\n" not in message and "layer_types" in message and len(message) < 700, message


def test_any_exception_building_the_model_is_one_line_naming_the_key():
    # Past check_raw (a config made in code): torch's nn.Embedding asserts padding_idx < num_embeddings.
    config = compatibility.check_config_dict(SMALL_QWEN2, "--model_id lab/m")
    config.pad_token_id = 7000
    with pytest.raises(ValueError, match="^--model_id lab/m: its config.json does not build a qwen2 model "
                                         r"\(AssertionError: Padding_idx must be within num_embeddings") as refused:
        compatibility.build(config, "--model_id lab/m")
    assert "\n" not in str(refused.value)


# Model-id mistakes, answered in a second and in the user's words (workload.model.model_source).

@pytest.mark.parametrize("model_id, words", [
    ("https://huggingface.co/Qwen/Qwen2.5-7B/tree/main", "is a web address; give the Hub id it names: Qwen/Qwen2.5-7B"),
    ("Qwen/../../../etc/passwd", "is not a Hugging Face Hub id (org/name"),
    ("Qwen/Qwen2.5-7B/extra", "is not a Hugging Face Hub id"),
    ("http://example.com/model", "is a web address, which the job does not download models from"),
])
def test_a_url_or_a_malformed_id_is_refused_before_anything_is_fetched(model_id, words):
    with pytest.raises(ValueError) as refused:
        TrainConfig(model_id=model_id)
    assert str(refused.value).startswith(f"--model_id {model_id!r} ") and words in str(refused.value), refused.value


def test_the_preview_names_trainModelId_for_the_same_mistake():
    from infra.job.job_config import stack_message

    with pytest.raises(ValueError) as refused:
        TrainConfig(model_id="Qwen/../../../etc/passwd")
    assert stack_message(str(refused.value)).startswith("config key 'trainModelId': trainModelId 'Qwen/../../../etc/")


@pytest.fixture
def gated_hub(monkeypatch):
    config = json.dumps(published("allenai/OLMo-2-1124-7B")).encode()
    repos, gated = {"acme/llama-gated": {"config.json": config}}, {"acme/llama-gated": {"hf_granted"}}
    with FakeHub(repos=repos, gated=gated) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def test_a_typo_and_a_gated_model_are_told_apart_in_one_request_each(gated_hub, monkeypatch):
    from workload import cli

    with pytest.raises(ValueError, match="acme/llama-gatd is not a model on the Hugging Face Hub .*set HF_TOKEN"):
        hf_config(TrainConfig(model_id="acme/llama-gatd"))
    with pytest.raises(cli.EnvironmentProblem) as gated:
        hf_config(TrainConfig(model_id="acme/llama-gated"))
    assert "gated" in str(gated.value) and "HF_TOKEN" in str(gated.value) and gated.value.exit_code == cli.ENVIRONMENT
    assert "pulumi config set --secret --path 'trainSecretEnv[0]' HF_TOKEN=..." in str(gated.value), gated.value
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    assert hf_config(TrainConfig(model_id="acme/llama-gated")).model_type == "olmo2", "with the token it reads"
    files = [path for _, path, _ in gated_hub.requests if "/resolve/" in path]
    assert files == ["/acme/llama-gatd/resolve/main/config.json"] + ["/acme/llama-gated/resolve/main/config.json"] * 2


def test_an_unreachable_hub_is_exit_3_at_once_not_a_minute_of_retries(monkeypatch):
    from workload import cli

    url, waits = unreachable_hub(monkeypatch)
    with pytest.raises(cli.EnvironmentProblem, match=f"--model_id acme/typo: the Hugging Face Hub at {url} is not "
                                                     "reachable"):
        hf_config(TrainConfig(model_id="acme/typo"))
    from workload.run import local

    # The local run asks before torch and Ray load (its first lines); a shipped model's tokenizer is asked for too.
    assert cli.run(local.main, ["--model_id", "acme/typo"]) == cli.ENVIRONMENT
    assert cli.run(local.main, ["--model_id", "meta-llama/Llama-3.1-8B"]) == cli.ENVIRONMENT
    assert waits == [], f"no retries, no backoff: {waits}"


def test_a_shipped_config_is_never_fetched_and_a_missing_directory_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # would fail if asked
    assert hf_config(TrainConfig(model_id="meta-llama/Llama-3.1-8B")).num_hidden_layers == 32
    with pytest.raises(ValueError, match=f"--model_id {tmp_path}/none: no such directory on this machine"):
        hf_config(TrainConfig(model_id=f"{tmp_path}/none"))


def test_the_local_run_trains_the_model_id_it_is_given(tmp_path):
    from workload.run.local import parse_command

    directory = str(tmp_path)
    given, _, _ = parse_command(["--model_id", directory])
    assert (given.model_id, given.model_config, given.tokenizer) == (directory, "", ""), (
        "--model_id DIR trains DIR with its own tokenizer, not the tiny default")
    both, _, _ = parse_command(["--model_id", directory, "--model_config", "tiny"])
    assert both.model_config == "tiny", "an explicit --model_config still wins, as --help says"
    assert parse_command([])[0].model_config == "tiny", "the local run's default is still the tiny model"


def test_the_local_run_refuses_a_model_it_cannot_train_before_ray_starts(tmp_path, capsys):
    from workload import cli
    from workload.run import local

    (tmp_path / "config.json").write_text(json.dumps(published("google-bert/bert-base-uncased")))
    # A directory without them is refused before this: a safetensors file of no tensors (its 8-byte header length,
    # then the header "{}") and a tokenizer the tokenizers library builds (an empty file is refused first).
    (tmp_path / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
    shutil.copy(os.path.join(DATA, "tokenizer", "tokenizer.json"), tmp_path / "tokenizer.json")
    assert cli.run(local.main, ["--model_id", str(tmp_path)]) == cli.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --model_id {tmp_path}: bert is an encoder"), err
    assert "starting a local Ray cluster" not in capsys.readouterr().out


@pytest.mark.parametrize("value, shown", [
    ("team/tok#sig=Zq81sPLq0fd", "'team/tok' then a '#' (the rest not shown)"),
    ("team/tok&auth=Zq81sPLq0fd", "'team/tok' then a '&' (the rest not shown)"),
    ("a" * 300, "then more (the rest not shown)"),
])
def test_a_refused_repo_id_is_quoted_only_up_to_its_first_character_no_id_has(value, shown):
    """What follows a '?', '#' or '&' in a refused id may be a token: the refusal stops quoting there."""
    from workload.config.values import repo_id_problem

    problem = repo_id_problem(value)
    assert problem and shown in problem and "Zq81sPLq0fd" not in problem and len(problem) < 700, problem


@pytest.mark.parametrize("value, repo", [("Qwen/Qwen2.5-1.5B/tokenizer.json", "Qwen/Qwen2.5-1.5B"),
                                         ("org/tok/sub/merges.txt", "org/tok"), ("org/tok/", "org/tok")])
def test_a_file_inside_a_hub_repo_is_refused_naming_the_repo_and_a_dataset_file_is_not(value, repo):
    """values.py: the tokenizer is read whole from its repo; --dataset also takes a data file by its name."""
    from workload.config.values import dataset_id_problem, repo_id_problem
    from workload.model import model_source

    assert f"did you mean {repo} (the repo" in (repo_id_problem(value) or ""), repo_id_problem(value)
    assert f"did you mean {repo}" in (model_source.problem(value) or ""), "--model_id's own words say it too"
    for dataset in ("corpus.jsonl", "data/chats.json", "org/corpus/train.csv.gz"):
        assert dataset_id_problem(dataset) is None, dataset
    assert repo_id_problem("a/b") is None and dataset_id_problem("org/corpus") is None


@pytest.mark.parametrize("extra, words", [
    ({"hidden_act": "gelu_fancy"}, "does not build a granite model (KeyError: 'gelu_fancy')"),
    ({"rope_scaling": {"rope_type": "mystery", "factor": 2.0}}, "does not build a granite model (KeyError"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "has a quantization_config"),
])
def test_a_config_whose_model_cannot_be_built_or_loaded_is_refused_naming_the_flag(extra, words):
    """Values the model's code looks up (an activation, a RoPE type) and weights stored quantized: one refusal
    naming the flag, not a KeyError from inside transformers."""
    from workload.model import compatibility

    granite = published("ibm-granite/granite-3.1-8b-base")
    with pytest.raises(ValueError) as refused:
        compatibility.gate({**granite, **extra}, "--model_id lab/odd")
    assert str(refused.value).startswith("--model_id lab/odd: ") and words in str(refused.value), refused.value
