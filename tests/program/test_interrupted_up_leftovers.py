"""Nothing that bills survives `destroy` after an interrupted `up`: `python -m tools.leftovers` finds what the
stack's tags name and its state does not, and deletes it.

An `up` killed while a resource was being made leaves a pending create in the state and no id, so `pulumi destroy`
never calls that resource's delete. Here the capacity reservation's provider is killed after EC2 answered
(tests/support/fake_ec2_capacity.py), and pulumi-aws's node group is made in EKS (moto) with no record in the
state: exactly what each leaves. `destroy` is played as Pulumi plays it, one delete per resource in the state.
"""
from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from infra.aws.capacity_reservation import RESOURCE_TYPE, GpuCapacityReservationProvider
from tests.support.fake_ec2_capacity import (
    ACCOUNT,
    ProviderKilled,
    killed_after_ec2_answers,
    reservations_on_every_client,
)
from tests.support.pulumi_mocks import run_program
from tools import leftovers
from workload import cli

STACK, REGION = "p5", "us-east-2"
TAGS = leftovers.stack_tags(STACK)
CLUSTER = TAGS["cluster"]
URN = f"urn:pulumi:{STACK}::raytrain-eks::{RESOURCE_TYPE}::{CLUSTER}-gpu-reservation"
NODEGROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"
RESERVATION_PROPS = {"instance_type": "p5.48xlarge", "instance_count": 2, "candidate_azs": ["us-east-2a"],
                     "tags": TAGS, "region": REGION, "urn": URN, "account_id": ACCOUNT}


@pytest.fixture
def aws(monkeypatch):
    with reservations_on_every_client(monkeypatch, region=REGION) as fake:
        yield fake


def export(resources=(), pending=()) -> dict:
    """`pulumi stack export`'s shape: the resources with ids, and the creates an interrupted `up` left pending."""
    return {"version": 3, "deployment": {
        "resources": [{"urn": f"urn:{kind}::{id_}", "custom": True, "type": kind, "id": id_}
                      for kind, id_ in resources],
        "pending_operations": [{"resource": {"urn": urn, "custom": True, "type": kind, "inputs": inputs},
                                "type": "creating"} for urn, kind, inputs in pending]}}


def tool(tmp_path: Path, state: dict, *flags: str) -> int:
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    return cli.run(leftovers.main, ["--stack", STACK, "--state", str(state_file), *flags])


def destroy(state: dict) -> None:
    """`pulumi destroy`: a delete for each resource in the state, and none for a pending create."""
    for resource in state["deployment"]["resources"]:
        if resource["type"] == RESOURCE_TYPE:
            GpuCapacityReservationProvider().delete(resource["id"], dict(RESERVATION_PROPS))


def make_cluster(eks, name: str = CLUSTER, tags: dict | None = None) -> None:
    eks.create_cluster(name=name, roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", tags=tags or TAGS,
                       resourcesVpcConfig={"subnetIds": ["subnet-00000000000000001"]})


def make_nodegroup(eks, name: str, tags: dict | None = None) -> None:
    eks.create_nodegroup(clusterName=CLUSTER, nodegroupName=name, nodeRole=f"arn:aws:iam::{ACCOUNT}:role/node",
                         subnets=["subnet-00000000000000001"], instanceTypes=["p5.48xlarge"], tags=tags or TAGS,
                         scalingConfig={"minSize": 0, "desiredSize": 2, "maxSize": 2})


def test_a_reservation_whose_create_was_killed_survives_destroy_and_the_tool_cancels_it(aws, monkeypatch, tmp_path,
                                                                                         capsys):
    killed_after_ec2_answers(aws, monkeypatch)
    with pytest.raises(ProviderKilled):
        GpuCapacityReservationProvider().create(dict(RESERVATION_PROPS))
    state = export(pending=[(URN, RESOURCE_TYPE, {"urn": URN})])
    destroy(state)
    assert len(aws.live()) == 1, "destroy knows no id for a pending create, so the reservation it made bills on"

    assert tool(tmp_path, state) == cli.CHECK_FAILED, "leftovers found and not deleted: exit 1"
    listed = capsys.readouterr().out
    reservation_id = aws.live()[0]["CapacityReservationId"]
    assert reservation_id in listed and URN in listed, f"the leftover and the pending create it is:\n{listed}"
    assert aws.live(), "without --delete nothing is cancelled"

    assert tool(tmp_path, state, "--delete") == cli.OK
    assert aws.live() == [], f"nothing that bills survives: {aws.live()}"
    assert "pulumi refresh --clear-pending-creates --stack p5" in capsys.readouterr().out


