"""Issue 44, item 5: each class of hostile or doomed input is refused by ONE rule, at preview (naming the stack key) or
by the CLI (naming the flag, exit 2), in under a second, without loading torch, Ray or transformers, and without
repeating a secret. One row per class, each with its cases; the rule each row exercises is named in its comment."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from infra import config
from infra.config import InstanceFacts, check_efa_gpu
from tests.program.test_refusals_at_preview import DEV
from tests.support.cli_process import HEAVY_MODULES, run_cli
from workload import cli

REPO = Path(__file__).resolve().parents[2]
SECRET = "SENTINELsecret9876"
STORED = {"trainStoragePath": "s3://company-data/runs"}

# (class, the key the refusal names, overrides of the dev stack, words the refusal says).
PREVIEW_CLASSES = [
    # infra/config/schema.py check_text_bounds, with workload/config/fields.py's max_length of each declaration.
    ("unbounded free text", "trainWandbProject", {"trainWandbProject": "p" * 300_000}, "at most 128"),
    ("unbounded free text", "trainDatasetSplit", {"trainDatasetSplit": "s" * 5_000}, "at most 256"),
    ("unbounded free text", "dlcImage", {"dlcImage": "x" * 300_000}, "at most 2,048"),
    ("unbounded free text", "trainPip", {"trainPip": ["y" * 100_000]}, "entry 0"),
    # workload/model/model_source.py hub_id_problem: huggingface_hub's validate_repo_id.
    ("Hub repo id", "trainPushToHub", {**STORED, "trainPushToHub": "org/bad--name"}, "Hub repo id"),
    ("Hub repo id", "trainPushToHub", {**STORED, "trainPushToHub": "org/name.git"}, "'.git'"),
    ("Hub repo id", "trainPushToHub", {**STORED, "trainPushToHub": "org/café"}, "ASCII"),
    # infra/config/rules.py s3_location: S3's safe key characters.
    ("S3 key characters", "trainStoragePath", {"trainStoragePath": "s3://company-data/my runs"}, "safe key"),
    ("S3 key characters", "trainDataset", {"trainDataset": "s3://company-data/données.jsonl"}, "safe key"),
    ("S3 key characters", "trainStoragePath", {"trainStoragePath": "s3://company-data/a#b"}, "safe key"),
    # infra/config/experiment_tracking.py tracking_uri_problem: the pods' egress is 443 to public addresses.
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "http://mlflow.example.com"}, "443"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://10.1.2.3/mlflow"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://mlflow.corp.internal"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://mlflow.example.com:5000"}, "443"),
    # workload/config/fields.py text_problem: no user:password@ in any URI, on every key.
    ("credentials in URIs", "trainMlflowTrackingUri",
     {"trainReportTo": "mlflow", "trainMlflowTrackingUri": f"https://me:{SECRET}@mlflow.example.com"}, "user:password@"),
    ("credentials in URIs", "trainStoragePath", {"trainStoragePath": f"s3://me:{SECRET}@company-data/runs"},
     "user:password@"),
    ("credentials in URIs", "trainDataset", {"trainDataset": f"s3://me:{SECRET}@company-data/a.jsonl"},
     "user:password@"),
    ("credentials in URIs", "trainEnv", {"trainEnv": [f"MY_SERVER=https://me:{SECRET}@host.example.com"]},
     "user:password@"),
    # infra/config/env_names.py reserved_reason and holds_credential.
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["HF_ENDPOINT=https://hub.attacker.example"]},
     "HF_ENDPOINT"),
    ("token-redirecting environment", "trainSecretEnv", {"trainSecretEnv": [f"WANDB_BASE_URL=https://{SECRET}.io"]},
     "WANDB_BASE_URL"),
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["MLFLOW_TRACKING_URI=https://x.example.com"]},
     "MLFLOW_TRACKING_URI"),
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["HTTPS_PROXY=https://proxy.example.com"]},
     "HTTPS_PROXY"),
    ("token under another name", "trainEnv", {"trainEnv": [f"HUGGING_FACE_HUB_TOKEN={SECRET}"]},
     "HUGGING_FACE_HUB_TOKEN"),
    ("token under another name", "trainEnv", {"trainEnv": [f"MY_SERVICE_API_KEY={SECRET}"]}, "MY_SERVICE_API_KEY"),
    # The second fresh set (2026-12-06), the same rules; the Hub rule now on every key that may name a repo
    # (workload/config repo_id_problem on trainModelId, trainTokenizer, trainDataset), NETRC among the names.
    ("unbounded free text", "trainTextField", {"trainTextField": "f" * 10_000}, "at most 256"),
    ("unbounded free text", "trainEvalSplit", {"trainDataset": "org/corpus", "trainEvalSplit": "v" * 1000},
     "at most 256"),
    ("unbounded free text", "trainMessagesField", {"trainMessagesField": "m" * 300}, "at most 256"),
    ("unbounded free text", "trainDatasetConfig", {"trainDatasetConfig": "c" * 100_000}, "at most 256"),
    ("unbounded free text", "trainLoraTargets",
     {"trainMethod": "lora", "trainLoraTargets": "q_proj," * 10_000 + "k_proj"}, "at most 256"),
    ("unbounded free text", "trainRunId", {"trainRunId": "7" * 100_000}, "at most 256"),
    ("Hub repo id", "trainPushToHub", {**STORED, "trainPushToHub": "org/" + "a" * 97}, "Hub repo id"),
    ("Hub repo id", "trainPushToHub", {**STORED, "trainPushToHub": "-org/name"}, "Hub repo id"),
    ("Hub repo id", "trainPushToHub", {**STORED, "trainPushToHub": "org/name."}, "Hub repo id"),
    ("Hub repo id", "trainTokenizer", {"trainDataset": "org/corpus", "trainTokenizer": "org/bad--tok"}, "Hub repo id"),
    ("Hub repo id", "trainDataset", {"trainDataset": "org/data..set"}, "Hub repo id"),
    ("Hub repo id", "trainModelId", {"trainModelId": "org/model.git"}, "not a Hugging Face Hub id"),
    ("S3 key characters", "trainStoragePath", {"trainStoragePath": "s3://company-data/runs?versionId=1"}, "'?'"),
    ("S3 key characters", "trainStoragePath", {"trainStoragePath": "s3://company-data/runs\\x"}, "safe key"),
    ("S3 key characters", "trainDataset", {"trainDataset": "s3://company-data/a{b}.jsonl"}, "safe key"),
    ("S3 key characters", "trainModelId", {"trainModelId": "s3://company-data/my model/"}, "safe key"),
    ("S3 bucket names", "trainStoragePath", {"trainStoragePath": "s3://Company-Data/runs"}, "3-63 lowercase"),
    ("S3 bucket names", "trainStoragePath", {"trainStoragePath": "s3://ab/runs"}, "3-63 lowercase"),
    ("AWS names", "clusterName", {"clusterName": "ray train"}, "1-39 letters"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://localhost/mlflow"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://127.0.0.1/x"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://[::1]/x"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://169.254.169.254/latest"},
     "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://100.64.1.1/"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://mlflow/"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri",
     {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://mlflow.ray.svc.cluster.local"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://2130706433/"}, "public"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "file:///tmp/mlruns"}, "443"),
    ("credentials in URIs", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": f"https://{SECRET}@mlflow.example.com"},
     "user:password@"),
    ("credentials in URIs", "trainMlflowTrackingUri",
     {"trainReportTo": "mlflow", "trainMlflowTrackingUri": f"https://mlflow.example.com/?token={SECRET}"}, "token, key or signature"),
    ("credentials in URIs", "trainModelId", {"trainModelId": f"https://me:{SECRET}@huggingface.co/org/x"},
     "user:password@"),
    ("credentials in URIs", "trainTokenizer", {"trainDataset": "org/corpus", "trainTokenizer": f"s3://me:{SECRET}@b/t"},
     "user:password@"),
    ("credentials in URIs", "trainChatTemplate", {"trainChatTemplate": f"https://u:{SECRET}@host.example.com/t.jinja"},
     "user:password@"),
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["https_proxy=http://proxy.example.com"]}, "https_proxy"),
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["ALL_PROXY=socks5://proxy.example.com"]}, "ALL_PROXY"),
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["REQUESTS_CA_BUNDLE=/tmp/ca.pem"]},
     "REQUESTS_CA_BUNDLE"),
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["SSL_CERT_FILE=/tmp/ca.pem"]}, "SSL_CERT_FILE"),
    ("another Ray cluster", "trainEnv", {"trainEnv": ["RAY_ADDRESS=ray://other.example.com:10001"]}, "RAY_ADDRESS"),
    ("another Ray cluster", "trainSecretEnv", {"trainSecretEnv": ["RAY_ADDRESS=10.0.0.9:6379"]}, "RAY_ADDRESS"),
    ("token-redirecting environment", "trainEnv", {"trainEnv": ["AWS_CA_BUNDLE=/tmp/ca.pem"]}, "AWS_CA_BUNDLE"),
    ("token under another name", "trainEnv", {"trainEnv": ["HF_TOKEN_PATH=/tmp/token"]}, "HF_TOKEN_PATH"),
    ("token under another name", "trainEnv", {"trainEnv": ["NETRC=/tmp/netrc"]}, "NETRC"),
    ("token under another name", "trainEnv", {"trainEnv": [f"MLFLOW_TRACKING_PASSWORD={SECRET}"]},
     "MLFLOW_TRACKING_PASSWORD"),
    ("token under another name", "trainEnv", {"trainEnv": [f"WANDB_API_KEY={SECRET}"]}, "WANDB_API_KEY"),
    ("token under another name", "trainEnv", {"trainEnv": [f"HF_TOKEN={SECRET}"]}, "HF_TOKEN"),
    ("token under another name", "trainEnv", {"trainEnv": [f"MLFLOW_TRACKING_TOKEN={SECRET}"]},
     "MLFLOW_TRACKING_TOKEN"),
    # The third fresh set (audit 44, 2026-12-06). workload/config/fields.py text_problem: no Unicode Cc/Cf character
    # (newline, NUL, bell, U+202E, zero-width) in any str setting, refused by code point without quoting the value.
    ("control or format characters", "trainWandbProject", {"trainWandbProject": "proj\nINJECT=1"}, "U+000A"),
    ("control or format characters", "trainDatasetSplit", {"trainDataset": "org/corpus", "trainDatasetSplit": "train\x00"},
     "U+0000"),
    ("control or format characters", "trainMessagesField",
     {"trainDataset": "org/chats", "trainDataFormat": "chat", "trainMessagesField": "\u202emessages"}, "U+202E"),
    ("control or format characters", "trainEvalSplit", {"trainDataset": "org/corpus", "trainEvalSplit": "validation\nx"},
     "U+000A"),
    ("control or format characters", "trainTextField", {"trainDataset": "org/corpus", "trainTextField": "text\nx"},
     "U+000A"),
    ("control or format characters", "trainDatasetConfig", {"trainDataset": "org/corpus", "trainDatasetConfig": "wiki\x07"},
     "U+0007"),
    ("control or format characters", "trainChatTemplate",
     {"trainDataset": "org/chats", "trainDataFormat": "chat", "trainChatTemplate": "qwen2.5\n"}, "U+000A"),
    ("control or format characters", "trainRunId", {"trainRunId": "1\u200b"}, "U+200B"),
    ("control or format characters", "trainEnv", {"trainEnv": ["FOO=bar\nBAZ=1"]}, "U+000A"),
    # workload/config/fields.py looks_like_token in text_problem: a token-shaped value in any free-text key.
    ("token-shaped values in free text", "trainWandbProject",
     {"trainReportTo": "wandb", "trainWandbProject": f"hf_{SECRET}{'Q' * 30}"}, "must hold no token"),
    ("token-shaped values in free text", "trainRunId", {"trainRunId": "AKIAIOSFODNN7EXAMPLE"}, "must hold no token"),
    # infra/config/env_names.py looks_like_token: a token-shaped value in trainEnv, whatever its name.
    ("token-shaped values in trainEnv", "trainEnv", {"trainEnv": [f"NOTE=hf_{SECRET}{'Q' * 20}"]}, "trainSecretEnv"),
    ("token-shaped values in trainEnv", "trainEnv", {"trainEnv": [f"NOTE=ghp_{SECRET}{'Q' * 20}"]}, "trainSecretEnv"),
    ("token-shaped values in trainEnv", "trainEnv", {"trainEnv": [f"NOTE=github_pat_{SECRET}{'Q' * 20}"]},
     "trainSecretEnv"),
    ("token-shaped values in trainEnv", "trainEnv", {"trainEnv": ["NOTE=AKIA" + "ABCDEFGHIJKLMNOP"]}, "trainSecretEnv"),
    ("token-shaped values in trainEnv", "trainEnv", {"trainEnv": [f"NOTE=sk-{SECRET}{'Q' * 20}"]}, "trainSecretEnv"),
    # infra/config/env_names.py reserved_reason: what code pip installs, and what a shell sources first.
    ("code-changing environment", "trainEnv", {"trainEnv": ["PIP_INDEX_URL=https://pypi.attacker.example/simple"]},
     "PIP_INDEX_URL"),
    ("code-changing environment", "trainEnv", {"trainEnv": ["PIP_EXTRA_INDEX_URL=https://x.example/simple"]},
     "PIP_EXTRA_INDEX_URL"),
    ("code-changing environment", "trainEnv", {"trainEnv": ["PIP_CONFIG_FILE=/tmp/pip.conf"]}, "PIP_CONFIG_FILE"),
    ("code-changing environment", "trainEnv", {"trainEnv": ["PIP_FIND_LINKS=https://x.example/wheels"]},
     "PIP_FIND_LINKS"),
    ("code-changing environment", "trainEnv", {"trainEnv": ["BASH_ENV=/tmp/x.sh"]}, "BASH_ENV"),
    ("code-changing environment", "trainEnv", {"trainEnv": ["ENV=/tmp/x.sh"]}, "ENV"),
    ("code-changing environment", "trainEnv", {"trainEnv": ["PYTHONSTARTUP=/tmp/x.py"]}, "PYTHONSTARTUP"),
    ("code-changing environment", "trainSecretEnv",
     {"trainSecretEnv": [f"PIP_INDEX_URL=https://u:{SECRET}@pypi.example/simple"]}, "PIP_INDEX_URL"),
    # workload/config/__init__.py's at_most bounds (MAX_STEPS, MAX_FAILURES).
    ("huge numbers", "trainSteps", {"trainSteps": 10 ** 30}, "at most 10000000"),
    ("huge numbers", "trainSteps", {"trainEnabled": True, "trainSteps": 10 ** 12}, "at most 10000000"),
    ("huge numbers", "trainMaxFailures", {"trainMaxFailures": 10 ** 9}, "at most 1000"),
    ("huge numbers", "trainEvalEvery", {"trainEvalEvery": 10 ** 30}, "at most 10000000"),
    ("huge numbers", "trainCheckpointEvery", {"trainCheckpointEvery": 10 ** 12}, "at most 10000000"),
    ("huge numbers", "trainWarmupSteps", {"trainWarmupSteps": 10 ** 12}, "at most 10000000"),
    # infra/config/pip_requirements.py shown: an entry with '://' or '@' is named by its index alone.
    ("credentials in URIs", "trainPip", {"trainPip": [f"pkg @ https://example.com/{SECRET}/pkg.whl"]}, "entry 0"),
    # workload/config wandb_project_problem: W&B's own rule for a project name.
    ("W&B project names", "trainWandbProject", {"trainWandbProject": "team/proj#1"}, "W&B project name"),
    ("W&B project names", "trainWandbProject", {"trainWandbProject": "p" * 129}, "at most 128"),
    # workload/config/values.py: mlflow_uri_problem, split_problem, DATASET_CONFIG.
    ("MLflow URIs without a scheme", "trainMlflowTrackingUri",
     {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "localhost:5000"}, "scheme MLflow takes"),
    ("splits that are no slice", "trainDatasetSplit", {"trainDataset": "org/corpus", "trainDatasetSplit": "train[:abc]"},
     "datasets' slice"),
    ("splits that are no slice", "trainDatasetSplit", {"trainDataset": "org/corpus", "trainDatasetSplit": "tr\u0430in"},
     "ASCII"),
    ("dataset configurations that climb", "trainDatasetConfig",
     {"trainDataset": "org/corpus", "trainDatasetConfig": "../../etc"}, "without '..'"),
    # Audit 45. experiment_tracking._address_problem: an address no TCP connection reaches, by ipaddress's kind.
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://239.1.2.3/mlflow"}, "multicast"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://0xe0000105/"}, "multicast"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://250.9.9.9/"}, "reserved"),
    ("tracking egress", "trainMlflowTrackingUri", {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "https://0.0.0.0/"}, "unspecified"),
    # fields.py text_problem: U+2028 and U+2029 (Zl, Zp) are line breaks to many readers, hidden like Cc and Cf.
    ("control or format characters", "trainRunId", {"trainRunId": "run\u2028INJECT"}, "U+2028"),
    ("control or format characters", "trainTextField", {"trainDataset": "org/corpus", "trainTextField": "t\u2029"},
     "U+2029"),
    # env_names.py: git's and ssh's command variables (the GIT_ family), and the pods' node-local cache locations.
    ("code-changing environment", "trainEnv", {"trainEnv": ["GIT_PROXY_COMMAND=/tmp/p.sh"]}, "GIT_PROXY_COMMAND"),
    ("code-changing environment", "trainEnv", {"trainEnv": ["GIT_CONFIG_KEY_0=core.sshCommand"]}, "GIT_CONFIG_KEY_0"),
    ("code-changing environment", "trainSecretEnv", {"trainSecretEnv": ["SSH_ASKPASS=/tmp/a.sh"]}, "SSH_ASKPASS"),
    ("node-local locations", "trainEnv", {"trainEnv": ["HF_HUB_CACHE=/sys/hub"]}, "local volume"),
    ("node-local locations", "trainSecretEnv", {"trainSecretEnv": ["TRANSFORMERS_CACHE=/dev/shm/x"]}, "local volume"),
    # values.py repo_id_problem: a file inside a Hub repo is no tokenizer; the repo is named.
    ("Hub repo id", "trainTokenizer", {"trainDataset": "org/corpus", "trainTokenizer": "meta-llama/Llama-3.2-1B/"
                                       "tokenizer_config.json"}, "did you mean meta-llama/Llama-3.2-1B"),
]

# Kubernetes' name rules, checked by the program at preview (infra/preview/object_names.py): under the mocks.
PROGRAM_CLASSES = [
    ("Kubernetes names", "rayNamespace", {"rayNamespace": "Ray_NS"}, "DNS-1123"),
    ("Kubernetes names", "rayClusterName", {"rayClusterName": "ray.cluster"}, "DNS-1035"),
    # infra/preview/job_plan.py check_job_model: a model is a Hub id or s3://; file:// is a path on this machine.
    ("model locations the pods read", "trainModelId", {"trainEnabled": True, "trainModelId": "file:///etc/passwd"},
     "file://"),
    ("tokenizer locations the pods read", "trainTokenizer",
     {"trainEnabled": True, "trainDataset": "org/corpus", "trainStoragePath": "s3://bucket/runs",
      "trainTokenizer": "file:///root/.aws/credentials"}, "file://"),
    # infra/kubernetes/raycluster.py check_image: user:password@ before the registry, refused without quoting.
    ("credentials in image references", "dlcImage",
     {"dlcImage": f"me:{SECRET}@registry.example.com/ray:2.58.0", "rayVersion": "2.58.0", "imageCudaVersion": "13.0"},
     "user:password@"),
]


@pytest.mark.parametrize("kind, key, overrides, words", PROGRAM_CLASSES, ids=[case[1] for case in PROGRAM_CLASSES])
def test_names_kubernetes_refuses_are_refused_at_preview(kind, key, overrides, words):
    from tests.program.test_refusals_at_preview import program_refusal

    message = program_refusal(overrides)
    assert key in message and words in message, f"{kind}: {message}"
    assert SECRET not in message and "\n" not in message, f"{kind}: one line, without the secret: {message}"


@pytest.mark.parametrize("kind, key, overrides, words", PREVIEW_CLASSES,
                         ids=[f"{case[0]}-{index}" for index, case in enumerate(PREVIEW_CLASSES)])
def test_each_class_is_refused_at_preview_naming_the_key_fast_and_without_the_secret(kind, key, overrides, words):
    started = time.perf_counter()
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | overrides)
    elapsed = time.perf_counter() - started
    message = str(refused.value)
    assert f"'{key}'" in message, f"{kind}: the refusal names {key}: {message[:300]}"
    assert words in message, f"{kind}: the refusal says {words!r}: {message[:300]}"
    assert SECRET not in message, f"{kind}: the refusal repeats the secret: {message[:300]}"
    assert len(message) < 1000 and "\n" not in message, f"{kind}: one bounded line, got {message[:300]!r}"
    assert elapsed < 1, f"{kind}: refused in {elapsed:.2f}s"


def test_the_rules_leave_ordinary_values_alone():
    parsed = config.parse(DEV | {
        "trainStoragePath": "s3://company-data/runs/date=2024-01-01", "trainDataset": "s3://company-data/corpus.jsonl",
        "trainMlflowTrackingUri": "https://mlflow.example.com/team", "trainPushToHub": "org/model-v1.2",
        "trainSecretEnv": ["HF_TOKEN=hf_x", "WANDB_API_KEY=k"], "trainReportTo": "mlflow,wandb",
        "trainEnv": ["TOKENIZERS_PARALLELISM=false", "HF_HUB_DISABLE_IMPLICIT_TOKEN=1", "NCCL_NET=Socket",
                     "HF_HUB_ETAG_TIMEOUT=30", "NOTE=sk-learn", "ENVIRONMENT=prod", "PIP_NO_CACHE_DIR=1"],
        "trainWandbProject": "team-proj_1.v2 (ablation)", "trainSteps": 10_000_000, "trainMaxFailures": 1000,
        "trainPip": ["einops==0.8.1"]})
    assert parsed.train.flags["push_to_hub"] == "org/model-v1.2"
    assert parsed.train.flags["wandb_project"] == "team-proj_1.v2 (ablation)"
    assert parsed.train.flags["max_failures"] == 1000


def facts(instance_type: str, gpu_name: str, architectures: tuple[str, ...] = ("x86_64",)) -> InstanceFacts:
    return InstanceFacts(instance_type=instance_type, gpus=8, gpu_memory_mib=32768, efa_supported=True,
                         maximum_efa_interfaces=1, network_cards=1, vcpus=96, memory_mib=786432,
                         architectures=architectures, gpu_name=gpu_name)


# infra/config/settings.py check_efa_gpu: the image's CUDA 13 GPUs, and the AMI's architecture.
INSTANCE_CLASSES = [
    ("GPU the image's CUDA cannot run", facts("p3dn.24xlarge", "V100"), "compute capability 7.0"),
    ("GPU the image's CUDA cannot run", facts("g3.16xlarge", "M60"), "compute capability 5.2"),
    ("architecture the AMI does not match", facts("g5g.16xlarge", "T4g", ("arm64",)), "arm64"),
    ("architecture the AMI does not match", facts("p6e-gb200.36xlarge", "GB200", ("arm64",)), "x86_64"),
]


@pytest.mark.parametrize("kind, described, words", INSTANCE_CLASSES, ids=[case[1].instance_type for case in
                                                                          INSTANCE_CLASSES])
def test_an_instance_type_the_image_or_ami_cannot_use_is_refused_naming_the_key(kind, described, words):
    with pytest.raises(ValueError) as refused:
        check_efa_gpu(described)
    assert "'gpuInstanceType'" in str(refused.value) and words in str(refused.value), f"{kind}: {refused.value}"


def test_turing_and_newer_gpus_pass():
    for name in ("T4", "A10G", "L4", "L40S", "A100", "H100", "H200", "B200"):
        assert check_efa_gpu(facts("x", name)).gpu_name == name


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" \
             "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nsteps: *c\n"

# (class, flags or a --config file's text, the flag the refusal names, words). workload.train, exit 2.
CLI_CLASSES = [
    ("unbounded free text", ["--wandb_project", "p" * 5000], "--wandb_project", "at most 128"),
    ("unbounded free text", ["--run_name", "r" * 200], "--run_name", "at most 128"),
    ("Hub repo id", ["--push_to_hub", "org/bad..name"], "--push_to_hub", "Hub repo id"),
    ("Hub repo id", ["--model_id", "org/x--y"], "--model_id", "Hugging Face Hub id"),
    ("credentials in URIs", ["--mlflow_tracking_uri", f"https://me:{SECRET}@mlflow.example.com"],
     "--mlflow_tracking_uri", "user:password@"),
    ("credentials in URIs", ["--storage_path", f"s3://me:{SECRET}@bucket/runs"], "--storage_path", "user:password@"),
    ("bounded config files", "config:" + ALIAS_BOMB, "--config", "aliases"),
    ("bounded config files", "config:" + "run_name: " + "x" * 300_000 + "\n", "--config", "allowed: at most 262,144"),
    ("bounded config files", f"config:steps: {SECRET}xxxxxxxxxx\n", "--config", "not shown"),
    ("bounded config files", f"config:{SECRET}yyyyyyyyyyyyyyyyyy: 1\n", "--config", "unrecognized"),
    # The second fresh set (2026-12-06): workload/config_file.py read_document's RecursionError, workload/cli.py
    # _bounded (argparse's own messages quote a value whole), fields.py's finite check of an int, and the Hub rule on
    # --tokenizer and --dataset (workload/config repo_id_problem).
    ("bounded config files", "config:steps: " + "[" * 50_000, "--config", "nested too deeply"),
    ("bounded config files", "config:steps: !!python/object/apply:os.system ['true']\n", "--config", "not YAML"),
    ("YAML alias expansion", "config:a: &a {x: 1}\nb: {<<: [*a, *a, *a]}\nsteps: 3\n", "--config", "aliases"),
    ("bounded errors", ["--batch_size", "9" * 100_000], "--batch_size", "not shown"),
    ("bounded errors", ["--batch_size", "9" * 400], "--batch_size", "over 80 characters"),
    ("bounded errors", ["--learning_rate", SECRET + "abcdefghijkl"], "--learning_rate", "not shown"),
    ("bounded errors", f"config:learning_rate: {SECRET}{'z' * 5000}\n", "--config", "not shown"),
    ("Hub repo id", ["--dataset", "org/corpus", "--tokenizer", "org/bad--tok"], "--tokenizer", "Hub repo id"),
    ("Hub repo id", ["--dataset", "org/data..set"], "--dataset", "Hub repo id"),
    ("Hub repo id", ["--storage_path", "/tmp/x", "--push_to_hub", "org/" + "a" * 97], "--push_to_hub", "Hub repo id"),
    ("credentials in URIs", ["--tokenizer", f"https://me:{SECRET}@huggingface.co/org/tok"], "--tokenizer",
     "user:password@"),
    # Audit 44: the same declarations' rules on the job's side (fields.py text_problem, at_most, the W&B rule).
    ("control or format characters", ["--wandb_project", "proj\nINJECT=1"], "--wandb_project", "U+000A"),
    ("control or format characters", ["--dataset", "org/chats", "--data_format", "chat", "--messages_field",
                                      "\u202emessages"], "--messages_field", "U+202E"),
    ("huge numbers", ["--steps", str(10 ** 12)], "--steps", "at most 10000000"),
    ("huge numbers", ["--max_failures", str(10 ** 9)], "--max_failures", "at most 1000"),
    ("W&B project names", ["--wandb_project", "team/proj#1"], "--wandb_project", "W&B project name"),
    ("control or format characters", ["--run_name", "a\u2029b"], "--run_name", "U+2029"),
    ("Hub repo id", ["--dataset", "org/corpus", "--tokenizer", "Qwen/Qwen3-0.6B/vocab.json"], "--tokenizer",
     "did you mean Qwen/Qwen3-0.6B"),
]


@pytest.mark.parametrize("kind, argv, flag, words", CLI_CLASSES,
                         ids=[f"{case[0]}-{index}" for index, case in enumerate(CLI_CLASSES)])
def test_each_class_is_refused_by_the_cli_naming_the_flag_with_exit_2_before_heavy_imports(kind, argv, flag, words,
                                                                                          tmp_path):
    if isinstance(argv, str):
        run_yaml = tmp_path / "run.yaml"
        run_yaml.write_text(argv.removeprefix("config:"))
        argv = ["--config", str(run_yaml)]
    code, stderr, loaded, elapsed = run_cli("workload.train", argv)
    assert code == cli.USAGE, f"{kind}: exit {cli.USAGE}, got {code}: {stderr[-500:]}"
    assert flag in stderr and words in stderr, f"{kind}: names {flag} and says {words!r}: {stderr[-500:]}"
    assert SECRET not in stderr, f"{kind}: repeats the secret: {stderr[-500:]}"
    assert len(stderr) < 2000, f"{kind}: a bounded error, got {len(stderr)} characters"
    assert loaded == [], f"{kind}: refused before {HEAVY_MODULES} load, loaded {loaded}"
    assert elapsed < 10, f"{kind}: the process took {elapsed:.1f}s"  # the rule itself: milliseconds (below)


def test_a_sparse_shard_is_measured_by_its_blocks(tmp_path):
    # workload/sparse_files.py stored_bytes (check_items measures each shard by it): st_blocks, not st_size, of a file that claims a terabyte.
    from workload.sparse_files import stored_bytes

    shard = tmp_path / "__0_0.distcp"
    with open(shard, "wb") as file:
        file.truncate(1 << 40)
    assert shard.stat().st_size == 1 << 40
    assert stored_bytes(shard) < 1 << 20, "a sparse file holds what its blocks hold"
    dense = tmp_path / "dense"
    dense.write_bytes(b"x" * 10_000)
    assert stored_bytes(dense) == 10_000


def test_a_config_json_is_bounded_before_it_is_parsed():
    from workload.model import model_source

    assert model_source.config_size_problem(model_source.MAX_CONFIG_BYTES) is None
    assert "few KiB" in model_source.config_size_problem(model_source.MAX_CONFIG_BYTES + 1)


def test_the_hub_rule_is_huggingface_hubs_own():
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from workload.model.model_source import hub_id_problem

    for repo in ("org/name", "org/na-me.v2", "org/-x", "org/x-", "org/a--b", "org/a..b", "org/x.git", "org/café",
                 "a/b/c", "name", "_org/x"):
        try:
            validate_repo_id(repo)
            hub_says = None
        except HFValidationError:
            hub_says = "refused"
        assert (hub_id_problem(repo) is None) == (hub_says is None), repo


def test_the_field_declarations_bound_every_free_text_flag():
    from workload.config import DECLARED, TrainConfig

    unbounded = [item.name for item in DECLARED if item.type == "str" and not item.max_length]
    assert not unbounded, f"every str setting has a max_length: {unbounded}"
    with pytest.raises(ValueError, match="--dataset_split must be at most 256"):
        dataclasses.replace(TrainConfig(model_config="tiny"), dataset_split="s" * 257)


# The other commands' paths, the same rules: credentials in URIs through `tools.job submit --print_config` (which would
# print them) and the local run, and a sparse dataset measured by its blocks (workload/sparse_files.py hole_problem)
# before the local run reads a terabyte of holes.
OTHER_CLI_CLASSES = [
    ("credentials in URIs", "tools.job",
     ["submit", "--stack", "dev", "--print_config", "--", "--mlflow_tracking_uri", f"https://me:{SECRET}@ml.example.com"],
     "--mlflow_tracking_uri", "user:password@"),
    ("credentials in URIs", "tools.job",
     ["submit", "--stack", "dev", "--print_config", "--", "--storage_path", f"s3://me:{SECRET}@company-data/runs"],
     "--storage_path", "user:password@"),
    ("credentials in URIs", "workload.local", ["--mlflow_tracking_uri", f"https://{SECRET}@mlflow.example.com"],
     "--mlflow_tracking_uri", "user:password@"),
    ("sparse files by blocks", "workload.local", ["--dataset", "SPARSE"], "--dataset", "sparse file"),
]


@pytest.mark.parametrize("kind, module, argv, flag, words", OTHER_CLI_CLASSES,
                         ids=[f"{case[1]}-{index}" for index, case in enumerate(OTHER_CLI_CLASSES)])
def test_each_class_is_refused_on_the_other_commands_paths(kind, module, argv, flag, words, tmp_path):
    if "SPARSE" in argv:
        sparse = tmp_path / "corpus.txt"
        with open(sparse, "wb") as file:
            file.truncate(1 << 40)
        argv = [str(sparse) if arg == "SPARSE" else arg for arg in argv]
    code, stderr, _, elapsed = run_cli(module, argv)
    assert code == cli.USAGE, f"{kind}: exit {cli.USAGE}, got {code}: {stderr[-500:]}"
    assert flag in stderr and words in stderr, f"{kind}: names {flag} and says {words!r}: {stderr[-500:]}"
    assert SECRET not in stderr and "Traceback" not in stderr, f"{kind}: {stderr[-500:]}"
    assert elapsed < 10, f"{kind}: the process took {elapsed:.1f}s"


def test_a_dataset_that_merely_compresses_is_not_sparse(tmp_path):
    from workload.sparse_files import hole_problem

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a line of text\n" * 10_000)
    assert hole_problem(corpus) is None
    with open(corpus, "ab") as file:
        file.truncate(1 << 30)  # a hole after the text
    assert "sparse file" in hole_problem(corpus)
