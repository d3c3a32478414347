"""Other families end to end: tiny Llama, Mistral, Qwen3, Gemma 2, Gemma 3 (text), Phi-3 and OLMo 2 models, shrunk
from their published config.json (workload/model/architectures/configs, and tests/fixtures/model_configs for the
families the project does not ship), saved as bf16 safetensors directories, then taken through the job's path by one
spawn of 2 gloo processes (tests/support/gloo_family_steps.py): fetched once per node, built on the meta device, sharded with
FSDP2, each rank's shards read from the files, trained, checkpointed, resumed and exported. The tests compare what
the ranks loaded, read and trained with the files, with from_pretrained, and with each other. The rest are the
loader's refusals of malformed files, without a process group.
"""
from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.support import gloo_spawn
from tests.support.gloo_family_steps import (
    FAMILIES,
    RESUMED_STEPS,
    TRAINED_STEPS,
    VOCAB,
    LargestTensor,
    published,
    save_tiny,
    shrink,
    worker,
)
from tests.support.gloo_layout_steps import free_port
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import weights
from workload.model.build import build_model, hf_config
from workload.model.loss import LM_PREFIX


def _file_tensors(directory: str) -> dict[str, torch.Tensor]:
    names = [name for name in os.listdir(directory) if name.endswith(".safetensors")]
    return {key: tensor for name in names for key, tensor in load_file(os.path.join(directory, name)).items()}


@pytest.fixture(scope="module")
def family_gloo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    directories = {family: str(root / family) for family in FAMILIES}
    save_tiny("llama", directories["llama"])
    save_tiny("mistral", directories["mistral"], max_shard_size="60KB")  # several files and their index
    for family in FAMILIES:
        if family not in ("llama", "mistral"):
            save_tiny(family, directories[family])
    # Qwen3 as a remote directory (file:// takes the pyarrow path s3:// takes), copied into the node's cache.
    models = {**directories, "qwen3": f"file://{directories['qwen3']}"}
    patch = pytest.MonkeyPatch()
    patch.setenv("HF_HOME", str(root / "hf-home"))  # the spawned ranks' node-local cache
    out = str(root / "results.pt")
    try:
        gloo_spawn.spawn(worker, args=(free_port(), models, str(root), out), nprocs=2)
    finally:
        patch.undo()
    return directories, torch.load(out, weights_only=False), torch.load(out + ".rank1", weights_only=False), root


def _trained_model(directory: str, state: dict[str, torch.Tensor]):
    from transformers import AutoConfig, AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory), dtype=torch.float32)
    missing, unexpected = lm.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"} and (
        not missing or lm.config.tie_word_embeddings), f"gathered weights against the model: {missing} {unexpected}"
    return lm.eval()


