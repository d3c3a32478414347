"""`python -m tools.job submit`: another training run on the stack's live RayCluster, without `pulumi up`.

The job is the one `pulumi up` would submit with `trainEnabled` (infra/job/ray_job.py's workload_config, from the same
stack file and Pulumi.yaml defaults, checked by the same infra/config/), with the flags after `--` on top
(`-- --steps 200 --learning_rate 2e-5`: any `python -m workload.train` flag; the last one given wins), under its
own run id (`--run-id`, default `submit-<UTC time>`), which names its submission and its checkpoints' directory.
It carries the stack's metadata, so `list`, `logs`, `summary` and `stop` find it; `pulumi up` does not know it.

What the stack file holds as a Pulumi secret (trainEnv) cannot be read without Pulumi: it is left out, and said so;
trainSecretEnv reaches the pods from their Kubernetes Secret as before.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
import time
from types import SimpleNamespace
from typing import Any

from workload import cli, config_file


class StackFile:
    """A Pulumi.<stack>.yaml read as pulumi.Config reads it (get, get_int, get_bool, get_object by key name),
    for infra.config.read_raw_config; a secret (`{secure: ...}`) reads as unset and is noted."""

    def __init__(self, stack: str, project: str) -> None:
        from tools.stack import stack_file_config

        config = stack_file_config(stack)
        prefix = project + ":"
        self.values = {key[len(prefix):]: value for key, value in config.items() if key.startswith(prefix)}
        # Every key the file sets, namespaced (`raytrain-eks:trainSteps`, `aws:region`), as `pulumi up` sees them.
        self.keys = set(config)
        self.secret_keys = sorted(key for key, value in self.values.items() if isinstance(value, dict)
                                  and "secure" in value)

    def get(self, key: str) -> Any:
        value = self.values.get(key)
        return None if key in self.secret_keys else value

    def get_int(self, key: str) -> int | None:
        value = self.get(key)
        return None if value is None else int(value)

    def get_bool(self, key: str) -> bool | None:
        value = self.get(key)
        return None if value is None else (value if isinstance(value, bool) else str(value).lower() == "true")

    def get_object(self, key: str) -> Any:
        value = self.get(key)
        return json.loads(value) if isinstance(value, str) else value


def stack_job(stack: str, run_id: str, extra_flags: list[str], config: str | None = None) -> dict:
    """The job `pulumi up` would submit for the stack with trainEnabled, under `run_id`, with --config's file
    `config` over the stack's keys and `extra_flags` over both:
    {train_args, workload, pip, env_vars, time_limit_s, submission_id, secrets_left_out, stack_keys}."""
    from infra import config as stack_config
    from infra.config.experiment_tracking import in_cluster_uri, tracking_uri_problem
    from infra.config.naming import default_cluster_name
    from infra.job.job_config import job_env, job_pip, submission_id, workload_config
    from infra.preview.instance_facts import known_gpu_facts
    from workload.config import build_parser

    project = stack_config.project_name()
    source = StackFile(stack, project)
    # What infra.config.load does before parse(), so this job is the one `pulumi up` would submit: a key typo
    # (trainLoraRnak) refused with the nearest declared key, and the empty clusterName made `ray-train-<stack>`.
    stack_config.check_unknown_keys(source.keys, project, set(stack_config.schema()))
    raw = stack_config.read_raw_config(source)
    raw.update(trainEnabled=True, trainRunId=run_id)
    raw["clusterName"] = raw["clusterName"] or default_cluster_name(stack)
    cfg = stack_config.parse(raw)
    # The instance's network bandwidth only informs the sharding choice, and the job's fabric check measures it;
    # reading it from EC2 would need this machine to be allowed to describe instance types. The GPU's memory and name
    # (for the memory plan and fp8) are the stacks' known figures; for another type the job reads its own GPU.
    workload = workload_config(cfg, known_gpu_facts(cfg.gpu_instance_type) or SimpleNamespace(
        network_gbps=0.0, instance_type=cfg.gpu_instance_type, gpu_memory_mib=0, gpu_name=""))
    # A flag the job does not know is refused here as `python -m workload.train` would (its one error line, exit 2),
    # and so is a key of --config's file.
    parser = build_parser()
    base = vars(parser.parse_args(workload.to_args()))
    from_file = config_file.load(config, parser) if config else {}
    parser.set_defaults(**{**base, **from_file})
    flags = vars(parser.parse_args(extra_flags))
    from workload.config import TrainConfig, rules

    chosen = TrainConfig(**flags)  # its s3:// flags held to the stack keys' rule too (workload/config/s3_uri.py)
    if (inert := rules.typed_without_effect(vars(chosen), config_file.command_line(extra_flags))) is not None:
        raise cli.UsageError(inert)
    # The stack's egress rule for trainMlflowTrackingUri, for the same URI given as a flag or in --config's file: the
    # run's pods are the stack's, behind the same NetworkPolicy.
    own_server = in_cluster_uri(cfg.ray_namespace) if cfg.experiment_tracking == "mlflow" else None
    if (why := tracking_uri_problem(chosen.mlflow_tracking_uri, own_server)) is not None:
        raise cli.UsageError(f"--mlflow_tracking_uri must be reachable from the Ray pods: {why}")
    if "--run_name" not in extra_flags and "run_name" not in from_file:
        # As workload_config names the stack's runs, from the flags this run really has: the same run id with other
        # flags must not resume this run's checkpoints.
        unnamed = dataclasses.replace(chosen, run_name=TrainConfig.run_name).to_args()
        chosen = dataclasses.replace(chosen, run_name=f"ray-train-fsdp-llm-{run_id}-"
                                     f"{hashlib.sha256(json.dumps(unnamed).encode()).hexdigest()[:8]}")
    train_args = chosen.to_args()
    env_vars = job_env(cfg.train.env)
    # The packages of the run's own flags: a tracker named by --config or after `--` brings its client too.
    pip = job_pip(dataclasses.replace(cfg.train, flags={**cfg.train.flags, "report_to": chosen.report_to}))
    return {"train_args": train_args, "workload": chosen, "pip": pip, "env_vars": env_vars,
            "time_limit_s": float(cfg.train.timeout_minutes * 60),
            "submission_id": submission_id(stack, run_id, train_args, pip, env_vars),
            "secrets_left_out": source.secret_keys, "stack_keys": raw}


def prepare(args: argparse.Namespace) -> None:
    """The job, built and checked before the cluster is reached (a bad flag costs no port-forward): args.prepared."""
    if not args.stack:
        raise cli.UsageError("submit needs --stack: the job is built from Pulumi.<stack>.yaml's train* keys")
    from infra.config.rules import RUN_ID
    from workload.config.fields import looks_like_token

    if args.run_id is not None and not RUN_ID.fullmatch(args.run_id):  # named as typed, not as trainRunId
        raise cli.UsageError(f"--run-id {cli.shown(args.run_id)} must be 1-32 letters, digits, '.', '_' or '-' (it "
                             "names the Ray job and the run's checkpoints)")
    if args.run_id is not None and looks_like_token(args.run_id):
        raise cli.UsageError("--run-id holds something shaped like a token (its value is not shown): it names the Ray "
                             "job and the run's checkpoints, where anyone with the cluster reads it; give a plain name")
    run_id = args.run_id or time.strftime("submit-%Y%m%d-%H%M%S", time.gmtime())
    flags = args.train_flags[1:] if args.train_flags[:1] == ["--"] else args.train_flags
    args.prepared = (run_id, stack_job(args.stack, run_id, flags, args.config))
    if not args.print_config:  # a printed file may be replayed here, where a local path is readable
        check_pods_can_read(args.prepared[1]["workload"])
        check_as_stack_keys(args.prepared[1]["stack_keys"], args.prepared[1]["workload"])


def check_pods_can_read(workload: Any) -> None:
    """A --dataset or --tokenizer on this machine is not in the cluster's pods: said before anything is submitted, as
    the preview says it of trainDataset (infra/preview/job_plan.py), instead of a job failing on every worker. So is a
    --dataset without --storage_path, as the preview says it (infra/config/train_keys.py _check_data_storage): the data
    stage runs on the Ray head and would keep the token shards on the head's own disk, which no GPU worker reads."""
    from workload.config import is_local_dataset

    for name, value in (("dataset", workload.dataset), ("tokenizer", workload.tokenizer)):
        if (is_local_dataset(value) if name == "dataset" else value.startswith(("/", "./", "../", "~"))):
            raise cli.UsageError(f"--{name} {value} is a path on this machine, which the job's pods cannot read; "
                                 "allowed: s3://bucket/key (the Ray pods' role reads the stack's prefix), or a Hugging "
                                 "Face id")
    if workload.dataset and not workload.storage_path:
        raise cli.UsageError(f"--dataset {workload.dataset} needs --storage_path (s3://BUCKET/PREFIX) on the cluster: "
                             "the data stage keeps its token shards there, where every GPU node reads them; give "
                             "--storage_path after -- or set trainStoragePath, or leave --dataset empty for random "
                             "tokens")


