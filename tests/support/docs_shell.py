"""The shell that follows the README's and docs/' command sequences as a user types them, and the stand-ins it runs
them against; tests/docs/test_readme.py and tests/docs/test_docs.py are its journeys.

- AWS is moto, plus answers in the services' real shapes for the APIs moto lacks (service quotas, Spot placement
  scores, capacity reservations).
- `pulumi` is a stand-in that keeps the stack files as the CLI does (`stack select/init`, `config set`,
  `stack output`) and runs the program under Pulumi's mocks for `up`.
- The API server is a local HTTP server answering for the RayCluster, its pods, its token Secret, the nodes and the
  device-plugin DaemonSets; `aws eks get-token` is a script that prints a token.
- With `creates_jobs`, `up` also creates the training job as the engine would: the TrainingJob's own provider,
  unpickled from what the program registered, runs its create (preflight, token, submission, transport check) for
  real. Its job server is tests/support/fake_ray_jobs.py, which speaks the Ray Jobs API but replays a training log instead
  of training (an EFA job of the dev stack's shape, so trainExpectTransport=efa holds as the stack file says),
  reached through a local port-forward in place of the Kubernetes API's.

A command the stand-ins do not know fails the test, and so does a `pulumi config set` whose effect on the program
CONFIG_EFFECTS does not check: when a page changes, its test changes with it. Blocks fenced without `bash`
(kubectl, `aws eks ...`) need a real cluster or account and are not followed.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import threading
from pathlib import Path
from typing import Any, Callable

import dill
import pytest
from botocore.awsrequest import AWSResponse
from pulumi.runtime.rpc import unwrap_rpc_secret
from ruamel.yaml import YAML

from infra.kubernetes import portforward
from infra.kubernetes.raycluster import DASHBOARD_PORT
from tests.support.fake_ec2_capacity import quota_answer, reservation
from tests.support.fake_json_api import JsonServer
from tests.support.fake_ray_jobs import FakeRayJobServer
from tests.support.pulumi_mocks import PROJECT, ProgramRun, run_program
from tools import job as job_cli
from tools import status
from tools.capacity import cli as finder
from tools.capacity.aws import Aws
from workload import cli, train
from workload.checkpoint import export
from workload.fabric import transport
from workload.run import local

REPO = Path(__file__).resolve().parents[2]
JOB = "pulumi-python:dynamic/raytrain:TrainingJob"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
RESERVATION = "pulumi-python:dynamic/raytrain:GpuCapacityReservation"


def page(path: str) -> str:
    """A page of the documentation, by its path in the repository (README.md, docs/jobs.md)."""
    return (REPO / path).read_text()


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


FENCED = re.compile(r"^ *```(?P<language>\w*)\n(?P<body>.*?)^ *```$", re.S | re.M)
"""A fenced block: its language ("" for a sample) and body. What is in one is no heading or link of the page."""


def _fenced(text: str, after: str, language: str) -> str:
    """The body of the first fenced block in `language` ("" for a plain one) after the text `after` (a heading)."""
    start = text.index(after)
    return next(block["body"] for block in FENCED.finditer(text)
                if block.start() >= start and block["language"] == language)


def bash_block(text: str, after: str) -> list[str]:
    """The commands of the first ```bash block after `after`: comments dropped, `&&` chains split."""
    commands = []
    for line in _fenced(text, after, "bash").splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        commands += [part.strip() for part in line.split("&&") if part.strip()]
    return commands


def sample_block(text: str, after: str) -> list[str]:
    """The lines of the first plain ``` block after `after` (a sample output), `...` lines dropped."""
    return [line for line in _fenced(text, after, "").splitlines() if line != "..."]


def python_block(text: str, after: str) -> str:
    """The first ```python block after `after`."""
    return _fenced(text, after, "python")


def table(text: str, after: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table after `after`, header and rule left out."""
    lines = text[text.index(after):].splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


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
            # Aws keeps one client per service and region: the same operation's handlers are registered once
            # (botocore keeps one handler per unique_id), the latest answer in place of an earlier one.
            client.meta.events.register(f"before-parameter-build.{service_id}.{operation}", _note_params,
                                        unique_id=f"journey-params-{operation}")
            client.meta.events.unregister(f"before-call.{service_id}.{operation}", unique_id=f"journey-{operation}")
            client.meta.events.register(
                f"before-call.{service_id}.{operation}",
                lambda context, answer=answer, **_: (AWSResponse("", 200, {}, None), answer(context["api_params"])),
                unique_id=f"journey-{operation}")
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


# ---- the shell that follows the pages ----------------------------------------------------------------------

# What each `pulumi config set KEY` of a page must change in the program's next run.
def _job(run: ProgramRun):
    jobs = run.of_type(JOB)
    return jobs[0] if jobs else None


def job_flags(run: ProgramRun) -> dict[str, str]:
    args = _job(run).inputs["train_args"]
    return dict(zip(args[::2], args[1::2]))


def _pod_role_policies(run: ProgramRun) -> list[str]:
    """The inline policies of the Ray pods' role (infra/aws/pod_identity.py), the only role with checkpoint access."""
    roles = {r.urn for r in run.of_type("aws:iam/role:Role")
             if "pods.eks.amazonaws.com" in r.inputs["assumeRolePolicy"]}
    return [str(r.inputs["policy"]) for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.parent in roles]


CONFIG_EFFECTS: dict[str, Callable[[ProgramRun, str], Any]] = {
    "trainEnabled": lambda run, value: (_job(run) is not None) == (value == "true"),
    "trainRunId": lambda run, value: (_job(run).inputs["run_id"] == value
                                      and job_flags(run)["--run_name"].startswith(f"ray-train-fsdp-llm-{value}-")),
    "trainStoragePath": lambda run, value: (job_flags(run)["--storage_path"] == value and len(
        [p for p in _pod_role_policies(run) if f"arn:aws:s3:::{value[5:].split('/')[0]}" in p]) == 1),
    "trainCheckpointEvery": lambda run, value: job_flags(run)["--checkpoint_every"] == value,
    "trainMaxFailures": lambda run, value: job_flags(run)["--max_failures"] == value,
    "trainDataset": lambda run, value: job_flags(run)["--dataset"] == value,
    "trainDatasetConfig": lambda run, value: job_flags(run)["--dataset_config"] == value,
    "trainEvalSplit": lambda run, value: job_flags(run)["--eval_split"] == value,
    "trainEvalEvery": lambda run, value: job_flags(run)["--eval_every"] == value,
    "capacityReserve": lambda run, value: bool(run.of_type(RESERVATION)) == (value == "true"),
    "trainWait": lambda run, value: _job(run).inputs["wait"] == value,
    "trainTimeoutMinutes": lambda run, value: _job(run).inputs["timeout_s"] == 60 * int(value),
    "trainModelId": lambda run, value: (job_flags(run)["--model_id"] == value
                                        and run.exports["jobMemoryPlan"]["fits"] is True),
    "trainMethod": lambda run, value: (job_flags(run)["--method"] == value
                                       and run.exports["jobMemoryPlan"]["method"] == value),
    "trainBatchSize": lambda run, value: (job_flags(run)["--batch_size"] == value
                                          and run.exports["jobMemoryPlan"]["batch_size"] == int(value)),
}
# The job's stack outputs (__main__.py's exports) and the provider outputs they read.
JOB_EXPORTS = {"jobId": "job_id", "jobStatus": "status", "jobFollow": "follow", "jobFinalLoss": "final_loss",
               "jobTokensPerSecond": "tokens_per_s", "jobWorldSize": "world_size",
               "jobTransportVerdicts": "verdicts", "jobCheckpoint": "checkpoint"}


# The commands the pages run, by module: each one's own main, run as `python -m MODULE` would. workload.local starts a
# real Ray cluster here and trains (under its LOCAL_DEFAULTS' storage path: a test points it at its own directory).
COMMANDS = {"tools.status": status.main, "workload.transport": transport.main, "tools.job": job_cli.main,
            "workload.train": train.main, "workload.local": local.main, "workload.export": export.main}


class Shell:
    """Follows a page's commands one line at a time, in `workdir` (a copy of the project's stack files)."""

    def __init__(self, workdir: Path, aws: Aws | None, kube_api: FakeKubeApi | None = None, creates_jobs: bool = False):
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
            raise AssertionError(f"a page shows `{line}`, which tests/support/docs_shell.py cannot follow: teach it")
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
                raise AssertionError(f"a page runs `python -m {module}`, unknown to tests/support/docs_shell.py")
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
            assert name in self.run.exports, f"a page reads stack output {name}; the program exports " \
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
        raise AssertionError(f"a page runs `pulumi {shlex.join(args)}`, unknown to tests/support/docs_shell.py")

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
