"""The in-stack capacity reservation (infra.aws.capacity_reservation): its dynamic provider's create, update, read,
diff and delete against botocore Stubbers, its trip to the provider process, and the resource under mocks."""
from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import dill
import pulumi
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws
from pulumi.runtime.rpc import unwrap_rpc_secret

from infra.aws import capacity_reservation
from infra.aws.capacity_reservation import (
    CapacityReservationError,
    GpuCapacityReservation,
    GpuCapacityReservationProvider,
)
from tests.support.fake_ec2_capacity import (
    ACCOUNT,
    G_AND_VT,
    FakeAws,
    capacity_error,
    fake_credentials,  # noqa: F401 (an autouse fixture: no real AWS credentials)
    reservation,
)
from tools.capacity import stack_file, survey
from tools.capacity.aws import Aws

REPO = Path(__file__).resolve().parents[2]
URN = "urn:pulumi:p5::raytrain-eks::pulumi-python:dynamic/raytrain:GpuCapacityReservation::ray-train-gpu-reservation"
PROPS = {"instance_type": "g6.12xlarge", "instance_count": 2, "candidate_azs": ["us-east-1a", "us-east-1b"],
         "tags": {"raytrain:cluster": "ray-train"}, "region": "us-east-1", "urn": URN}


@pytest.fixture
def reservation_stub(monkeypatch):
    client = Aws().client("ec2", "us-east-1")
    stub = Stubber(client)
    stub.activate()
    regions = []
    monkeypatch.setattr(capacity_reservation, "_ec2_client",
                        lambda props: regions.append((props.get("region"), props.get("profile"))) or client)
    yield stub
    stub.assert_no_pending_responses()
    assert set(regions) <= {("us-east-1", None), ("us-east-1", "gpu-account")}, \
        f"the provider should use the region and profile inputs, used {regions}"


def expect_tag_lookup(stub: Stubber, *found: dict, urn: str = URN) -> None:
    """The look-up for reservations an interrupted create left, by this resource's URN tag."""
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": list(found)},
                      {"Filters": [{"Name": "tag:raytrain:urn", "Values": [urn]}]})


def expect_create(stub: Stubber, az: str, error: str | None = None, reservation_id: str = "cr-0b0000000000000b1",
                  urn: str = URN):
    expected = {"ClientToken": ANY, "InstanceType": "g6.12xlarge", "InstancePlatform": "Linux/UNIX",
                "AvailabilityZone": az, "InstanceCount": 2, "InstanceMatchCriteria": "targeted",
                "Tenancy": "default", "EndDateType": "unlimited",
                "TagSpecifications": [{"ResourceType": "capacity-reservation",
                                       "Tags": [{"Key": "raytrain:cluster", "Value": "ray-train"},
                                                {"Key": "raytrain:urn", "Value": urn}]}]}
    if error:
        capacity_error(stub, "create_capacity_reservation", error, f"{error} in {az}", status=500, **expected)
    else:
        stub.add_response("create_capacity_reservation",
                          {"CapacityReservation": reservation(reservation_id, az)}, expected)


def test_provider_create_moves_to_the_next_az_on_insufficient_capacity(reservation_stub):
    expect_tag_lookup(reservation_stub)
    expect_create(reservation_stub, "us-east-1a", "InsufficientInstanceCapacity")
    expect_create(reservation_stub, "us-east-1b")
    result = GpuCapacityReservationProvider().create(dict(PROPS))
    assert result.id == "cr-0b0000000000000b1" and result.outs["reservation_id"] == result.id
    assert result.outs["availability_zone"] == "us-east-1b", "the reservation should land in the second candidate"
    assert result.outs["skipped_azs"][0].startswith("us-east-1a: InsufficientInstanceCapacity")


def test_provider_create_lists_every_az_when_all_fail(reservation_stub):
    expect_tag_lookup(reservation_stub)
    expect_create(reservation_stub, "us-east-1a", "InsufficientInstanceCapacity")
    expect_create(reservation_stub, "us-east-1b", "Unsupported")
    with pytest.raises(CapacityReservationError) as failure:
        GpuCapacityReservationProvider().create(dict(PROPS))
    message = str(failure.value)
    assert "us-east-1a: InsufficientInstanceCapacity" in message and "us-east-1b: Unsupported" in message, message


def test_provider_create_stops_at_a_quota_error(reservation_stub):
    expect_tag_lookup(reservation_stub)
    expect_create(reservation_stub, "us-east-1a", "InstanceLimitExceeded")  # no call for us-east-1b is queued
    with pytest.raises(CapacityReservationError, match="quota of the instance family is regional"):
        GpuCapacityReservationProvider().create(dict(PROPS))


