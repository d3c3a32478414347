"""The TrainingJob under Pulumi mocks: its inputs from the stack config, its secrets, its place after the
RayCluster, and its absence unless trainEnabled."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pulumi
import pytest

from infra import config
from infra.job import job_config, ray_job
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import is_secret_value, program, run_program, run_under_mocks, stack_settings
from workload.model import adapters

JOB = "pulumi-python:dynamic/raytrain:TrainingJob"
TRAIN = {
    "trainEnabled": True, "trainModelConfig": "tiny", "trainSeqLen": 256, "trainSteps": 3, "trainRunId": "7",
    "trainEnv": ["NCCL_NET=Socket"], "trainPip": ["einops==0.8.1"], "trainExpectTransport": "socket",
    "trainTimeoutMinutes": 90,
}


@pytest.fixture(scope="module")
def enabled():
    return run_program("dev", TRAIN)


def test_job_inputs_come_from_the_train_config(enabled):
    job = enabled.one(JOB)
    args = job.inputs["train_args"]
    flags = dict(zip(args[::2], args[1::2]))
    assert flags["--model_config"] == "tiny" and flags["--steps"] == "3", \
        f"train flags from trainModelConfig/Steps: {args}"
    assert flags["--run_name"].startswith("ray-train-fsdp-llm-7-"), f"a new trainRunId is a new checkpoint run: {args}"
    assert is_secret_value(job.inputs["env_vars"]), "trainEnv may hold a token: the job's env is a secret input"
    assert job.inputs["env_vars"]["value"] == {"NCCL_DEBUG_FILE": job_config.NCCL_DEBUG_FILE, "NCCL_NET": "Socket",
                                               "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, \
        f"job env: each rank's NCCL debug file, the allocator's expandable segments, plus trainEnv; got {job.inputs['env_vars']}"
    assert job.inputs["pip"] == ["einops==0.8.1"] and job.inputs["run_id"] == "7", job.inputs
    assert job.inputs["expect_transport"] == "socket" and job.inputs["timeout_s"] == 90 * 60, job.inputs
    facts = INSTANCE_FACTS["g6.12xlarge"]  # Pulumi.dev.yaml: 2 x g6.12xlarge
    assert (job.inputs["gpus_per_worker"], job.inputs["efa_per_worker"], job.inputs["workers"]) == \
        (facts.gpus, facts.efa_interfaces, 2), f"preflight request from the instance facts: {job.inputs}"
    assert flags["--node_gbits_per_s"] == "40.0", f"the sharding choice gets the instance's network (EC2): {args}"
    assert "--sharding" not in flags and "--min_bus_gbytes_per_s" not in flags, f"defaults stay implicit: {args}"


def test_job_reaches_the_ray_cluster_it_waits_for_with_secret_kubeconfig(enabled):
    run = enabled
    job = run.one(JOB)
    ray_cluster = run.one("kubernetes:ray.io/v1:RayCluster")
    assert ray_cluster.urn in job.dependencies, "the job must be created after the RayCluster"
    assert (job.inputs["namespace"], job.inputs["cluster_name"], job.inputs["auth_secret_name"]) == \
        ("ray", "ray-train", "ray-train"), f"the RayCluster's namespace, name and token Secret: {job.inputs}"
    assert is_secret_value(job.inputs["kubeconfig"]), "the kubeconfig given to the job must be a Pulumi secret"
    assert is_secret_value(job.inputs["__provider"]), "the serialized provider must be stored as a secret"
    assert "token" not in job.inputs, "the Ray token is read from its Secret at run time, never an input"
    assert {"jobId", "jobStatus", "jobFinalLoss", "jobTokensPerSecond", "jobTransportVerdicts", "jobSharding",
            "jobFabricCheck", "jobCheckpoint", "jobModelPath", "jobEvalLoss", "jobTensorBoard"} <= set(run.exports), \
        f"the job's results must be stack outputs: {sorted(run.exports)}"


def test_a_job_run_wakes_the_gpu_nodes_before_it_is_submitted(enabled):
    """Issue 24's idle stop (on by default) may have scaled the GPU nodes to 0: the run asks them back first."""
    awake = enabled.one("pulumi-python:dynamic/raytrain:GpuNodesAwake", "ray-train-gpu-awake")
    assert (awake.inputs["node_count"], awake.inputs["run_id"]) == (2, "7"), awake.inputs
    assert awake.urn in enabled.one(JOB).dependencies, "the job waits for the nodes to be asked back"


