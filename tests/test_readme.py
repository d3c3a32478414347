"""The README's command sequences, followed in order as a user types them, through the same entry points.

- The first set-up line runs for real: `bash scripts/setup.sh && .venv/bin/python -m workload.local`.
- "The commands" (the real-cluster journey), "The cluster from your machine", "Long runs" and "Tools" run in a
  copy of the project, with stand-ins for what this machine cannot have: AWS is moto, plus answers in the
  services' real shapes for the APIs moto lacks (service quotas, Spot placement scores, capacity reservations);
  `pulumi` is a stand-in that keeps the stack files as the CLI does (`stack select/init`, `config set`,
  `stack output`) and runs the program under Pulumi's mocks for `up`; the API server is a local HTTP server
  answering for the RayCluster, its pods, its token Secret, the nodes and the device-plugin DaemonSets;
  `aws eks get-token` is a script that prints a token.
- "Long runs" also creates the training job as the engine would: the TrainingJob's own provider, unpickled from
  what the program registered, runs its create (preflight, token, submission, transport check) for real. Its job
  server is tests/fake_ray_jobs.py, which speaks the Ray Jobs API but replays a training log instead of training
  (an EFA job of the dev stack's shape, so trainExpectTransport=efa holds as the stack file says), reached through
  a local port-forward in place of the Kubernetes API's. tests/test_ray_job.py runs the same provider and
  `tools.job` against a real Ray head and a real job.
- The finder-then-`pulumi up` flow runs for every stack file, with capacityReserve on and off.

A command the stand-ins do not know fails the test, and so does a `pulumi config set` whose effect on the
program this file does not check: when the README changes, this file changes with it. Blocks fenced without
`bash` (kubectl, `aws eks ...`) need a real cluster or account and are not followed.
"""
from __future__ import annotations

import contextlib
import io
import base64
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import dill
import pytest
import yaml
from botocore.awsrequest import AWSResponse
from pulumi.runtime.rpc import unwrap_rpc_secret
from ruamel.yaml import YAML

from infra.kubernetes import portforward
from infra.kubernetes.raycluster import DASHBOARD_PORT
from tests.fake_ray_jobs import FakeRayJobServer
from tests.http_stubs import JsonServer
from tests.pulumi_mocks import PROJECT, STACKS, ProgramRun, run_program, stack_settings
from tests.test_capacity import quota_answer, reservation
from tools import job as job_cli
from tools import status
from tools.capacity import cli as finder
from tools.capacity.aws import Aws
from workload import cli, train
from workload.fabric import transport
from workload.config import SUMMARY_PREFIX

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
JOB = "pulumi-python:dynamic/raytrain:TrainingJob"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
RESERVATION = "pulumi-python:dynamic/raytrain:GpuCapacityReservation"
NCCL_EFA_LOG = REPO / "tests" / "fixtures" / "nccl" / "efa-synthetic-2x4-g6.12xlarge.log"


def bash_block(after: str) -> list[str]:
    """The commands of the first ```bash block after the text `after`: comments dropped, `&&` chains split."""
    start = README.index("```bash", README.index(after)) + len("```bash")
    commands = []
    for line in README[start:README.index("```", start)].splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        commands += [part.strip() for part in line.split("&&") if part.strip()]
    return commands


def sample_block(after: str) -> list[str]:
    """The lines of the first plain ``` block after the text `after` (a sample output), `...` lines dropped."""
    start = README.index("```\n", README.index(after)) + 4
    return [line for line in README[start:README.index("```", start)].splitlines() if line != "..."]


# ---- AWS: moto, and canned answers for what moto lacks -------------------------------------------------------

def _note_params(params: dict, context: dict, **_) -> None:
    context["api_params"] = dict(params)


