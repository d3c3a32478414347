"""Issue 31, item 1: the second `pulumi up`, on a stack whose idle stop has scaled the GPU node group to 0.

Each case runs the program twice under the mocks (tests/support/pulumi_mocks.py): a first `up`, then a change (node count up
and down, a new trainSecretEnv value, a monitoring switch, a new trainRunId). Between the two the idle check stops the
group (idle_check.stop). The second `up` is then played against an EKS as strict as EKS (tests/support/fake_eks.py): first
what pulumi-aws does to the node group given the program's ignore_changes, then GpuNodesAwake's diff and wake. The
tests assert that neither is refused, that the group ends at (min 0, desired gpuNodeCount, max gpuNodeCount), and that
everything that waits for GPU nodes or Ray workers (GpuNodesReady, the RayCluster, the job) comes after the wake.

KubeRay's side is one rule: a replaced RayCluster is ready (RayClusterProvisioned, which `pulumi up` waits for) only
once all its pods are ready (kuberay v1.7.0, ray-operator/controllers/ray/raycluster_controller.go), so its workers
need the GPU nodes: `provisioned` below, counted on the fake's Ready nodes that advertise their GPUs and EFA (EKS is
ACTIVE before they join), after the job's own wait for them (infra/job/nodes_joined.py).
"""
from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.aws import identity as aws_identity
from infra.aws import nodegroup_health
from infra.job import nodes_joined
from infra.job.preflight import GpuNodesReadyProvider, WorkerRequest
from infra.kubernetes import idle_check, idle_stop
from tests.support.fake_eks import StrictEks, pulumi_aws_node_group_update
from tests.support.pulumi_mocks import ProgramRun, Registration, Secret, is_secret_value, program, run_program

AWAKE = "pulumi-python:dynamic/raytrain:GpuNodesAwake"
READY = "pulumi-python:dynamic/raytrain:GpuNodesReady"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
JOB = "pulumi-python:dynamic/raytrain:TrainingJob"
TOKEN = "hf_dayTwoToken0001"
JOB_ON = {"trainEnabled": True}


RUNS: dict[str, ProgramRun] = {}


def up(overrides: tuple[tuple[str, Any], ...] = ()) -> ProgramRun:
    """The program's run with these overrides, once per session (each case shares its runs with the others)."""
    try:
        return program("dev", overrides)  # shared with the other test files' runs of the same config
    except TypeError:  # a Secret holding a list is not hashable
        key = repr(overrides)
        if key not in RUNS:
            RUNS[key] = run_program("dev", dict(overrides))
        return RUNS[key]


def gpu_group(run: ProgramRun) -> Registration:
    (group,) = [r for r in run.of_type(NODE_GROUP) if r.name.endswith("-gpu-ng")]
    return group


def plain(value: Any) -> Any:
    """A recorded input as the provider sees it: secrets unwrapped."""
    if is_secret_value(value):
        return plain(value["value"])
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def provisioned(desired_workers: int, gpu_nodes: int) -> bool:
    """KubeRay: RayClusterProvisioned once every pod is ready; a worker pod needs a GPU node of its own."""
    return gpu_nodes >= desired_workers


def depends_on(run: ProgramRun, later: Registration, earlier: Registration) -> bool:
    """Whether `later` waits for `earlier`, directly or through what it depends on."""
    by_urn = {r.urn: r for r in run.resources}
    seen, todo = set(), list(later.dependencies)
    while todo:
        urn = todo.pop()
        if urn == earlier.urn:
            return True
        if urn not in seen and urn in by_urn:
            seen.add(urn)
            todo.extend(by_urn[urn].dependencies)
    return False


def second_up(first: ProgramRun, second: ProgramRun, monkeypatch) -> tuple[StrictEks, bool]:
    """The second `up` against a group the idle check stopped after the first: pulumi-aws's node group update, then
    GpuNodesAwake (its diff, and its wake when the diff says so). Returns the EKS and whether the wake ran."""
    created = gpu_group(first).inputs["scalingConfig"]
    eks = StrictEks(desired=created["desiredSize"], minimum=created["minSize"], maximum=created["maxSize"],
                    cluster=first.one(AWAKE).inputs["cluster"], name=first.one(AWAKE).inputs["nodegroup"])
    idle_check.stop(eks, eks.cluster, eks.describe_nodegroup(clusterName=eks.cluster, nodegroupName=eks.name)[
        "nodegroup"])
    eks.get_waiter("nodegroup_active").wait(clusterName=eks.cluster, nodegroupName=eks.name)
    eks.calls.clear()
    group = gpu_group(second)
    pulumi_aws_node_group_update(eks, gpu_group(first).inputs, group.inputs, group.ignore_changes)
    provider = idle_stop._WakeProvider()
    olds, news = plain(first.one(AWAKE).inputs), plain(second.one(AWAKE).inputs)
    if not provider.diff("id", olds, news).changes:
        return eks, False
    monkeypatch.setattr(aws_identity, "session", lambda identity, region: type("S", (), {"client": lambda s, n: eks})())
    monkeypatch.setattr(aws_identity, "check_account", lambda session, identity: "")
    monkeypatch.setattr(nodegroup_health, "time", eks.time)
    outs = provider.update("id", olds, news).outs
    assert outs["woken_at"], "the wake's time goes to the CronJob's AWAKE_SINCE"
    return eks, True


