"""Issue 31, item 3: the doomed and hostile inputs found after issue 22's review, each refused at preview naming the key
and what it allows, in one line, before any resource and without quoting a secret.

Most cases go straight to the validation the program runs first (config.parse) or the preview's own checks; one case
per kind runs the whole program under mocks (tests/support/pulumi_mocks.py) to show the refusal comes with nothing registered.
"""
from __future__ import annotations

import logging
import time

import pytest

from infra import config
from infra.config import env_names
from infra.kubernetes.raycluster import unpinned_image_warning
from infra.preview import endpoint_access, object_names
from tests.program.test_refusals_at_preview import DEV, TOKEN, load_refusal, program_refusal, refusal
from tests.support.pulumi_mocks import Secret, run_program


def assert_names(message: str, words: list[str]) -> None:
    missing = [word for word in words if word not in message]
    assert not missing, f"the refusal should say {missing}: {message}"


# ---- reserved environment names, and how many ------------------------------------------------------------------

@pytest.mark.parametrize("name, says", [
    ("AWS_ACCESS_KEY_ID", "EKS Pod Identity"), ("AWS_SECRET_ACCESS_KEY", "EKS Pod Identity"),
    ("AWS_SESSION_TOKEN", "EKS Pod Identity"), ("AWS_PROFILE", "EKS Pod Identity"),
    ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "EKS Pod Identity"),
    ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "EKS Pod Identity"), ("AWS_ENDPOINT_URL_S3", "EKS Pod Identity"),
    ("LD_PRELOAD", "trainPip"), ("LD_LIBRARY_PATH", "trainPip"), ("PYTHONPATH", "trainPip"),
    ("PYTHONHOME", "trainPip"),
    ("NCCL_SOCKET_IFNAME", "ncclSocketIfname"), ("NCCL_DEBUG", "ncclDebug"), ("FI_PROVIDER", "fiProvider"),
    ("NCCL_NET_PLUGIN", "ncclNetPlugin"),
])
@pytest.mark.parametrize("key", ["trainEnv", "trainSecretEnv"])
def test_a_name_that_takes_over_the_job_is_refused_naming_what_sets_it(key, name, says):
    message = refusal({key: [f"{name}={TOKEN}"]})
    assert_names(message, [f"config key {key!r}", name, says])
    assert TOKEN not in message, message


def test_the_jobs_own_names_stay_allowed():
    # HF_HUB_OFFLINE with a model in S3: with a Hub model it would cut the job off its source (test_doomed_configs_refused).
    parsed = config.parse(DEV | {"trainEnv": ["NCCL_NET=Socket", "NCCL_DEBUG_FILE=/tmp/nccl.log", "AWS_REGION=x",
                                              "HF_HUB_OFFLINE=1"], "trainSecretEnv": ["HF_TOKEN=x", "WANDB_API_KEY=y"],
                                 "trainModelId": "s3://company-data/models/m/"})
    assert set(parsed.train.env) == {"NCCL_NET", "NCCL_DEBUG_FILE", "AWS_REGION", "HF_HUB_OFFLINE"}
    assert set(parsed.train.secret_env.names) == {"HF_TOKEN", "WANDB_API_KEY"}


def test_ten_thousand_keys_are_refused_in_well_under_a_second():
    started = time.perf_counter()
    message = refusal({"trainEnv": [f"K{i}=v" for i in range(10_000)]})
    assert time.perf_counter() - started < 1, "a bound is checked before the entries are"
    assert_names(message, ["'trainEnv'", "10000 entries", f"at most {env_names.MAX_ENV_ENTRIES}"])
    assert "K9999" not in message


def test_a_huge_secret_value_is_refused_without_it():
    message = refusal({"trainSecretEnv": ["HF_TOKEN=" + "x" * (env_names.MAX_ENV_VALUE_CHARS + 1)]})
    assert_names(message, ["'trainSecretEnv'", "HF_TOKEN", str(env_names.MAX_ENV_VALUE_CHARS)])
    assert "xxxx" not in message


def test_a_secret_credential_is_refused_at_preview_with_nothing_registered_and_no_value():
    message = program_refusal({"trainSecretEnv": Secret([f"AWS_SECRET_ACCESS_KEY={TOKEN}"])})
    assert_names(message, ["trainSecretEnv", "AWS_SECRET_ACCESS_KEY", "EKS Pod Identity"])
    assert TOKEN not in message


def test_load_names_the_reserved_secret_without_its_value():
    message = load_refusal({"trainSecretEnv": Secret([f"LD_PRELOAD=/tmp/{TOKEN}.so"])})
    assert "LD_PRELOAD" in message and TOKEN not in message, message


# ---- S3 paths: decoded, and bucket names S3 allows -------------------------------------------------------------