class JourneyAws(Aws):
    """moto for what moto emulates. For the rest, answers in every region: ample quota, no reservations, Spot
    scores only in `region`, where the second AZ scores best (so the finder's pick is visibly not the default
    first AZ), and probes that succeed."""

    def __init__(self, region: str):
        super().__init__()
        self.region = region

    def _answering(self, service: str, region: str, answers: dict[str, Callable[[dict], dict]]):
        client = self.client(service, region)
        service_id = client.meta.service_model.service_id.hyphenize()
        for operation, answer in answers.items():
            # What botocore's Stubber does: the call's parameters are noted before they are serialized, and a
            # before-call handler that returns a response short-circuits the HTTP request.
            client.meta.events.register(f"before-parameter-build.{service_id}.{operation}", _note_params)
            client.meta.events.register(
                f"before-call.{service_id}.{operation}",
                lambda context, answer=answer, **_: (AWSResponse("", 200, {}, None), answer(context["api_params"])))
        return client

    def quotas(self, region: str):
        return self._answering("service-quotas", region, {
            "GetServiceQuota": lambda params: quota_answer(region, params["QuotaCode"], 4096)})

    def spot_scores(self, region: str):
        zones = sorted((zone["ZoneName"], zone["ZoneId"])
                       for zone in self.ec2(region).describe_availability_zones()["AvailabilityZones"])
        scores = [{"Region": region, "AvailabilityZoneId": zone_id, "Score": 9 if index == 1 else 5}
                  for index, (_, zone_id) in enumerate(zones)] if region == self.region else []
        return self._answering("ec2", region, {
            "GetSpotPlacementScores": lambda params: {"SpotPlacementScores": scores}})

    def reservations(self, region: str):
        return self._answering("ec2", region, {
            "DescribeCapacityReservations": lambda params: {"CapacityReservations": []},
            "CreateCapacityReservation": lambda params: {"CapacityReservation": reservation(
                "cr-0123456789abcdef1", params["AvailabilityZone"], instance_type=params["InstanceType"])},
            "CancelCapacityReservation": lambda params: {"Return": True},
        })


# ---- Kubernetes: a local API server, and `aws eks get-token` --------------------------------------------------

def _node(name: str, labels: dict, allocatable: dict) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, kind: str, node: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ray",
                         "labels": {"ray.io/cluster": "ray-train", "ray.io/node-type": kind}},
            "spec": {"nodeName": node, "containers": [{"name": "ray", "image": "ray"}]},
            "status": {"phase": "Running"}}


JOB_SERVER_TOKEN = "journey-ray-token"


def _daemonset(name: str) -> dict:
    labels = {"app.kubernetes.io/instance": name}
    return {"metadata": {"name": name, "namespace": "kube-system", "labels": labels},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "containers": [{"name": name, "image": name}]}}},
            "status": {"currentNumberScheduled": 2, "desiredNumberScheduled": 2, "numberMisscheduled": 0,
                       "numberReady": 2}}


class FakeKubeApi(JsonServer):
    """What `tools.status`, `tools.job` and the job's preflight read, answered as an EKS API server would for the
    dev stack's cluster (list answers honour labelSelector)."""

    GPU_NODE_LABELS = {"role": "gpu-worker", "node.kubernetes.io/instance-type": "g6.12xlarge",
                       "topology.kubernetes.io/zone": "us-west-2b"}
    ANSWERS = {
        "/apis/ray.io/v1/namespaces/ray/rayclusters/ray-train": {
            "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray-train", "namespace": "ray"},
            "status": {"state": "ready", "readyWorkerReplicas": 2, "desiredWorkerReplicas": 2,
                       "conditions": [{"type": "RayClusterProvisioned", "status": "True"}]}},
        "/api/v1/namespaces/ray/pods": {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
            _pod("ray-train-head-x1", "head", "ip-10-0-1-1"),
            _pod("ray-train-gpu-workers-worker-a", "worker", "ip-10-0-64-1"),
            _pod("ray-train-gpu-workers-worker-b", "worker", "ip-10-0-64-2")]},
        "/api/v1/nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": [
            _node("ip-10-0-1-1", {"role": "system"}, {"cpu": "4"}),
            _node("ip-10-0-64-1", GPU_NODE_LABELS, {"nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"}),
            _node("ip-10-0-64-2", GPU_NODE_LABELS, {"nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"})]},
        "/api/v1/namespaces/ray/secrets/ray-train": {"apiVersion": "v1", "kind": "Secret", "metadata": {
            "name": "ray-train", "namespace": "ray"}, "data": {"auth_token": base64.b64encode(
                JOB_SERVER_TOKEN.encode()).decode()}},
        "/apis/apps/v1/namespaces/kube-system/daemonsets": {"apiVersion": "apps/v1", "kind": "DaemonSetList",
                                                            "metadata": {}, "items": [
            _daemonset("nvidia-device-plugin"), _daemonset("aws-efa-k8s-device-plugin")]},
    }

    def __init__(self) -> None:
        super().__init__(self.ANSWERS)