CASES = {
    "node count up": ((), (("gpuNodeCount", 3),), 3),
    "node count down": ((("gpuNodeCount", 3),), (), 2),
    "a new secret": ((), (("trainSecretEnv", Secret([f"HF_TOKEN={TOKEN}"])),), 2),
    "monitoring switch": ((), (("monitoring", "cloudwatch"),), 2),
    "a new run id": (tuple(JOB_ON.items()), (*JOB_ON.items(), ("trainRunId", "2")), 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_change_on_a_stopped_stack_wakes_the_group_before_anything_waits_for_it(case, monkeypatch):
    before, after, nodes = CASES[case]
    first, second = up(before), up(after)
    eks, woke = second_up(first, second, monkeypatch)
    assert woke, f"{case}: the second up waits for GPU nodes or workers, so it must wake the group first"
    assert eks.scaling() == {"minSize": 0, "maxSize": nodes, "desiredSize": nodes}, f"{case}: {eks.scaling()}"
    assert [call for call, _ in eks.calls].count("UpdateNodegroupConfig") == 1, \
        f"{case}: one scaling call, all three sizes together: {eks.calls}"
    awake, ready, ray = second.one(AWAKE), second.one(READY), second.one(RAY_CLUSTER)
    assert depends_on(second, ready, awake), f"{case}: GpuNodesReady waits for GPU nodes: after the wake"
    assert depends_on(second, ray, awake), f"{case}: the RayCluster waits for its workers: after the wake"
    assert eks.nodegroup["status"] == "ACTIVE" and eks.usable_nodes() < nodes, \
        f"{case}: the wake returns at ACTIVE, before the nodes have joined"
    nodes_joined.wait_for_joined_nodes(eks.nodes, WorkerRequest(8, 32, nodes), clock=eks.clock, sleep=eks.sleep)
    assert provisioned(nodes, eks.usable_nodes()), f"{case}: KubeRay's workers get their nodes"
    for job in second.of_type(JOB):
        assert depends_on(second, job, awake), f"{case}: the job is submitted after the wake"


def test_the_wake_follows_exactly_what_replaces_the_ray_cluster_or_the_readiness_check():
    base = plain(up().one(AWAKE).inputs)
    for case, (before, after, _) in CASES.items():
        olds, news = plain(up(before).one(AWAKE).inputs), plain(up(after).one(AWAKE).inputs)
        changed = [key for key in idle_stop.WAKE_TRIGGERS if olds.get(key) != news.get(key)]
        assert changed, f"{case}: a trigger must change"
    assert not idle_stop._WakeProvider().diff("id", base, plain(up().one(AWAKE).inputs)).changes, \
        "an `up` with nothing changed leaves a stopped group stopped"
    ready_diff = GpuNodesReadyProvider().diff("id", plain(up().one(READY).inputs),
                                              plain(up((("gpuNodeCount", 3),)).one(READY).inputs))
    assert "workers" in ready_diff.replaces, "a new node count re-checks the nodes: it must come after the wake"


def test_nothing_changed_leaves_the_stopped_group_alone(monkeypatch):
    eks, woke = second_up(up(), up(), monkeypatch)
    assert not woke and eks.calls == [] and eks.scaling()["desiredSize"] == 0, eks.calls


def test_the_old_ignore_changes_would_be_refused_by_eks_when_the_count_goes_down():
    """The strict EKS refuses what issue 31 found: ignoring desiredSize alone sends the state's desired 3 with max 2."""
    first, second = up((("gpuNodeCount", 3),)), up()
    eks = StrictEks(desired=0, minimum=0, maximum=3)
    with pytest.raises(ClientError, match="Desired capacity 3 can't be greater than max size 2"):
        pulumi_aws_node_group_update(eks, gpu_group(first).inputs, gpu_group(second).inputs,
                                     ["scalingConfig.desiredSize"])
    assert "scalingConfig" in gpu_group(second).ignore_changes, "the program leaves every size to GpuNodesAwake"


def test_the_secret_reaches_the_wake_only_as_a_secret():
    awake = up((("trainSecretEnv", Secret([f"HF_TOKEN={TOKEN}"])),)).one(AWAKE)
    assert is_secret_value(awake.inputs["secret_env"]), "the token must stay a secret in the state"
    assert TOKEN not in str({k: v for k, v in awake.inputs.items() if k != "secret_env"})


def test_a_wake_during_an_update_in_progress_waits_for_it_first(monkeypatch):
    eks = StrictEks(desired=2, minimum=0, maximum=2)
    idle_check.stop(eks, eks.cluster, eks.describe_nodegroup(clusterName=eks.cluster, nodegroupName=eks.name)[
        "nodegroup"])  # the idle check's own stop, still in progress
    eks.calls.clear()
    monkeypatch.setattr(aws_identity, "session", lambda identity, region: type("S", (), {"client": lambda s, n: eks})())
    monkeypatch.setattr(aws_identity, "check_account", lambda session, identity: "")
    monkeypatch.setattr(nodegroup_health, "time", eks.time)
    idle_stop._WakeProvider().create({"cluster": "ray-train", "nodegroup": "gpu", "node_count": 2, "region": "x",
                                      "profile": "", "role_arn": "", "account_id": ""})
    first_update = [c for c, _ in eks.calls].index("UpdateNodegroupConfig")
    assert first_update > 0 and eks.calls[first_update - 1] == ("DescribeNodegroup", {"status": "ACTIVE"}), \
        f"the wake waits for the stop's update to end before its own: {eks.calls}"
    assert ("DescribeNodegroup", {"status": "UPDATING"}) in eks.calls[:first_update], eks.calls
    assert eks.scaling() == {"minSize": 0, "maxSize": 2, "desiredSize": 2}
