"""The preview's checks of capacity reservations: a Capacity Block must outlast the set-up and the job, an existing
reservation is read with the stack's identity (describe_existing against botocore Stubbers), and the stack's own
reservation lands in its placement group, is replaced when that or the account changes, and is made as the stack's
role."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from botocore.stub import Stubber
from moto import mock_aws

from infra.aws import capacity_reservation
from infra.aws import identity as aws_identity
from infra.aws.capacity_reservation import GpuCapacityReservationProvider, reservation_request
from infra.config import AwsIdentity
from infra.preview import feasibility
from tests.support.fake_aws import ACCOUNT_ID, DEPLOYER_ROLE_ARN, RESERVATIONS, existing
from tests.support.pulumi_mocks import run_program_expecting_error, stack_settings


def _capacity_block(end_in: timedelta, timeout_minutes: int) -> tuple:
    from infra import config

    raw = stack_settings("p5") | existing("cr-00000000000000cb1") | {"trainEnabled": True,
                                                                     "trainTimeoutMinutes": timeout_minutes}
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    found = dict(RESERVATIONS["cr-00000000000000cb1"], StartDate=now - timedelta(hours=1), EndDate=now + end_in)
    return config.parse(raw), found, now


def test_a_capacity_block_must_outlast_the_setup_and_the_job():
    # One hour of setup, the job's 60 minutes, and EC2 stops the instances 30 minutes before the end.
    cfg, found, now = _capacity_block(timedelta(hours=2, minutes=31), timeout_minutes=60)
    assert feasibility.check_existing_reservation(cfg, found, region="us-east-2", now=now).capacity_block
    cfg, found, now = _capacity_block(timedelta(hours=2, minutes=29), timeout_minutes=60)
    with pytest.raises(ValueError, match="trainTimeoutMinutes"):
        feasibility.check_existing_reservation(cfg, found, region="us-east-2", now=now)


@pytest.fixture
def ec2_stub(monkeypatch):
    import boto3

    client = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                   region_name="us-east-2").client("ec2")
    stub = Stubber(client)
    stub.activate()
    monkeypatch.setattr(capacity_reservation, "_ec2_client", lambda props: client)
    yield stub
    stub.assert_no_pending_responses()


def test_describe_existing_counts_this_clusters_nodes_in_the_reservation(ec2_stub):
    found = {k: v for k, v in RESERVATIONS["cr-0123456789abcdef0"].items() if k != "ClusterInstances"}
    ec2_stub.add_response("describe_capacity_reservations", {"CapacityReservations": [found]},
                          {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
    ec2_stub.add_response("describe_instances", {"Reservations": [{"Instances": [{"InstanceId": "i-1"},
                                                                                 {"InstanceId": "i-2"}]}]},
                          {"Filters": [{"Name": "capacity-reservation-id", "Values": ["cr-0123456789abcdef0"]},
                                       {"Name": "tag:eks:cluster-name", "Values": ["ray-train"]},
                                       {"Name": "instance-state-name", "Values": ["pending", "running"]}]})
    result = capacity_reservation.describe_existing("cr-0123456789abcdef0", cluster_name="ray-train",
                                                    region="us-east-2", identity=AwsIdentity())
    assert result["ClusterInstances"] == 2 and result["InstanceType"] == "p5.48xlarge", result


def test_describe_existing_answers_none_for_a_reservation_that_does_not_exist(ec2_stub):
    ec2_stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound")
    assert capacity_reservation.describe_existing("cr-0000000000000dead", cluster_name="ray-train",
                                                  region="us-east-2", identity=AwsIdentity()) is None


def test_a_reservation_that_cannot_be_read_names_the_key(monkeypatch):
    from botocore.exceptions import ClientError

    from tests.support import pulumi_mocks

    def denied(*args, **kwargs):
        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}},
                          "DescribeCapacityReservations")

    monkeypatch.setattr(pulumi_mocks, "describe_existing", denied)
    failed = run_program_expecting_error("p5", existing("cr-0123456789abcdef0"))
    assert "capacityReservationId" in str(failed.error) and "UnauthorizedOperation" in str(failed.error), failed.error
    assert failed.resources == [], "a reservation that cannot be read stops the stack before any resource"


def test_the_stacks_reservation_is_requested_in_its_placement_group():
    arn = "arn:aws:ec2:us-east-2:123456789012:placement-group/ray-train-gpu-placement-1a2b3c4"
    request = reservation_request(instance_type="p5.48xlarge", instance_count=2, availability_zone="us-east-2a",
                                  tags={}, placement_group_arn=arn)
    assert request["PlacementGroupArn"] == arn, "CreateCapacityReservation must name the placement group"
    assert "PlacementGroupArn" not in reservation_request(instance_type="p5.48xlarge", instance_count=2,
                                                          availability_zone="us-east-2a", tags={})


@pytest.mark.parametrize("key", ["placement_group_arn", "account_id"])
def test_a_new_placement_group_or_account_replaces_the_reservation(key):
    olds = {"instance_type": "p5.48xlarge", "candidate_azs": ["us-east-2a"], "availability_zone": "us-east-2a",
            key: "old"}
    result = GpuCapacityReservationProvider().diff("cr-1", olds, {**olds, key: "new"})
    assert result.replaces == [key] and result.delete_before_replace, \
        f"EC2 cannot move a reservation into another placement group or account: {result.replaces}"


def test_the_session_assumes_the_stacks_role(monkeypatch):
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    with mock_aws():
        session = aws_identity.session(AwsIdentity(role_arn=DEPLOYER_ROLE_ARN), "us-east-2")
        caller = session.client("sts").get_caller_identity()["Arn"]
    assert caller.startswith(f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/deployer/"), \
        f"the reservation's calls must run as the assumed role, ran as {caller}"


def test_a_reservation_on_an_outpost_is_refused_naming_the_key(ec2_stub):
    # An Outpost's reservation serves only instances launched in that Outpost's subnets (EC2 User Guide, "Capacity
    # Reservations on AWS Outposts"); the GPU node group launches in the region's subnets, so it would get no node.
    found = RESERVATIONS["cr-000000000000a0770"]
    failed = run_program_expecting_error("p5", existing("cr-000000000000a0770"))
    message = str(failed.error)
    assert isinstance(failed.error, ValueError) and failed.resources == [], failed.error
    assert message.startswith("config key 'capacityReservationId': ") and "AWS Outpost" in message, message
    # describe_existing hands EC2's OutpostArn on as DescribeCapacityReservations gives it (the Stubber checks the
    # answer against EC2's model), and the same reservation without one is taken.
    answer = {k: v for k, v in found.items() if k != "ClusterInstances"}
    ec2_stub.add_response("describe_capacity_reservations", {"CapacityReservations": [answer]},
                          {"CapacityReservationIds": ["cr-000000000000a0770"]})
    ec2_stub.add_response("describe_instances", {"Reservations": []},
                          {"Filters": [{"Name": "capacity-reservation-id", "Values": ["cr-000000000000a0770"]},
                                       {"Name": "tag:eks:cluster-name", "Values": ["ray-train"]},
                                       {"Name": "instance-state-name", "Values": ["pending", "running"]}]})
    read = capacity_reservation.describe_existing("cr-000000000000a0770", cluster_name="ray-train",
                                                  region="us-east-2", identity=AwsIdentity())
    assert read["OutpostArn"] == found["OutpostArn"], read
    from infra import config

    cfg = config.parse(stack_settings("p5") | existing("cr-000000000000a0770"))
    with pytest.raises(ValueError, match="not on an Outpost"):
        feasibility.check_existing_reservation(cfg, read, region="us-east-2", now=datetime.now(timezone.utc))
    regional = {k: v for k, v in read.items() if k != "OutpostArn"}
    assert feasibility.check_existing_reservation(cfg, regional, region="us-east-2",
                                                  now=datetime.now(timezone.utc)).reservation_id == found[
        "CapacityReservationId"]
