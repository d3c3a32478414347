"""Bad configs fail at preview with a message naming the key, before any resource is registered.

The whole program runs under mocks for each case (tests/support/pulumi_mocks.py); the pure helpers get direct cases.
"""
from __future__ import annotations

import ipaddress

import pytest

from infra import config
from infra.aws.gpu_nodes import efa_network_interfaces, use_placement_group
from infra.aws.network import check_gpu_azs, choose_vpc_azs, subnet_plan
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import run_program_expecting_error, stack_settings

# (stack, overrides, words the error must contain)
BAD_CONFIGS = {
    "unknown instance type": ("dev", {"gpuInstanceType": "g9.48xlarge"}, ["gpuInstanceType", "g9.48xlarge"]),
    "GPU type without EFA": ("dev", {"gpuInstanceType": "g6.xlarge"}, ["gpuInstanceType", "g6.xlarge", "EFA"]),
    "type without GPUs": ("dev", {"gpuInstanceType": "m7i.xlarge"}, ["gpuInstanceType", "no GPUs"]),
    "GPU AZ of another region": ("dev", {"gpuAvailabilityZone": "us-east-1a"}, ["gpuAvailabilityZone", "us-east-1a"]),
    "GPU AZ outside the VPC's AZs": (
        "dev", {"vpcAvailabilityZones": ["us-west-2a", "us-west-2b"], "gpuAvailabilityZone": "us-west-2c"},
        ["gpuAvailabilityZone", "us-west-2c"]),
    "no GPU AZ": ("dev", {"gpuAvailabilityZone": ""}, ["gpuAvailabilityZone", "required"]),
    "candidate AZ outside the VPC": (
        "p5", {"vpcAvailabilityZones": ["us-east-2a", "us-east-2b"], "capacityCandidateAzs": ["us-east-2c"]},
        ["capacityCandidateAzs", "us-east-2c"]),
    "VPC AZ not in the region": ("dev", {"vpcAvailabilityZones": ["us-west-2a", "us-west-2x"]},
                                 ["vpcAvailabilityZones", "us-west-2x"]),
    "one VPC AZ": ("dev", {"vpcAvailabilityZones": ["us-west-2a"]}, ["vpcAvailabilityZones", "two"]),
    "one VPC AZ EKS can use": ("g6e", {"vpcAvailabilityZones": ["us-east-1a", "us-east-1e"]},
                               ["vpcAvailabilityZones", "control plane", "use1-az3"]),
    "cluster name too long for IAM": ("dev", {"clusterName": "c" * 40}, ["clusterName", "1-39"]),
    "zero GPU nodes": ("dev", {"gpuNodeCount": 0}, ["gpuNodeCount", "at least 1"]),
    "negative GPU nodes": ("dev", {"gpuNodeCount": -2}, ["gpuNodeCount", "at least 1"]),
    "GPU node count not a number": ("dev", {"gpuNodeCount": "two"}, ["gpuNodeCount", "integer"]),
    "reservation id with forced placement group": (
        "p5", {"capacityReserve": False, "capacityReservationId": "cr-0123456789abcdef0", "gpuPlacement": "cluster"},
        ["gpuPlacement", "capacityReservationId", "placement group"]),
    "reserve and reservation id": ("p5", {"capacityReservationId": "cr-0123456789abcdef0"},
                                   ["capacityReserve", "capacityReservationId"]),
    "unknown placement": ("dev", {"gpuPlacement": "spread"}, ["gpuPlacement", "spread", "auto", "cluster", "none"]),
    "malformed reservation id": ("dev", {"capacityReservationId": "r-123"}, ["capacityReservationId", "r-123"]),
    "unknown system type": ("dev", {"systemInstanceType": "m99.huge"}, ["systemInstanceType", "m99.huge"]),
    "zero system nodes": ("dev", {"systemNodeCount": 0}, ["systemNodeCount"]),
    "small root volume": ("dev", {"gpuRootVolumeGiB": 20}, ["gpuRootVolumeGiB"]),
    "bad kubernetes version": ("dev", {"kubernetesVersion": "latest"}, ["kubernetesVersion", "latest"]),
    "bad VPC CIDR": ("dev", {"vpcCidr": "10.0.0.0/24"}, ["vpcCidr", "/16 to /20"]),
    "bad transport expectation": ("dev", {"trainExpectTransport": "tcp"}, ["trainExpectTransport", "efa", "socket"]),
    "bad env entry": ("dev", {"trainEnv": ["NCCL_NET"]}, ["trainEnv", "KEY=VALUE"]),
    "bad learning rate": ("dev", {"trainLearningRate": "fast"}, ["trainLearningRate", "fast"]),
    "learning rate of 1 or more (the stack's typo guard)": ("dev", {"trainLearningRate": "1e5"},
                                                          ["trainLearningRate", "below 1", "100000.0"]),
    "bad run id": ("dev", {"trainEnabled": True, "trainRunId": "a/b"}, ["trainRunId"]),
    "reserved Ray namespace": ("dev", {"rayNamespace": "kube-system"}, ["rayNamespace", "kube-system"]),
    "RayCluster name not a DNS-1035 label": ("dev", {"rayClusterName": "7-ray"}, ["rayClusterName", "DNS-1035"]),
    "Ray namespace not a DNS-1123 label": ("dev", {"rayNamespace": "Ray_NS"}, ["rayNamespace", "DNS-1123"]),
    "image without tag or digest": ("dev", {"dlcImage": "public.ecr.aws/deep-learning-containers/ray"}, ["dlcImage"]),
    "unknown sharding": ("dev", {"trainSharding": "zero3"}, ["trainSharding", "zero3", "auto", "full", "hybrid"]),
    "unknown reduce dtype": ("dev", {"trainReduceDtype": "fp16"}, ["trainReduceDtype", "fp16", "bf16"]),
    "accumulation not dividing the batch": ("dev", {"trainGradAccumSteps": 3}, ["trainGradAccumSteps", "divide"]),
    "bus bandwidth not a number": ("dev", {"trainMinBusBandwidthGBps": "fast"},
                                   ["trainMinBusBandwidthGBps", "fast"]),
    "negative bus bandwidth": ("dev", {"trainMinBusBandwidthGBps": "-1"}, ["trainMinBusBandwidthGBps", "GB/s"]),
    "assumed role without a role ARN": ("p5", {"aws:assumeRoles": [{"sessionName": "ci"}]},
                                        ["aws:assumeRoles", "roleArn"]),
    "a chain of assumed roles": ("p5", {"aws:assumeRoles": [{"roleArn": "arn:aws:iam::123456789012:role/a"},
                                                            {"roleArn": "arn:aws:iam::123456789012:role/b"}]},
                                 ["aws:assumeRoles", "one role"]),
    "assumed role with an external id": (
        "p5", {"aws:assumeRoles": [{"roleArn": "arn:aws:iam::123456789012:role/r", "externalId": "x"}]},
        ["aws:assumeRoles", "externalId"]),
    "pulumi-aws 6's assumeRole": ("p5", {"aws:assumeRole": {"roleArn": "arn:aws:iam::123456789012:role/r"}},
                                  ["aws:assumeRole", "aws:assumeRoles"]),
    "reservation hours without a reservation": ("dev", {"capacityReservationHours": 24},
                                                ["capacityReservationHours", "capacityReserve"]),
    "negative reservation hours": ("p5", {"capacityReservationHours": -1}, ["capacityReservationHours"]),
    "unknown train wait": ("dev", {"trainWait": "forever"}, ["trainWait", "finish", "transport"]),
    "unknown learning-rate schedule": ("dev", {"trainLrSchedule": "step"},
                                       ["trainLrSchedule", "constant, linear, cosine"]),
    "warmup longer than the run": ("dev", {"trainWarmupSteps": 60}, ["trainWarmupSteps", "at most trainSteps 50"]),
    "negative warmup": ("dev", {"trainWarmupSteps": -1}, ["trainWarmupSteps", "at least 0"]),
    "eval fraction not a number": ("dev", {"trainDataset": "wikitext", "trainEvalFraction": "a tenth"},
                                   ["trainEvalFraction", "a tenth"]),
    "eval fraction of everything": ("dev", {"trainDataset": "wikitext", "trainEvalFraction": "1"},
                                    ["trainEvalFraction", "below 1"]),
    "two evaluation sets": ("dev", {"trainDataset": "wikitext", "trainEvalFraction": "0.1",
                                    "trainEvalSplit": "validation"}, ["trainEvalFraction", "trainEvalSplit", "one"]),
    "evaluation without a dataset": ("dev", {"trainEvalEvery": 10}, ["trainDataset", "random tokens"]),
    "a split of a file": ("dev", {"trainDataset": "s3://data/corpus.jsonl", "trainEvalSplit": "validation"},
                          ["trainEvalSplit", "trainEvalFraction"]),
    "a wildcard in an s3 dataset": ("dev", {"trainDataset": "s3://my-bucket/*.jsonl"}, ["trainDataset", "'*'"]),
    "an s3 model at a bucket's root": ("dev", {"trainModelId": "s3://my-bucket/"}, ["trainModelId", "bucket's root"]),
    "unknown export": ("dev", {"trainExport": "gguf"}, ["trainExport", "final, checkpoints, none"]),
    "export at checkpoints without any": ("dev", {"trainExport": "checkpoints"},
                                          ["trainExport", "trainCheckpointEvery"]),
    "an unknown tracker": ("dev", {"trainReportTo": "comet"}, ["trainReportTo", "tensorboard, mlflow, wandb, or none"]),
    "wandb without its key": ("dev", {"trainReportTo": "tensorboard,wandb"},
                              ["trainReportTo", "WANDB_API_KEY", "trainSecretEnv"]),
    "mlflow without a server": ("dev", {"trainReportTo": "mlflow"}, ["trainReportTo", "trainMlflowTrackingUri"]),
    "a tracking uri with a password": ("dev", {"trainReportTo": "mlflow",
                                               "trainMlflowTrackingUri": "https://me:pw@mlflow.example.com"},
                                       ["trainMlflowTrackingUri", "a URI with credentials"]),
    "a tracking server the pods cannot reach": ("dev", {"trainReportTo": "mlflow",
                                                        "trainMlflowTrackingUri": "http://10.0.3.4:5000"},
                                                ["trainMlflowTrackingUri", "443", "NetworkPolicy"]),
    "a token in plain trainEnv": ("dev", {"trainEnv": ["WANDB_API_KEY=abc"]}, ["trainEnv", "trainSecretEnv"]),
    "a push without a token": ("dev", {"trainPushToHub": "me/model", "trainStoragePath": "s3://my-bucket/runs"},
                               ["trainPushToHub", "HF_TOKEN", "trainSecretEnv"]),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_fails_before_any_resource(case):
    stack, overrides, words = BAD_CONFIGS[case]
    failed = run_program_expecting_error(stack, overrides)
    assert isinstance(failed.error, ValueError), f"{case}: expected a ValueError, got {failed.error!r}"
    missing = [w for w in words if w not in str(failed.error)]
    assert not missing, f"{case}: the error should mention {missing}; it says: {failed.error}"
    assert failed.resources == [], \
        f"{case}: no resource may be registered; got {[r.type + ' ' + r.name for r in failed.resources]}"


# ---- pure helpers ---------------------------------------------------------------------------------------------

def defaults() -> dict:
    return stack_settings(None)


def test_parse_maps_every_key_onto_the_dataclass():
    raw = defaults() | {"gpuAvailabilityZone": "us-west-2b", "trainEnv": ["NCCL_NET=Socket", "A=b=c"],
                        "trainLearningRate": "3e-4", "trainPip": ["datasets"], "ncclDebug": "TRACE"}
    cfg = config.parse(raw)
    assert cfg.gpu_availability_zone == "us-west-2b", "gpuAvailabilityZone -> gpu_availability_zone"
    assert cfg.train.env == {"NCCL_NET": "Socket", "A": "b=c"}, "trainEnv KEY=VALUE entries split at the first '='"
    assert cfg.train.learning_rate == pytest.approx(3e-4), "trainLearningRate is parsed as a float"
    assert cfg.train.pip == ("datasets",), "trainPip -> a tuple"
    assert cfg.transport_env["NCCL_DEBUG"] == "TRACE", "ncclDebug -> transport_env NCCL_DEBUG"
    assert cfg.gpu_node_count == raw["gpuNodeCount"] == 2, "gpuNodeCount default is 2"
    assert (cfg.train.sharding, cfg.train.reduce_dtype, cfg.train.grad_accum_steps) == ("auto", "auto", 1), cfg.train
    bus = config.parse(raw | {"trainMinBusBandwidthGBps": "4.5"}).train.min_bus_gbytes_per_s
    assert bus == 4.5, "trainMinBusBandwidthGBps is parsed as a float"
    train = config.parse(raw | {"trainDataset": "wikitext", "trainEvalFraction": "0.05",
                                "trainStoragePath": "s3://my-bucket/ray-train"}).train
    assert (train.dataset, train.eval_fraction) == ("wikitext", 0.05), "trainEvalFraction is parsed as a float"
    assert train.storage_path == "s3://my-bucket/ray-train", "trainStoragePath -> storage_path"
    assert (train.lr_schedule, train.warmup_steps, train.export) == ("cosine", 0, "final"), train


def test_efa_interfaces_follow_the_network_cards():
    for facts in INSTANCE_FACTS.values():
        if not facts.efa_supported:
            continue
        interfaces = efa_network_interfaces(facts, ["sg-1"])
        assert len(interfaces) == facts.network_cards, f"{facts.instance_type}: one EFA interface per network card"
        assert [i["device_index"] for i in interfaces] == [0] + [1] * (facts.network_cards - 1), \
            f"{facts.instance_type}: device index 0 on card 0, 1 on every other card"


@pytest.mark.parametrize("placement, reservation, expected", [
    ("auto", False, True), ("auto", True, False), ("cluster", False, True), ("cluster", True, False),
    ("none", False, False), ("none", True, False),
])
def test_placement_group_rule(placement, reservation, expected):
    assert use_placement_group(placement, existing_reservation=reservation) is expected, \
        f"gpuPlacement={placement} with an existing reservation={reservation} should give own group={expected}"


def test_subnet_plan_fits_seven_azs_without_overlap():
    azs = tuple(f"us-east-1{c}" for c in "abcdefg")
    plan = subnet_plan("10.0.0.0/16", azs, {az: f"id-{az}" for az in azs})
    blocks = [ipaddress.ip_network(c) for p in plan for c in (p.private_cidr, p.public_cidr)]
    assert all(b.subnet_of(ipaddress.ip_network("10.0.0.0/16")) for b in blocks), "subnets inside the VPC"
    assert not any(a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1:]), "subnets must not overlap"
    assert all(ipaddress.ip_network(p.private_cidr).prefixlen == 19 for p in plan), "private subnets are /19 of a /16"