# ---- the shell that follows the README ---------------------------------------------------------------------

# What each `pulumi config set KEY` of the README must change in the program's next run.
def _job(run: ProgramRun):
    jobs = run.of_type(JOB)
    return jobs[0] if jobs else None


def _flags(run: ProgramRun) -> dict[str, str]:
    args = _job(run).inputs["train_args"]
    return dict(zip(args[::2], args[1::2]))


def _pod_role_policies(run: ProgramRun) -> list[str]:
    """The inline policies of the Ray pods' role (infra/aws/pod_identity.py), the only role with checkpoint access."""
    roles = {r.urn for r in run.of_type("aws:iam/role:Role") if "pods.eks.amazonaws.com" in r.inputs["assumeRolePolicy"]}
    return [str(r.inputs["policy"]) for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.parent in roles]


CONFIG_EFFECTS: dict[str, Callable[[ProgramRun, str], Any]] = {
    "trainEnabled": lambda run, value: (_job(run) is not None) == (value == "true"),
    "trainRunId": lambda run, value: (_job(run).inputs["run_id"] == value
                                      and _flags(run)["--run_name"].startswith(f"ray-train-fsdp-llm-{value}-")),
    "trainStoragePath": lambda run, value: (_flags(run)["--storage_path"] == value and len(
        [p for p in _pod_role_policies(run) if f"arn:aws:s3:::{value[5:].split('/')[0]}" in p]) == 1),
    "trainCheckpointEvery": lambda run, value: _flags(run)["--checkpoint_every"] == value,
    "trainMaxFailures": lambda run, value: _flags(run)["--max_failures"] == value,
    "trainDataset": lambda run, value: _flags(run)["--dataset"] == value,
    "trainDatasetConfig": lambda run, value: _flags(run)["--dataset_config"] == value,
    "trainEvalSplit": lambda run, value: _flags(run)["--eval_split"] == value,
    "trainEvalEvery": lambda run, value: _flags(run)["--eval_every"] == value,
    "capacityReserve": lambda run, value: bool(run.of_type(RESERVATION)) == (value == "true"),
    "trainWait": lambda run, value: _job(run).inputs["wait"] == value,
    "trainTimeoutMinutes": lambda run, value: _job(run).inputs["timeout_s"] == 60 * int(value),
    "trainModelId": lambda run, value: (_flags(run)["--model_id"] == value
                                        and run.exports["jobMemoryPlan"]["fits"] is True),
}
# The job's stack outputs (__main__.py's exports) and the provider outputs they read.
JOB_EXPORTS = {"jobId": "job_id", "jobStatus": "status", "jobFollow": "follow", "jobFinalLoss": "final_loss",
               "jobTokensPerSecond": "tokens_per_s", "jobWorldSize": "world_size",
               "jobTransportVerdicts": "verdicts", "jobCheckpoint": "checkpoint"}


# The commands the README runs, by module: each one's own main, run as `python -m MODULE` would.
COMMANDS = {"tools.status": status.main, "workload.transport": transport.main, "tools.job": job_cli.main,
            "workload.train": train.main}