def check_as_stack_keys(raw: dict[str, Any], workload: Any) -> None:
    """The run's flags (after `--`, and --config's keys) through the preview's own checks of the train* keys they
    stand for, before the cluster is reached: a model directory on this machine (infra/preview/job_plan.py), the
    secret a flag needs in trainSecretEnv (`--report_to wandb`, `--push_to_hub`: infra/config/train_keys.py). The
    stack's own keys passed them already, so a refusal here is the flags': it names the flag, and the key beside it."""
    from infra import config as stack_config
    from infra.preview.instance_facts import known_gpu_facts
    from infra.preview.job_layout import ranks_per_node_problem
    from infra.preview.job_plan import check_job_data, check_job_model, check_job_offline, check_workers
    from workload.config import DECLARED

    flags = {declared.stack_key: declared.to_stack(getattr(workload, declared.name))
             for declared in DECLARED if declared.stack_key}
    try:
        cfg = stack_config.parse({**raw, **flags})
        check_job_model(cfg)
        check_job_data(cfg)
        if (gpu := known_gpu_facts(cfg.gpu_instance_type)) is not None:
            # --ranks_per_node has no stack key, so no preview sees it: the stack's nodes judge it here.
            if (why := ranks_per_node_problem(workload.ranks_per_node, check_workers(cfg, gpu), gpu)) is not None:
                raise cli.UsageError(why)
            # The stack's GPUs as the preview read them from EC2 (the same figures): the workers, the memory plan and
            # the time limit of this run's flags on them, as `pulumi up` would check them.
            check_job_offline(cfg, gpu)
    except ValueError as error:
        raise cli.UsageError(in_flag_terms(str(error))) from None


