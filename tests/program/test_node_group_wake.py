"""Issue 44, items 1 and 4: the fake EKS answers as EKS does (each rule cites the API reference in tests/support/fake_eks.py),
the wake follows every new job and reports a failed group at once in EKS's words, and the job's create waits, bounded
and saying so, for its nodes to join and advertise their devices.
"""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, WaiterError

from infra import config
from infra.aws import identity as aws_identity
from infra.aws import nodegroup_health
from infra.job import nodes_joined, ray_job
from infra.job.preflight import WorkerRequest
from infra.kubernetes import idle_check, idle_stop
from tests.program.test_up_after_idle_stop import AWAKE, plain
from tests.support.fake_eks import ADVERTISE_SECONDS, JOIN_SECONDS, READY_SECONDS, UPDATE_SECONDS, StrictEks
from tests.support.pulumi_mocks import is_secret_value, program

REQUEST = WorkerRequest(gpus=8, efa_interfaces=32, workers=2)
WAKE_PROPS = {"cluster": "ray-train", "nodegroup": "gpu", "node_count": 2, "region": "us-west-2", "profile": "",
              "role_arn": "", "account_id": ""}
FREE_ADDRESSES = ("InsufficientFreeAddresses", "One or more of the subnets associated with your node group does not "
                  "have enough available IP addresses for new nodes.")


def stopped() -> StrictEks:
    eks = StrictEks(desired=2, minimum=0, maximum=2)
    idle_check.stop(eks, eks.cluster, eks.describe_nodegroup(clusterName=eks.cluster, nodegroupName=eks.name)[
        "nodegroup"])
    eks.sleep(UPDATE_SECONDS)
    eks.calls.clear()
    return eks


def use(eks: StrictEks, monkeypatch) -> None:
    monkeypatch.setattr(aws_identity, "session", lambda identity, region: type("S", (), {"client": lambda s, n: eks})())
    monkeypatch.setattr(aws_identity, "check_account", lambda session, identity: "")
    monkeypatch.setattr(nodegroup_health, "time", eks.time)


# ---- the fake, as strict as EKS ----------------------------------------------------------------------------------

def test_the_fake_is_active_before_its_nodes_join_and_advertise():
    eks = stopped()
    assert eks.nodes() == [] and eks.scaling()["desiredSize"] == 0
    idle_check.wake(eks, eks.cluster, eks.name, 2)
    assert eks.nodegroup["status"] == "UPDATING" and eks.nodes() == []
    eks.sleep(UPDATE_SECONDS)
    assert eks.describe_nodegroup(clusterName=eks.cluster, nodegroupName=eks.name)["nodegroup"]["status"] == "ACTIVE"
    assert eks.scaling()["desiredSize"] == 2 and eks.usable_nodes() == 0, "desiredSize is asked, not nodes"
    eks.sleep(JOIN_SECONDS)
    assert len(eks.nodes()) == 2 and eks.usable_nodes() == 0, "joined, NotReady"
    eks.sleep(READY_SECONDS)
    assert nodes_joined.node_states(eks.nodes(), REQUEST) == (2, 2, 0), "Ready, nothing advertised yet"
    eks.sleep(ADVERTISE_SECONDS)
    assert eks.usable_nodes() == 2 and nodes_joined.node_states(eks.nodes(), REQUEST) == (2, 2, 2)


def test_the_fake_refuses_an_update_while_one_is_in_progress():
    eks = stopped()
    idle_check.wake(eks, eks.cluster, eks.name, 2)
    with pytest.raises(ClientError) as refused:
        idle_check.wake(eks, eks.cluster, eks.name, 3)
    assert refused.value.response["Error"]["Code"] == "ResourceInUseException"


def test_the_fake_degrades_on_launch_failures_and_botocores_waiter_polls_that_for_40_minutes():
    eks = stopped()
    eks.fail_launches(*FREE_ADDRESSES)
    idle_check.wake(eks, eks.cluster, eks.name, 2)
    before = eks.clock()
    with pytest.raises(WaiterError):
        eks.get_waiter("nodegroup_active").wait(clusterName=eks.cluster, nodegroupName=eks.name)
    assert eks.clock() - before >= 40 * 60 - 30, "what the wake used to wait before saying anything"
    group = eks.describe_nodegroup(clusterName=eks.cluster, nodegroupName=eks.name)["nodegroup"]
    assert group["status"] == "DEGRADED" and group["health"]["issues"][0]["code"] == "InsufficientFreeAddresses"
    assert eks.nodes() == []


