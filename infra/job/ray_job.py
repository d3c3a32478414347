"""The training job as a Pulumi dynamic resource: preflight, submit, stream the logs, verify the NCCL transport.

`pulumi up` creates it after the RayCluster when `trainEnabled` is true. Create waits, bounded, for the GPU nodes to
have joined and to advertise GPUs and EFA (infra/job/nodes_joined.py: after the idle stop's wake they come minutes
after EKS says ACTIVE), checks that they advertise what the worker pods request, reaches the head's job server through a Kubernetes port-forward with
the RayCluster's token, submits the workload through `workload.run.submit`, streams its logs into the Pulumi output
and fails with the log tail when the job fails, times out, or shows a transport other than
`trainExpectTransport`. A change to the training inputs or `trainRunId` replaces it: a new job, the
infrastructure untouched. Delete stops the job if it still runs; refresh (`read`) brings its status and, once it
has succeeded, its results into the state.

Nothing runs unseen:
- the submission id is derived from the run (stack, trainRunId, the job's flags, pip and env): a create that was
  cut off (a cancelled `pulumi up`, a dropped port-forward) and then run again attaches to the job it started,
  running or finished, instead of submitting a second beside it;
- the job carries its own deadline (`trainTimeoutMinutes`, enforced by its driver: workload/train.py), so it
  stops even if no `pulumi up` is left waiting for it;
- `trainWait: transport` returns from create once every rank has reported its NCCL transport after the first
  steps (a TCP fallback still fails `up`, and that job is stopped); the job runs on, and `python -m tools.job`
  follows, summarizes and stops it.

Everything Kubernetes (preflight, the token from its Secret, the port-forward) sits behind `JobServerConnector`,
which tests replace with a Ray head started on the test machine.

The provider runs in its own process (Pulumi's python dynamic-provider host), which unpickles
`TrainingJobProvider` by reference: it imports this module from the project root, Pulumi's working directory.
There `pulumi.log` has no engine to talk to, so progress goes to stderr, which Pulumi shows under the resource.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Mapping

import pulumi
import pulumi.dynamic

from infra.config import InstanceFacts, StackConfig
from infra.job.job_config import job_inputs, secret_job_env
from infra.job.job_server import JobServer, JobServerConnector, kubernetes_job_server
from infra.job.preflight import to_stderr

# What the failure message quotes of the job's log.
LOG_TAIL_LINES = 80
# Inputs that define the job: a change runs a new one. The rest (how to reach the cluster, the timeout, the
# expectation, what `up` waits for) is updated in place. The submission id follows from these.
REPLACE_ON_CHANGE = ("train_args", "run_id", "pip", "env_vars")
# Ray's terminal job statuses (ray.job_submission.JobStatus.is_terminal): such a job never runs again by itself.
ENDED_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# Outputs, declared as None inputs so that Pulumi exposes them as attributes.
OUTPUT_NAMES = ("job_id", "status", "final_loss", "tokens_per_s", "world_size", "device", "verdicts", "checkpoint",
                "sharding", "fabric", "follow", "eval_loss", "model",
                "tensorboard")
# With trainWait=transport, how long create waits for the transport report. The RayCluster is up and its image
# pulled by then, so this covers the job's pip installs, the model's download and its first two steps; a job that
# has not reported by then is stopped rather than left holding every GPU unverified.
TRANSPORT_WAIT_S = 30 * 60
# The job's metadata on the job server, by which `python -m tools.job` finds a stack's runs.
STACK_METADATA, RUN_METADATA = "raytrain.stack", "raytrain.run_id"


@dataclass(frozen=True)
class TrainingJobInputs:
    """Everything the provider needs besides the kubeconfig; the RayCluster's identity arrives as its Outputs."""

    namespace: pulumi.Input[str]
    cluster_name: pulumi.Input[str]
    auth_secret_name: pulumi.Input[str]
    train_args: list[str]
    run_id: str
    pip: list[str]
    env_vars: dict[str, str]
    timeout_s: float
    expect_transport: str
    gpus_per_worker: int
    efa_per_worker: int
    workers: int
    submission_id: str
    stack: str
    wait: str


