"""Issue 44, "Done when": a stack the idle stop stopped takes every usual day-two change, in sequence, each on the state
the one before left: `up`, then (after each step the idle stop scales the GPU group to 0) a changed model, a changed
dataset, a new run id, a count change, a secret rotation, and `destroy`. Every job's create must begin its submission
only once the fake EKS (tests/support/fake_eks.py, strict: ACTIVE before the nodes join, devices advertised later still) has
gpuNodeCount Ready nodes advertising GPUs and EFA.

How an `up` is played: the program runs under the mocks (tests/support/pulumi_mocks.py) with the step's config; then, in the
order its dependencies give (tests/program/test_up_after_idle_stop.py checks that order), what pulumi-aws does to the node group
(ignore_changes), GpuNodesAwake's diff and update, GpuNodesReady's replacement and wait, the RayCluster's readiness
when it is replaced (KubeRay: every worker pod Ready), and TrainingJob's diff, delete and create. The job's create
runs as it does in the provider (TrainingJobProvider.create through kubernetes_job_server: the wait for joined nodes,
then the readiness check); only the Kubernetes client, the port-forward and Ray's job client are stand-ins, the node
list and DescribeNodegroup are the fake's. `destroy` deletes the dynamic resources in reverse order.
"""
from __future__ import annotations

import contextlib
from typing import Any

import pytest

from infra.aws import identity as aws_identity
from infra.aws import nodegroup_health
from infra.job import job_server, nodes_joined, preflight, ray_job
from infra.kubernetes import idle_check, idle_stop, raycluster
from tests.program.test_up_after_idle_stop import AWAKE, JOB, READY, gpu_group, plain
from tests.support.fake_eks import StrictEks, pulumi_aws_node_group_update
from tests.support.pulumi_mocks import Secret, run_program

TOKEN = "hf_journeyToken0001"
BASE = {"trainEnabled": True}
# Each step's config, in order; each keeps what the ones before it set (the operator's stack file, edited).
STEPS = [
    ("first up", {}),
    ("a changed model", {"trainModelId": "Qwen/Qwen2.5-0.5B"}),
    # A dataset's token shards live under trainStoragePath (infra/config/train_keys.py _check_data_storage).
    ("a changed dataset", {"trainDataset": "s3://company-data/corpus.txt", "trainStoragePath": "s3://company-data/runs"}),
    ("a new run id", {"trainRunId": "2"}),
    ("a count change", {"gpuNodeCount": 3}),
    ("a secret rotation", {"trainSecretEnv": Secret([f"HF_TOKEN={TOKEN}"])}),
]
# The device plugins' DaemonSets as the readiness check reads them: running on the GPU nodes.
DAEMONSETS = [{"metadata": {"name": release, "labels": {"app.kubernetes.io/instance": release}},
               "status": {"desiredNumberScheduled": 1}} for release in preflight.DEVICE_PLUGIN_RELEASES]


