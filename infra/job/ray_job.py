"""The training job as a Pulumi dynamic resource: preflight, submit, stream the logs, verify the NCCL transport.

`pulumi up` creates it after the RayCluster when `trainEnabled` is true. Create checks that the GPU nodes
advertise what the worker pods request, reaches the head's job server through a Kubernetes port-forward with
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

import contextlib
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping

import pulumi
import pulumi.dynamic
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from infra.stack.config import InstanceFacts, StackConfig, TrainExamples
from infra.job.preflight import to_stderr
from infra.kubernetes.raycluster import DASHBOARD_PORT as JOB_SERVER_PORT  # the head serves the Jobs API on its dashboard port
from workload.model import fp8  # standard library only: the preview's fp8 check and torchao's pin

if TYPE_CHECKING:
    from workload.config import TrainConfig as WorkloadConfig

# Each rank writes its own NCCL log here (%h host, %p pid), reads back its transport lines at the end and reports
# them in the summary, so the verdict does not depend on which worker output reaches the driver.
NCCL_DEBUG_FILE = "/tmp/nccl-%h-%p.log"
# The job server's port on the head pod (the dashboard serves the jobs API).
# Key of the token in the Secret KubeRay generates for authOptions.mode=token.
AUTH_TOKEN_KEY = "auth_token"
# What the failure message quotes of the job's log.
LOG_TAIL_LINES = 80
# Inputs that define the job: a change runs a new one. The rest (how to reach the cluster, the timeout, the
# expectation, what `up` waits for) is updated in place. The submission id follows from these.
REPLACE_ON_CHANGE = ("train_args", "run_id", "pip", "env_vars")
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


def submission_id(stack: str, run_id: str, train_args: list[str], pip: list[str], env_vars: dict[str, str]) -> str:
    """The Ray submission id of a run: the same for every create of the same job, another for another job.
    The env's values are hashed, never shown (trainEnv may hold a token)."""
    definition = json.dumps([stack, run_id, train_args, pip, sorted(env_vars.items())])
    return f"raytrain-{stack}-{run_id}-{hashlib.sha256(definition.encode()).hexdigest()[:8]}"


def follow_command(stack: str, job_id: str) -> str:
    return f"python -m tools.job logs {job_id} --follow --stack {stack} --kubeconfig kubeconfig.json"


# The workload's flags the stack sets, by the train* key that sets each (infra.stack.config.TrainConfig has the workload's
# field names), so that a refusal from the workload's own checks names what the user set.
STACK_KEYS = {
    "model_id": "trainModelId", "model_config": "trainModelConfig", "steps": "trainSteps",
    "batch_size": "trainBatchSize", "seq_len": "trainSeqLen", "learning_rate": "trainLearningRate",
    "num_workers": "trainNumWorkers", "max_failures": "trainMaxFailures", "checkpoint_every": "trainCheckpointEvery",
    "storage_path": "trainStoragePath", "sharding": "trainSharding", "reduce_dtype": "trainReduceDtype",
    "grad_accum_steps": "trainGradAccumSteps", "min_bus_gbytes_per_s": "trainMinBusBandwidthGBps",
    "lr_schedule": "trainLrSchedule", "warmup_steps": "trainWarmupSteps", "dataset": "trainDataset",
    "dataset_config": "trainDatasetConfig", "dataset_split": "trainDatasetSplit", "text_field": "trainTextField",
    "tokenizer": "trainTokenizer", "eval_split": "trainEvalSplit", "eval_fraction": "trainEvalFraction",
    "eval_every": "trainEvalEvery", "export": "trainExport", "fp8": "trainFp8",
}
# The flags of trainDataFormat and its keys (infra.stack.config.TrainExamples' fields), for naming only.
EXAMPLES_KEYS = {
    "data_format": "trainDataFormat", "messages_field": "trainMessagesField", "prompt_field": "trainPromptField",
    "completion_field": "trainCompletionField", "train_on_prompt": "trainOnPrompt",
    "chat_template": "trainChatTemplate", "truncation": "trainTruncation",
}
assert set(EXAMPLES_KEYS) == {field.name for field in dataclasses.fields(TrainExamples)}, "a TrainExamples field unnamed"
_FLAG = re.compile(r"--([a-z_]+)")


def stack_message(message: str) -> str:
    """A refusal of the workload's, with its flags (--checkpoint_every) named as the stack keys that set them."""
    stack_keys = {**STACK_KEYS, **EXAMPLES_KEYS}
    keys = [stack_keys[flag] for flag in _FLAG.findall(message) if flag in stack_keys]
    named = _FLAG.sub(lambda match: stack_keys.get(match.group(1), match.group(0)), message)
    if not keys:
        return f"train* config keys do not make a valid job: {named}"
    return f"config key{'s' if len(set(keys)) > 1 else ''} {', '.join(repr(k) for k in dict.fromkeys(keys))}: {named}"