def in_flag_terms(message: str) -> str:
    """A preview refusal (`config key 'trainReportTo': ...`) for the flag that set the key: `--report_to (stack key
    trainReportTo): ...`."""
    from workload.config import DECLARED

    flag_of = {declared.stack_key: declared.flag for declared in DECLARED if declared.stack_key}
    message = re.sub(r"^config keys? ", "", message)
    return re.sub(r"'(train[A-Za-z0-9]+)'", lambda key: f"{flag_of[key[1]]} (stack key {key[1]})"
                  if key[1] in flag_of else key[1], message)


def submit_command(client: Any, args: argparse.Namespace) -> int:
    from infra.job.ray_job import RUN_METADATA, STACK_METADATA
    from workload.run import submit

    run_id, job = args.prepared
    for key in job["secrets_left_out"]:
        print(f"note: {key} is a Pulumi secret in Pulumi.{args.stack}.yaml and is not sent; pass what the job needs "
              "as flags, or through trainSecretEnv", file=sys.stderr)
    job_id, attached = submit.start_job(
        client, job["train_args"], submission_id=job["submission_id"], pip=tuple(job["pip"]),
        env_vars=job["env_vars"], time_limit_s=job["time_limit_s"],
        metadata={STACK_METADATA: args.stack, RUN_METADATA: run_id})
    follow = f"python -m tools.job logs {job_id} --follow --stack {args.stack}" + (
        f" --kubeconfig {args.kubeconfig}" if args.kubeconfig else "")
    print(f"job {job_id} (run {run_id}) {'was already on the cluster' if attached else 'submitted'}; "
          f"follow it: {follow}")
    return cli.OK