def job_definition(inputs: Mapping[str, Any]) -> str:
    """A digest of what defines the job (REPLACE_ON_CHANGE): it changes exactly when the job is replaced, so
    GpuNodesAwake, which takes it among its triggers, wakes a stopped group for every new job."""
    return hashlib.sha256(json.dumps({key: inputs[key] for key in REPLACE_ON_CHANGE}, sort_keys=True).encode()
                          ).hexdigest()


# How the job's create reads the GPU node group from EKS while it waits for the nodes (infra/job/nodes_joined.py).
# Outside TrainingJobInputs, so outside the diff: where the group is does not define the job, and create always
# gets the current values.
NODE_GROUP_PROPS = ("eks_cluster", "gpu_nodegroup", "region", "profile", "role_arn", "account_id", "wake_command")


def follow_command(stack: str, job_id: str) -> str:
    return f"python -m tools.job logs {job_id} --follow --stack {stack} --kubeconfig kubeconfig.json"


class TrainingJobError(RuntimeError):
    """The job failed, timed out, or ran on the wrong transport; the message carries the log tail."""


class TrainingJobProvider(pulumi.dynamic.ResourceProvider):
    """create submits (or attaches) and waits; diff replaces on a new job definition; read refreshes the job's
    status; delete stops a running job."""

    def __init__(self, connect: JobServerConnector | None = None, on_log: Callable[[str], None] | None = None):
        super().__init__()
        # None means Kubernetes: the provider is pickled into the state, so it holds no client and no secret.
        self._connect = connect
        self._on_log = on_log

    def _job_server(self, props: Mapping[str, Any], preflight: bool) -> ContextManager[JobServer]:
        return (self._connect or kubernetes_job_server)(props, preflight)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        from workload.run import submit

        on_log = self._on_log or to_stderr
        on_log(f"[{props['submission_id']}] preflight and port-forward to the Ray head of "
               f"{props['namespace']}/{props['cluster_name']}")
        with self._job_server(props, True) as server:
            client = submit.connect(server.address, server.token)
            job_id, attached = submit.start_job(
                client, list(props["train_args"]), submission_id=props["submission_id"], pip=tuple(props["pip"]),
                env_vars=dict(props["env_vars"]), time_limit_s=float(props["timeout_s"]),
                metadata={STACK_METADATA: props["stack"], RUN_METADATA: props["run_id"]})
            on_log(f"[{job_id}] " + ("attached to this run's job, already on the cluster (an earlier create was cut "
                                     "off)" if attached else f"submitted to {server.address}"))
            try:
                if props["wait"] == "transport":
                    results = self._until_transport(client, job_id, props, on_log)
                else:
                    results = self._until_end(client, job_id, props, on_log)
            except submit.JobFailedError as e:
                # The job has ended, or was stopped at its timeout; the cluster stays.
                raise TrainingJobError(
                    f"the training job did not succeed (the infrastructure is left as it is): {e}") from None
        outs = {**props, **results, "follow": follow_command(props["stack"], job_id)}
        return pulumi.dynamic.CreateResult(id_=job_id, outs=outs)

    @staticmethod
    def _until_end(client: Any, job_id: str, props: Mapping[str, Any], on_log: Callable[[str], None]) -> dict:
        """trainWait=finish: the job's end, its summary, and every rank's transport judged."""
        from workload.fabric import transport
        from workload.run import submit

        result = submit.wait_for_end(client, job_id, on_log, float(props["timeout_s"]))
        verdicts = transport.verdicts_from_summary(result.summary, result.logs)
        problem = transport.check_expectation(verdicts, props["expect_transport"])
        if problem:
            raise TrainingJobError(
                f"training job {job_id} succeeded but its NCCL transport is wrong: {problem}\n"
                f"per-rank verdicts: {json.dumps(verdicts, sort_keys=True)}\n"
                f"last lines of its log:\n{submit.log_tail(result.logs, LOG_TAIL_LINES)}")
        summary = result.summary
        on_log(f"[{job_id}] {result.status}: final loss {summary.get('final_loss')}, "
               f"{summary.get('tokens_per_s')} tokens/s, transport {json.dumps(verdicts, sort_keys=True)}")
        return job_outputs(job_id, result.status, summary, verdicts)

    @staticmethod
    def _until_transport(client: Any, job_id: str, props: Mapping[str, Any], on_log: Callable[[str], None]) -> dict:
        """trainWait=transport: every rank's transport after the first steps, judged; the job runs on. A wrong one
        stops the job: nothing should train for days over TCP sockets."""
        from workload.fabric import transport
        from workload.run import submit

        wait_s = min(float(props["timeout_s"]), TRANSPORT_WAIT_S)
        report, logs = submit.wait_for_transport(client, job_id, on_log, wait_s)
        verdicts = transport.verdicts_from_summary(report, logs)
        problem = transport.check_expectation(verdicts, props["expect_transport"])
        if problem:
            client.stop_job(job_id)
            raise TrainingJobError(
                f"training job {job_id} reported the wrong NCCL transport after step {report.get('step')} and was "
                f"stopped: {problem}\nper-rank verdicts: {json.dumps(verdicts, sort_keys=True)}\n"
                f"last lines of its log:\n{submit.log_tail(logs, LOG_TAIL_LINES)}")
        status = client.get_job_status(job_id).value
        on_log(f"[{job_id}] {status}: transport {json.dumps(verdicts, sort_keys=True)} after step "
               f"{report.get('step')}; `pulumi up` returns and the job runs on. Follow it with: "
               f"{follow_command(props['stack'], job_id)}")
        return job_outputs(job_id, status, {**report, **(submit.parse_summary(logs) or {})}, verdicts)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        inputs = [field.name for field in dataclasses.fields(TrainingJobInputs)] + ["kubeconfig"]
        changed = [name for name in inputs if olds.get(name) != news.get(name)]
        replaces = [name for name in changed if name in REPLACE_ON_CHANGE]
        # Stop the old job before the new one asks for the same GPUs.
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=True)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        """Only inputs that do not define the job changed: keep its results, re-judge them against the new
        expectation."""
        from workload.fabric import transport

        problem = transport.check_expectation(olds.get("verdicts") or {}, news["expect_transport"])
        if problem:
            raise TrainingJobError(f"training job {olds.get('job_id')} does not meet trainExpectTransport="
                                   f"{news['expect_transport']}: {problem}; change trainRunId to run it again")
        kept = {name: olds.get(name) for name in OUTPUT_NAMES}
        # A job created before `follow` existed gets it now.
        kept["follow"] = kept["follow"] or follow_command(news["stack"], _id)
        return pulumi.dynamic.UpdateResult(outs={**olds, **news, **kept})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        """`pulumi refresh`: the job's status now and, once it has succeeded, its results. Where the job server
        cannot say (it is unreachable, or knows no such job: a RayCluster made anew forgets every job), a job the
        state records as ended keeps its stored outputs, so the next `up` never runs a finished job again; one the
        state records as unfinished is dropped, and the next `up` runs it again."""
        from workload.fabric import transport
        from workload.run import submit

        on_log = self._on_log or to_stderr
        try:
            with self._job_server(props, False) as server:
                client = submit.connect(server.address, server.token)
                info = submit.job_info(client, id_)
                logs = client.get_job_logs(id_) if info is not None and info.status.value == "SUCCEEDED" else ""
        except Exception as e:  # noqa: BLE001 - a refresh must not lose a job because its cluster cannot be reached
            on_log(f"[{id_}] the job server cannot be reached ({type(e).__name__}: {e}); the stored state is kept")
            return pulumi.dynamic.ReadResult(id_, dict(props))
        if info is None:
            if props.get("status") in ENDED_STATUSES:
                on_log(f"[{id_}] unknown to the job server (a new RayCluster); it had ended "
                       f"({props.get('status')}): its stored results are kept")
                return pulumi.dynamic.ReadResult(id_, dict(props))
            return pulumi.dynamic.ReadResult("", {})
        outs = {**props, "status": info.status.value}
        if summary := submit.parse_summary(logs):
            outs.update(job_outputs(id_, info.status.value, summary, transport.verdicts_from_summary(summary, logs)))
        return pulumi.dynamic.ReadResult(id_, outs)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        """Stop the job if it still runs. A cluster that is already gone has nothing left to stop."""
        from workload.run import submit

        on_log = self._on_log or to_stderr
        try:
            with self._job_server(props, False) as server:
                submit.connect(server.address, server.token).stop_job(_id)
        except Exception as e:  # noqa: BLE001 - deleting must not be blocked by a cluster already torn down
            on_log(f"[{_id}] not stopped ({type(e).__name__}: {e}); it had finished or its cluster is gone")