def test_a_half_made_node_group_is_deleted_and_what_the_state_holds_is_left(aws, tmp_path, capsys):
    eks = boto3.client("eks", region_name=REGION)
    make_cluster(eks)
    make_nodegroup(eks, f"{CLUSTER}-system-ng-0a1b2c3")
    make_nodegroup(eks, f"{CLUSTER}-gpu-ng-4d5e6f7")  # recorded by the up before
    # The interrupted `up` that replaced the GPU group: EKS made it, Pulumi recorded only that it was creating it.
    half_made = f"{CLUSTER}-gpu-ng-8a9b0c1"
    make_nodegroup(eks, half_made)
    # Someone else's group in the same cluster (no stack tags) is not the stack's to delete.
    make_nodegroup(eks, "hand-made", tags={"team": "research"})
    kept = GpuCapacityReservationProvider().create(dict(RESERVATION_PROPS))
    state = export(resources=[("aws:eks/cluster:Cluster", CLUSTER),
                              (NODEGROUP_TYPE, f"{CLUSTER}:{CLUSTER}-system-ng-0a1b2c3"),
                              (NODEGROUP_TYPE, f"{CLUSTER}:{CLUSTER}-gpu-ng-4d5e6f7"), (RESOURCE_TYPE, kept.id)],
                   pending=[("urn:pulumi:p5::raytrain-eks::aws:eks/nodeGroup:NodeGroup::gpu-ng", NODEGROUP_TYPE,
                             {"nodeGroupName": half_made})])

    assert tool(tmp_path, state, "--delete") == cli.OK
    out = capsys.readouterr().out
    assert half_made in out and "aws:eks/nodeGroup:NodeGroup::gpu-ng" in out, out
    remaining = sorted(eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"])
    assert remaining == sorted([f"{CLUSTER}-system-ng-0a1b2c3", f"{CLUSTER}-gpu-ng-4d5e6f7", "hand-made"]), (
        f"only the node group outside the state goes: {remaining}")
    assert [r["CapacityReservationId"] for r in aws.live()] == [kept.id], "the state's reservation stays"
    assert tool(tmp_path, state) == cli.OK, "a second look finds nothing"


def test_after_destroy_everything_still_tagged_goes_in_dependency_order(aws, tmp_path):
    eks = boto3.client("eks", region_name=REGION)
    ec2 = boto3.client("ec2", region_name=REGION)
    make_cluster(eks)
    make_nodegroup(eks, f"{CLUSTER}-gpu-ng-8a9b0c1")

    def tag_spec(kind: str) -> list[dict]:
        return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in TAGS.items()]}]

    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    address = ec2.allocate_address(Domain="vpc", TagSpecifications=tag_spec("elastic-ip"))["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=address,
                                 TagSpecifications=tag_spec("natgateway"))["NatGateway"]["NatGatewayId"]
    other_stack = ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": [
        {"Key": "project", "Value": TAGS["project"]}, {"Key": "stack", "Value": "dev"}]}])["AllocationId"]
    GpuCapacityReservationProvider().create(dict(RESERVATION_PROPS))

    assert tool(tmp_path, export(), "--delete") == cli.OK  # a destroy that removed everything from the state
    assert aws.live() == []
    assert eks.list_clusters()["clusters"] == [], "the cluster goes once its node groups are gone"
    nats = ec2.describe_nat_gateways(NatGatewayIds=[nat])["NatGateways"]
    assert nats[0]["State"] == "deleted", nats
    assert [a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]] == [other_stack], (
        "the stack's address is released after its NAT gateway; another stack's stays")


def test_bad_input_is_refused_in_one_line(aws, tmp_path, monkeypatch, capsys):
    assert cli.run(leftovers.main, ["--stack", "nope"]) == cli.USAGE
    assert "--stack nope: no Pulumi.nope.yaml" in capsys.readouterr().err
    (tmp_path / "state.json").write_text("{not json")
    assert cli.run(leftovers.main, ["--stack", STACK, "--state", str(tmp_path / "state.json")]) == cli.USAGE
    assert "--state" in capsys.readouterr().err
    monkeypatch.setattr(leftovers.shutil, "which", lambda _name: None)
    assert cli.run(leftovers.main, ["--stack", STACK]) == cli.ENVIRONMENT
    assert "Pulumi CLI is not on PATH" in capsys.readouterr().err
    # A misspelt region is named first: without the CLI, without credentials, it is still the mistake to fix.
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    assert cli.run(leftovers.main, ["--stack", STACK, "--region", "ap-south1"]) == cli.USAGE
    assert "--region: 'ap-south1' is not an AWS region's name; did you mean ap-south-1?" in capsys.readouterr().err


