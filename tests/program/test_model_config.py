"""The preview reads a model's architecture it does not ship: from the Hub (a local fake, tests/support/fake_hub.FakeHub, as
strict as huggingface_hub relies on) and from S3 (moto), never the network."""
from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from infra.config import AwsIdentity
from infra.preview import model_config
from tests.support.fake_hub import FakeHub, unreachable_hub
from workload.model import architectures, structure

QWEN_7B = architectures.published("Qwen/Qwen2.5-7B")
TOKEN = "hf_granted_0123456789"


@pytest.fixture
def hub(monkeypatch):
    config = json.dumps(QWEN_7B).encode()
    weights = {"model.safetensors": b"\0"}  # listed by the Hub's model_info; the preview reads no weights
    repos = {"acme/qwen-7b-chat": {"config.json": config, **weights},
             "acme/llama-gated": {"config.json": config, **weights},
             "acme/weights-only": {"model.safetensors": b"\0"},
             # weights too: a repo without them is refused for that first, from its file list, before the gate
             "acme/encoder": {"config.json": json.dumps({"model_type": "bert", "hidden_size": 768}).encode(),
                              **weights}}
    with FakeHub(repos=repos, gated={"acme/llama-gated": {TOKEN}}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_a_public_model_is_read_from_the_hub_anonymously(hub):
    found = model_config.resolve("acme/qwen-7b-chat")
    assert isinstance(found, model_config.Known) and structure.without_structure(found.config) == QWEN_7B, found
    assert structure.parameter_count(found.config) == 7_615_616_512, "counted from the meta-built model"
    # huggingface_hub 2.x also fetches its agent-harness registry once a day (utils/_detect_agent.py, best effort:
    # the fake's 404 is swallowed), so only the file requests are compared.
    files = [(method, path) for method, path, _ in hub.requests if "/resolve/" in path]
    assert files == [("GET", "/acme/qwen-7b-chat/resolve/main/config.json")], f"one GET: {hub.requests}"
    assert not any(auth for _, _, auth in hub.requests), f"no token was given, none was sent: {hub.requests}"


def test_a_gated_model_needs_the_secret_envs_token(hub):
    with pytest.raises(ValueError, match="gated.*trainSecretEnv\\[0\\]' HF_TOKEN=") as refused:
        model_config.resolve("acme/llama-gated")
    assert "trainModelId" in str(refused.value)
    with pytest.raises(ValueError, match="has not been granted access") as refused:
        model_config.resolve("acme/llama-gated", hub_token="hf_someone_else")
    assert "hf_someone_else" not in str(refused.value), "a refusal never quotes the token"
    found = model_config.resolve("acme/llama-gated", hub_token=TOKEN)
    assert isinstance(found, model_config.Known) and found.config["hidden_size"] == 3584
    assert hub.requests[-1][2] == f"Bearer {TOKEN}", "the token goes to the Hub as huggingface_hub sends it"


@pytest.mark.parametrize("model_id, token, words", [
    ("acme/no-such-model", None, "is not a model on the Hugging Face Hub (or private"),
    ("acme/no-such-model", TOKEN, "trainSecretEnv's HF_TOKEN cannot see it"),
    ("acme/weights-only", None, "has no config.json on the Hub"),
    ("acme/encoder", None, "bert is an encoder"),
])
def test_a_model_the_job_could_not_load_is_refused(hub, model_id, token, words):
    with pytest.raises(ValueError, match="config key 'trainModelId'") as refused:
        model_config.resolve(model_id, hub_token=token)
    assert words in str(refused.value), refused.value


def test_a_repo_without_safetensors_weights_is_refused_after_one_listing(hub):
    hub.repos["acme/bin-only"] = {"config.json": json.dumps(QWEN_7B).encode(), "pytorch_model.bin": b"\0",
                                  "tf_model.h5": b"\0"}
    with pytest.raises(ValueError, match="config key 'trainModelId': acme/bin-only on the Hub holds no "
                                         "model.safetensors or model.safetensors.index.json") as refused:
        model_config.resolve("acme/bin-only")
    assert "its weights are pytorch_model.bin, tf_model.h5" in str(refused.value), refused.value
    listings = [request for request in hub.requests if request[1].startswith("/api/models/")]
    assert listings == [("GET", "/api/models/acme/bin-only", "")], f"one listing, no token given: {listings}"


@pytest.mark.parametrize("weights, words", [
    (("consolidated/model.safetensors", "consolidated/params.json"),
     "its weights are consolidated/model.safetensors, under a folder, where from_pretrained does not look"),
    (("weights/model-00001-of-00002.safetensors", "flax_model.msgpack"),
     "its weights are flax_model.msgpack, weights/model-00001-of-00002.safetensors, under a folder"),
    (("model.gguf",), "its weights are model.gguf"),
    (("README.md",), "(no weights)"),
])
def test_weights_the_job_cannot_load_are_refused_from_the_listing_before_the_gate(hub, monkeypatch, weights, words):
    from workload.model import compatibility

    hub.repos["acme/no-root-weights"] = {"config.json": json.dumps(QWEN_7B).encode(), **dict.fromkeys(weights, b"\0")}
    # The file list is in hand before the model gate's seconds of torch and transformers imports: answered first.
    monkeypatch.setattr(compatibility, "gate", lambda *args: pytest.fail("the gate ran before the weights' check"))
    with pytest.raises(ValueError, match="^config key 'trainModelId': acme/no-root-weights on the Hub holds no "
                                         "model.safetensors") as refused:
        model_config.resolve("acme/no-root-weights")
    assert words in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_the_listing_goes_with_the_secret_envs_token_and_sharded_safetensors_pass(hub):
    index = {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    hub.repos["acme/llama-gated"].update({"model.safetensors.index.json": json.dumps(index).encode(),
                                          "model-00001-of-00002.safetensors": b"",
                                          "model-00002-of-00002.safetensors": b""})
    del hub.repos["acme/llama-gated"]["model.safetensors"]
    found = model_config.resolve("acme/llama-gated", hub_token=TOKEN)
    assert isinstance(found, model_config.Known) and found.warning == "", found
    assert ("GET", "/api/models/acme/llama-gated", f"Bearer {TOKEN}") in hub.requests, hub.requests
    assert ("GET", "/acme/llama-gated/resolve/main/model.safetensors.index.json", f"Bearer {TOKEN}") in hub.requests


def _sharded(weight_map, *shards) -> dict:
    index = json.dumps({"metadata": {}, "weight_map": weight_map}).encode() if isinstance(weight_map, dict) \
        else weight_map
    return {"config.json": json.dumps(QWEN_7B).encode(), "model.safetensors.index.json": index,
            **dict.fromkeys(shards, b"\0")}


@pytest.mark.parametrize("files, words", [
    (_sharded({f"model.layers.{i}.weight": f"model-0000{i + 1}-of-00004.safetensors" for i in range(4)},
              "model-00001-of-00004.safetensors", "model-00004-of-00004.safetensors"),
     "its model.safetensors.index.json names model-00002-of-00004.safetensors, model-00003-of-00004.safetensors, "
     "which the repo does not hold"),
    (_sharded({"lm_head.weight": "weights/part-b.safetensors"}, "part-b.safetensors"),
     "names weights/part-b.safetensors, which the repo does not hold"),
    (_sharded({"lm_head.weight": "../other/model.safetensors"}), "outside the model directory"),
    (_sharded(b'{"weight_map": [1]}', "model-00001-of-00001.safetensors"), "is not a safetensors index"),
])
def test_a_sharded_repo_missing_a_shard_its_index_names_is_refused(hub, monkeypatch, files, words):
    from workload.model import compatibility

    hub.repos["acme/sharded"] = files
    # Answered from the file list and the index, before the model gate's seconds of torch imports.
    monkeypatch.setattr(compatibility, "gate", lambda *args: pytest.fail("the gate ran before the shards' check"))
    with pytest.raises(ValueError, match="^config key 'trainModelId': acme/sharded on the Hub") as refused:
        model_config.resolve("acme/sharded")
    assert words in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_a_file_list_that_cannot_be_had_is_a_warning(hub, monkeypatch):
    from workload.model import model_source

    def no_answer(model_id, token):
        raise model_source.Unreachable("the Hugging Face Hub at http://x is not reachable (ConnectError)")

    monkeypatch.setattr(model_source, "hub_files", no_answer)
    found = model_config.resolve("acme/qwen-7b-chat")
    assert isinstance(found, model_config.Known) and "file list could not be read from the Hub" in found.warning, found
    assert "checked only on the cluster" in found.warning, found.warning


def test_an_unreachable_hub_is_a_warning_not_a_refusal(monkeypatch):
    _, waits = unreachable_hub(monkeypatch)  # the preview asks once: any retry's wait is recorded here
    found = model_config.resolve("acme/qwen-7b-chat")
    assert isinstance(found, model_config.Unknown) and "could not be read from the Hub" in found.reason, found
    assert "not reachable" in found.reason and waits == [], f"one request, no retries: {found.reason}, {waits}"


def test_shipped_and_random_weight_architectures_are_sized_without_a_download(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    # A shipped config sizes its model; the Hub is asked only whether the job's token may download it (one request,
    # infra/preview/hub_access.py), and no answer is a warning, not a refusal.
    shipped = model_config.resolve("meta-llama/Llama-3.1-8B")
    assert shipped.config["num_hidden_layers"] == 32 and "could not be asked of the Hub" in shipped.warning, shipped
    assert model_config.resolve("meta-llama/Llama-3.1-8B", offline=True).warning == "", "offline asks nothing"
    assert model_config.resolve("whatever", "tiny").config["hidden_size"] == 64


def test_an_s3_model_directory_is_read_as_the_stacks_identity(monkeypatch):
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-west-2")
        s3.create_bucket(Bucket="models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        s3.put_object(Bucket="models", Key="runs/qwen-7b/config.json", Body=json.dumps(QWEN_7B).encode())
        s3.put_object(Bucket="models", Key="broken/config.json", Body=b"{not json")
        found = model_config.resolve("s3://models/runs/qwen-7b/", identity=AwsIdentity(), region="us-west-2")
        assert isinstance(found, model_config.Known) and structure.without_structure(found.config) == QWEN_7B, found
        assert structure.parameter_count(found.config) == 7_615_616_512, "counted from the meta-built model"
        with pytest.raises(ValueError, match="s3://models/runs/none/config.json does not exist"):
            model_config.resolve("s3://models/runs/none", identity=AwsIdentity(), region="us-west-2")
        with pytest.raises(ValueError, match="bucket no-such-bucket does not exist"):
            model_config.resolve("s3://no-such-bucket/m/", identity=AwsIdentity(), region="us-west-2")
        with pytest.raises(ValueError, match="is not JSON"):
            model_config.resolve("s3://models/broken/", identity=AwsIdentity(), region="us-west-2")


def test_the_preview_refuses_a_hub_model_that_cannot_fit_before_any_resource(hub):
    from tests.support.pulumi_mocks import run_program_expecting_error

    hub.repos["acme/llama-70b-chat"] = {"config.json": json.dumps(architectures.published(
        "meta-llama/Llama-3.1-70B")).encode(), "model.safetensors.index.json": json.dumps(
        {"weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}}).encode(),
        "model-00001-of-00001.safetensors": b"\0"}
    failed = run_program_expecting_error("dev", {"trainEnabled": True, "trainModelId": "acme/llama-70b-chat"})
    message = str(failed.error)
    assert "acme/llama-70b-chat (70.55 B parameters)" in message and "p5.48xlarge" in message, message
    assert failed.resources == [], "refused at preview, before any resource"
    assert any("/acme/llama-70b-chat/resolve/main/config.json" in path for _, path, _ in hub.requests)




@pytest.mark.parametrize("config, words", [
    (b'{"x":' * 120_000 + b"0" + b"}" * 120_000, "nested more than"),
    (json.dumps({**QWEN_7B, "num_attention_heads": 1 << 20}).encode(), "num_attention_heads is 1,048,576"),
    # numbers whose first forward is NaN (workload.model.config_json.NUMBER_FIELD_RULES)
    (json.dumps({**QWEN_7B, "rope_theta": -1000000.0}).encode(), "its rope_theta is -1000000.0; allowed: a finite"),
    (json.dumps({**QWEN_7B, "rms_norm_eps": 0.0}).encode(), "its rms_norm_eps is 0.0; allowed: a finite number above"),
    (json.dumps({**QWEN_7B, "rope_parameters": {"rope_type": "default", "rope_theta": {"__float__": "NaN"}}}).encode(),
     "its rope_theta is nan"),
    # a typed field of a kind transformers' strict config class refuses (workload.model.config_types)
    (json.dumps({**QWEN_7B, "attention_bias": 1}).encode(),
     "its attention_bias is an integer; allowed: true or false"),
    (json.dumps({**QWEN_7B, "attention_dropout": "0.1"}).encode(), "its attention_dropout is a string"),
])
def test_a_hub_config_out_of_shape_is_refused_naming_the_key(monkeypatch, config, words):
    with FakeHub(repos={"acme/odd-shape": {"config.json": config}}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        with pytest.raises(ValueError, match="config key 'trainModelId': acme/odd-shape's config.json") as refused:
            model_config.resolve("acme/odd-shape")
    assert words in str(refused.value), refused.value


def test_the_program_refuses_a_hub_model_whose_norm_trains_to_nan_before_any_resource(hub):
    from tests.support.pulumi_mocks import run_program_expecting_error

    hub.repos["acme/eps-inf"] = {"config.json": json.dumps({**QWEN_7B, "rms_norm_eps": float("inf")}).encode(),
                                 "model.safetensors": b"\0"}
    failed = run_program_expecting_error("dev", {"trainEnabled": True, "trainModelId": "acme/eps-inf"})
    message = str(failed.error)
    assert "trainModelId" in message and "its rms_norm_eps is inf; allowed: a finite number above 0" in message, message
    assert len(message.splitlines()) <= 2, message
    assert failed.resources == [], "refused at preview, before any resource"
