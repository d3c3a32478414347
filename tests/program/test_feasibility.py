"""Preview refuses every stack that cannot end in a working job, before any resource (infra/preview/feasibility.py), and the
real-deploy fixes show in the rendered resources.

The whole program runs under mocks for each stack (tests/support/pulumi_mocks.py: EC2, Service Quotas and the existing
reservations are faked there); the rules and the reservation look-up also get direct cases.
"""
from __future__ import annotations

import json

import pytest

from infra.kubernetes.raycluster import KNOWN_IMAGES
from infra.preview import access
from tests.support.fake_aws import ACCOUNT_ID, existing
from tests.support.pulumi_mocks import (
    PROJECT,
    SCHEMA,
    STACKS,
    is_secret_value,
    program,
    run_program,
    run_program_expecting_error,
)

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
JOB = "pulumi-python:dynamic/raytrain:TrainingJob"
ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/deployer"
JOB_ON = {"trainEnabled": True}
# A dataset's token shards live under trainStoragePath (infra/config/train_keys.py _check_data_storage): the cases
# below that set one store there too, so that the refusal each shows is its own.
STORED = {"trainStoragePath": "s3://company-data/runs"}


# (stack, overrides, words the error must contain: the key and what is allowed). None of these is in
# test_stack_validation's BAD_CONFIGS: each passed every check before this module existed.
DOOMED = {
    # -- keys Pulumi would ignore
    "typo'd gpuNodeCount": ("dev", {"gpuNodeCout": 4}, ["gpuNodeCout", "did you mean 'gpuNodeCount'"]),
    "typo'd trainSteps": ("dev", {"trainStep": 5}, ["trainStep", "did you mean 'trainSteps'"]),
    "a key no declared key resembles": ("dev", {"nodes": 4}, ["'nodes'", "a key Pulumi.yaml declares", "gpu, "]),
    "pulumi-aws 6's assumeRole": ("dev", {"aws:assumeRole": {"roleArn": ROLE}},
                                  ["aws:assumeRole", "aws:assumeRoles", "one role"]),
    "a chain of roles": ("dev", {"aws:assumeRoles": [{"roleArn": ROLE}, {"roleArn": ROLE + "-2"}]},
                         ["aws:assumeRoles", "401", "one role"]),
    "a role with an external id": ("dev", {"aws:assumeRoles": [{"roleArn": ROLE, "externalId": "x"}]},
                                   ["aws:assumeRoles", "externalId", "without externalId"]),
    # -- the job cannot run on this cluster
    "tiny at the default 2048 tokens": ("dev", {**JOB_ON, "trainModelConfig": "tiny"},
                                        ["trainSeqLen", "tiny's 512 positions", "1 to 512"]),
    "more tokens than Qwen's positions": ("dev", {**JOB_ON, "trainSeqLen": 262144},
                                          ["trainSeqLen", "131072", "1 to 131072"]),
    "more workers than GPUs": ("dev", {**JOB_ON, "trainNumWorkers": 9}, ["trainNumWorkers", "0 (one per GPU) to 8"]),
    "64k-token sequences on L4s": ("dev", {**JOB_ON, "trainSeqLen": 65536},
                                   ["trainSeqLen", "Qwen/Qwen2.5-1.5B", "a per-GPU batch (trainBatchSize) of 1 at",
                                    "gpuInstanceType g6e.12xlarge"]),
    "a 70B model on L4s": ("dev", {**JOB_ON, "trainModelId": "meta-llama/Llama-3.1-70B"},
                           ["trainModelId", "meta-llama/Llama-3.1-70B", "70.55 B parameters", "GiB on each of the 8",
                            "gpuInstanceType p5.48xlarge (2 nodes"]),
    "a 70B model on A100s": ("p4d", {**JOB_ON, "trainModelId": "meta-llama/Llama-3.3-70B-Instruct"},
                             ["trainModelId", "79.1 GiB on each of the 16 GPUs of p4d.24xlarge",
                              "gpuNodeCount 6 or more of p4d.24xlarge", "gpuInstanceType p5.48xlarge"]),
    "a 32B model on L40Ss": ("g6e", {**JOB_ON, "trainModelId": "Qwen/Qwen2.5-32B"},
                             ["trainModelId", "Qwen/Qwen2.5-32B", "gpuNodeCount 4 or more of g6e.12xlarge"]),
    "a model directory on this machine": ("dev", {**JOB_ON, "trainModelId": "./my-model"},
                                          ["trainModelId", "./my-model is a path on this machine", "s3://bucket/prefix/"]),
    "a model's web address": ("dev", {**JOB_ON, "trainModelId": "https://huggingface.co/Qwen/Qwen2.5-7B"},
                              ["trainModelId", "give the Hub id it names: Qwen/Qwen2.5-7B"]),
    "local checkpoints on two nodes": ("dev", {**JOB_ON, "trainStoragePath": "/mnt/checkpoints"},
                                       ["trainStoragePath", "s3://bucket/prefix"]),
    "a dataset on this machine, two nodes": ("dev", {**JOB_ON, **STORED, "trainDataset": "/home/me/corpus.jsonl"},
                                             ["trainDataset", "2 GPU nodes cannot read", "s3://bucket/key.jsonl"]),
    "a dataset on this machine, one node": ("dev", {**JOB_ON, **STORED, "trainDataset": "corpus.txt", "gpuNodeCount": 1,
                                                    "trainExpectTransport": "intra-node"},
                                            ["trainDataset", "1 GPU node cannot read", "Hugging Face dataset id"]),
    "a tokenizer on this machine": ("dev", {**JOB_ON, **STORED, "trainDataset": "wikitext",
                                                             "trainTokenizer": "./tokenizer"},
                                    ["trainTokenizer", "cannot read", "Hugging Face tokenizer or model id"]),
    "an unknown data format": ("dev", {**JOB_ON, "trainDataFormat": "sharegpt"},
                               ["trainDataFormat", "text, chat, prompt-completion"]),
    "chat without a messages field": ("dev", {**JOB_ON, **STORED, "trainDataFormat": "chat",
                                              "trainDataset": "org/chats", "trainMessagesField": ""}, ["trainMessagesField", "must name"]),
    "chat with a tokenizer without a template": ("dev", {**JOB_ON, **STORED, "trainDataFormat": "chat",
                                                         "trainDataset": "org/c", "trainTokenizer": "openai-community/gpt2"},
                                                 ["trainTokenizer", "no chat template", "trainChatTemplate"]),
    "efa with one GPU node": ("dev", {**JOB_ON, "gpuNodeCount": 1},
                              ["trainExpectTransport", "one GPU node", "intra-node or any"]),
    "efa with workers that fit one node": ("dev", {**JOB_ON, "trainNumWorkers": 4},
                                           ["trainExpectTransport", "fit on one node", "intra-node or any"]),
    "efa with NCCL_NET=Socket": ("dev", {**JOB_ON, "trainEnv": ["NCCL_NET=Socket"]},
                                 ["trainExpectTransport", "NCCL_NET=Socket", "socket or any"]),
    "efa over libfabric's tcp provider": ("dev", {**JOB_ON, "fiProvider": "tcp"},
                                          ["trainExpectTransport", "FI_PROVIDER=tcp", "socket or any"]),
    "socket without NCCL_NET=Socket": ("dev", {**JOB_ON, "trainExpectTransport": "socket"},
                                       ["trainExpectTransport", "EFA", "trainEnv NCCL_NET=Socket"]),
    "intra-node across two nodes": ("dev", {**JOB_ON, "trainExpectTransport": "intra-node"},
                                    ["trainExpectTransport", "trainNumWorkers up to 4"]),
    "fp8 on A100s": ("p4d", {**JOB_ON, "trainFp8": True}, ["trainFp8", "A100", "no fp8 tensor cores",
                                                           "L4, L40S, H100, H200"]),
    "pip replacing torch": ("dev", {**JOB_ON, "trainPip": ["torch==2.5.1"]},
                            ["trainPip", "torch==2.5.1", "other than"]),
    "pip replacing Ray": ("dev", {**JOB_ON, "trainPip": ["einops", "Ray[train]>=2.40"]}, ["trainPip", "ray"]),
    "pip replacing NCCL": ("dev", {**JOB_ON, "trainPip": ["nvidia-nccl-cu12==2.21.5"]}, ["trainPip", "nvidia-*"]),
    # -- the cluster cannot come up
    "Kubernetes 1.20": ("dev", {"kubernetesVersion": "1.20"}, ["kubernetesVersion", "1.32, 1.33, 1.34, 1.35"]),
    "Kubernetes 1.99": ("dev", {"kubernetesVersion": "1.99"}, ["kubernetesVersion", "1.32, 1.33, 1.34, 1.35"]),
    "1000 GPU nodes": ("dev", {"gpuNodeCount": 1000}, ["gpuNodeCount", "1 to 450"]),
    "500 system nodes": ("dev", {"systemNodeCount": 500}, ["systemNodeCount", "1 to 450"]),
    "G vCPUs beyond the quota": ("dev", {"gpuNodeCount": 9}, ["gpuNodeCount", "L-DB2E81BA", "at most 8 nodes"]),
    "P vCPUs beyond the quota": ("p5", {"gpuNodeCount": 3}, ["gpuNodeCount", "L-417A185B", "at most 2 nodes"]),
    "a system type with GPUs": ("dev", {"systemInstanceType": "g6.12xlarge"}, ["systemInstanceType", "4 GPUs",
                                                                              "m7i.xlarge"]),
    "a system type too small": ("dev", {"systemInstanceType": "m7i.large"}, ["systemInstanceType", "Ray head",
                                                                           "4 vCPUs and 16 GiB"]),
    "a Graviton system type": ("dev", {"systemInstanceType": "m7g.xlarge"}, ["systemInstanceType", "arm64",
                                                                            "x86_64"]),
    # -- the image
    "rayVersion contradicting the image": ("dev", {"rayVersion": "2.40.0"}, ["rayVersion", "empty or 2.58.0"]),
    "imageCudaVersion contradicting the image": ("dev", {"imageCudaVersion": "12.8"},
                                                 ["imageCudaVersion", "empty or 13.0"]),
    "an unknown image without its versions": ("dev", {"dlcImage": "registry.example.com/team/ray:2.58.0"},
                                              ["rayVersion", "imageCudaVersion", "e.g. 2.58.0 and 13.0"]),
    "Ray too old for token auth": ("dev", {"dlcImage": "registry.example.com/team/ray:2.40.0", "rayVersion": "2.40.0",
                                           "imageCudaVersion": "12.4"}, ["rayVersion", "2.52.0"]),
    "a rayVersion that is not a version": ("dev", {"rayVersion": "latest"}, ["rayVersion", "like 2.58.0"]),
    # -- an existing reservation that does not fit
    "a reservation that does not exist": ("p5", existing("cr-0000000000000dead"),
                                          ["capacityReservationId", "does not exist in us-east-2"]),
    "a reservation in another AZ": ("p5", existing("cr-0123456789abcdef0", gpuAvailabilityZone="us-east-2b"),
                                    ["capacityReservationId", "gpuAvailabilityZone", "allowed: us-east-2a"]),
    "a reservation of another type": ("p5", existing("cr-0000000000000a4d0"), ["capacityReservationId",
                                                                             "p4d.24xlarge"]),
    "a Windows reservation": ("p5", existing("cr-00000000000057d00"), ["capacityReservationId", "Linux/UNIX"]),
    "a dedicated reservation": ("p5", existing("cr-0000000000000ded0"), ["capacityReservationId", "dedicated"]),
    "a cancelled reservation": ("p5", existing("cr-00000000000cace10"), ["capacityReservationId", "cancelled",
                                                                        "Allowed: an active reservation"]),
    "a reservation for one node of two": ("p5", existing("cr-00000000000000001"), ["capacityReservationId",
                                                                                  "gpuNodeCount is 2"]),
    "a reservation full of other instances": ("p5", existing("cr-000000000000000f0"),
                                              ["capacityReservationId", "0 of its 2 instances are free"]),
    "a reservation in a placement group, placement none": (
        "p5", existing("cr-00000000000000c91", gpuPlacement="none"),
        ["gpuPlacement", "capacityReservationId", "p5-spine", "auto or cluster"]),
    "a Capacity Block not started yet": ("p5", existing("cr-00000000000000cb2"),
                                         ["capacityReservationId", "Capacity Block that starts"]),
    "a Capacity Block ending before the nodes are up": ("p5", existing("cr-00000000000000cb3"),
                                                        ["capacityReservationId", "30 minutes earlier"]),
}


