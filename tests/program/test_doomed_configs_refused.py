"""Issue 44's fresh hidden set of doomed configs: stack configs the preview used to accept that could never end in a
working job (found by the job only after the nodes billed, or never), each refused at preview under the mocks with
nothing registered, naming the key. One rule per class, named in each class's comment; /tmp-free, no network (the
Hub is a port where nothing listens: every size these rules read is the shipped one; the rules that read a model the
project does not ship ask the fake Hub, tests/support/fake_hub.py)."""
from __future__ import annotations

import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import Secret

JOB = {"trainEnabled": True}
# Every case that sets a dataset stores under trainStoragePath too, so that the rule it shows is the one that refuses.
STORED = {"trainStoragePath": "s3://company-data/runs"}
CHATS = {**JOB, **STORED, "trainDataset": "org/chats", "trainDataFormat": "chat"}

# (case, the key the refusal names, overrides of the dev stack: 2 x g6.12xlarge, Qwen/Qwen2.5-1.5B, words it says).
DOOMED = [
    # infra/preview/job_plan.py check_qlora_shards, over workload/model/adapters qlora_shards_problem (the check
    # nf4.check_shardable makes in every worker after the model loads).
    ("qlora on 3 workers", "trainNumWorkers",
     {**JOB, "trainMethod": "qlora", "trainNumWorkers": 3, "trainExpectTransport": "any"}, "k_proj (256 x 1536)"),
    ("qlora on 6 workers", "trainNumWorkers", {**JOB, "trainMethod": "qlora", "trainNumWorkers": 6}, "6 shards"),
    ("qlora Llama-3.2-1B on 7 workers", "trainNumWorkers",
     {**JOB, "trainMethod": "qlora", "trainNumWorkers": 7, "trainModelId": "meta-llama/Llama-3.2-1B"}, "7 shards"),
    ("qlora Qwen3-0.6B on 5 workers", "trainNumWorkers",
     {**JOB, "trainMethod": "qlora", "trainNumWorkers": 5, "trainModelId": "Qwen/Qwen3-0.6B"}, "allowed: trainNumWorkers"),
    ("qlora Mistral-7B on 6 workers", "trainNumWorkers",
     {**JOB, "trainMethod": "qlora", "trainNumWorkers": 6, "trainModelId": "mistralai/Mistral-7B-v0.3"}, "q_proj"),
    # infra/config/train_keys.py _check_tracking and _parse_env: a run's credentials there, and not empty.
    ("wandb without its key", "trainReportTo", {**JOB, "trainReportTo": "wandb"}, "WANDB_API_KEY"),
    ("wandb with an empty key", "trainSecretEnv",
     {**JOB, "trainReportTo": "tensorboard,wandb", "trainSecretEnv": Secret(["WANDB_API_KEY="])}, "empty value"),
    ("push without a token", "trainPushToHub", {**JOB, **STORED, "trainPushToHub": "org/model"}, "HF_TOKEN"),
    ("push with an empty token", "trainSecretEnv",
     {**JOB, **STORED, "trainPushToHub": "org/model", "trainSecretEnv": Secret(["HF_TOKEN="])}, "empty value"),
    # infra/config/train_keys.py job_flags: a flag the job's argv carries that the others make do nothing, which the
    # job refuses at its start (workload/config/rules.py typed_without_effect).
    ("restarts without checkpoints", "trainMaxFailures", {**JOB, "trainMaxFailures": 2}, "train from step 0"),
    ("LoRA's rank on a full fine-tune", "trainLoraRank", {**JOB, "trainLoraRank": 32}, "trainMethod"),
    # infra/config/train_keys.py _check_offline: an offline switch with a source on the Hub (fresh nodes, no cache).
    ("HF_HUB_OFFLINE with a Hub model", "trainEnv", {**JOB, "trainEnv": ["HF_HUB_OFFLINE=1"]}, "trainModelId"),
    ("HF_HUB_OFFLINE with a Hub dataset", "trainEnv",
     {**JOB, **STORED, "trainModelId": "s3://company-data/models/m/", "trainDataset": "org/corpus",
      "trainTokenizer": "s3://company-data/models/m/", "trainEnv": ["HF_HUB_OFFLINE=true"]}, "trainDataset org/corpus"),
    ("TRANSFORMERS_OFFLINE with a Hub tokenizer", "trainEnv",
     {**JOB, **STORED, "trainDataset": "s3://company-data/c.jsonl", "trainEnv": ["TRANSFORMERS_OFFLINE=1"]},
     "TRANSFORMERS_OFFLINE"),
    ("HF_HUB_OFFLINE with an upload to the Hub", "trainEnv",
     {**JOB, **STORED, "trainModelId": "s3://company-data/models/m/", "trainPushToHub": "org/model",
      "trainSecretEnv": Secret(["HF_TOKEN=hf_x"]), "trainEnv": ["HF_HUB_OFFLINE=1"]}, "trainPushToHub org/model"),
    ("HF_DATASETS_OFFLINE with a Hub dataset", "trainEnv",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainEnv": ["HF_DATASETS_OFFLINE=1"]}, "HF_DATASETS_OFFLINE"),
    # infra/preview/job_plan.py check_tokenizer_vocabulary (workload/data/tokenizer_size.py).
    ("Qwen3's tokenizer on Llama-3.2-1B", "trainTokenizer",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainModelId": "meta-llama/Llama-3.2-1B",
      "trainTokenizer": "Qwen/Qwen3-0.6B"},
     "151,669 tokens"),
    ("Qwen2.5's tokenizer on Mistral-7B-v0.3", "trainTokenizer",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainModelId": "mistralai/Mistral-7B-v0.3",
      "trainTokenizer": "Qwen/Qwen2.5-7B"},
     "vocabulary of 32,768"),
    ("Llama 3's tokenizer on tiny", "trainTokenizer",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainModelConfig": "tiny", "trainSeqLen": 256,
      "trainTokenizer": "meta-llama/Llama-3.1-8B"}, "128,256 tokens"),
    ("the model id's tokenizer on tiny", "trainModelConfig",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainModelConfig": "tiny", "trainSeqLen": 256},
     "vocabulary of 512"),
    # infra/config/train_keys.py: trainChatTemplate is a shipped template only (a .jinja file is not on the cluster).
    ("a chat template in ./", "trainChatTemplate", {**CHATS, "trainChatTemplate": "./my.jinja"}, "one of"),
    ("a chat template by absolute path", "trainChatTemplate", {**CHATS, "trainChatTemplate": "/home/me/t.jinja"},
     "one of"),
    ("a chat template by relative path", "trainChatTemplate",
     {**CHATS, "trainChatTemplate": "templates/chat.jinja"}, "one of"),
    # infra/config/train_keys.py _check_data_storage: the data stage keeps its token shards under trainStoragePath,
    # which every GPU node reads; without one they stay on the Ray head's disk and every worker fails after billing.
    ("a Hub dataset without a storage path", "trainDataset", {**JOB, "trainDataset": "org/corpus"},
     "needs trainStoragePath"),
    ("an s3 dataset without a storage path", "trainDataset",
     {**JOB, "trainDataset": "s3://company-data/corpus.jsonl"}, "needs trainStoragePath"),
    ("a chat dataset without a storage path", "trainDataset",
     {**JOB, "trainDataset": "org/chats", "trainDataFormat": "chat"}, "needs trainStoragePath"),
    ("a dataset with file:// storage", "trainStoragePath",
     {**JOB, "trainDataset": "team/texts", "trainStoragePath": "file:///scratch/runs"},
     "needs an s3:// trainStoragePath"),
    ("a dataset with a node's local storage", "trainDataset",
     {**JOB, "trainDataset": "s3://team-data/texts.jsonl", "trainStoragePath": "/data/runs"},
     "needs an s3:// trainStoragePath"),
    # infra/config/pip_requirements.py PLACEHOLDER_PACKAGES: names on PyPI whose install always fails, by canonical name.
    ("a placeholder package", "trainPip", {**JOB, "trainPip": ["einops", "SKLearn>=0"]}, "the package meant is "
     "scikit-learn"),
    ("PyTorch's placeholder", "trainPip", {**JOB, "trainPip": ["PyTorch==1.0.2"]}, "the package meant is torch"),
    # workload/config/__init__.py: trainSeqLen at least 2 (the loss predicts each next token: one leaves no target).
    ("one-token sequences", "trainSeqLen", {**JOB, "trainSeqLen": 1}, "at least 2"),
    # infra/preview/job_plan.py check_min_bus_bandwidth: one worker's bus bandwidth is 0 (algbw x (n - 1) / n).
    ("a fabric minimum on one worker", "trainMinBusBandwidthGBps",
     {**JOB, "trainNumWorkers": 1, "trainModelConfig": "tiny", "trainSeqLen": 256, "trainMinBusBandwidthGBps": "1",
      "trainExpectTransport": "any"}, "trainNumWorkers"),
    # workload/config/rules.py _records_are_not_plain_text: a CSV cell is never a list of messages.
    ("chat records in CSV", "trainDataFormat",
     {**JOB, **STORED, "trainDataset": "s3://company-data/chats.csv", "trainDataFormat": "chat"}, "is CSV"),
    ("chat records in gzipped CSV", "trainDataFormat",
     {**JOB, **STORED, "trainDataset": "s3://company-data/chats.csv.gz", "trainDataFormat": "chat"}, "is CSV"),
    # infra/preview/job_plan.py check_transport_expectation: only aws-ofi-nccl carries NCCL over EFA.
    ("OFI plugin off, efa expected", "ncclNetPlugin", {**JOB, "ncclNetPlugin": "none"}, "'trainExpectTransport'"),
    # infra/preview/job_plan.py check_transport_expectation: the verdict reads NCCL INFO lines, printed at INFO and TRACE.
    ("NCCL version line only, efa expected", "ncclDebug", {**JOB, "ncclDebug": "VERSION"}, "'trainExpectTransport'"),
    ("NCCL warnings only, socket expected", "ncclDebug",
     {**JOB, "ncclDebug": "WARN", "ncclNetPlugin": "none", "trainExpectTransport": "socket"}, "INFO or TRACE"),
    # infra/preview/job_layout.py predict: hybrid and two-level shard within whole nodes (the job's words name flags).
    ("hybrid on 6 workers", "trainSharding", {**JOB, "trainSharding": "hybrid", "trainNumWorkers": 6},
     "'trainNumWorkers'"),
    ("hybrid on 5 workers", "trainSharding", {**JOB, "trainSharding": "hybrid", "trainNumWorkers": 5},
     "multiple of 4"),
    ("two-level on 6 workers", "trainNumWorkers", {**JOB, "trainSharding": "two-level", "trainNumWorkers": 6},
     "'trainSharding'"),
    # workload/config/__init__.py split_problem: a slice of a split that selects nothing whatever its size.
    ("an empty percent slice", "trainDatasetSplit",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainDatasetSplit": "train[:0%]"}, "selects none"),
    ("an empty absolute slice", "trainDatasetSplit",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainDatasetSplit": "train[:0]"}, "selects none"),
    ("an empty evaluation slice", "trainEvalSplit",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainEvalSplit": "validation[50:10]"}, "selects none"),
    # workload/config/values.py split_problem: what datasets' ReadInstruction.from_spec cannot read.
    ("a percent slice past 100", "trainDatasetSplit",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainDatasetSplit": "train[10%:150%]"}, "-100%..100%"),
    ("an evaluation slice without its colon", "trainEvalSplit",
     {**JOB, **STORED, "trainDataset": "org/corpus", "trainEvalSplit": "validation[40]"}, "slice of one"),
    # infra/aws/offerings.py check_gpu_zone: EC2's DescribeInstanceTypeOfferings (tests/support/fake_aws.py UNOFFERED).
    ("p5 in an AZ that does not offer it", "gpuAvailabilityZone",
     {"gpuInstanceType": "p5.48xlarge", "gpuAvailabilityZone": "us-west-2d"}, "allowed: one of us-west-2a"),
    # infra/preview/job_plan.py check_time_limit: the steps at the GPU's full peak and a minute's start-up.
    ("a minute for the default job", "trainTimeoutMinutes", {**JOB, "trainTimeoutMinutes": 1},
     "trainTimeoutMinutes 2 or more"),
]


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a rule that asks would warn, not refuse


@pytest.mark.parametrize("case, key, overrides, words", DOOMED, ids=[case[0] for case in DOOMED])
def test_a_doomed_config_is_refused_at_preview_naming_the_key(case, key, overrides, words):
    message = program_refusal(overrides)  # nothing registered, one line
    assert f"'{key}'" in message, f"{case}: the refusal names {key}: {message}"
    assert words in message, f"{case}: the refusal says {words!r}: {message}"


def test_the_classes_leave_working_configs_alone():
    from tests.support.pulumi_mocks import run_program

    for overrides in ({**JOB, "trainMethod": "qlora", "trainNumWorkers": 4, "trainExpectTransport": "any"},
                      {**JOB, "trainModelId": "s3://company-data/models/m/", "trainEnv": ["HF_HUB_OFFLINE=1"]},
                      {**JOB, **STORED, "trainDataset": "org/corpus", "trainModelId": "meta-llama/Llama-3.2-1B",
                       "trainTokenizer": "meta-llama/Llama-3.1-8B"},
                      {**JOB, **STORED, "trainDataset": "s3://company-data/corpus.jsonl"},
                      {**JOB, **STORED, "trainDataset": "s3://company-data/pairs.csv", "trainDataFormat": "prompt-completion"},
                      {**JOB, **STORED, "trainDataset": "org/corpus", "trainDatasetSplit": "train[:10%]",
                       "trainEvalSplit": "validation[-500:]"},
                      {**JOB, "trainSharding": "hybrid", "trainNumWorkers": 8},
                      {**JOB, "ncclNetPlugin": "none", "trainExpectTransport": "socket"},
                      {**JOB, "ncclDebug": "TRACE"}, {**JOB, "ncclDebug": "WARN", "trainExpectTransport": "any"},
                      {**JOB, "trainNumWorkers": 2, "trainModelConfig": "tiny", "trainSeqLen": 256,
                       "trainMinBusBandwidthGBps": "1", "trainExpectTransport": "any"},
                      {**JOB, "trainSeqLen": 2, "trainTimeoutMinutes": 2}):
        run = run_program("dev", overrides)
        assert run.error is None, f"{overrides}: {run.error}"


def test_a_time_limit_shorter_than_the_steps_at_full_peak_is_refused_on_p5():
    # check_time_limit on the p5 stack (8 x H100): 5000 steps of Llama-3.1-8B take 0.2 s each even at the full peak.
    message = program_refusal({**JOB, "trainModelId": "meta-llama/Llama-3.1-8B", "trainSteps": 5000,
                               "trainTimeoutMinutes": 1}, stack="p5")
    assert "'trainTimeoutMinutes', 'trainSteps'" in message and "trainTimeoutMinutes 18 or more" in message, message


# Audit 45: a Hub model the project does not ship, read at preview from the Hub (the fake, tests/support/fake_hub.py):
# heads that do not split the model's width, or query heads no key/value head count divides (workload/model/
# config_json.py attention_shape_problem, which the job's own reading of config.json applies too: transformers builds
# either, and the first forward fails), and a repo whose weights are not safetensors (model_source.weights_problem
# over its file list, HfApi.model_info: the job loads safetensors only). (case, repo, config, files, words).
SMALL = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}
SAFETENSORS = ("model.safetensors",)
DOOMED_ON_THE_HUB = [
    ("heads that do not split the width", "lab/uneven-heads", {**SMALL, "hidden_size": 250}, SAFETENSORS,
     "its hidden_size 250 is not a multiple of its num_attention_heads 4"),
    ("query heads no key/value count divides", "lab/uneven-groups",
     {**SMALL, "num_attention_heads": 8, "num_key_value_heads": 3}, SAFETENSORS,
     "its num_attention_heads 8 is not a multiple of its num_key_value_heads 3"),
    ("pickled weights only", "lab/pickles", SMALL, ("pytorch_model-00001-of-00002.bin", "pytorch_model.bin.index.json"),
     "its weights are pytorch_model-00001-of-00002.bin"),
    ("no weights at all", "lab/card-only", SMALL, ("README.md",), "holds no model.safetensors"),
    # values transformers refuses while building (audit 44g D08/D09): a pad id past the embedding's rows (torch's
    # nn.Embedding assert), layer_types not one per layer (huggingface_hub's strict dataclass validator)
    ("a pad id past the vocabulary", "lab/pad-past", {**SMALL, "pad_token_id": 1024}, SAFETENSORS,
     "its config.json's pad_token_id 1024 is not below its vocab_size 1000"),
    ("layer types not one per layer", "lab/layer-types",
     {**SMALL, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "layer_types": ["full_attention"] * 3},
     SAFETENSORS, "its config.json's layer_types has 3 entries for its num_hidden_layers 2"),
    # a sharded repo whose index names a shard it does not hold (audit 44g D15): every rank's load fails
    ("an index naming a shard the repo lacks", "lab/two-of-three",
     SMALL, ("model.safetensors.index.json", "model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"),
     "its model.safetensors.index.json names model-00002-of-00003.safetensors, which the repo does not hold"),
]
# The index the sharded repos above and below hold: each names its shards by the files of its repo's name pattern.
INDEXES = {
    "lab/two-of-three": {"model.embed_tokens.weight": "model-00001-of-00003.safetensors",
                         "model.layers.0.mlp.up_proj.weight": "model-00002-of-00003.safetensors",
                         "lm_head.weight": "model-00003-of-00003.safetensors"},
    "lab/sharded": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                    "lm_head.weight": "model-00002-of-00002.safetensors"},
}
WORKING_ON_THE_HUB = {
    "lab/sharded": (SMALL, ("model.safetensors.index.json", "model-00001-of-00002.safetensors",
                            "model-00002-of-00002.safetensors")),
    "lab/wide-heads": ({**SMALL, "head_dim": 128}, SAFETENSORS),  # heads wider than hidden_size / heads (Qwen3's)
}


@pytest.fixture
def hub(monkeypatch):
    def files_of(repo, config, files):
        index = json.dumps({"metadata": {}, "weight_map": INDEXES.get(repo, {})}).encode()
        return {"config.json": json.dumps(config).encode(), **dict.fromkeys(files, b"\0"),
                **({"model.safetensors.index.json": index} if "model.safetensors.index.json" in files else {})}

    repos = {repo: files_of(repo, config, files) for _, repo, config, files, _ in DOOMED_ON_THE_HUB}
    repos.update({repo: files_of(repo, config, files) for repo, (config, files) in WORKING_ON_THE_HUB.items()})
    with FakeHub(repos=repos) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.mark.parametrize("case, repo, config, files, words", DOOMED_ON_THE_HUB, ids=[c[0] for c in DOOMED_ON_THE_HUB])
def test_a_hub_model_the_job_could_not_run_is_refused_at_preview_naming_the_model(hub, case, repo, config, files, words):
    message = program_refusal({**JOB, "trainModelId": repo})
    assert "'trainModelId'" in message and repo in message, f"{case}: the refusal names trainModelId: {message}"
    assert words in message, f"{case}: the refusal says {words!r}: {message}"


def test_the_hub_rules_leave_working_models_alone(hub):
    from tests.support.pulumi_mocks import run_program

    for repo in WORKING_ON_THE_HUB:
        run = run_program("dev", {**JOB, "trainModelId": repo})
        assert run.error is None, f"{repo}: {run.error}"
    assert ("GET", "/api/models/lab/sharded", "") in hub.requests, "the file list, asked once without a token"