class Shell:
    """Follows README commands one line at a time, in `workdir` (a copy of the project's stack files)."""

    def __init__(self, workdir: Path, aws: Aws, kube_api: FakeKubeApi | None = None, creates_jobs: bool = False):
        self.workdir, self.aws, self.kube_api = workdir, aws, kube_api
        self.stack: str | None = None
        self.run: ProgramRun | None = None
        self.pending: dict[str, str] = {}  # keys set since the last `up`, to check against its run
        self.outputs: list[str] = []
        # With creates_jobs, `up` creates the TrainingJob through its provider (the engine's part), and these are
        # that create's outputs, which the job's stack outputs then read.
        self.creates_jobs = creates_jobs
        self.job: dict | None = None

    def __call__(self, line: str) -> str:
        argv = shlex.split(line)
        target = None
        if ">" in argv:
            argv, target = argv[:argv.index(">")], argv[argv.index(">") + 1]
        if argv[:2] == ["bash", "scripts/setup.sh"]:
            out = ""  # this test runs inside the environment it builds
        elif argv[:2] == [".venv/bin/python", "-m"]:
            out = self.python(argv[2], argv[3:])
        elif argv[0] == "pulumi":
            out = self.pulumi(argv[1:])
        else:
            raise AssertionError(f"the README shows `{line}`, which tests/test_readme.py cannot follow: teach it")
        if target:
            (self.workdir / target).write_text(out)
        self.outputs.append(out)
        return out

    # -- `.venv/bin/python -m MODULE ...`: the module's own main, in this process -----------------------------
    def python(self, module: str, args: list[str]) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.chdir(self.workdir):
            if module == "tools.capacity":
                code = finder.main([*args, "--project-dir", str(self.workdir)], aws=self.aws)
            elif module in COMMANDS:
                try:
                    code = cli.run(COMMANDS[module], args)
                except SystemExit as exited:  # --help
                    code = exited.code
            else:
                raise AssertionError(f"the README runs `python -m {module}`, unknown to tests/test_readme.py")
        assert code == cli.OK, f"`python -m {module} {shlex.join(args)}` exited {code}:\n{out.getvalue()}"
        return out.getvalue()

    # -- `pulumi ...` ----------------------------------------------------------------------------------------
    def pulumi(self, args: list[str]) -> str:
        if args[:2] in (["stack", "select"], ["stack", "init"]):
            self.stack = args[2]
            assert (self.workdir / f"Pulumi.{self.stack}.yaml").is_file(), f"no stack file for {self.stack}"
            return ""
        if args[:2] == ["config", "set"]:
            key, value = [arg for arg in args[2:] if not arg.startswith("--")]
            self.set_config(key, value)
            return ""
        if args == ["up"]:
            self.run = run_program(self.stack, project_dir=self.workdir)
            for key, value in self.pending.items():
                assert key in CONFIG_EFFECTS, f"`pulumi config set {key}`: teach CONFIG_EFFECTS what it changes"
                assert CONFIG_EFFECTS[key](self.run, value) is True, (
                    f"after `pulumi config set {key} {value}`, `pulumi up` did not reflect it")
            self.pending.clear()
            if self.creates_jobs and _job(self.run) is not None:
                self.create_job(_job(self.run))
            return f"{len(self.run.resources)} resources"
        if args[:2] == ["stack", "output"]:
            assert self.run is not None, "`pulumi stack output` before any `pulumi up`"
            name = args[2]
            assert name in self.run.exports, f"the README reads stack output {name}; the program exports " \
                                             f"{sorted(self.run.exports)}"
            if name in self.run.secret_exports and "--show-secrets" not in args:
                return "[secret]"
            value = self.job[JOB_EXPORTS[name]] if self.job and name in JOB_EXPORTS else self.run.exports[name]
            if name == "kubeconfig":
                return self.kubeconfig(value)
            return value if isinstance(value, str) else json.dumps(value)
        if args == ["destroy"]:
            # Pulumi deletes in reverse dependency order: the RayCluster must go while the operator still runs,
            # and the job before the RayCluster.
            operator = next(r for r in self.run.of_type("kubernetes:helm.sh/v3:Release") if "kuberay" in r.name)
            ray_cluster = self.run.one(RAYCLUSTER)
            assert operator.urn in ray_cluster.dependencies, "the RayCluster must depend on the KubeRay operator"
            if _job(self.run):
                assert ray_cluster.urn in _job(self.run).dependencies, "the job must depend on the RayCluster"
            self.run = None
            return ""
        raise AssertionError(f"the README runs `pulumi {shlex.join(args)}`, unknown to tests/test_readme.py")

    def set_config(self, key: str, value: str) -> None:
        """As `pulumi config set` does: a project key gets the project's prefix; values are kept as text."""
        path = self.workdir / f"Pulumi.{self.stack}.yaml"
        document = YAML()
        data = document.load(path.read_text())
        data["config"][key if ":" in key else f"{PROJECT}:{key}"] = value
        with path.open("w") as stream:
            document.dump(data, stream)
        self.pending[key] = value

    def create_job(self, registered) -> None:
        """What the engine does with a new (or replaced) TrainingJob: unpickle its provider and call create with
        the inputs, secrets as plain values (the dynamic provider does not accept secrets)."""
        props = {key: unwrap_rpc_secret(value) for key, value in registered.inputs.items()}
        provider = dill.loads(base64.b64decode(props.pop("__provider")))
        if self.job and self.job["submission_id"] == props["submission_id"]:
            return  # the same job: no change, nothing created
        assert self.job is None, "a replaced job: teach the stand-in delete-before-replace"
        props["kubeconfig"] = self.kubeconfig(props["kubeconfig"])  # the cluster's kubeconfig text, as JSON
        self.job = provider.create(props).outs

    def kubeconfig(self, text: str) -> str:
        """The program's kubeconfig, pointed at this test's API server: the mocked EKS endpoint does not exist."""
        kubeconfig = json.loads(text)
        assert kubeconfig["users"][0]["user"]["exec"]["command"] == "aws", "the token comes from aws eks get-token"
        if self.kube_api is not None:
            kubeconfig["clusters"][0]["cluster"] = {"server": self.kube_api.url}
        return json.dumps(kubeconfig)