def test_az_checks_name_the_az():
    region = {"us-west-2a": "usw2-az1", "us-west-2b": "usw2-az2", "us-west-2c": "usw2-az3"}
    assert choose_vpc_azs((), region) == ("us-west-2a", "us-west-2b", "us-west-2c"), "empty means every AZ"
    with pytest.raises(ValueError, match="gpuAvailabilityZone.*us-west-2c"):
        check_gpu_azs(("us-west-2a", "us-west-2b"), gpu_az="us-west-2c", candidate_azs=())


def test_missing_region_fails_before_any_resource(monkeypatch):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    failed = run_program_expecting_error(None, {"gpuAvailabilityZone": "us-west-2a"})
    assert isinstance(failed.error, ValueError) and "aws:region" in str(failed.error), \
        f"expected a ValueError naming aws:region; got {failed.error!r}"
    assert failed.resources == [], "no resource may be registered without a region"


def test_a_misspelt_region_is_named_with_the_nearest_before_any_resource():
    failed = run_program_expecting_error("dev", {"aws:region": "eu-west1"})
    assert "config key 'aws:region'" in str(failed.error) and "did you mean eu-west-1" in str(failed.error), \
        f"expected the region's key and the nearest region; got {failed.error!r}"
    assert failed.resources == [], "no resource may be registered in a region that is none"


def test_reservation_candidates_start_with_the_gpu_az():
    from infra.aws.network import reservation_candidate_azs

    raw = defaults() | {"gpuAvailabilityZone": "us-east-2b", "capacityReserve": True}
    vpc_azs = ("us-east-2a", "us-east-2b", "us-east-2c")
    assert reservation_candidate_azs(config.parse(raw), vpc_azs) == ("us-east-2b", "us-east-2a", "us-east-2c"), \
        "without capacityCandidateAzs, the GPU AZ is tried first, then the VPC's other AZs"
    ranked = config.parse(raw | {"capacityCandidateAzs": ["us-east-2c", "us-east-2a"]})
    assert reservation_candidate_azs(ranked, vpc_azs) == ("us-east-2c", "us-east-2a"), "capacityCandidateAzs as given"