@pytest.mark.parametrize("case", list(DOOMED))
def test_doomed_config_is_refused_before_any_resource(case):
    stack, overrides, words = DOOMED[case]
    failed = run_program_expecting_error(stack, overrides)
    assert isinstance(failed.error, ValueError), f"{case}: expected a ValueError, got {failed.error!r}"
    message = str(failed.error)
    missing = [w for w in words if w not in message]
    assert not missing, f"{case}: the error should mention {missing}; it says: {message}"
    # The longest, the refusal of an unknown key, lists every declared key.
    assert "\n" not in message and len(message) < 2000, f"{case}: one line, not a traceback's worth: {message}"
    assert failed.resources == [], \
        f"{case}: no resource may be registered; got {[r.type + ' ' + r.name for r in failed.resources]}"


def test_there_are_at_least_25_doomed_configs():
    assert len(DOOMED) >= 25, f"issue 13 asks for 25 refusals beyond BAD_CONFIGS; {len(DOOMED)} here"


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_runs_the_default_job(stack):
    run = run_program(stack, JOB_ON)
    assert run.one(JOB), f"{stack}: the default job must pass every check and be declared"


def test_an_8b_model_on_p5_passes_with_the_plan_it_will_use():
    run = run_program("p5", {**JOB_ON, "trainModelId": "meta-llama/Llama-3.1-8B"})
    plan = run.exports["jobMemoryPlan"]
    assert plan["fits"] and plan["changed"] == [] and plan["shards"] == 16, (
        f"Llama-3.1-8B at 2 x 2048 fits p5's H100s as requested, with full sharding's 16-way shards (auto picks full "
        f"sharding or two-level for full training): {plan}")
    args = run.one(JOB).inputs["train_args"]
    assert args[args.index("--gpu_memory_mib") + 1] == "81920", \
        f"the job plans with the memory the preview planned with (EC2's H100 figure): {args}"


