"""AWS for the capacity finder's and the in-stack reservation's tests: moto for what moto emulates, botocore Stubbers
(which check every request against the service model) for quotas, Spot placement scores and capacity reservations,
and canned answers in the shapes the services really return."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from botocore.stub import Stubber

from tests.support.instance_facts import INSTANCE_FACTS
from tools.capacity.aws import Aws
from tools.capacity.quotas import OnDemandQuota

ACCOUNT = "123456789012"
G6 = INSTANCE_FACTS["g6.12xlarge"]
G_AND_VT = OnDemandQuota("L-DB2E81BA", "Running On-Demand G and VT instances")


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch):
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # seconds per region, and no test needs them


def quota_answer(region: str, code: str, value: float) -> dict:
    return {"Quota": {"ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                      "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT}:ec2/{code}", "QuotaCode": code,
                      "QuotaName": "Running On-Demand G and VT instances", "Value": value, "Unit": "None",
                      "Adjustable": True, "GlobalQuota": False}}


def reservation(reservation_id: str, az: str, *, instance_type: str = "g6.12xlarge", total: int = 2,
                available: int = 2, state: str = "active") -> dict:
    return {"CapacityReservationId": reservation_id, "OwnerId": ACCOUNT,
            "CapacityReservationArn": f"arn:aws:ec2:{az[:-1]}:{ACCOUNT}:capacity-reservation/{reservation_id}",
            "AvailabilityZoneId": "use1-az1", "InstanceType": instance_type, "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": az, "Tenancy": "default", "TotalInstanceCount": total,
            "AvailableInstanceCount": available, "EbsOptimized": True, "EphemeralStorage": False,
            "State": state, "EndDateType": "unlimited", "InstanceMatchCriteria": "targeted",
            "CreateDate": datetime(2026, 11, 29, tzinfo=timezone.utc), "Tags": []}


def capacity_error(stub: Stubber, operation: str, code: str, message: str = "", status: int = 400, **expected):
    stub.add_client_error(operation, service_error_code=code, service_message=message or code,
                          http_status_code=status, expected_params=expected or None)


class FakeAws(Aws):
    """moto for what moto emulates; one Stubber per region for quotas, Spot scores and reservations."""

    def __init__(self):
        super().__init__()
        self.stubs: dict[tuple[str, str], Stubber] = {}

    def stub(self, kind: str, region: str) -> Stubber:
        if (kind, region) not in self.stubs:
            service = "service-quotas" if kind == "quotas" else "ec2"
            # A client of its own for each stub (Aws.client shares one per service and region): a Stubber answers
            # only what it was given, and the survey's other EC2 calls go to moto.
            self.stubs[kind, region] = Stubber(self._session.client(service, region_name=region))
            self.stubs[kind, region].activate()
        return self.stubs[kind, region]

    def quotas(self, region):
        return self.stub("quotas", region).client

    def spot_scores(self, region):
        return self.stub("spot", region).client

    def reservations(self, region):
        return self.stub("reservations", region).client

    def answer_survey(self, region: str, quota_vcpus: float | None, scores: dict[str, int] | None,
                      reservations: list[dict] = ()) -> None:
        """Queues what one region's survey asks of the stubbed APIs; None for quota or scores: access denied."""
        if quota_vcpus is None:  # the survey then skips the usage it would subtract from the quota
            capacity_error(self.stub("quotas", region), "get_service_quota", "AccessDeniedException",
                           "User is not authorized to perform: servicequotas:GetServiceQuota")
        else:
            self.stub("quotas", region).add_response(
                "get_service_quota", quota_answer(region, G_AND_VT.code, quota_vcpus),
                {"ServiceCode": "ec2", "QuotaCode": G_AND_VT.code})
            self.stub("reservations", region).add_response(
                "describe_capacity_reservations", {"CapacityReservations": list(reservations)})
        if scores is None:
            capacity_error(self.stub("spot", region), "get_spot_placement_scores", "UnauthorizedOperation",
                           "You are not authorized to perform this operation.")
            return
        self.stub("spot", region).add_response("get_spot_placement_scores", {"SpotPlacementScores": [
            {"Region": region, "AvailabilityZoneId": zone_id, "Score": score} for zone_id, score in scores.items()]},
            {"InstanceTypes": ["g6.12xlarge"], "TargetCapacity": 2, "TargetCapacityUnitType": "units",
             "SingleAvailabilityZone": True, "RegionNames": [region]})

    def assert_all_answered(self):
        for (kind, region), stub in self.stubs.items():
            stub.assert_no_pending_responses()
