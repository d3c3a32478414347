"""Issue 31, items 2 and 14: the idle stop counts idle time from the last job or the last `up` that woke the nodes (not
the node group's creation), says so when it cannot run, and is the only workload that can act as its service account.

The admission policy's CEL is compiled and evaluated with cel-python as tests/program/test_admission.py does (on objects as the
API server sees them, with the requesting user in `request`), and the manifests validated against the Kubernetes schema.
"""
from __future__ import annotations

import sys
from datetime import timedelta

import celpy
import kubernetes_validate
import pytest

from infra import config
from infra.job.preflight import GPU_NODES_READY_TIMEOUT_SECONDS
from infra.kubernetes import idle_check, idle_stop_identity, raycluster
from tests.support.fake_eks import CREATED
from tests.support.pulumi_mocks import SCHEMA, program
from tools.status import idle_stop_line

VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
KUBERNETES = SCHEMA["kubernetesVersion"]["default"]
ACCOUNT, CRONJOB = "ray-train-idle-stop", "ray-train-idle-stop"
NODEGROUP = {"createdAt": CREATED, "modifiedAt": CREATED,
             "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 2}}


def test_idle_counts_from_the_last_wake_not_the_groups_creation():
    woke = CREATED + timedelta(days=3)
    kept = idle_check.decide([], NODEGROUP, now=woke + timedelta(minutes=50), idle_minutes=60, awake_since=woke)
    assert not kept.stop and kept.idle_since == woke, kept
    stopped = idle_check.decide([], NODEGROUP, now=woke + timedelta(minutes=61), idle_minutes=60, awake_since=woke)
    assert stopped.stop, stopped


def test_the_minimum_idle_period_covers_every_wait_of_an_up_after_its_wake():
    assert config.IDLE_STOP_MINIMUM_MINUTES * 60 >= GPU_NODES_READY_TIMEOUT_SECONDS + raycluster.READY_TIMEOUT_SECONDS


def test_a_check_that_cannot_run_fails_with_one_line_in_its_termination_message(tmp_path, monkeypatch, capsys):
    log = tmp_path / "termination-log"
    monkeypatch.setattr(idle_check, "TERMINATION_LOG", str(log))
    monkeypatch.setitem(sys.modules, "boto3", None)  # an image without boto3: what issue 31 found failing silently
    assert idle_check.main() == 1
    line = log.read_text()
    assert line.startswith("idle stop cannot run, so the GPU nodes are not stopped:") and "\n" not in line, line
    assert "boto3" in line, line
    assert line in capsys.readouterr().err


def _pod(name: str, created: str, terminated: dict | None) -> dict:
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {"metadata": {"name": name, "namespace": "ray", "creationTimestamp": created},
            "status": {"containerStatuses": [{"state": state}]}}


def test_tools_status_says_when_the_last_check_failed_or_what_it_decided():
    failed = _pod("b", "2026-12-02T10:05:00Z", {"exitCode": 1, "finishedAt": "2026-12-02T10:05:09Z",
                                                "message": "idle stop cannot run, so ...: ModuleNotFoundError: boto3"})
    ok = _pod("a", "2026-12-02T10:00:00Z", {"exitCode": 0, "finishedAt": "2026-12-02T10:00:07Z",
                                            "message": "keeping the GPU nodes: idle for 12 of 60 minutes"})
    line = idle_stop_line([ok, failed])
    assert "FAILED" in line and "boto3" in line and "not being stopped" in line and "logs pod/b" in line, line
    assert "keeping the GPU nodes" in idle_stop_line([ok]), idle_stop_line([ok])
    assert idle_stop_line([]) is None


def test_the_cronjob_reports_and_follows_the_wake():
    run = program("dev")
    cron = run.one("kubernetes:batch/v1:CronJob")
    container = cron.inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "AWAKE_SINCE" in {e["name"] for e in container["env"]}
    assert run.one("pulumi-python:dynamic/raytrain:GpuNodesAwake").urn in cron.dependencies


# ---- item 14: the idle stop's service account -----------------------------------------------------------------

_env = celpy.Environment()


@pytest.fixture(scope="module")
def guard():
    run = program("dev")
    policy = run.one(VAP, "ray-train-idle-stop-identity")
    binding = run.one(BINDING, "ray-train-idle-stop-identity-binding")
    for registration, kind in ((policy, "ValidatingAdmissionPolicy"), (binding, "ValidatingAdmissionPolicyBinding")):
        kubernetes_validate.validate({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                                      "metadata": registration.inputs["metadata"],
                                      "spec": registration.inputs["spec"]}, KUBERNETES, strict=True)
    assert binding.inputs["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ray"}
    account = run.one("kubernetes:core/v1:ServiceAccount", "ray-train-idle-stop-sa")
    assert binding.urn in account.dependencies, "bound before the account exists"
    return [(v["message"], _env.program(_env.compile(v["expression"]))) for v in policy.inputs["spec"]["validations"]]


def refused(guard, obj: dict, user: str) -> list[str]:
    activation = {"object": celpy.json_to_cel(obj),
                  "request": celpy.json_to_cel({"userInfo": {"username": user}})}
    return [message for message, compiled in guard if not bool(compiled.evaluate(activation))]


def pod(account: str, owner: str | None = "Job") -> dict:
    meta = {"name": "p", "namespace": "ray",
            **({"ownerReferences": [{"kind": owner, "name": "x", "apiVersion": "batch/v1", "uid": "u"}]}
               if owner else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"serviceAccountName": account, "containers": [{"name": "c", "image": "i"}]}}


def job(account: str, name: str = "ray-train-idle-stop-29000000") -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ray"},
            "spec": {"template": {"spec": {"serviceAccountName": account, "containers": []}}}}


def cronjob(account: str, name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": "ray"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"serviceAccountName": account}}}}}}


def test_the_idle_stops_own_chain_is_admitted(guard):
    assert refused(guard, cronjob(ACCOUNT, CRONJOB), "kubernetes-admin") == []
    assert refused(guard, job(ACCOUNT), idle_stop_identity.CRONJOB_CONTROLLER) == []
    assert refused(guard, pod(ACCOUNT), idle_stop_identity.JOB_CONTROLLER) == []


@pytest.mark.parametrize("obj, user", [
    (pod(ACCOUNT, owner=None), "alice"),  # a pod of one's own
    (pod(ACCOUNT), "alice"),  # claiming a Job owner does not make one the Job controller
    (job(ACCOUNT), "alice"),  # a Job of one's own, whose pods the Job controller would create
    (cronjob(ACCOUNT, "my-cron"), "alice"),  # another CronJob naming the account
])
def test_no_other_workload_can_act_as_the_idle_stop(guard, obj, user):
    assert refused(guard, obj, user), f"{obj['kind']} by {user} must be refused"


def test_other_pods_of_the_namespace_are_not_affected(guard):
    assert refused(guard, pod("ray-train-pods", owner=None), "alice") == []
    assert refused(guard, job("default", name="mine"), "alice") == []