@pytest.fixture
def project(tmp_path) -> Path:
    for path in REPO.glob("Pulumi*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


@pytest.fixture
def job_server(monkeypatch):
    """The stand-in job server, and the Kubernetes port-forward to the head pod replaced by a local one to it."""
    forwarded: list[tuple[str, str, int]] = []

    def forward_to_pod(api_client, namespace, pod, port):
        forwarded.append((namespace, pod, port))
        return portforward.LocalForward(lambda: socket.create_connection(("127.0.0.1", server.port), timeout=30))

    monkeypatch.setattr(portforward, "forward_to_pod", forward_to_pod)
    with FakeRayJobServer(JOB_SERVER_TOKEN) as server:
        yield server
    assert forwarded and set(forwarded) == {("ray", "ray-train-head-x1", DASHBOARD_PORT)}, (
        f"every port-forward goes to the running head pod's job server port: {set(forwarded)}")


@pytest.fixture
def kube_api(tmp_path, monkeypatch):
    server = FakeKubeApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # `aws eks get-token`, as the kubeconfig's exec plugin runs it: an ExecCredential with a token.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text('#!/bin/sh\necho \'{"apiVersion": "client.authentication.k8s.io/v1beta1", '
                                 '"kind": "ExecCredential", "status": {"token": "k8s-aws-v1.journey"}}\'\n')
    (bin_dir / "aws").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield server
    server.shutdown()


# ---- the journeys ------------------------------------------------------------------------------------------

def test_the_real_cluster_journey_as_written(project, aws_env, kube_api):
    region = stack_settings("dev")["aws:region"]
    shell = Shell(project, JourneyAws(region), kube_api)
    commands = bash_block("### The commands")
    assert any("tools.capacity" in c for c in commands) and "pulumi up" in commands, commands
    for command in commands:
        shell(command)
        if "tools.capacity" in command:
            written = yaml.safe_load((project / "Pulumi.dev.yaml").read_text())["config"]
            assert written["aws:region"] == region and written[f"{PROJECT}:gpuAvailabilityZone"] == f"{region}b", (
                f"the finder's best AZ (the best Spot score) goes into the stack file: {written}")
            assert f"{PROJECT}:capacityCandidateAzs" not in written, "dev reserves nothing: no candidate list"
            shown = [line for line in sample_block("`python -m tools.capacity --instance-type g6.12xlarge")
                     if line.startswith(("rank ", "1 ", "2 ", "Wrote "))]
            # Columns are as wide as their widest cell: the README searched two regions, this every region.
            printed = [" ".join(line.split()) for line in shell.outputs[-1].splitlines()]
            assert len(shown) == 4 and all(" ".join(line.split()) in printed for line in shown), (
                f"the README's sample of the finder is what it prints: {shown}\n{shell.outputs[-1]}")
    assert shell.run is None, "the README's journey ends with pulumi destroy"