# ---- the wake --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code, message", [
    FREE_ADDRESSES,
    ("AsgInstanceLaunchFailures", "Could not launch On-Demand Instances. InsufficientInstanceCapacity"),
])
def test_a_wake_reports_a_degraded_group_at_once_with_eks_issues(code, message, monkeypatch):
    eks = stopped()
    use(eks, monkeypatch)
    eks.fail_launches(code, message)
    start = eks.clock()
    with pytest.raises(nodegroup_health.NodegroupUnhealthyError) as failed:
        idle_stop._WakeProvider().create(dict(WAKE_PROPS))
    assert f"{code}: {message}" in str(failed.value) and "DEGRADED" in str(failed.value), failed.value
    assert eks.clock() - start < 2 * UPDATE_SECONDS, f"reported after {eks.clock() - start} s"


def test_a_group_degraded_before_the_wake_gets_its_scaling_update_and_recovers(monkeypatch, capsys):
    eks = stopped()
    eks.nodegroup.update(status="DEGRADED", health={"issues": [{"code": FREE_ADDRESSES[0],
                                                               "message": FREE_ADDRESSES[1]}]})
    use(eks, monkeypatch)
    outs = idle_stop._WakeProvider().create(dict(WAKE_PROPS)).outs
    assert outs["woken"] and eks.nodegroup["status"] == "ACTIVE" and eks.scaling()["desiredSize"] == 2
    assert "InsufficientFreeAddresses" in capsys.readouterr().err, "the old issue is said, then the update tried"


def test_a_group_that_failed_is_not_updated(monkeypatch):
    eks = stopped()
    eks.nodegroup["status"] = "CREATE_FAILED"
    use(eks, monkeypatch)
    with pytest.raises(nodegroup_health.NodegroupUnhealthyError, match="CREATE_FAILED"):
        idle_stop._WakeProvider().create(dict(WAKE_PROPS))
    assert "UpdateNodegroupConfig" not in [call for call, _ in eks.calls]


def test_every_input_that_replaces_the_job_wakes_the_group():
    base = plain(program("dev", (("trainEnabled", True),)).one(AWAKE).inputs)
    assert base["job_definition"], "a job runs: its definition is a trigger"
    inputs = {"train_args": ["--steps", "10"], "run_id": "1", "pip": [], "env_vars": {"A": "1"}}
    for key in ray_job.REPLACE_ON_CHANGE:
        changed = {**inputs, key: inputs[key] + ["x"] if isinstance(inputs[key], list) else
                   {"A": "2"} if isinstance(inputs[key], dict) else "2"}
        olds = {**base, "job_definition": ray_job.job_definition(inputs)}
        news = {**base, "job_definition": ray_job.job_definition(changed)}
        assert idle_stop._WakeProvider().diff("id", olds, news).changes, f"a new {key} replaces the job: it must wake"
        assert idle_stop.needs_wake(olds, news), key


def test_a_new_model_changes_the_wakes_inputs_and_the_definition_stays_secret():
    first = program("dev", (("trainEnabled", True),)).one(AWAKE)
    second = program("dev", (("trainEnabled", True), ("trainModelId", "Qwen/Qwen2.5-0.5B"))).one(AWAKE)
    assert is_secret_value(first.inputs["job_definition"]), "the definition digests trainEnv's values"
    assert idle_stop._WakeProvider().diff("id", plain(first.inputs), plain(second.inputs)).changes
    assert plain(program("dev").one(AWAKE).inputs)["job_definition"] == "", "no job, no job trigger"


def test_turning_the_job_off_records_without_waking(monkeypatch):
    eks = stopped()
    use(eks, monkeypatch)
    olds = {**WAKE_PROPS, "run_id": "1", "job_definition": "abc", "woken_at": "2026-12-02T09:00:00+00:00"}
    news = {**WAKE_PROPS, "run_id": "", "job_definition": ""}
    outs = idle_stop._WakeProvider().update("id", olds, news).outs
    assert outs["run_id"] == "" and not outs["woken"] and eks.calls == [], eks.calls
    assert idle_stop.needs_wake(outs, olds), "turned on again later, the job wakes the group"