def job_outputs(job_id: str, status: str, summary: Mapping[str, Any], verdicts: dict[str, str]) -> dict[str, Any]:
    """The resource's outputs from the job's summary (or, still running, its transport report)."""
    return {
        "job_id": job_id,
        "status": status,
        "final_loss": summary.get("final_loss"),
        "tokens_per_s": summary.get("tokens_per_s"),
        "world_size": summary.get("world_size"),
        "device": summary.get("device"),
        "verdicts": verdicts,
        "checkpoint": summary.get("checkpoint"),
        "sharding": summary.get("sharding"),
        "fabric": summary.get("fabric"),
        "eval_loss": summary.get("eval_loss"),
        "model": summary.get("model"),
        "tensorboard": summary.get("tensorboard"),
    }


class TrainingJob(pulumi.dynamic.Resource, module="raytrain", name="TrainingJob"):
    """One training run on the RayCluster, with its results and the NCCL transport verdict of every rank."""

    job_id: pulumi.Output[str]
    status: pulumi.Output[str]
    final_loss: pulumi.Output[float]
    tokens_per_s: pulumi.Output[float]
    world_size: pulumi.Output[int]
    device: pulumi.Output[str]
    verdicts: pulumi.Output[dict]
    checkpoint: pulumi.Output[str]
    """The last checkpoint's URI (s3://... under trainStoragePath), or None without trainStoragePath."""
    sharding: pulumi.Output[dict]
    fabric: pulumi.Output[dict]
    follow: pulumi.Output[str]
    """The command that follows the job's progress (`python -m tools.job logs ... --follow`)."""
    eval_loss: pulumi.Output[float]
    model: pulumi.Output[str]
    """The Hugging Face model directory the job exported (s3://.../model_<step>), or None (trainExport none)."""
    tensorboard: pulumi.Output[str]
    """The run's TensorBoard event files (tensorboard --logdir), or None without trainStoragePath."""

    def __init__(
        self,
        name: str,
        *,
        kubeconfig: pulumi.Input[Any],
        cfg: StackConfig,
        facts: InstanceFacts,
        ray_cluster: Any,
        node_group: Mapping[str, pulumi.Input[str]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`node_group`: NODE_GROUP_PROPS, for the create's wait to read the group's health from EKS."""
        inputs = TrainingJobInputs(
            namespace=ray_cluster.namespace,
            cluster_name=ray_cluster.cluster_name,
            auth_secret_name=ray_cluster.auth_secret_name,
            **job_inputs(cfg, facts),
        )
        props: dict[str, Any] = {
            **{field.name: getattr(inputs, field.name) for field in dataclasses.fields(inputs)},
            "env_vars": secret_job_env(inputs.env_vars),
            "kubeconfig": pulumi.Output.secret(kubeconfig),
            **{key: (node_group or {}).get(key, "") for key in NODE_GROUP_PROPS},
            **{output: None for output in OUTPUT_NAMES},
        }
        # The kubeconfig is kept in the outputs because delete needs it to reach the cluster; the env stays a secret
        # in the outputs as in the inputs.
        secret = pulumi.ResourceOptions(additional_secret_outputs=["kubeconfig", "env_vars"])
        super().__init__(TrainingJobProvider(), name, props, pulumi.ResourceOptions.merge(secret, opts))
