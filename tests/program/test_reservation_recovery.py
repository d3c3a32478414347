"""The in-stack capacity reservation is found again, never made twice, and made only in the stack's account.

moto answers STS for real (its caller identity, and AssumeRole into another account). It has no capacity
reservations, so tests/support/fake_ec2_capacity.py's `FakeCapacityReservations` answers those EC2 calls with
EC2's documented ClientToken rule, through botocore's own events on real clients.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import boto3
import pytest

from infra.aws.capacity_reservation import URN_TAG, GpuCapacityReservationProvider
from infra.aws.identity import AccountMismatch
from tests.support.fake_ec2_capacity import (
    ACCOUNT,
    ProviderKilled,
    killed_after_ec2_answers,
    reservations_on_every_client,
)

OTHER_ACCOUNT = "210987654321"
URN = "urn:pulumi:p5::raytrain-eks::pulumi-python:dynamic/raytrain:GpuCapacityReservation::ray-train-gpu-reservation"
PROPS = {"instance_type": "p5.48xlarge", "instance_count": 2, "candidate_azs": ["us-east-2a", "us-east-2b"],
         "tags": {"project": "raytrain-eks", "stack": "p5"}, "region": "us-east-2", "urn": URN, "account_id": ACCOUNT}


@pytest.fixture
def ec2(monkeypatch):
    """moto for STS; every EC2 client any boto3 session makes answers capacity reservations from the fake."""
    with reservations_on_every_client(monkeypatch, region="us-east-2") as fake:
        yield fake


def test_a_create_killed_after_ec2_answered_leaves_one_reservation_after_the_retry(ec2, monkeypatch):
    killed_after_ec2_answers(ec2, monkeypatch)
    with pytest.raises(ProviderKilled):
        GpuCapacityReservationProvider().create(dict(PROPS))
    assert len(ec2.live()) == 1, "EC2 made the reservation before the provider died"

    retried = GpuCapacityReservationProvider().create(dict(PROPS))  # the next `pulumi up`
    live = ec2.live()
    print(f"\nlive reservations after the interrupted create and its retry: {len(live)}")
    assert [r["CapacityReservationId"] for r in live] == [retried.id], (
        f"the retry must adopt the reservation the killed create made, not make a second: {live}")
    assert retried.outs["availability_zone"] == "us-east-2a", retried.outs


def test_a_retry_that_describe_does_not_yet_show_gets_the_same_reservation_from_its_client_token(ec2, monkeypatch):
    killed_after_ec2_answers(ec2, monkeypatch)
    with pytest.raises(ProviderKilled):
        GpuCapacityReservationProvider().create(dict(PROPS))
    ec2.hidden_from_describe = set(ec2.reservations)  # EC2's read-after-write lag: the tag look-up finds nothing

    retried = GpuCapacityReservationProvider().create(dict(PROPS))
    assert [r["CapacityReservationId"] for r in ec2.live()] == [retried.id], (
        f"the same ClientToken must return the reservation already made: {ec2.live()}")


def test_extra_reservations_carrying_the_tag_are_cancelled_and_the_fitting_one_adopted(ec2):
    made = GpuCapacityReservationProvider().create(dict(PROPS))
    # Two more carrying this resource's URN (a create cut off twice, once for another instance type), and one of
    # someone else's in the same AZ.
    client = boto3.session.Session().client("ec2", region_name="us-east-2")
    stray = client.create_capacity_reservation(
        InstanceType="p5.48xlarge", InstancePlatform="Linux/UNIX", AvailabilityZone="us-east-2b", InstanceCount=2,
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": URN_TAG, "Value": URN}]}])
    other_type = client.create_capacity_reservation(
        InstanceType="p4d.24xlarge", InstancePlatform="Linux/UNIX", AvailabilityZone="us-east-2a", InstanceCount=2,
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": URN_TAG, "Value": URN}]}])
    someone_elses = client.create_capacity_reservation(
        InstanceType="p5.48xlarge", InstancePlatform="Linux/UNIX", AvailabilityZone="us-east-2a", InstanceCount=1)
    creates_before = ec2.calls.count("CreateCapacityReservation")

    adopted = GpuCapacityReservationProvider().create(dict(PROPS))
    assert adopted.id == made.id, "the reservation in the best-ranked candidate AZ is kept"
    assert ec2.calls.count("CreateCapacityReservation") == creates_before, "nothing new is reserved"
    states = {r["CapacityReservationId"]: r["State"] for r in ec2.reservations.values()}
    assert states == {made.id: "active", stray["CapacityReservation"]["CapacityReservationId"]: "cancelled",
                      other_type["CapacityReservation"]["CapacityReservationId"]: "cancelled",
                      someone_elses["CapacityReservation"]["CapacityReservationId"]: "active"}, states


def test_destroy_then_up_makes_a_new_reservation_not_the_cancelled_one_its_token_named(ec2):
    provider = GpuCapacityReservationProvider()
    first = provider.create(dict(PROPS))
    provider.delete(first.id, {**PROPS, **first.outs})
    second = provider.create(dict(PROPS))
    assert second.id != first.id and [r["CapacityReservationId"] for r in ec2.live()] == [second.id], (
        f"EC2 answers a reused ClientToken with the cancelled reservation; the provider must move on: {ec2.live()}")


def test_delete_cancels_a_stray_reservation_carrying_the_tag_too(ec2, monkeypatch):
    killed_after_ec2_answers(ec2, monkeypatch)
    with pytest.raises(ProviderKilled):
        GpuCapacityReservationProvider().create({**PROPS, "candidate_azs": ["us-east-2b"]})
    ec2.hidden_from_describe = set(ec2.reservations)
    made = GpuCapacityReservationProvider().create({**PROPS, "candidate_azs": ["us-east-2a"]})  # another AZ: no token
    ec2.hidden_from_describe = set()
    assert len(ec2.live()) == 2, "the lagging describe hid the first one from the second create"
    GpuCapacityReservationProvider().delete(made.id, {**PROPS, **made.outs})
    assert ec2.live() == [], f"destroy must cancel every reservation that carries the resource's URN: {ec2.live()}"


def test_capacity_reservation_hours_sets_an_end_date_and_a_change_moves_it(ec2):
    provider = GpuCapacityReservationProvider()
    made = provider.create({**PROPS, "end_hours": 6})
    reservation = ec2.reservations[made.id]
    hours = (reservation["EndDate"] - datetime.now(timezone.utc)) / timedelta(hours=1)
    assert reservation["EndDateType"] == "limited" and 6 <= hours <= 7, (
        f"capacityReservationHours 6: the reservation ends 6 to 7 hours from now (rounded up to the hour): {hours}")
    provider.update(made.id, {**PROPS, **made.outs, "end_hours": 6}, {**PROPS, "end_hours": 0})
    assert reservation["EndDateType"] == "unlimited", "0 hours: it lasts until destroy"


def test_credentials_of_another_account_are_refused_before_any_reservation_call(ec2):
    with pytest.raises(AccountMismatch, match=f"account {ACCOUNT}.*previewed in account {OTHER_ACCOUNT}"):
        GpuCapacityReservationProvider().create({**PROPS, "account_id": OTHER_ACCOUNT})
    with pytest.raises(AccountMismatch):  # nor may delete take "not found there" for "gone"
        GpuCapacityReservationProvider().delete("cr-00000000000000001", {**PROPS, "account_id": OTHER_ACCOUNT})
    assert ec2.calls == [], f"no EC2 call with the wrong account's credentials: {ec2.calls}"


def test_the_stacks_assumed_role_is_assumed_before_reserving(ec2):
    role_arn = f"arn:aws:iam::{OTHER_ACCOUNT}:role/gpu-deployer"
    made = GpuCapacityReservationProvider().create({**PROPS, "account_id": OTHER_ACCOUNT, "role_arn": role_arn})
    assert ec2.live()[0]["CapacityReservationId"] == made.id, \
        "with aws:assumeRoles the provider reaches the role's account, which is the stack's, and reserves there"
    with pytest.raises(AccountMismatch, match=f"role {role_arn}"):
        GpuCapacityReservationProvider().create({**PROPS, "role_arn": role_arn})  # previewed in the base account