def test_provider_delete_cancels_and_tolerates_an_ended_reservation(reservation_stub):
    reservation_stub.add_response("describe_capacity_reservations",
                                  {"CapacityReservations": [reservation("cr-0b0000000000000b1", "us-east-1b")]})
    expect_tag_lookup(reservation_stub, reservation("cr-0b0000000000000b1", "us-east-1b"))
    reservation_stub.add_response("cancel_capacity_reservation", {"Return": True},
                                  {"CapacityReservationId": "cr-0b0000000000000b1"})
    reservation_stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        reservation("cr-0b0000000000000b1", "us-east-1b", state="cancelled")]})
    expect_tag_lookup(reservation_stub)
    provider = GpuCapacityReservationProvider()
    provider.delete("cr-0b0000000000000b1", dict(PROPS))
    provider.delete("cr-0b0000000000000b1", dict(PROPS))  # already cancelled: no second cancel call


def test_provider_update_resizes_and_retags_in_place(reservation_stub):
    reservation_stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        reservation("cr-0b0000000000000b1", "us-east-1b")]}, {"CapacityReservationIds": ["cr-0b0000000000000b1"]})
    reservation_stub.add_response("modify_capacity_reservation", {"Return": True},
                                  {"CapacityReservationId": "cr-0b0000000000000b1", "InstanceCount": 3})
    reservation_stub.add_response("delete_tags", {}, {"Resources": ["cr-0b0000000000000b1"],
                                                      "Tags": [{"Key": "raytrain:cluster"}]})
    reservation_stub.add_response("create_tags", {}, {"Resources": ["cr-0b0000000000000b1"],
                                                      "Tags": [{"Key": "team", "Value": "ml"}]})
    olds = {**PROPS, "reservation_id": "cr-0b0000000000000b1", "availability_zone": "us-east-1b"}
    result = GpuCapacityReservationProvider().update(
        "cr-0b0000000000000b1", olds, {**PROPS, "instance_count": 3, "tags": {"team": "ml"}})
    assert (result.outs["availability_zone"], result.outs["instance_count"]) == ("us-east-1b", 3), \
        f"an update keeps the reservation's AZ and reports the new count: {result.outs}"


def test_provider_update_refuses_credentials_that_cannot_see_the_reservation(reservation_stub):
    reservation_stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound")
    olds = {**PROPS, "reservation_id": "cr-0b0000000000000b1", "availability_zone": "us-east-1b"}
    with pytest.raises(CapacityReservationError, match="not visible with the new credentials") as refused:
        GpuCapacityReservationProvider().update("cr-0b0000000000000b1", olds, {**PROPS, "profile": "gpu-account"})
    assert "profile 'gpu-account'" in str(refused.value), f"the message names the new identity: {refused.value}"


def test_provider_read_drops_a_reservation_that_ended_outside_pulumi(reservation_stub):
    reservation_stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        reservation("cr-0b0000000000000b1", "us-east-1b", state="expired")]})
    result = GpuCapacityReservationProvider().read("cr-0b0000000000000b1", dict(PROPS))
    assert not result.id, "an expired reservation reads as gone, so a refresh removes it from the state"


@pytest.mark.parametrize("change, replaces, changes", [
    ({"instance_type": "g6e.12xlarge"}, ["instance_type"], True),
    ({"candidate_azs": ["us-east-1c"]}, ["candidate_azs"], True),          # its AZ dropped: move
    ({"candidate_azs": ["us-east-1b", "us-east-1a"]}, [], True),           # re-ranked only: stay put
    ({"instance_count": 3}, [], True),
    ({"profile": "gpu-account"}, [], True),                                # credentials alone: keep the capacity
    ({"role_arn": "arn:aws:iam::123456789012:role/gpu"}, [], True),
    ({"account_id": "210987654321"}, ["account_id"], True),                # another account: another reservation
    ({"end_hours": 12}, [], True),                                         # a new end date, in place
    ({}, [], False),
])
def test_provider_diff_names_the_inputs_that_force_replacement(change, replaces, changes):
    olds = {**PROPS, "account_id": ACCOUNT, "reservation_id": "cr-0b0000000000000b1",
            "availability_zone": "us-east-1b"}
    result = GpuCapacityReservationProvider().diff("cr-0b0000000000000b1", olds,
                                                   {**PROPS, "account_id": ACCOUNT, **change})
    assert (result.replaces, result.changes) == (replaces, changes), f"{change}: {result.replaces}, {result.changes}"
    assert result.delete_before_replace is True