def workload_config(cfg: StackConfig, facts: InstanceFacts) -> "WorkloadConfig":
    """The workload's own config for the stack's train* keys, validated by the workload itself."""
    from workload.config import TrainConfig as WorkloadConfig

    train = cfg.train
    if train is None:
        raise ValueError("trainEnabled: the stack config has no train settings")
    # An unknown GPU (tools.job submit, away from EC2) is left to the job's own device check (workload.model.fp8).
    if train.fp8 and facts.gpu_name and not fp8.gpu_has_fp8(facts.gpu_name):
        raise ValueError(f"config key 'trainFp8': {facts.instance_type}'s {facts.gpu_name or 'GPU'} has no fp8 tensor "
                         f"cores; allowed: false, or true on {', '.join(fp8.FP8_GPUS)} instances")
    try:
        workload = WorkloadConfig(
            **{name: getattr(train, name) for name in STACK_KEYS},
            **examples_flags(train.examples),
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
    """trainPip, plus what the job's flags need beyond the image: torchao for trainFp8 (unless trainPip names it)."""
    pip = list(train.pip)

    def name(entry: str) -> str:
        try:
            return canonicalize_name(Requirement(entry).name)
        except InvalidRequirement:
            return entry  # a URL or a path: never torchao by name

    if train.fp8 and "torchao" not in {name(entry) for entry in pip}:
        pip.append(fp8.TORCHAO_REQUIREMENT)
    return pip


def examples_flags(examples: TrainExamples) -> dict[str, Any]:
    """trainDataFormat and its keys as the workload's fields of the same names (--data_format, --messages_field...)."""
    return dataclasses.asdict(examples)


def job_inputs(cfg: StackConfig, facts: InstanceFacts) -> dict[str, Any]:
    """The job's inputs from the stack config: the workload's flags, its runtime_env and the checks.

    Everything but the RayCluster's identity, which comes from the RayCluster's outputs (so the job waits for it).
    """
    from infra.job.preflight import WorkerRequest

    workload = workload_config(cfg, facts)
    train = cfg.train
    # NCCL_DEBUG_FILE goes first so that trainEnv can still send NCCL's log elsewhere.
    env_vars = {"NCCL_DEBUG_FILE": NCCL_DEBUG_FILE, **train.env}
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


@dataclass(frozen=True)
class JobServer:
    """Where the Ray job server answers, and the token it wants (None when auth is off)."""

    address: str
    token: str | None


# (props, preflight) -> a context in which the job server is reachable. The seam tests replace.
JobServerConnector = Callable[[Mapping[str, Any], bool], ContextManager[JobServer]]


def read_auth_token(api_client: Any, namespace: str, secret_name: str) -> str:
    """The RayCluster's token from its Secret. Never logged: callers pass it straight to the job client."""
    import base64

    from kubernetes import client

    try:
        secret = client.CoreV1Api(api_client).read_namespaced_secret(secret_name, namespace)
    except client.ApiException as e:
        raise RuntimeError(f"cannot read the RayCluster's auth Secret {namespace}/{secret_name}: "
                           f"{e.status} {e.reason}") from None
    data = secret.data or {}
    if AUTH_TOKEN_KEY not in data:
        raise RuntimeError(f"Secret {namespace}/{secret_name} has no {AUTH_TOKEN_KEY!r} key")
    return base64.b64decode(data[AUTH_TOKEN_KEY]).decode()


@contextlib.contextmanager
def kubernetes_job_server(props: Mapping[str, Any], preflight: bool) -> Iterator[JobServer]:
    """Preflight (when asked), then the RayCluster's job server (head_job_server)."""
    from infra.job.preflight import WorkerRequest, kubernetes_client, run_preflight

    api_client = kubernetes_client(props["kubeconfig"])
    if preflight:
        run_preflight(api_client, WorkerRequest.from_props(props))
    with head_job_server(api_client, props["namespace"], props["cluster_name"], props["auth_secret_name"]) as server:
        yield server


@contextlib.contextmanager
def head_job_server(api_client: Any, namespace: str, cluster_name: str, secret_name: str) -> Iterator[JobServer]:
    """The token from the RayCluster's Secret, and a port-forward to its head pod's job server."""
    from infra.kubernetes.portforward import forward_to_pod, head_pod_name

    token = read_auth_token(api_client, namespace, secret_name)
    pod = head_pod_name(api_client, namespace, cluster_name)
    with forward_to_pod(api_client, namespace, pod, JOB_SERVER_PORT) as forward:
        yield JobServer(forward.address, token)


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
        from workload.run import submit
        from workload.fabric import transport

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
        from workload.run import submit
        from workload.fabric import transport

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
        """`pulumi refresh`: the job's status now and, once it has succeeded, its results. A job the job server no
        longer knows (a RayCluster made anew) is gone from the state, and the next `up` runs it again."""
        from workload.run import submit
        from workload.fabric import transport

        with self._job_server(props, False) as server:
            client = submit.connect(server.address, server.token)
            info = submit.job_info(client, id_)
            if info is None:
                return pulumi.dynamic.ReadResult("", {})
            outs = {**props, "status": info.status.value}
            logs = client.get_job_logs(id_) if info.status.value == "SUCCEEDED" else ""
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
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
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
            **{output: None for output in OUTPUT_NAMES},
        }
        # The kubeconfig is kept in the outputs because delete needs it to reach the cluster; the env stays a secret
        # in the outputs as in the inputs.
        secret = pulumi.ResourceOptions(additional_secret_outputs=["kubeconfig", "env_vars"])
        super().__init__(TrainingJobProvider(), name, props, pulumi.ResourceOptions.merge(secret, opts))
