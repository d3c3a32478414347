"""Settings no job could ever work with, each class refused at preview under the mocks with nothing registered, one
line naming the key: pip specifiers no version satisfies (infra/config/pip_satisfiable.py), storage locations too
long for S3's keys or Linux's names or in a kernel pseudo file system (infra/config/storage_bounds.py)."""
from __future__ import annotations

import pytest

from infra.config.pip_satisfiable import check_satisfiable
from tests.program.test_refusals_at_preview import program_refusal
from tests.support.pulumi_mocks import run_program

JOB = {"trainEnabled": True}
ONE_NODE = {"gpuNodeCount": 1, "trainExpectTransport": "intra-node"}


@pytest.mark.parametrize("entries, words", [
    (["safetensors==0.4.5", "accelerate>=1", "safetensors==0.4.3"], "entries 0, 2 ask for safetensors"),
    (["accelerate>=1.2,<1.1"], "entry 0 asks for accelerate"),
    (["accelerate>=1.2", "Accelerate<=1.1"], "entries 0, 1 ask for accelerate"),
    (["sentencepiece~=0.2.0", "sentencepiece>=0.3"], "no version satisfies"),
    (["sentencepiece==0.2.0,!=0.2.0"], "no version satisfies"),
    (["sentencepiece>0.2,<=0.2"], "no version satisfies"),
])
def test_pip_specifiers_no_version_satisfies_are_refused(entries, words):
    message = program_refusal({**JOB, "trainPip": entries})
    assert message.startswith("config key 'trainPip': ") and words in message, message


@pytest.mark.parametrize("entries", [
    ["accelerate>=1.0", "accelerate<2"],
    ["sentencepiece>=0.2,<=0.2", "safetensors~=0.4.2,<0.5"],
    ['accelerate==1.1; python_version<"3.11"', 'accelerate==1.2; python_version>="3.11"'],
    ["accelerate==1.*", "accelerate>=1.1"],  # wildcards are not reasoned about: never a refusal for them
])
def test_satisfiable_specifiers_pass(entries):
    check_satisfiable(entries)


@pytest.mark.parametrize("overrides, words", [
    ({"trainStoragePath": "s3://team-bucket/" + "p/" * 390}, "S3 object keys are at most 1,024 bytes"),
    ({"trainStoragePath": "s3://team-bucket/" + "\u00e9" * 400}, "800 bytes"),  # counted in UTF-8 bytes
    ({**ONE_NODE, "trainStoragePath": "/data/runs/" + "d" * 256}, "NAME_MAX"),
    ({**ONE_NODE, "trainStoragePath": "file:///data/" + "d" * 256}, "NAME_MAX"),
    ({**ONE_NODE, "trainStoragePath": "/data" + ("/" + "\u20ac" * 85) * 16}, "PATH_MAX"),  # 1,381 characters
    ({**ONE_NODE, "trainStoragePath": "/sys/fs/checkpoints"}, "/sys is a kernel pseudo file system"),
    ({**ONE_NODE, "trainStoragePath": "file:///dev/shm/run"}, "/dev is a kernel pseudo file system"),
    ({**ONE_NODE, "trainStoragePath": "/proc"}, "/proc is a kernel pseudo file system"),
])
def test_storage_paths_the_job_cannot_write_under_are_refused(overrides, words):
    message = program_refusal({**JOB, **overrides})
    assert message.startswith("config key 'trainStoragePath': ") and words in message, message


@pytest.mark.parametrize("overrides", [
    {"trainStoragePath": "s3://team-bucket/" + "q" * 768},
    {**ONE_NODE, "trainStoragePath": "/data/" + "d" * 255},
    {**ONE_NODE, "trainStoragePath": "file:///devices/run"},
])
def test_storage_paths_within_the_bounds_pass(overrides):
    run = run_program("dev", {**JOB, **overrides})
    assert run.error is None, f"{overrides}: {run.error}"


@pytest.mark.parametrize("key, arn", [
    ("clusterViewers", "arn:aws-us-gov:iam::210987654321:role/auditors"),
    ("clusterAdmins", "arn:aws-cn:iam::210987654321:user/platform/lead"),
])
def test_principals_of_another_partition_are_refused(key, arn):
    # The dev stack deploys in the aws partition (its caller, under the mocks, is arn:aws:...).
    message = program_refusal({key: [arn]})
    assert message.startswith(f"config key '{key}': ") and "partition" in message \
        and "arn:aws:iam::ACCOUNT" in message, message


def test_the_partition_is_the_callers():
    from types import SimpleNamespace

    from infra.preview.access import check_access_entries

    stack = SimpleNamespace(cluster_admins=("arn:aws-cn:iam::210987654321:role/ops",), cluster_viewers=())
    check_access_entries(stack, "arn:aws-cn:sts::210987654321:assumed-role/deployer/session")  # a China stack
    with pytest.raises(ValueError, match="config key 'clusterAdmins': .* aws-cn partition .* deploys in aws-us-gov"):
        check_access_entries(stack, "arn:aws-us-gov:iam::210987654321:user/deployer")