class Journey:
    """The stack's state between steps: the fake EKS, and the dynamic resources' last outputs."""

    def __init__(self, monkeypatch) -> None:
        self.monkeypatch = monkeypatch
        self.eks: StrictEks | None = None
        self.previous = None
        self.outs: dict[str, dict] = {}
        self.job_starts: list[dict] = []
        self.log: list[str] = []

    def patch(self) -> None:
        eks, mp = self.eks, self.monkeypatch
        real_session = aws_identity.session

        def session(identity: Any, region: Any) -> Any:  # EKS is the fake; the preview's other calls are as before
            return type("S", (), {"client": lambda s, name: eks if name == "eks" else
                                  real_session(identity, region).client(name)})()

        mp.setattr(aws_identity, "session", session)
        mp.setattr(aws_identity, "check_account", lambda session, identity: "")
        mp.setattr(nodegroup_health, "time", eks.time)
        mp.setattr(nodes_joined, "time", eks.time)

        def eks_reader(props: dict) -> Any:
            assert (props["eks_cluster"], props["gpu_nodegroup"]) == (eks.cluster, eks.name), props
            return nodegroup_health.reader(eks, eks.cluster, eks.name)

        def run_preflight(_api: Any, request: preflight.WorkerRequest) -> None:
            # The readiness check itself, on the fake's nodes now.
            problems = preflight.cluster_problems(eks.nodes(), DAEMONSETS, request)
            if problems:
                raise preflight._preflight_error(problems)

        @contextlib.contextmanager
        def head(*_args: Any) -> Any:
            yield job_server.JobServer("http://127.0.0.1:8265", "token")

        mp.setattr(nodes_joined, "eks_reader", eks_reader)
        mp.setattr(nodes_joined, "list_gpu_nodes", lambda _api: eks.nodes())
        mp.setattr(preflight, "kubernetes_client", lambda _kubeconfig: object())
        mp.setattr(preflight, "run_preflight", run_preflight)
        mp.setattr(job_server, "head_job_server", head)
        from workload.run import submit

        def start_job(_client: Any, args: list, *, submission_id: str, **_kw: Any) -> tuple[str, bool]:
            self.job_starts.append({"submission_id": submission_id, "at": eks.clock(), "usable": eks.usable_nodes(),
                                    "status": eks.nodegroup["status"], "args": list(args)})
            return submission_id, False

        mp.setattr(submit, "connect", lambda address, token: object())
        mp.setattr(submit, "start_job", start_job)
        # The job ran, on EFA (what the provider judges against trainExpectTransport).
        done = staticmethod(lambda _c, job_id, _p, _l: ray_job.job_outputs(job_id, "SUCCEEDED", {}, {"0": "efa"}))
        mp.setattr(ray_job.TrainingJobProvider, "_until_end", done)
        mp.setattr(ray_job.TrainingJobProvider, "_until_transport", done)

    def up(self, config: dict[str, Any]) -> dict[str, Any]:
        """One `pulumi up`; returns what it did."""
        run = run_program("dev", config)
        did: dict[str, Any] = {"wake": False, "job_created": False, "job_deleted": False}
        new_group = gpu_group(run).inputs
        if self.eks is None:  # the group is created with its sizes; its nodes have long joined by the job's turn
            sizes = new_group["scalingConfig"]
            self.eks = StrictEks(desired=sizes["desiredSize"], minimum=sizes["minSize"], maximum=sizes["maxSize"],
                                 cluster=run.one(AWAKE).inputs["cluster"], name=run.one(AWAKE).inputs["nodegroup"],
                                 gpus=4, efa_interfaces=1)  # dev's g6.12xlarge
            self.patch()
        else:
            pulumi_aws_node_group_update(self.eks, gpu_group(self.previous).inputs, new_group,
                                         gpu_group(run).ignore_changes)
        self.eks.calls.clear()
        # GpuNodesAwake
        wake, news = idle_stop._WakeProvider(), plain(run.one(AWAKE).inputs)
        if "awake" not in self.outs:
            self.outs["awake"] = wake.create(news).outs
        else:
            olds = self.outs["awake"]
            raycluster_replaced = any(olds.get(k) != news.get(k) for k in ("ray_cluster_spec", "secret_env"))
            if wake.diff("id", olds, news).changes:
                self.outs["awake"] = wake.update("id", olds, news).outs
            did["raycluster_replaced"] = raycluster_replaced
        did["wake"] = any(call == "UpdateNodegroupConfig" for call, _ in self.eks.calls)
        # GpuNodesReady, replaced on a new request: its own wait, on the fake's clock
        ready = plain(run.one(READY).inputs)
        request = preflight.WorkerRequest.from_props(ready)
        if "ready" not in self.outs or preflight.GpuNodesReadyProvider().diff("id", self.outs["ready"], ready).changes:
            preflight.wait_for_gpu_nodes(lambda: (self.eks.nodes(), DAEMONSETS), request,
                                         clock=self.eks.clock, sleep=self.eks.sleep)
            self.outs["ready"] = ready
        if did.get("raycluster_replaced"):  # KubeRay's RayClusterProvisioned: every worker pod on a usable node
            deadline = self.eks.clock() + raycluster.READY_TIMEOUT_SECONDS
            while self.eks.usable_nodes() < request.workers:
                assert self.eks.clock() < deadline, "the replaced RayCluster's workers never got their nodes"
                self.eks.sleep(10)
        # TrainingJob
        provider, jobs = ray_job.TrainingJobProvider(on_log=self.log.append), run.of_type(JOB)
        job_news = plain(jobs[0].inputs) if jobs else None
        if "job" in self.outs and (job_news is None or provider.diff("id", self.outs["job"], job_news).replaces):
            provider.delete(self.outs["job"]["job_id"], self.outs.pop("job"))
            did["job_deleted"] = True
        if job_news is not None and "job" not in self.outs:
            self.outs["job"] = provider.create(job_news).outs
            did["job_created"] = True
        elif job_news is not None and provider.diff("id", self.outs["job"], job_news).changes:
            self.outs["job"] = provider.update(self.outs["job"]["job_id"], self.outs["job"], job_news).outs
        self.previous = run
        return did

    def idle_stop(self) -> None:
        """The CronJob's check found no job for gpuIdleStopMinutes: the group goes to 0, and its nodes with it."""
        eks = self.eks
        eks.sleep(3600)
        idle_check.stop(eks, eks.cluster, eks.describe_nodegroup(clusterName=eks.cluster, nodegroupName=eks.name)[
            "nodegroup"])
        eks.get_waiter("nodegroup_active").wait(clusterName=eks.cluster, nodegroupName=eks.name)
        assert eks.scaling()["desiredSize"] == 0 and eks.nodes() == [], eks.scaling()

    def destroy(self) -> None:
        """`pulumi destroy`: the dynamic resources deleted in reverse order (the job first); nothing wakes the group."""
        self.eks.calls.clear()
        if "job" in self.outs:
            ray_job.TrainingJobProvider(on_log=self.log.append).delete(self.outs["job"]["job_id"], self.outs.pop("job"))
        idle_stop._WakeProvider().delete("id", self.outs.pop("awake"))
        preflight.GpuNodesReadyProvider().delete("id", self.outs.pop("ready"))


