"""The training job's command, from the stack's train* keys: the workload's flags (one per key), the packages it
installs, its data-format flags and its secret environment."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any, Mapping

import pulumi
import pulumi.dynamic
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from infra.config import InstanceFacts, StackConfig, config_error
from workload.config import STACK_KEYS as workload_stack_keys
from workload.config import parse_report_to, stack_message  # noqa: F401  (stack_message: tests and tools)
from workload.metrics.tracking import TRACKER_REQUIREMENTS  # standard library only: the trackers' client pins
from workload.model import adapters, fp8  # standard library only: the preview's fp8 check, the pins they install

if TYPE_CHECKING:
    from workload.config import TrainConfig as WorkloadConfig


# Each rank writes its own NCCL log here (%h host, %p pid), reads back its transport lines at the end and reports
# them in the summary, so the verdict does not depend on which worker output reaches the driver.
NCCL_DEBUG_FILE = "/tmp/nccl-%h-%p.log"
# PyTorch's caching allocator with expandable segments: a segment grows in place instead of a new block being carved
# for each size, so memory freed by one step's shapes serves the next (issue 30 measured on an H200: the dev plan for
# Qwen2.5-7B ran out of memory under a 21.85 GiB cap with the default allocator, 4.2 GiB reserved but unallocated, and
# ran with this). Read once, when CUDA first allocates, so it goes in the job's environment, not in the code.
CUDA_ALLOCATOR = "expandable_segments:True"


def job_env(train_env: Mapping[str, str]) -> dict[str, str]:
    """The job's runtime_env env_vars: the project's defaults, then trainEnv, whose values win (NCCL_DEBUG_FILE can
    go elsewhere, and a trainEnv PYTORCH_CUDA_ALLOC_CONF replaces the allocator setting rather than adds to it)."""
    return {"NCCL_DEBUG_FILE": NCCL_DEBUG_FILE, "PYTORCH_CUDA_ALLOC_CONF": CUDA_ALLOCATOR, **train_env}


def submission_id(stack: str, run_id: str, train_args: list[str], pip: list[str], env_vars: dict[str, str]) -> str:
    """The Ray submission id of a run: the same for every create of the same job, another for another job.
    The env's values are hashed, never shown (trainEnv may hold a token)."""
    definition = json.dumps([stack, run_id, train_args, pip, sorted(env_vars.items())])
    return f"raytrain-{stack}-{run_id}-{hashlib.sha256(definition.encode()).hexdigest()[:8]}"


# The workload's flags the stack sets, by field name -> the train* key that sets each, derived from each field's one
# declaration (workload/config/fields.py); a refusal from the workload's own checks names what the user set.
STACK_KEYS = workload_stack_keys


def workload_config(cfg: StackConfig, facts: InstanceFacts) -> "WorkloadConfig":
    """The workload's own config for the stack's train* keys, validated by the workload itself."""
    from workload.config import TrainConfig as WorkloadConfig

    train = cfg.train
    if train is None:
        raise config_error("trainEnabled", "the stack config has no train settings")
    # An unknown GPU (tools.job submit, away from EC2) is left to the job's own device check (workload.model.fp8).
    if train.fp8 and facts.gpu_name and not fp8.gpu_has_fp8(facts.gpu_name):
        raise ValueError(f"config key 'trainFp8': {facts.instance_type}'s {facts.gpu_name or 'GPU'} has no fp8 tensor "
                         f"cores; allowed: false, or true on {', '.join(fp8.FP8_GPUS)} instances")
    try:
        workload = WorkloadConfig(
            **train.flags,
            # The instance's network, for the job's choice of sharding; its fabric check's measurement wins.
            node_gbits_per_s=facts.network_gbps,
            # Its GPUs' memory as EC2 says, so the job's memory plan is the one the preview exported.
            gpu_memory_mib=facts.gpu_memory_mib,
        )
        # Ray Train resumes a run of the same name and storage path from its latest checkpoint. A retried create
        # of the same job should (the same trainRunId and flags); a job with other flags (another model, another
        # shape) must not load this one's checkpoints, and a new trainRunId starts afresh.
        definition = hashlib.sha256(json.dumps(workload.to_args()).encode()).hexdigest()[:8]
        return dataclasses.replace(workload, run_name=f"ray-train-fsdp-llm-{train.run_id}-{definition}")
    except ValueError as e:
        raise ValueError(stack_message(str(e))) from None


def job_pip(train) -> list[str]:
    """trainPip, plus what the job's flags need beyond the image: torchao for trainFp8, peft for trainMethod lora
    (and torchao for qlora), and the client of each tracker trainReportTo names (mlflow-skinny, wandb), unless trainPip
    names the package."""
    pip = list(train.pip)

    def name(entry: str) -> str:
        try:
            return canonicalize_name(Requirement(entry).name)
        except InvalidRequirement:
            return entry  # a URL or a path: never torchao by name

    named = {name(entry) for entry in pip}
    needed = ([fp8.TORCHAO_REQUIREMENT] if train.fp8 else []) + list(adapters.requirements(train.method))
    for requirement in needed:  # torchao once, when both trainFp8 and qlora want it
        if name(requirement) not in named:
            pip.append(requirement)
            named.add(name(requirement))
    for tracker in parse_report_to(train.report_to):
        requirement = TRACKER_REQUIREMENTS.get(tracker)
        if requirement and name(requirement) not in named:
            pip.append(requirement)
    return pip


def job_inputs(cfg: StackConfig, facts: InstanceFacts) -> dict[str, Any]:
    """The job's inputs from the stack config: the workload's flags, its runtime_env and the checks.

    Everything but the RayCluster's identity, which comes from the RayCluster's outputs (so the job waits for it).
    """
    from infra.job.preflight import WorkerRequest

    workload = workload_config(cfg, facts)
    train = cfg.train
    env_vars = job_env(train.env)
    stack = pulumi.get_stack()
    pip = job_pip(train)
    return {
        "train_args": workload.to_args(),
        "run_id": train.run_id,
        "pip": pip,
        "env_vars": env_vars,
        "timeout_s": float(train.timeout_minutes * 60),
        "expect_transport": train.expect_transport,
        **WorkerRequest.for_instance(facts, cfg.gpu_node_count).as_props(),
        "submission_id": submission_id(stack, train.run_id, workload.to_args(), pip, env_vars),
        "stack": stack,
        "wait": train.wait,
    }


def secret_job_env(env_vars: Mapping[str, str]) -> pulumi.Output[dict[str, str]]:
    """The job's runtime_env env_vars as a Pulumi secret input. trainEnv may carry a token: a plain input is stored
    and shown by `pulumi preview` in plain text even when the config value was set with --secret, and
    additional_secret_outputs covers the outputs only. Tokens belong in trainSecretEnv, which never reaches the job:
    Ray's dashboard shows every job's runtime_env."""
    return pulumi.Output.secret(dict(env_vars))