def test_a_batch_that_does_not_fit_is_planned_into_micro_batches_of_the_same_batch():
    run = run_program("dev", {**JOB_ON, "trainBatchSize": 64})
    plan = run.exports["jobMemoryPlan"]
    assert plan["fits"] and plan["batch_size"] == 64, f"the per-GPU batch of 64 is kept: {plan}"
    assert plan["activation_checkpointing"] and plan["grad_accum_steps"] * plan["micro_batch"] == 64, \
        f"checkpointing first, then micro-batches that multiply back to 64: {plan}"
    assert "grad_accum_steps" in plan["changed"] and plan["peak_gib"] <= plan["usable_gib"] - 2, plan


def test_the_readmes_examples_pass():
    # README "A real cluster": the job, a rerun, S3 checkpoints, failure restarts, one after the other.
    readme = {**JOB_ON, "trainRunId": "2", "trainStoragePath": "s3://my-bucket/ray-train", "trainCheckpointEvery": 25,
              "trainMaxFailures": 2}
    assert run_program("dev", readme).one(JOB), "the README's pulumi config examples must make a valid stack"


def test_unreadable_quotas_are_not_checked():
    # pulumi_mocks answers Service Quotas in eu-north-1 with AccessDenied, as an account without the permission.
    run = run_program(None, {"aws:region": "eu-north-1", "gpuAvailabilityZone": "eu-north-1a", "gpuNodeCount": 9})
    assert len(run.of_type(NODE_GROUP)) == 2, "quotas that cannot be read do not refuse the stack"