def test_the_cluster_from_your_machine_and_the_tools(project, aws_env, kube_api):
    shell = Shell(project, JourneyAws("us-east-2"), kube_api)
    shell("pulumi stack select dev")
    shell("pulumi up")
    for command in bash_block("### The cluster from your machine"):
        out = shell(command)
    assert "ray-train-gpu-workers-worker-a" in out and "ip-10-0-64-2" in out, f"tools.status's tables:\n{out}"
    shown = sample_block("`python -m tools.status --kubeconfig kubeconfig.json --stack dev`:")
    assert shown[-1] == "No training job running." and "\n".join(shown[:-1]) in out, (
        f"the README's sample of tools.status is what it prints (but the job line, with no job server here):\n{out}")
    assert kube_api.authorizations and set(kube_api.authorizations) == {"Bearer k8s-aws-v1.journey"}, (
        "every API call carries the token from `aws eks get-token`")

    shutil.copy(NCCL_EFA_LOG, project / "job.log")
    outputs = {command: shell(command) for command in bash_block("## Tools")}
    probe = next(out for command, out in outputs.items() if "--probe" in command)
    assert "ok" in probe and "us-east-2" in probe, f"the probe ranks the probed AZs:\n{probe}"
    verdict = next(json.loads(out) for command, out in outputs.items() if "workload.transport" in command)
    assert verdict["ok"] and set(verdict["verdicts"].values()) <= {"efa", "intra-node"}, verdict


def test_the_long_run_flow_as_written(project, aws_env, kube_api, job_server):
    shell = Shell(project, JourneyAws("us-west-2"), kube_api, creates_jobs=True)
    for command in ("pulumi stack select dev", "pulumi up", "pulumi stack output kubeconfig --show-secrets > "
                    "kubeconfig.json", "pulumi config set trainEnabled true"):
        shell(command)
    outputs = [(command, shell(command)) for command in bash_block("### Long runs")]
    said = {command.split(" --")[0].split("python -m ")[-1]: out for command, out in outputs}
    (job_id,) = job_server.jobs
    job = job_server.jobs[job_id]
    assert job.metadata == {"raytrain.stack": "dev", "raytrain.run_id": "3"} and job_id.startswith("raytrain-dev-3-"), (
        f"`pulumi up` submitted one job for the stack's run 3: {job_id} {job.metadata}")
    assert "--time_limit_s 172800" in job.entrypoint, f"trainTimeoutMinutes 2880 is the job's own limit: {job.entrypoint}"
    assert shell.job["status"] == "RUNNING" and set(shell.job["verdicts"].values()) == {"efa", "intra-node"}, (
        f"`up` returned with the job running and its EFA transport checked: {shell.job}")
    assert said["pulumi stack output jobFollow"].startswith(f"python -m tools.job logs {job_id} --follow"), said
    assert f"Job {job_id} RUNNING (run 3); follow it: python -m tools.job logs --follow --stack dev --kubeconfig " \
        "kubeconfig.json" in said["tools.status"], f"status names the running job:\n{said['tools.status']}"
    assert re.search(rf"{job_id}\s+RUNNING\s+3\s", said["tools.job list"]), said["tools.job list"]
    followed = said["tools.job logs"]
    assert "step 50/50 loss" in followed and followed.rstrip().endswith(f"job {job_id} SUCCEEDED"), (
        f"`logs --follow` streams the job's progress until it ends: {followed[-500:]}")
    summary = json.loads(said["tools.job summary"])
    assert (summary["status"], summary["final_loss"], summary["steps"]) == ("SUCCEEDED", 2.0, 50), summary
    assert said["tools.job stop"].strip() == f"job {job_id} already SUCCEEDED: nothing to stop", said["tools.job stop"]


def test_an_8b_model_on_p5_as_written(project, aws_env):
    shell = Shell(project, JourneyAws("us-east-2"))
    outputs = [shell(command) for command in bash_block("### Your model in")]
    assert shell.stack == "p5" and _flags(shell.run)["--model_id"] == "Qwen/Qwen3-8B", _flags(shell.run)
    plan = json.loads(outputs[-1])
    assert plan["fits"] and plan["changed"] == [] and plan["shards"] == 8, f"p5 fits Qwen3-8B as requested: {plan}"
    assert f'"peak_gib": {plan["peak_gib"]}' in README, f"the README shows the plan's peak, {plan['peak_gib']} GiB"


def test_the_model_table_is_what_the_preview_says():
    from bench import model_table

    assert model_table.in_readme(README) == model_table.markdown(), \
        "README's model table is stale: python -m bench.model_table --write"