# ---- the job's wait for its nodes ----------------------------------------------------------------------------------

def wait(eks: StrictEks, **kwargs) -> None:
    nodes_joined.wait_for_joined_nodes(
        eks.nodes, REQUEST, read_nodegroup=nodegroup_health.reader(eks, eks.cluster, eks.name), nodegroup=eks.name,
        clock=eks.clock, sleep=eks.sleep, **kwargs)


def test_the_job_waits_for_joined_nodes_advertising_gpus_and_efa():
    eks = stopped()
    idle_check.wake(eks, eks.cluster, eks.name, 2)
    lines: list[str] = []
    wait(eks, on_progress=lines.append)
    assert eks.usable_nodes() == 2 and eks.clock() >= UPDATE_SECONDS + JOIN_SECONDS + READY_SECONDS + ADVERTISE_SECONDS
    assert lines[0].startswith("waiting for the GPU nodes before the job: 0 of 2"), lines
    assert any("2 Ready, 0 advertising" in line for line in lines), lines
    assert lines[-1].startswith("2 GPU node(s) Ready with nvidia.com/gpu and vpc.amazonaws.com/efa"), lines


def test_the_jobs_wait_fails_at_once_on_a_stopped_group_naming_the_wake():
    eks = stopped()
    start = eks.clock()
    with pytest.raises(nodes_joined.NodesNotJoinedError, match="desired 0.*aws eks update-nodegroup-config"):
        wait(eks, wake_hint="aws eks update-nodegroup-config ...")
    assert eks.clock() == start, "no time waited"


def test_the_jobs_wait_fails_at_once_when_launches_fail():
    eks = stopped()
    eks.fail_launches("AsgInstanceLaunchFailures", "Could not launch On-Demand Instances.")
    idle_check.wake(eks, eks.cluster, eks.name, 2)
    start = eks.clock()
    with pytest.raises(nodegroup_health.NodegroupUnhealthyError, match="AsgInstanceLaunchFailures"):
        wait(eks)
    assert eks.clock() - start < UPDATE_SECONDS * 2


def test_the_jobs_wait_is_bounded_and_says_what_it_saw():
    eks = stopped()
    idle_check.wake(eks, eks.cluster, eks.name, 2)
    eks.gpus = 0  # a device plugin that never registers: nodes Ready, no GPUs advertised
    with pytest.raises(nodes_joined.NodesNotJoinedError) as failed:
        wait(eks, timeout_s=900)
    assert "after 900 s: 2 of 2 GPU node(s) joined, 2 Ready, 0 advertising" in str(failed.value), failed.value
    assert "Nothing was submitted" in str(failed.value)


def test_nodes_of_another_group_do_not_count():
    eks = StrictEks(desired=2, minimum=0, maximum=2)
    assert nodes_joined.node_states(eks.nodes(), REQUEST, "another-group") == (0, 0, 0)
    assert nodes_joined.node_states(eks.nodes(), REQUEST, eks.name) == (2, 2, 2)


def test_the_idle_stop_minimum_covers_the_jobs_wait_after_a_wake():
    assert config.IDLE_STOP_MINIMUM_MINUTES * 60 >= nodes_joined.NODES_JOIN_TIMEOUT_SECONDS