@pytest.mark.parametrize("key, value, scheme", [
    ("trainModelId", "gs://models-bucket/llama/", "gs://"),
    ("trainModelId", "file:///opt/models/qwen", "file://"),
    ("trainModelId", "hf://meta-llama/Llama-3.2-1B", "hf://"),
    ("trainTokenizer", "http://mirror.internal/tokenizers/qwen", "http://"),
    ("trainTokenizer", "hf://Qwen/Qwen3-0.6B", "hf://"),
    ("trainTokenizer", "S3://team-bucket/tokenizer/", "lowercase"),
])
def test_model_and_tokenizer_sources_other_than_s3_are_refused(key, value, scheme):
    message = program_refusal({**JOB, key: value})
    assert message.startswith(f"config key '{key}': ") and scheme in message and "org/name" in message, message
    assert value.split("://")[1] not in message, message  # the scheme alone: a URI's rest may hold a token


def test_s3_model_and_tokenizer_pass():
    run = run_program("dev", {**JOB, "trainModelId": "s3://team-bucket/models/qwen/",
                              "trainTokenizer": "s3://team-bucket/models/qwen/"})
    assert run.error is None, run.error


@pytest.mark.parametrize("value", [
    "eyJhbGciOiJFUzI1NiJ9.eyJhdWQiOiJQv8Rt2Ks6LmfQ.U2lnbmF0dXJlQnl0ZXNIZXJl",
    "glrt-Qv8Rt2Ks6LmQv8Rt2Ks6Lm",
    "xoxa-2-Qv8Rt2Ks6LmQv8Rt2Ks6Lm",
])
def test_trainenv_values_shaped_like_tokens_are_refused(value):
    message = program_refusal({"trainEnv": [f"REMARK={value}"]})
    assert message.startswith("config key 'trainEnv': ") and "Qv8Rt2Ks6Lm" not in message, message


@pytest.mark.parametrize("net", ["ib", "Socket", "nccl-net-custom"])
def test_nccl_net_other_than_aws_ofi_nccl_with_efa_expected_is_refused(net):
    message = program_refusal({**JOB, "trainEnv": [f"NCCL_NET={net}"]})  # the dev stack expects efa across 2 nodes
    assert message.startswith("config keys 'trainEnv', 'trainExpectTransport': efa") \
        and "AWS Libfabric" in message, message
    assert "custom" not in message, message  # trainEnv's values are never quoted


def test_nccl_net_naming_aws_ofi_nccl_passes():
    run = run_program("dev", {**JOB, "trainEnv": ["NCCL_NET=AWS Libfabric"]})
    assert run.error is None, run.error


def test_a_secret_principal_is_refused_before_its_partition_is_read_and_unquoted():
    """clusterViewers names access entries (infra/config/secret_placement.py): a secret one is refused as such,
    before the partition rule reads it, and its value is never quoted."""
    from tests.support.pulumi_mocks import Secret

    message = program_refusal({"clusterViewers": Secret(["arn:aws-us-gov:iam::210987654321:role/audit-Hx4Tq9"])})
    assert "config key 'clusterViewers': cannot be a secret" in message and "Hx4Tq9" not in message, message


def test_a_principal_arn_with_no_name_after_its_path_is_refused():
    """IAM's identifiers: a path then a name; `role/team/` has no name, and EKS refuses its access entry at `up`."""
    message = program_refusal({"clusterAdmins": ["arn:aws:iam::123456789012:role/platform/"]})
    assert message.startswith("config key 'clusterAdmins'"), message


@pytest.mark.parametrize("env", [["NCCL_P2P_LEVEL=LOC", "NCCL_SHM_DISABLE=1"],
                                 ["NCCL_SHM_DISABLE=0x1", "NCCL_P2P_DISABLE=1"]])
def test_intra_node_expected_with_both_transports_inside_a_node_off_is_refused(env):
    # infra/preview/job_plan.py check_transport_expectation over fabric_env.intra_node_transports_off: the ranks of
    # one node then talk through the network plugin, and every rank's verdict differs from intra-node.
    message = program_refusal({**JOB, **ONE_NODE, "trainNumWorkers": 4, "trainEnv": env})
    assert message.startswith("config keys 'trainEnv', 'trainExpectTransport': intra-node"), message
    assert "allowed: trainEnv without one of them" in message, message


def test_intra_node_expected_with_shared_memory_left_on_previews():
    run_program("dev", {**JOB, **ONE_NODE, "trainNumWorkers": 4, "trainEnv": ["NCCL_P2P_DISABLE=1"]})


@pytest.mark.parametrize("debug_file, words", [("/tmp/nccl.log", "holds no %p"), ("/tmp/nccl-%h-%%p.log", "holds no %p"),
                                               ("", "is empty")])
def test_an_nccl_debug_file_shared_by_a_node_s_ranks_is_refused_while_a_transport_is_expected(debug_file, words):
    # infra/preview/job_plan.py check_transport_expectation: NCCL opens it "w" in every process, so the ranks of a
    # node overwrite one file and no verdict is a rank's own.
    message = program_refusal({**JOB, "trainEnv": [f"NCCL_DEBUG_FILE={debug_file}"]})
    assert message.startswith("config keys 'trainEnv', 'trainExpectTransport': efa, but trainEnv's NCCL_DEBUG_FILE "
                              f"{words}"), message


@pytest.mark.parametrize("overrides", [{"trainEnv": ["NCCL_DEBUG_FILE=/tmp/logs/nccl.%h.%p"]},
                                       {"trainEnv": ["NCCL_DEBUG_FILE=/tmp/nccl.log"], "trainExpectTransport": "any"}])
def test_an_nccl_debug_file_per_process_or_unchecked_previews(overrides):
    run_program("dev", {**JOB, **overrides})