def test_no_job_unless_train_enabled():
    run = program("dev")
    assert not run.of_type(JOB), "trainEnabled defaults to false: no training job"
    assert not [key for key in run.exports if key.startswith("job")], f"no job exports: {sorted(run.exports)}"


def test_training_job_makes_a_plain_kubeconfig_secret_and_keeps_it_secret_in_outputs():
    from tests.program.test_raycluster_pulumi import CONFIG

    cfg = dataclasses.replace(CONFIG, train=dataclasses.replace(
        CONFIG.train, enabled=True, flags={**CONFIG.train.flags, "steps": 5, "seq_len": 128}))
    cluster = SimpleNamespace(namespace=pulumi.Output.from_input("ray"),
                              cluster_name=pulumi.Output.from_input("ray-train"),
                              auth_secret_name=pulumi.Output.from_input("ray-train"))

    def build():
        job = ray_job.TrainingJob("job", kubeconfig="apiVersion: v1\nkind: Config\n", cfg=cfg,
                                  facts=INSTANCE_FACTS["g6.12xlarge"], ray_cluster=cluster)
        return job.urn

    mocks, _ = run_under_mocks(build)
    job = mocks.named("job")
    assert is_secret_value(job["inputs"]["kubeconfig"]), "a kubeconfig given in plain must be registered as a secret"
    assert "kubeconfig" in job["secret_outputs"], "the kubeconfig kept in the job's outputs must stay secret"


def test_run_name_follows_the_job_definition_so_only_a_retry_resumes():
    """Ray Train resumes a run of the same name from its checkpoints: the same job retried must, a job with other
    flags must not (its checkpoints would not even load)."""
    def run_name(overrides):
        args = run_program("dev", {**TRAIN, **overrides}).one(JOB).inputs["train_args"]
        return args[args.index("--run_name") + 1]

    same = run_name({})
    assert run_name({}) == same, "the same job, retried, keeps its run name"
    assert run_name({"trainSeqLen": 128}) != same, "other flags are another checkpoint run"
    assert run_name({"trainRunId": "8"}) != same, "a new trainRunId is another checkpoint run"


def test_sharding_and_fabric_keys_reach_the_job():
    keys = {"trainSharding": "hybrid", "trainReduceDtype": "bf16", "trainGradAccumSteps": 2,
            "trainMinBusBandwidthGBps": "4.5"}
    # A pretrained model, not trainModelConfig tiny: a dataset's tokenizer must fit the model's vocabulary (512 for
    # tiny; Qwen2.5's tokenizers have 151,665 tokens), which the preview now holds the stack to.
    without_tiny = {key: value for key, value in TRAIN.items() if key != "trainModelConfig"}
    args = run_program("dev", {**without_tiny, **keys}).one(JOB).inputs["train_args"]
    flags = dict(zip(args[::2], args[1::2]))
    assert (flags["--sharding"], flags["--reduce_dtype"], flags["--grad_accum_steps"],
            flags["--min_bus_gbytes_per_s"]) == ("hybrid", "bf16", "2", "4.5"), args


def test_fp8_reaches_the_job_with_torchao_installed_at_start():
    job = run_program("dev", {**TRAIN, "trainFp8": True}).one(JOB)
    assert "--fp8" in job.inputs["train_args"], job.inputs["train_args"]
    # The image has no torchao: the job's runtime_env installs it, next to trainPip's own packages.
    assert job.inputs["pip"] == ["einops==0.8.1", "torchao==0.18.0"], job.inputs["pip"]
    pinned = SimpleNamespace(fp8=True, pip=("TorchAO==0.17.0", "https://example.com/x.whl"), report_to="tensorboard",
                             method="qlora")
    assert job_config.job_pip(pinned) == [*pinned.pip, adapters.PEFT_REQUIREMENT], \
        "trainPip's own torchao, by its canonical name, wins over trainFp8's and qlora's; qlora's peft is added"


def test_checkpoint_every_reaches_the_job():
    args = run_program("dev", {**TRAIN, "trainStoragePath": "s3://ckpt-bucket/p", "trainCheckpointEvery": 2}).one(JOB) \
        .inputs["train_args"]
    assert args[args.index("--checkpoint_every") + 1] == "2", args