def test_an_eks_read_that_fails_leaves_the_wait_to_kubernetes(monkeypatch, capsys):
    from botocore.exceptions import ClientError as Refused

    class Throttled:
        def describe_nodegroup(self, **_kw):
            raise Refused({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "DescribeNodegroup")

    monkeypatch.setattr(aws_identity, "session", lambda identity, region: type("S", (), {
        "client": lambda s, n: Throttled()})())
    read = nodes_joined.eks_reader({"eks_cluster": "ray-train", "gpu_nodegroup": "gpu", "region": "us-west-2"})
    eks = StrictEks(desired=2, minimum=0, maximum=2)
    nodes_joined.wait_for_joined_nodes(eks.nodes, REQUEST, read_nodegroup=read, clock=eks.clock, sleep=eks.sleep)
    assert read() == {} and "ThrottlingException" in capsys.readouterr().err
    assert nodes_joined.eks_reader({"eks_cluster": "", "gpu_nodegroup": ""}) is None, "a job made before it knew"


def test_a_replaced_node_group_wakes_by_its_new_arn_under_the_same_name():
    """The GPU group's name is fixed (infra/aws/gpu_nodes.py): a replacement (a new instance type or AZ) keeps it, and
    only EKS's ARN, whose last part is a new UUID, says that new nodes follow."""
    arn = "arn:aws:eks:us-west-2:123456789012:nodegroup/ray-train/gpu/"
    olds = {**WAKE_PROPS, "nodegroup_arn": arn + "0c2f2d0e-1111-2222-3333-444444444444"}
    news = {**WAKE_PROPS, "nodegroup_arn": arn + "5e6f7a8b-5555-6666-7777-888888888888"}
    assert idle_stop._WakeProvider().diff("id", olds, news).changes
    assert idle_stop.needs_wake(olds, news), "a replaced group under the same name must wake"
    assert "nodegroup_arn" in plain(program("dev").one(AWAKE).inputs), "the program passes the group's ARN"


def test_a_state_from_before_the_arn_trigger_records_it_without_waking(monkeypatch):
    eks = stopped()
    use(eks, monkeypatch)
    olds = {**WAKE_PROPS, "woken_at": "2026-12-02T09:00:00+00:00"}  # written before these two triggers existed
    news = {**WAKE_PROPS, "nodegroup_arn": "arn:aws:eks:us-west-2:123456789012:nodegroup/ray-train/gpu/0c2f",
            "ray_namespace": "ray"}
    assert idle_stop._WakeProvider().diff("id", olds, news).changes, "the update records the ARN"
    outs = idle_stop._WakeProvider().update("id", olds, news).outs
    assert outs["nodegroup_arn"] == news["nodegroup_arn"] and not outs["woken"] and eks.calls == [], (
        f"the first ARN is no change: a stopped group stays stopped: {eks.calls}")


def test_a_new_ray_namespace_wakes_the_group_for_the_raycluster_it_replaces():
    """The namespace is the RayCluster's metadata, not its spec: a new one replaces the RayCluster (Kubernetes cannot
    move an object), whose readiness then waits for every worker, on a stopped group forever."""
    first = plain(program("dev", (("trainEnabled", True),)).one(AWAKE).inputs)
    second = plain(program("dev", (("trainEnabled", True), ("rayNamespace", "training"))).one(AWAKE).inputs)
    assert first["ray_cluster_spec"] == second["ray_cluster_spec"], "the spec alone does not say it"
    assert idle_stop._WakeProvider().diff("id", first, second).changes
    assert idle_stop.needs_wake(first, second), "a stopped group must wake for the new RayCluster's workers"


def test_a_wake_killed_after_eks_accepted_it_is_retried_without_a_second_update(monkeypatch):
    """An `up` cut off inside GpuNodesAwake's create, after UpdateNodegroupConfig returned: the next `up` creates it
    again. EKS refuses a second update while the first runs (ResourceInUseException); the retry waits for the group to
    settle, finds it at the asked size, and asks nothing again."""
    from tests.support.fake_ec2_capacity import ProviderKilled

    eks = stopped()
    use(eks, monkeypatch)
    accept = eks.update_nodegroup_config

    def killed_after(**kwargs):
        accept(**kwargs)
        raise ProviderKilled("killed after EKS accepted the update")

    monkeypatch.setattr(eks, "update_nodegroup_config", killed_after)
    with pytest.raises(ProviderKilled):
        idle_stop._WakeProvider().create(dict(WAKE_PROPS))
    assert eks.nodegroup["status"] == "UPDATING", "the update runs on without the provider"
    monkeypatch.setattr(eks, "update_nodegroup_config", accept)

    outs = idle_stop._WakeProvider().create(dict(WAKE_PROPS)).outs  # the next `up`
    updates = [call for call in eks.calls if call[0] == "UpdateNodegroupConfig"]
    assert len(updates) == 1 and eks.scaling()["desiredSize"] == 2, f"one update in all: {eks.calls}"
    assert not outs["woken"], "the retry found the group already asked for its nodes"
