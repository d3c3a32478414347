"""The stack's own reservation after it ended (capacityReservationHours, or cancelled): the preview finds it by its URN
tag with the stack's identity and warns, naming the keys and the recovery (`pulumi refresh`, then `pulumi up`), since
the GPU launch template still targets it and a stopped group could never wake; docs/troubleshooting.md gives the same
commands. A live reservation, or none yet (a first `up`), says nothing."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from unittest import mock

import boto3
import pulumi
import pytest
from botocore.stub import Stubber

from infra.aws import reservation_end
from infra.aws.capacity_reservation import RESOURCE_TYPE, URN_TAG
from infra.config import AwsIdentity
from tests.support import fake_aws
from tests.support.pulumi_mocks import run_program

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
URN = f"urn:pulumi:p5::raytrain-eks::{RESOURCE_TYPE}::ray-train-p5-gpu-reservation"


def reservation(reservation_id: str, state: str, created: datetime, **extra) -> dict:
    return {"CapacityReservationId": reservation_id, "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-2a",
            "State": state, "CreateDate": created, "TotalInstanceCount": 2, **extra}


def test_only_a_tag_with_no_live_reservation_is_ended():
    old = reservation("cr-0000000000000a001", "expired", NOW - timedelta(days=3), EndDate=NOW - timedelta(days=2))
    newer = reservation("cr-0000000000000a002", "expired", NOW - timedelta(days=1), EndDate=NOW - timedelta(hours=1))
    live = reservation("cr-0000000000000a003", "active", NOW)
    assert reservation_end.ended_reservation([]) is None, "a first up: nothing made yet"
    assert reservation_end.ended_reservation([old, live]) is None, "a live one (a refresh-and-up already made it)"
    assert reservation_end.ended_reservation([newer, old]) is newer


@pytest.mark.parametrize("state, end_hours, idle, expected", [
    ("expired", 48, 60, ["capacityReservationHours is 48", "gpuIdleStopMinutes", "cannot wake"]),
    ("cancelled", 0, 0, ["cancelled outside `pulumi destroy`"]),
])
def test_the_warning_names_the_keys_and_the_recovery(state, end_hours, idle, expected):
    ended = reservation("cr-0000000000000a002", state, NOW - timedelta(days=2), EndDate=NOW - timedelta(hours=1))
    message = reservation_end.ended_message(ended, end_hours=end_hours, idle_stop_minutes=idle)
    for part in ["capacityReserve:", "cr-0000000000000a002", state, "`pulumi refresh`", "then `pulumi up`",
                 "capacityReserve false", *expected]:
        assert part in message, (part, message)
    assert ("gpuIdleStopMinutes" in message) is bool(idle)


def test_the_reservations_are_read_by_the_urn_tag_in_every_state():
    ec2 = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    ended = reservation("cr-0000000000000a002", "expired", NOW - timedelta(days=2))
    with Stubber(ec2) as stub, mock.patch.object(reservation_end, "_ec2_client", lambda props: ec2):
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [ended]},
                          {"Filters": [{"Name": f"tag:{URN_TAG}", "Values": [URN]}]})
        found = reservation_end.describe_tagged(URN, region="us-east-2", identity=AwsIdentity())
    assert [r["State"] for r in found] == ["expired"], "ended reservations are kept: they are the point"


def _warnings(overrides: dict) -> list[str]:
    seen: list[str] = []
    real_warn = pulumi.log.warn
    with mock.patch.object(pulumi.log, "warn", lambda message, *a, **k: (seen.append(message), real_warn(message))):
        run = run_program("p5", overrides)
    return run, [line for line in seen if "capacityReserve:" in line]


def test_an_ended_reservation_is_warned_of_at_preview_and_a_live_one_is_not(monkeypatch):
    ended = reservation("cr-0000000000000a002", "expired", NOW - timedelta(days=2), EndDate=NOW - timedelta(hours=1))
    monkeypatch.setitem(fake_aws.TAGGED_RESERVATIONS, URN, [ended])
    run, warned = _warnings({"capacityReservationHours": 48, "gpuIdleStopMinutes": 60})
    (resource,) = [r for r in run.resources if r.type == RESOURCE_TYPE]
    assert resource.inputs["urn"] == URN, "the preview looks for the tag the resource writes"
    assert len(warned) == 1 and "cr-0000000000000a002" in warned[0] and "`pulumi refresh`" in warned[0], warned
    monkeypatch.setitem(fake_aws.TAGGED_RESERVATIONS, URN, [ended, reservation("cr-0000000000000a003", "active", NOW)])
    assert _warnings({"capacityReservationHours": 48})[1] == []


def test_a_read_that_fails_never_stops_the_preview(monkeypatch):
    def refuse(*_a, **_k):
        raise RuntimeError("AccessDenied: ec2:DescribeCapacityReservations")

    monkeypatch.setattr(reservation_end, "describe_tagged", refuse)
    with mock.patch.object(pulumi, "get_stack", lambda: "p5"), mock.patch.object(pulumi, "get_project",
                                                                                 lambda: "raytrain-eks"):
        assert reservation_end.warn_if_ended("ray-train-p5-gpu-reservation", region="us-east-2",
                                             identity=AwsIdentity(), end_hours=0, idle_stop_minutes=0) is None