@pytest.mark.parametrize("reserve", [False, True], ids=["on-demand", "capacityReserve"])
@pytest.mark.parametrize("stack", STACKS)
def test_the_finder_then_pulumi_up_for_every_stack(project, aws_env, stack, reserve):
    settings = stack_settings(stack)
    instance_type, count, region = settings["gpuInstanceType"], settings["gpuNodeCount"], settings["aws:region"]
    shell = Shell(project, JourneyAws(region))
    shell(f"pulumi stack select {stack}")
    shell(f"pulumi config set capacityReserve {str(reserve).lower()}")
    finder_line = next(c for c in bash_block("### The commands") if "tools.capacity" in c)
    shell(re.sub(r"--instance-type \S+ --count \S+ --write-stack \S+",
                 f"--instance-type {instance_type} --count {count} --write-stack {stack}", finder_line))
    written = yaml.safe_load((project / f"Pulumi.{stack}.yaml").read_text())["config"]
    best = written[f"{PROJECT}:gpuAvailabilityZone"]
    shell("pulumi up")
    run = shell.run
    assert run.exports["gpuAvailabilityZone"] == best, f"{stack}: the GPU nodes land where the finder pointed"
    if reserve:
        (reservation_,) = run.of_type(RESERVATION)
        assert reservation_.inputs["candidate_azs"] == written[f"{PROJECT}:capacityCandidateAzs"], (
            f"{stack}: the reservation tries the finder's ranking in order")
        assert reservation_.inputs["candidate_azs"][0] == best
    else:
        assert f"{PROJECT}:capacityCandidateAzs" not in written, f"{stack}: no candidate list without a reservation"
        assert not run.of_type(RESERVATION), f"{stack}: nothing reserved"


def python_block(after: str) -> str:
    """The first ```python block after the text `after`."""
    start = README.index("```python", README.index(after)) + len("```python")
    return README[start:README.index("```", start)]


# What differs between two runs of the same command: ids, ports, timings, where the repository is.
RUN_TO_RUN = [
    (re.compile(r"raysubmit_\w+"), "raysubmit_ID"),
    (re.compile(r"http://127\.0\.0\.1:\d+"), "http://127.0.0.1:PORT"),
    (re.compile(r"\S*/local-\d{8}-\d{6}-\d+"), "RUN"),
    (re.compile(r"step_time [0-9.]+s tokens/s [0-9,]+"), "step_time Ts tokens/s N"),
    (re.compile(r"in \d+ s; "), "in T s; "),
    (re.compile(r"; [0-9,]+ tokens/s$"), "; N tokens/s"),
    (re.compile(r"(all_reduce|all_gather|reduce_scatter) [0-9.]+"), r"\1 B"),
    (re.compile(r"^TRAIN_SUMMARY .*"), "TRAIN_SUMMARY {...}"),
]


def _same_in_any_run(line: str) -> str:
    for pattern, replacement in RUN_TO_RUN:
        line = pattern.sub(replacement, line)
    return line


def check_example_output(readme_block: str, printed: str) -> None:
    """The README's example output is a real run's: each of its lines (but `...`) is a line the run printed, in
    order, and each kind of line the run printed (all but the elided steps) is in the README."""
    shown = [_same_in_any_run(line) for line in readme_block.splitlines() if line != "..."]
    said = [_same_in_any_run(line) for line in printed.splitlines()]
    position = 0
    for line in shown:
        assert line in said[position:], f"the README shows {line!r}, which the run did not print (in that order):\n" \
                                        + "\n".join(said)
        position = said.index(line, position) + 1
    elided = re.compile(r"^step \d+/\d+ (loss|eval_loss) ")
    missing = [line for line in said if line not in shown and not elided.match(line)]
    assert not missing, f"the run printed lines the README's example leaves out: {missing}"


@pytest.fixture
def runs_it_leaves():
    """The README's first command writes under the repository's runs/local/, as it says; the run directories this
    test made there are removed after it (a user's own runs stay)."""
    runs = REPO / "runs" / "local"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    yield
    for made in (set(runs.iterdir()) if runs.is_dir() else set()) - before:
        shutil.rmtree(made, ignore_errors=True)