def test_every_day_two_change_on_a_stopped_stack_runs_its_job_on_ready_nodes(monkeypatch, capsys):
    journey, config = Journey(monkeypatch), dict(BASE)
    for step, (name, change) in enumerate(STEPS):
        config.update(change)
        starts_before = len(journey.job_starts)
        did = journey.up(config)
        workers = int(config.get("gpuNodeCount", 2))
        if step:
            assert did["wake"], f"{name}: the stopped group must be woken ({journey.eks.calls})"
            assert [c for c, _ in journey.eks.calls].count("UpdateNodegroupConfig") == 1, journey.eks.calls
        assert journey.eks.scaling() == {"minSize": 0, "maxSize": workers, "desiredSize": workers}, name
        new_jobs = journey.job_starts[starts_before:]
        # A new node count or trainSecretEnv (which never reaches the job) does not define a new run: the finished job
        # stays; the RayCluster they replace is what waits for the woken nodes.
        expect_new_job = name not in ("a count change", "a secret rotation")
        assert len(new_jobs) == expect_new_job, f"{name}: {len(new_jobs)} job(s) created"
        for start in new_jobs:
            assert start["usable"] >= workers and start["status"] == "ACTIVE", \
                f"{name}: the job was submitted with {start['usable']} of {workers} nodes Ready with GPUs and EFA"
        journey.idle_stop()
    progress = capsys.readouterr().err  # where a dynamic provider's lines go (Pulumi shows them under the resource)
    assert "waiting for the GPU nodes before the job: 0 of 2 GPU node(s) joined" in progress, progress
    assert "the readiness check runs now" in progress, progress
    journey.destroy()
    assert not any(call == "UpdateNodegroupConfig" for call, _ in journey.eks.calls), \
        f"destroy must not wake the group: {journey.eks.calls}"
    assert journey.outs == {}


def test_a_degraded_group_fails_the_wake_at_once_in_eks_words(monkeypatch):
    journey = Journey(monkeypatch)
    journey.up(dict(BASE))
    journey.idle_stop()
    journey.eks.fail_launches("AsgInstanceLaunchFailures", "Could not launch On-Demand Instances. "
                              "InsufficientInstanceCapacity - We currently do not have sufficient g6.12xlarge "
                              "capacity in the Availability Zone you requested (us-west-2a).")
    started = journey.eks.clock()
    with pytest.raises(nodegroup_health.NodegroupUnhealthyError) as failed:
        journey.up({**BASE, "trainRunId": "2"})
    message = str(failed.value)
    assert "DEGRADED" in message and "AsgInstanceLaunchFailures" in message and "InsufficientInstanceCapacity" in \
        message, message
    assert journey.eks.clock() - started < 5 * 60, "reported when EKS says it, not after the waiter's 40 minutes"
    assert len(journey.job_starts) == 1, "no job is submitted to a group that cannot give nodes"