def test_the_stacks_own_reservation_with_a_forced_placement_group_is_fine():
    run = program("p5", (("gpuPlacement", "cluster"),))
    reservation = next(r for r in run.resources if r.type.endswith(":GpuCapacityReservation"))
    assert reservation.inputs["placement_group_arn"], "gpuPlacement=cluster reserves inside the stack's group"


def _launch_template_of(run, group):
    return next(t for t in run.of_type(LAUNCH_TEMPLATE) if t.resource_id == group.inputs["launchTemplate"]["id"])


@pytest.mark.parametrize("stack", STACKS)
def test_system_nodes_have_a_100_gib_encrypted_gp3_root(stack):
    run = program(stack)
    group = next(g for g in run.of_type(NODE_GROUP) if g.inputs["amiType"] == "AL2023_x86_64_STANDARD")
    assert "diskSize" not in group.inputs, f"{stack}: the disk comes from the launch template (EKS refuses both)"
    (root,) = _launch_template_of(run, group).inputs["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/xvda", f"{stack}: the AL2023 AMI's root device"
    assert (root["ebs"]["volumeSize"], root["ebs"]["volumeType"], root["ebs"]["encrypted"]) == (100, "gp3", "true"), \
        f"{stack}: system root volume must be 100 GiB gp3 encrypted (the Ray head's image lands there): {root}"


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_is_replaced_delete_first(stack):
    group = next(g for g in program(stack).of_type(NODE_GROUP) if g.inputs["amiType"] == "AL2023_x86_64_NVIDIA")
    assert group.delete_before_replace, \
        f"{stack}: a replaced GPU node group must go before its successor (no double GPUs, quota or reservation)"


def test_the_placement_group_keeps_its_urn_from_before_it_moved_out_of_the_node_group():
    run = program("dev")
    group = run.one("aws:ec2/placementGroup:PlacementGroup")
    old_parent = f"urn:pulumi:dev::{PROJECT}::raytrain:infra:GpuNodeGroup::ray-train-gpu"
    assert group.alias_parents == [old_parent], \
        f"live stacks' placement group (and the nodes in it) must not be replaced by the move: {group.alias_parents}"
    assert group.name == "ray-train-gpu-placement", "the alias keeps the name it had under GpuNodeGroup"


def _token_args(kubeconfig: str | dict) -> list[str]:
    config = json.loads(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
    return config["users"][0]["user"]["exec"]["args"]


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize("aws_config", [{"aws:profile": "ops"},
                                        {"aws:assumeRoles": [{"roleArn": ROLE}], "aws:profile": "ops"}])
def test_every_kubeconfig_the_program_uses_carries_the_stacks_profile_and_role(aws_config):
    run = run_program("dev", {**aws_config, "trainEnabled": True, "trainModelConfig": "tiny", "trainSeqLen": 256,
                              "trainExpectTransport": "any"})
    expected = {"--profile": aws_config.get("aws:profile"),
                "--role": aws_config["aws:assumeRoles"][0]["roleArn"] if "aws:assumeRoles" in aws_config else None}
    # pulumi-eks's own output (what the mock gives as pulumi-eks does) lacks the profile: the reason for the fix.
    assert _flag(_token_args(run.one("eks:index:Cluster").outputs["kubeconfigJson"]), "--profile") is None
    users = {"the kubeconfig output": run.exports["kubeconfig"],
             "the Kubernetes provider": run.one("pulumi:providers:kubernetes").inputs["kubeconfig"],
             "the GPU readiness gate": run.one("pulumi-python:dynamic/raytrain:GpuNodesReady").inputs["kubeconfig"],
             "the training job": run.one("pulumi-python:dynamic/raytrain:TrainingJob").inputs["kubeconfig"]}
    for user, kubeconfig in users.items():
        if is_secret_value(kubeconfig):
            kubeconfig = kubeconfig["value"]
        args = _token_args(kubeconfig)
        assert {flag: _flag(args, flag) for flag in expected} == expected, \
            f"{user}: `aws eks get-token` must run as {expected}, got {args}"


def test_without_a_profile_or_role_the_kubeconfig_is_pulumi_eks_own():
    run = program("dev")
    assert "providerCredentialOpts" not in run.one("eks:index:Cluster").inputs
    args = _token_args(run.exports["kubeconfig"])
    assert "--profile" not in args and "--role" not in args, args


def test_the_stacks_reservation_is_made_as_the_stacks_role():
    run = run_program("p5", {"aws:assumeRoles": [{"roleArn": ROLE}]})
    reservation = next(r for r in run.resources if r.type.endswith(":GpuCapacityReservation"))
    assert reservation.inputs["role_arn"] == ROLE, "the reservation must land in the account the stack deploys to"


def test_the_default_image_is_pinned_and_its_ray_version_reaches_the_raycluster():
    image = SCHEMA["dlcImage"]["default"]
    assert image.rsplit(":", 1)[-1].count(".") == 2 or "@sha256:" in image, \
        f"the default image must be a frozen vX.Y.Z tag or a digest, not a moving one: {image}"
    spec = program("dev").one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    assert spec["rayVersion"] == KNOWN_IMAGES[image].ray_version, \
        f"rayVersion must be the image's: {spec['rayVersion']}"
    custom = run_program("dev", {"dlcImage": "registry.example.com/team/ray:2.60.0", "rayVersion": "2.60.0",
                                 "imageCudaVersion": "12.8"})
    assert custom.one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]["rayVersion"] == "2.60.0", \
        "a custom image's rayVersion comes from the config"
    gate = custom.one("pulumi-python:dynamic/raytrain:GpuNodesReady")
    assert gate.inputs["image_cuda_version"] == "12.8", "the driver check uses the custom image's CUDA"


def test_the_benchmark_projects_by_the_same_model(monkeypatch):
    from bench.record import step_bench

    # The H200 peaks of bench/results/step_bench-h200-2026-11-29.log, through the benchmark's own projection.
    peaks = iter([29.2, 34.2])
    monkeypatch.setattr(step_bench, "measure", lambda *args: {"peak_memory_gib": next(peaks)})
    monkeypatch.setattr(step_bench, "project_step", lambda cfg, device: None)
    monkeypatch.setattr(step_bench, "fresh", lambda device: None)
    cfg = step_bench.TrainConfig(model_config="qwen2.5-1.5b", batch_size=8, seq_len=2048)
    result = step_bench.memory_projection(cfg, "cuda", [1, 2], warmup=0)
    assert result["projected_peak_gib_8xL4_by_batch"] == {1: 10.1, 2: 15.1, 4: 25.1}, result
    assert result[f"largest_batch_that_fits_with_{step_bench.memory.MARGIN_GIB:g}gib_margin"] == 2, result


def test_the_program_judges_a_job_without_importing_torch():
    import subprocess
    import sys

    from tests.support.pulumi_mocks import REPO

    # The layout's choice (jobLayoutPlan) included: workload.model.layout, its bus factors and the GPUs' peaks.
    code = ("import sys, infra.preview.feasibility, infra.preview.job_layout, workload.model.layout; "
            "print('torch' in sys.modules, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], \
        f"preview must not pay for importing torch or ray (workload.model.memory, .layout, workload.config: stdlib): {out}"


@pytest.mark.parametrize("entry, refused", [
    ("torch", True), ("TORCH>=2", True), ("torchvision==0.28.0", True), ("ray[train]", True),
    ("nvidia-cudnn-cu13", True), ("einops==0.8.1", False), ("raydp", False), ("torchmetrics", False),
])
def test_pip_refusal_goes_by_the_package_name(entry, refused):
    from infra.config import pip_requirements

    if refused:
        with pytest.raises(ValueError, match="trainPip"):
            pip_requirements.check_requirements((entry,))
    else:
        pip_requirements.check_requirements((entry,))


class FakeAwsConfig(dict):
    def get_object(self, key):
        return self[key] if key in self else None


def test_unknown_keys_are_found_in_either_channel_the_cli_passes_config_by(monkeypatch):
    import pulumi

    from infra import config

    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"raytrain-eks:gpuNodeCout": "4", "aws:region": "us-west-2"}))
    token = pulumi.runtime.config.CONFIG.set({"raytrain-eks:trainStep": "5"})
    try:
        keys = config.stack_config_keys()
    finally:
        pulumi.runtime.config.CONFIG.reset(token)
    assert {"raytrain-eks:gpuNodeCout", "raytrain-eks:trainStep", "aws:region"} <= keys, keys
    with pytest.raises(ValueError, match="gpuNodeCout.*trainStep"):
        config.check_unknown_keys(keys, "raytrain-eks", set(SCHEMA))


def test_aws_identity_passes_one_role_and_the_profile_on():
    identity = access.aws_identity(FakeAwsConfig(profile="ops", assumeRoles=[{"roleArn": ROLE}]))
    assert (identity.profile, identity.role_arn) == ("ops", ROLE), identity
    assert access.aws_identity(FakeAwsConfig()).role_arn is None, "no role without aws:assumeRoles"