def test_the_first_set_up_command_as_written(tmp_path, runs_it_leaves):
    """`bash scripts/setup.sh && .venv/bin/python -m workload.local`: a second setup installs nothing, and the local
    run's output is what the README shows: the losses, the exported model's generation, the picture of its curves.
    The model it exported then loads as the real-cluster section loads its own."""
    command = bash_block("# Ray Train + FSDP on EKS with EFA")[:2]
    assert command == ["bash scripts/setup.sh", ".venv/bin/python -m workload.local"], command
    done = subprocess.run(" && ".join(command), shell=True, cwd=REPO, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for unwanted in ("Traceback", "deprecated", "PreemptionWatcher", "Reporting training result", " INFO "):
        assert unwanted not in output, f"the local run must not print {unwanted!r}:\n{output[-4000:]}"
    start = README.index("```\n", README.index("Its output\n(`--verbose`")) + 4
    # The example is the local run's output; setup.sh's own `setup:` lines come first (tests/test_setup.py).
    run_output = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("setup: "))
    check_example_output(README[start:README.index("```", start)], run_output)
    summaries = [line for line in done.stdout.splitlines() if line.startswith(SUMMARY_PREFIX)]
    assert len(summaries) == 1 and done.stdout.splitlines()[-1] == summaries[0], "the summary once, as the last line"
    summary = json.loads(summaries[0][len(SUMMARY_PREFIX):])
    steps = summary["steps"]
    losses = [float(m) for m in re.findall(rf"step \d+/{steps} loss ([0-9.]+)", done.stdout)]
    assert len(losses) == steps and summary["final_loss"] < 0.75 * losses[0], f"the loss must visibly fall: {losses}"
    evaluations = [float(m) for m in re.findall(rf"step \d+/{steps} eval_loss ([0-9.]+)", done.stdout)]
    assert evaluations == sorted(evaluations, reverse=True) and evaluations[-1] < 0.75 * losses[0], (
        f"the held-out loss must fall too: {evaluations}")
    shown = [float(m) for m in re.findall(rf"step (?:1|{steps})/{steps} loss ([0-9.]+)", README)]
    assert shown == pytest.approx([losses[0], losses[-1]], abs=0.05), (
        f"the README's example losses {shown} must be what a run prints: {losses[0]}, {losses[-1]}")
    shown_eval = [float(m) for m in re.findall(rf"step {steps}/{steps} eval_loss ([0-9.]+)", README)]
    assert shown_eval == pytest.approx([evaluations[-1]], abs=0.05), (shown_eval, evaluations)

    # The generation: a line of the corpus, completed by the exported model loaded with from_pretrained.
    (generated,) = re.findall(r'^from_pretrained\((.+)\)\.generate\(\'the cat\'\): (".*")$', done.stdout, re.M)
    assert generated[0] == summary["model"], f"the model the summary names is the one that generates: {generated}"
    corpus = (REPO / "data" / "corpus.txt").read_text().splitlines()
    assert json.loads(generated[1]) in corpus, f"after its steps the model completes a corpus line: {generated}"
    assert re.search(r'\.generate\(\'the cat\'\): "the cat [a-z ]+ \."', README), "and the README shows one"

    # The README's picture is tools.loss_curve's drawing of a run like this one: every step, every evaluation.
    picture = re.search(r"!\[[^]]*\]\((docs/[^)]+\.svg)\)", README).group(1)
    lines = re.findall(r'<polyline [^>]*points="([^"]*)"><title>([^<]*)</title>', (REPO / picture).read_text())
    drawn = {name: len(points.split()) for points, name in lines}
    assert drawn == {"training loss": steps, "held-out loss": len(evaluations), "learning rate": steps}, drawn
    from tools import loss_curve

    run_directory = os.path.dirname(summary["tensorboard"])
    assert loss_curve.main([run_directory, "--out", str(tmp_path / "run.svg")]) == cli.OK
    assert re.findall(r"<polyline", (tmp_path / "run.svg").read_text()) == ["<polyline"] * 3, "the tool redraws it"

    # The real-cluster section's loading code, on this run's model in place of the one synced from S3.
    (tmp_path / "qwen-wikitext").symlink_to(summary["model"])
    loaded = subprocess.run([sys.executable, "-c", python_block("### The commands")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0 and loaded.stdout.startswith("The history of the"), loaded.stderr[-3000:]


def _github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readmes_links_to_its_sections_land_and_it_names_no_internal_issue():
    anchors = {_github_anchor(heading) for heading in re.findall(r"^#{2,4} (.+)$", README, re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert len(links) > 15 and links <= anchors, f"links to no heading: {sorted(links - anchors)}"
    assert not re.search(r"\bissues? #?\d+", README, re.I), re.search(r".{40}\bissues? #?\d+.{20}", README, re.I)