def test_shrunk_configs_keep_what_tells_each_family_apart():
    llama, mistral, qwen3 = (shrink(published(family)) for family in ("llama", "mistral", "qwen3"))
    assert llama["rope_scaling"]["rope_type"] == "llama3" and llama["tie_word_embeddings"], llama
    assert llama["rope_scaling"]["original_max_position_embeddings"] < llama["max_position_embeddings"], llama
    assert not mistral["tie_word_embeddings"] and mistral["model_type"] == "mistral", mistral
    assert qwen3["head_dim"] * qwen3["num_attention_heads"] != qwen3["hidden_size"], (
        f"Qwen3's head_dim is not hidden_size / heads, in the published config and the shrunk one: {qwen3}")
    for family, config in (("llama", llama), ("mistral", mistral), ("qwen3", qwen3)):
        assert config["num_key_value_heads"] < config["num_attention_heads"], f"{family}: grouped-query attention"
        assert config["vocab_size"] == VOCAB and config["num_hidden_layers"] == 2, config
    gemma2, gemma3, phi3, olmo2 = (shrink(published(family)) for family in ("gemma2", "gemma3", "phi3", "olmo2"))
    assert gemma2["final_logit_softcapping"] and gemma2["attn_logit_softcapping"], "Gemma 2's soft-capping"
    for config in (gemma2, gemma3):
        assert config["query_pre_attn_scalar"] == config["head_dim"] != config["hidden_size"] // 4, config
        assert config["sliding_window"] < 16, "windowed layers that differ from full ones on the 16-token batches"
    assert gemma3["model_type"] == "gemma3_text" and gemma3["sliding_window_pattern"] == 2, gemma3
    assert not phi3["tie_word_embeddings"] and phi3["pad_token_id"] < VOCAB, phi3
    assert not olmo2["tie_word_embeddings"] and olmo2["model_type"] == "olmo2", olmo2


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_rank_loads_its_shards_of_the_files_to_from_pretrained_s_model(family_gloo_run, family):
    from transformers import AutoModelForCausalLM

    directories, results, _, _ = family_gloo_run
    result = results[family]
    files = _file_tensors(directories[family])
    assert result["loaded"].keys() <= files.keys(), f"{family}: loaded tensors that the files lack"
    differing = [name for name, tensor in result["loaded"].items() if not torch.equal(tensor, files[name].float())]
    assert not differing, f"{family}: the gathered shards must be the files' bf16 tensors in fp32; differ: {differing}"
    reference = AutoModelForCausalLM.from_pretrained(directories[family], dtype=torch.float32)
    probe = random_batches(TrainConfig(batch_size=2, seq_len=16), VOCAB, rank=99)(0)
    with torch.no_grad():
        expected = reference(input_ids=probe, labels=probe).loss.item()
    assert result["untrained_loss"] == pytest.approx(expected, rel=1e-5), (
        f"{family}: the sharded model's loss must be from_pretrained's, {expected}: {result['untrained_loss']}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_no_rank_reads_or_materialises_more_than_its_own_shard_of_a_tensor(family_gloo_run, family):
    """Each rank reads each tensor once, exactly its shard's rows (half of each, at 2 ranks), and no operation of
    the load makes a tensor larger than the largest of its shards: no full weight, let alone a layer's, is ever
    held."""
    from transformers import AutoConfig, AutoModelForCausalLM

    _, rank0, rank1, _ = family_gloo_run
    raw = shrink(published(family))
    with LargestTensor() as unsharded:  # the recorder sees what a plain build allocates: the whole embedding
        AutoModelForCausalLM.from_config(AutoConfig.for_model(raw.pop("model_type"), **raw))
    assert unsharded.numel == VOCAB * raw["hidden_size"], unsharded.numel
    for rank, result in ((0, rank0[family]), (1, rank1[family])):
        reads = dict(result["reads"])
        assert len(reads) == len(result["reads"]), f"{family} rank {rank}: a tensor read twice: {result['reads']}"
        expected = {name: 2 * shard for name, (shard, _) in result["shards"].items()}  # bf16 files
        assert reads == expected, f"{family} rank {rank}: bytes read per tensor {reads}, its shards {expected}"
        assert all(2 * shard == full for shard, full in result["shards"].values()), f"{family}: halves at 2 ranks"
        largest_shard = max(shard for shard, _ in result["shards"].values())
        assert result["largest"] <= largest_shard, (
            f"{family} rank {rank}: the load made a tensor of {result['largest']} elements; its largest shard has "
            f"{largest_shard}")


def test_the_model_files_are_fetched_once_per_node(family_gloo_run):
    directories, rank0, rank1, root = family_gloo_run
    copied = [line for line in rank0["qwen3"]["progress"] if line.startswith("copying")]
    assert len(copied) == 1 and "3 files" in copied[0], f"local rank 0 copies the directory once: {copied}"
    assert rank1["qwen3"]["progress"] == [], f"the node's other rank waits and copies nothing: {rank1['qwen3']}"
    cache = rank0["qwen3"]["directory"]
    assert cache == rank1["qwen3"]["directory"] and cache.startswith(str(root / "hf-home")), (
        f"both ranks read one copy under HF_HOME: {cache}, {rank1['qwen3']['directory']}")
    assert sorted(os.listdir(cache)) == sorted(os.listdir(directories["qwen3"])), "the model directory's files"
    assert rank0["llama"]["directory"] == directories["llama"], "a local directory is read where it is"
    assert rank0["failed_download"].startswith("ValueError: --model_id file://") and (
        "cannot list the model directory" in rank0["failed_download"]), rank0["failed_download"]
    assert rank1["failed_download"] == (f"RuntimeError: --model_id file://{root}/no-such-model: the download failed "
                                        "on another rank (its log says why)"), rank1["failed_download"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_resumes_from_the_checkpoint_and_both_exports_give_the_trained_logits(family_gloo_run, family, tmp_path):
    from transformers import AutoModelForCausalLM

    from workload.checkpoint import export

    directories, results, _, _ = family_gloo_run
    result = results[family]
    assert result["resumed_at"] == TRAINED_STEPS, f"{family}: the checkpoint's step"
    assert result["resumed"] == result["continued"] and len(result["resumed"]) == RESUMED_STEPS, (
        f"{family}: the resumed run's losses must be the uninterrupted run's: {result['resumed']} vs "
        f"{result['continued']}")
    for name, tensor in result["final"].items():
        assert torch.equal(result["resumed_final"][name], tensor), f"{family}: {name} differs after resuming"
    assert not torch.equal(result["final"]["model.norm.weight"], result["loaded"]["model.norm.weight"]), (
        f"{family}: training must have moved the weights")

    out = tmp_path / "exported"
    export.export(result["checkpoint"], str(out))
    probe = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    for directory, weights_at, made_by in ((result["exported"], result["final"], "the job"),
                                           (str(out), result["at_checkpoint"], "workload.export")):
        loaded = AutoModelForCausalLM.from_pretrained(directory).eval()
        assert type(loaded).__name__ == published(family)["architectures"][0], f"{family}: {made_by}'s class"
        with torch.no_grad():
            assert torch.equal(loaded(probe).logits, _trained_model(directories[family], weights_at)(probe).logits), (
                f"{family}: from_pretrained on {made_by}'s export must give the trained model's logits")


def test_hsdp_two_dimensional_mesh_reads_the_shard_dimension_s_rows(family_gloo_run):
    directories, results, _, _ = family_gloo_run
    files = _file_tensors(directories["llama"])
    differing = [name for name, tensor in results["hybrid"].items() if not torch.equal(tensor, files[name].float())]
    assert not differing, f"a (1, 2) mesh must load the files' tensors; differ: {differing}"


# Malformed files, without a process group: the model is built on meta and loaded unsharded.

@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("tiny-llama"))
    save_tiny("llama", directory)
    return directory


def _load(directory: str) -> None:
    cfg = TrainConfig(model_id=directory, compile=False)
    weights.load_sharded(build_model(cfg, torch.device("cpu"), directory), directory, torch.device("cpu"),
                         f"--model_id {directory}", prefix=LM_PREFIX)


def _rewrite(source: str, target, change) -> str:
    """A copy of the model directory whose model.safetensors holds change(tensors)."""
    target.mkdir()
    for name in ("config.json", "generation_config.json"):
        (target / name).write_text(open(os.path.join(source, name)).read())
    save_file(change(load_file(os.path.join(source, "model.safetensors"))), str(target / "model.safetensors"))
    return str(target)


@pytest.mark.parametrize("change, message", [
    (lambda t: {k: v for k, v in t.items() if k != "model.layers.1.mlp.up_proj.weight"},
     "lack the tensor model.layers.1.mlp.up_proj.weight"),
    (lambda t: {**t, "model.norm.weight": torch.ones(65, dtype=torch.bfloat16)},
     r"model.norm.weight in model.safetensors has shape \[65\]; the model's config.json gives \[64\]"),
    (lambda t: {**t, "model.norm.weight": torch.ones(64, dtype=torch.int8)}, "is I8; only floating-point"),
])
def test_a_file_without_a_tensor_or_with_another_shape_is_refused_in_one_line(tiny_llama, tmp_path, change, message):
    broken = _rewrite(tiny_llama, tmp_path / "broken", change)
    with pytest.raises(ValueError, match=message) as refusal:
        _load(broken)
    assert "\n" not in str(refusal.value) and f"--model_id {broken}" in str(refusal.value), str(refusal.value)


def test_an_index_naming_a_file_outside_the_directory_or_no_weights_is_refused(tiny_llama, tmp_path):
    escaping = _rewrite(tiny_llama, tmp_path / "escaping", lambda t: t)
    os.rename(os.path.join(escaping, "model.safetensors"), tmp_path / "elsewhere.safetensors")
    with open(os.path.join(escaping, weights.INDEX_FILE), "w") as file:
        json.dump({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}}, file)
    with pytest.raises(ValueError, match=r"puts model.norm.weight in '../elsewhere.safetensors', outside"):
        _load(escaping)
    os.remove(os.path.join(escaping, weights.INDEX_FILE))
    with pytest.raises(ValueError, match="no model.safetensors or model.safetensors.index.json"):
        _load(escaping)