def test_provider_survives_the_trip_to_the_provider_process():
    """Pulumi pickles the provider with dill and unpickles it in a fresh interpreter at the project root."""
    serialized = pulumi.dynamic.dynamic.serialize_provider(GpuCapacityReservationProvider())
    script = ("import base64, dill, sys; provider = dill.loads(base64.b64decode(sys.stdin.read())); "
              "print(provider.diff('cr-1', {'availability_zone': 'a', 'candidate_azs': ['a']}, "
              "{'candidate_azs': ['b']}).replaces)")
    done = subprocess.run([sys.executable, "-c", script], input=serialized, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "['candidate_azs']", done.stderr[-2000:]


class DynamicProviderMocks(pulumi.runtime.Mocks):
    """Answers a dynamic resource the way the engine would: through its own unpickled provider."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        inputs = dict(args.inputs)
        if args.typ.startswith("pulumi-python:dynamic"):
            provider = dill.loads(base64.b64decode(unwrap_rpc_secret(inputs.pop("__provider"))))
            result = provider.create(inputs)
            return result.id, result.outs
        return f"{args.name}-id", inputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


@pytest.fixture
def mocks():
    pulumi.runtime.set_mocks(DynamicProviderMocks(), project="raytrain-eks", stack="test", preview=False)
    yield


@pulumi.runtime.test
def test_reservation_under_mocks_lands_in_the_first_az_with_capacity(mocks, reservation_stub):
    urn = "urn:pulumi:test::raytrain-eks::pulumi-python:dynamic/raytrain:GpuCapacityReservation::gpu-capacity"
    expect_tag_lookup(reservation_stub, urn=urn)
    expect_create(reservation_stub, "us-east-1a", "InsufficientInstanceCapacity", urn=urn)
    expect_create(reservation_stub, "us-east-1b", reservation_id="cr-0c0000000000000c1", urn=urn)
    held = GpuCapacityReservation("gpu-capacity", instance_type="g6.12xlarge", instance_count=2,
                                  candidate_azs=["us-east-1a", "us-east-1b"], tags={"raytrain:cluster": "ray-train"},
                                  region="us-east-1")

    def check(values):
        reservation_id, availability_zone, registered_urn = values
        assert reservation_id == "cr-0c0000000000000c1", \
            f"reservation_id should be the one created in us-east-1b, got {reservation_id}"
        assert availability_zone == "us-east-1b", f"availability_zone should be us-east-1b, got {availability_zone}"
        # The engine leaves the root stack out of a top-level resource's URN (pulumi/pulumi, Deployment.generateURN:
        # "don't use the root stack type"); Python's mock monitor puts it in.
        assert registered_urn.replace("pulumi:pulumi:Stack$", "") == urn, \
            f"the URN tag must be the URN Pulumi gives the resource: {registered_urn}"
    return pulumi.Output.all(held.reservation_id, held.availability_zone, held.urn).apply(check)


@pytest.mark.parametrize("kwargs, message", [
    ({"instance_count": 0}, "instance_count"),
    ({"candidate_azs": []}, "candidate_azs"),
    ({"candidate_azs": ["us-east-1a", "us-east-1a"]}, "lists an AZ twice"),
])
def test_reservation_refuses_bad_inputs_before_registering(kwargs, message):
    arguments = {"instance_type": "g6.12xlarge", "instance_count": 2, "candidate_azs": ["us-east-1a"], "tags": {},
                 **kwargs}
    with pytest.raises(ValueError, match=message):
        GpuCapacityReservation("gpu-capacity", **arguments)


def test_an_undeployed_stack_is_judged_by_its_vpc_availability_zones():
    stack = stack_file.StackContext(name="g6", path=Path("Pulumi.g6.yaml"), project="raytrain-eks",
                                  cluster_name="ray-train", region="us-west-2",
                                  vpc_azs=("us-west-2a", "us-west-2b"))
    with mock_aws():
        aws = FakeAws()
        aws.answer_survey("us-west-2", 256, {})
        report = survey.survey_region(aws, "us-west-2", "g6.12xlarge", 2, G_AND_VT, stack)
        aws.assert_all_answered()
    covered = {az.availability_zone: az.private_subnet for az in report.azs}
    assert covered == {"us-west-2a": True, "us-west-2b": True, "us-west-2c": False, "us-west-2d": False}, \
        f"with no VPC deployed, only the stack's vpcAvailabilityZones will have a private subnet: {covered}"