@pytest.mark.parametrize("key, value, words", [
    ("trainStoragePath", "s3://company-data/runs/%2e%2e/other", ["'..'"]),
    ("trainStoragePath", "s3://company-data/runs/%2E%2E/other", ["'..'"]),
    ("trainStoragePath", "s3://company-data/runs/a%20b", ["percent-escape"]),
    ("trainDataset", "s3://company-data/a%2F..%2Fb/corpus.jsonl", ["'..'"]),
    ("trainModelId", "s3://company-data/models/%2e%2e/other-team", ["'..'"]),
    ("trainStoragePath", "file:///mnt/%2e%2e/etc", ["'..'"]),
    ("trainStoragePath", "s3://xn--bcher-kva/runs", ["'xn--'", "reserved"]),
    ("trainStoragePath", "s3://my-ap-abcdef-s3alias/runs", ["'-s3alias'"]),
    ("trainDataset", "s3://my-olap--ol-s3/corpus.jsonl", ["'--ol-s3'"]),
    ("trainModelId", "s3://fast--usw2-az1--x-s3/models/m", ["'--x-s3'"]),
    ("trainStoragePath", "s3://sthree-data/runs", ["'sthree-'"]),
    ("trainStoragePath", "s3://global.mrap/runs", ["'.mrap'"]),
    ("trainStoragePath", "s3://192.168.5.4/runs", ["IP address"]),
])
def test_s3_paths_s3_or_iam_would_read_otherwise_are_refused(key, value, words):
    message = refusal({key: value})
    assert_names(message, [f"config key {key!r}", *words])


def test_a_percent_encoded_parent_is_refused_at_preview_with_nothing_registered():
    assert "'..'" in program_refusal({"trainStoragePath": "s3://company-data/runs/%2e%2e/other"})


# ---- names and namespaces ---------------------------------------------------------------------------------------

def test_a_ray_cluster_name_too_long_for_the_idle_stops_cronjob_is_refused_naming_the_longest():
    name = "r" * 43  # a valid RayCluster name (53 at most); `<name>-idle-stop` is 53, the CronJob limit 52
    message = program_refusal({"rayClusterName": name, "gpuIdleStopMinutes": 60})
    assert_names(message, ["rayClusterName", "CronJob", "52", "at most 42 characters"])
    # Without the idle stop there is no CronJob, and 43 characters are fine.
    object_names.check_names(config.parse(DEV | {"rayClusterName": name, "gpuIdleStopMinutes": 0}))


@pytest.mark.parametrize("namespace, monitoring", [("monitoring", "prometheus"), ("amazon-cloudwatch", "cloudwatch"),
                                                   ("monitoring", "none")])
def test_the_ray_namespace_cannot_be_one_monitoring_owns(namespace, monitoring):
    message = program_refusal({"rayNamespace": namespace, "monitoring": monitoring})
    assert_names(message, ["rayNamespace", repr(namespace), "such as ray"])


# ---- the API endpoint: EKS's CIDR limit, and the warning by coverage --------------------------------------------

def test_more_public_cidrs_than_eks_takes_are_refused():
    cidrs = [f"198.51.{i}.0/24" for i in range(41)]
    assert_names(refusal({"apiPublicAccessCidrs": cidrs}), ["'apiPublicAccessCidrs'", "41", "at most 40"])


def test_forty_cidrs_plus_the_deployers_address_are_refused_at_preview():
    with pytest.raises(ValueError, match=r"'apiPublicAccessCidrs'.*are 41; EKS accepts at most 40"):
        endpoint_access.check_public_access_count(tuple(f"198.51.{i}.0/24" for i in range(40)) + ("203.0.113.7/32",))


@pytest.mark.parametrize("cidrs, warned", [
    (("0.0.0.0/1", "128.0.0.0/1"), "every IPv4 address"), (("0.0.0.0/0",), "every IPv4 address"),
    (("11.0.0.0/8",), "of IPv4"), (("203.0.113.0/24", "198.51.100.7/32"), None),
])
def test_the_internet_is_warned_about_by_the_addresses_covered(cidrs, warned):
    warning = endpoint_access.public_access_warning(cidrs)
    assert (warning is None) if warned is None else (warned in warning), (cidrs, warning)


def test_the_internet_in_two_halves_warns_at_preview(caplog):
    with caplog.at_level(logging.WARNING):
        run_program("dev", {"apiPublicAccessCidrs": ["0.0.0.0/1", "128.0.0.0/1"]})
    assert any("every IPv4 address" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


# ---- NCCL's interface on the VPC CNI, and a foreign registry's release-looking tag ----------------------------

@pytest.mark.parametrize("ifname", ["ens5", "lo", "^eth", "=eth", "eth1", "docker0"])
def test_an_interface_a_pod_does_not_have_is_refused(ifname):
    assert_names(refusal({"ncclSocketIfname": ifname}), ["'ncclSocketIfname'", "eth0", "lo", "allowed"])


@pytest.mark.parametrize("image", ["registry.example.com:5000/team/ray:v2.60.0", "ghcr.io/someone/ray:2.60.0-gpu",
                                   "rayproject/ray:2.60.0"])
def test_a_release_looking_tag_the_stack_does_not_know_is_warned_about(image):
    warning = unpinned_image_warning(image)
    assert warning and "digest" in warning and "crane digest" in warning, warning
    assert unpinned_image_warning(image + "@sha256:" + "ab" * 32) is None