@pytest.mark.parametrize("model_id, words", [("s3://bucket", "a model in S3 is a directory, s3://bucket/prefix/"),
                                              ("s3://bucket/", "a model in S3 is a directory, s3://bucket/prefix/"),
                                              ("s3:///models/llama", "an s3:// location names its bucket")])
def test_an_s3_model_must_be_a_directory_under_a_bucket(model_id, words):
    with pytest.raises(ValueError, match=f"--model_id .*{words}"):
        TrainConfig(model_id=model_id)
    assert TrainConfig(model_id="s3://bucket/models/llama-3.2-1b/").model_id.endswith("/")


def test_a_remote_model_s_config_and_tokenizer_are_read_from_their_directory(family_gloo_run, tmp_path, monkeypatch):
    """The driver's checks read an s3:// model's config.json, and a tokenizer from a remote directory, through
    pyarrow into the machine's cache (file:// takes the path s3:// takes); a directory without config.json is
    named as not a model."""
    from huggingface_hub import constants

    from workload.data.tokenizer import load_tokenizer

    directories, _, _, _ = family_gloo_run
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf-home"))
    cfg = TrainConfig(model_id=f"file://{directories['mistral']}")
    assert hf_config(cfg).model_type == "mistral", "the config of a remote model directory"
    tokenizer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "tokenizer")
    text = "the cat sees the ball ."
    assert load_tokenizer(f"file://{os.path.abspath(tokenizer)}")(text).input_ids == load_tokenizer(tokenizer)(
        text).input_ids, "a remote tokenizer directory tokenizes as the local one"
    with pytest.raises(ValueError, match=r"--model_id file://.*: no config.json there; a model directory holds"):
        hf_config(TrainConfig(model_id=f"file://{tmp_path}"))