def test_the_gpu_node_group_has_a_fixed_name_so_a_retried_create_cannot_make_a_second():
    run = run_program(STACK)
    group = next(r for r in run.of_type(NODEGROUP_TYPE) if r.name == f"{CLUSTER}-gpu-ng")
    assert group.inputs.get("nodeGroupName") == f"{CLUSTER}-gpu-ng", (
        f"an auto-name gets a new random suffix on each create, so the `up` after an interrupted one made a second "
        f"GPU group beside the first: {group.inputs.get('nodeGroupName')!r}")
    assert "nodeGroupName" in group.ignore_changes, "a stack made with the auto-name keeps it (no replacement)"


def test_eks_refuses_a_second_node_group_of_the_same_name(aws):
    """What the fixed name buys: the create retried after an interrupted `up` fails at once, billing nothing."""
    eks = boto3.client("eks", region_name=REGION)
    make_cluster(eks)
    make_nodegroup(eks, f"{CLUSTER}-gpu-ng")
    with pytest.raises(eks.exceptions.ResourceInUseException):
        make_nodegroup(eks, f"{CLUSTER}-gpu-ng")


def test_no_credentials_is_one_line_and_exit_3(aws, tmp_path, monkeypatch, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    assert tool(tmp_path, export()) == cli.ENVIRONMENT
    err = capsys.readouterr().err
    assert err.startswith("error: AWS refused the look-up: Unable to locate credentials"), err
    assert "Traceback" not in err, err


def test_node_groups_are_found_by_their_own_tags_and_an_untagged_cluster_is_left(aws, tmp_path):
    eks = boto3.client("eks", region_name=REGION)
    make_cluster(eks, tags={"team": "platform"})  # the stack's name, but not made by it: never deleted
    make_nodegroup(eks, f"{CLUSTER}-gpu-ng")
    assert tool(tmp_path, export(), "--delete") == cli.OK
    assert eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"] == [], "the stack's tagged group goes"
    assert eks.list_clusters()["clusters"] == [CLUSTER], "a cluster without the stack's tags stays"


WRONG_SHAPES = {  # (the file, what the refusal says): each a way the readers' .get() chain met another type
    "a list": ([export()], "top level is list"),
    "version 2": ({**export(), "version": 2}, "allowed: 3"),
    "version true": ({**export(), "version": True}, "allowed: 3"),
    "deployment a number": ({"version": 3, "deployment": 7}, "deployment is int"),
    "resources an object": ({"version": 3, "deployment": {"resources": {"urn": "x"}}}, "resources is dict"),
    "a resource a string": ({"version": 3, "deployment": {"resources": ["urn:pulumi:p5::x"]}}, "resources[0] is str"),
    "a resource without type": ({"version": 3, "deployment": {"resources": [{"urn": "u", "id": "i"}]}},
                                "no string 'type'"),
    "an id that is a number": ({"version": 3, "deployment": {"resources": [{"urn": "u", "type": "t", "id": 5}]}},
                               "'id' is int"),
    "pending operations a string": ({"version": 3, "deployment": {"pending_operations": "creating"}},
                                    "pending_operations is str"),
    "a pending resource null": ({"version": 3, "deployment": {"pending_operations": [{"type": "creating"}]}},
                                "pending_operations[0].resource is NoneType"),
}


@pytest.mark.parametrize("name", WRONG_SHAPES)
def test_a_state_file_of_another_shape_is_refused_naming_state(name, aws, tmp_path, capsys):
    state, said = WRONG_SHAPES[name]
    assert tool(tmp_path, state) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) <= 2 and err[0].startswith("error: --state") and said in err[0], err
    assert aws.live() == [], "nothing looked up or deleted"


def test_a_pulumi_cli_export_of_another_shape_is_a_set_up_problem(aws, monkeypatch, capsys):
    monkeypatch.setattr(leftovers.shutil, "which", lambda _name: "/usr/bin/pulumi")
    monkeypatch.setattr(leftovers.subprocess, "run", lambda *a, **k: type("Done", (), {
        "returncode": 0, "stdout": '{"version": 3, "deployment": "none"}', "stderr": ""})())
    assert cli.run(leftovers.main, ["--stack", STACK]) == cli.ENVIRONMENT
    assert "deployment is str" in capsys.readouterr().err