def test_data_schedule_evaluation_and_export_keys_reach_the_job():
    keys = {"trainModelId": "Qwen/Qwen2.5-1.5B", "trainSeqLen": 1024,
            "trainDataset": "Salesforce/wikitext", "trainDatasetConfig": "wikitext-2-raw-v1",
            "trainDatasetSplit": "train[:90%]", "trainTextField": "text", "trainTokenizer": "Qwen/Qwen2.5-0.5B",
            "trainEvalSplit": "validation", "trainEvalEvery": 25, "trainLrSchedule": "linear",
            "trainSteps": 100, "trainWarmupSteps": 5, "trainStoragePath": "s3://bucket/runs",
            "trainCheckpointEvery": 25, "trainExport": "checkpoints"}
    # A pretrained model, not trainModelConfig tiny: a dataset's tokenizer must fit the model's vocabulary (512 for
    # tiny; Qwen2.5's tokenizers have 151,665 tokens), which the preview now holds the stack to.
    without_tiny = {key: value for key, value in TRAIN.items() if key != "trainModelConfig"}
    args = run_program("dev", {**without_tiny, **keys}).one(JOB).inputs["train_args"]
    flags = dict(zip(args[::2], args[1::2]))
    expected = {"--dataset": "Salesforce/wikitext", "--dataset_config": "wikitext-2-raw-v1",
                "--dataset_split": "train[:90%]", "--tokenizer": "Qwen/Qwen2.5-0.5B", "--eval_split": "validation",
                "--eval_every": "25", "--lr_schedule": "linear", "--warmup_steps": "5", "--export": "checkpoints"}
    assert {flag: flags.get(flag) for flag in expected} == expected, args
    assert "--text_field" not in flags, f"a key at its default stays implicit: {args}"
    fraction = run_program("dev", {**without_tiny, "trainDataset": "s3://bucket/data/corpus.jsonl",
                                   "trainStoragePath": "s3://bucket/runs", "trainTextField": "body",
                                   "trainEvalFraction": "0.05"}).one(JOB).inputs["train_args"]
    flags = dict(zip(fraction[::2], fraction[1::2]))
    assert (flags["--dataset"], flags["--text_field"], flags["--eval_fraction"]) == \
        ("s3://bucket/data/corpus.jsonl", "body", "0.05"), fraction


def test_a_chat_fine_tune_reaches_the_job_as_the_workload_flags():
    """The stack's job inputs for conversations: the format and its keys become the workload's flags, which
    rebuild a workload config (the one the job will parse) with the same values."""
    from workload.config import parse_args

    keys = {"trainDataset": "s3://bucket/chats/train.parquet", "trainDataFormat": "chat",
            "trainMessagesField": "conversation", "trainChatTemplate": "llama3", "trainTruncation": "split",
            "trainOnPrompt": True, "trainEvalFraction": "0.05", "trainModelId": "Qwen/Qwen2.5-0.5B",
            "trainStoragePath": "s3://bucket/runs"}
    # Qwen2.5-0.5B's own tokenizer: tiny's 512-token vocabulary holds no real tokenizer's ids.
    without_tiny = {key: value for key, value in TRAIN.items() if key != "trainModelConfig"}
    args = run_program("dev", {**without_tiny, **keys}).one(JOB).inputs["train_args"]
    workload = parse_args(args)
    assert (workload.dataset, workload.data_format, workload.messages_field, workload.chat_template,
            workload.truncation, workload.train_on_prompt, workload.eval_fraction) == (
        "s3://bucket/chats/train.parquet", "chat", "conversation", "llama3", "split", True, 0.05), args
    flags = config.parse(stack_settings("dev") | {
        **TRAIN, "trainDataset": "org/pairs", "trainDataFormat": "prompt-completion", "trainPromptField": "question",
        "trainCompletionField": "answer", "trainStoragePath": "s3://bucket/runs"}).train.flags
    pairs = {name: flags[name] for name in ("data_format", "messages_field", "prompt_field", "completion_field",
                                            "train_on_prompt", "chat_template", "truncation")}
    assert pairs == {"data_format": "prompt-completion", "messages_field": "messages", "prompt_field": "question",
                     "completion_field": "answer", "train_on_prompt": False, "chat_template": "",
                     "truncation": "truncate"}, pairs
