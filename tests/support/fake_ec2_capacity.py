"""AWS for the capacity finder's and the in-stack reservation's tests: moto for what moto emulates, botocore Stubbers
(which check every request against the service model) for quotas, Spot placement scores and capacity reservations,
and canned answers in the shapes the services really return.

The capacity reservations a stack makes for itself (infra/aws/capacity_reservation.py) and what tools.leftovers looks
for are answered by `FakeCapacityReservations`: moto has no capacity reservations."""
from __future__ import annotations

import contextlib
import itertools
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from botocore.validate import validate_parameters
from moto import mock_aws

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
                available: int = 2, state: str = "active", outpost_arn: str | None = None) -> dict:
    """One reservation as EC2's DescribeCapacityReservations gives it; OutpostArn only for one on an AWS Outpost."""
    return {**({"OutpostArn": outpost_arn} if outpost_arn else {}), "CapacityReservationId": reservation_id,
            "OwnerId": ACCOUNT,
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


class ProviderKilled(BaseException):
    """The provider process dying (SIGKILL, a cancelled `pulumi up`): nothing after it runs, no `except` sees it."""


class Ec2Error(Exception):
    """An error EC2 answers with: its code and message."""


class FakeCapacityReservations:
    """Create, Describe, Cancel and Modify of EC2 capacity reservations, with state and ClientToken semantics.

    The ClientToken rule is EC2's own (EC2 API reference, CreateCapacityReservation: ClientToken "Unique,
    case-sensitive identifier that you provide to ensure the idempotency of the request"; EC2 Developer Guide,
    "Ensuring idempotency in Amazon EC2 API requests"): a request repeated with the same token and the same
    parameters returns the first request's result (here the same reservation, even after it ended) and creates
    nothing; the same token with any other parameter is the error IdempotentParameterMismatch. It answers through
    botocore's events on real clients, so every request is still checked against EC2's service model, and every
    answer against the response shape.
    """

    OPERATIONS = ("CreateCapacityReservation", "DescribeCapacityReservations", "CancelCapacityReservation",
                  "ModifyCapacityReservation")

    def __init__(self) -> None:
        self.reservations: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, tuple[dict, str]] = {}  # ClientToken -> (request without it, reservation id)
        self.calls: list[str] = []
        self.hidden_from_describe: set[str] = set()  # EC2's describe is eventually consistent
        self._ids = (f"cr-{n:017x}" for n in itertools.count(1))

    def attach(self, client) -> None:
        for operation in self.OPERATIONS:
            client.meta.events.register(f"before-parameter-build.ec2.{operation}", self._note_params)
            client.meta.events.register(f"before-call.ec2.{operation}", self._answer)

    @staticmethod
    def _note_params(params: dict, context: dict, **_) -> None:
        context["api_params"] = dict(params)

    def _answer(self, model, context: dict, **_):
        self.calls.append(model.name)
        params = context["api_params"]
        try:
            body = getattr(self, "_" + model.name)(params)
        except Ec2Error as error:
            return AWSResponse("", 400, {}, None), {"Error": {"Code": error.args[0], "Message": error.args[1]}}
        validate_parameters(body, model.output_shape)
        return AWSResponse("", 200, {}, None), body

    def live(self) -> list[dict[str, Any]]:
        return [r for r in self.reservations.values() if r["State"] == "active"]

    def _CreateCapacityReservation(self, params: dict) -> dict:  # noqa: N802 (EC2's name)
        token = params.pop("ClientToken", None)
        if token in self.tokens:
            first, reservation_id = self.tokens[token]
            if first != params:
                raise Ec2Error("IdempotentParameterMismatch", "ClientToken reused with other parameters")
            return {"CapacityReservation": self.reservations[reservation_id]}
        reservation_id = next(self._ids)
        tags = [tag for spec in params.get("TagSpecifications", []) for tag in spec["Tags"]]
        self.reservations[reservation_id] = {
            "CapacityReservationId": reservation_id, "OwnerId": ACCOUNT, "InstanceType": params["InstanceType"],
            "InstancePlatform": params["InstancePlatform"], "AvailabilityZone": params["AvailabilityZone"],
            "Tenancy": params.get("Tenancy", "default"), "TotalInstanceCount": params["InstanceCount"],
            "AvailableInstanceCount": params["InstanceCount"], "State": "active",
            "EndDateType": params.get("EndDateType", "unlimited"),
            **({"EndDate": params["EndDate"]} if "EndDate" in params else {}),
            **({"OutpostArn": params["OutpostArn"]} if "OutpostArn" in params else {}),
            "InstanceMatchCriteria": params.get("InstanceMatchCriteria", "open"),
            "CreateDate": datetime.now(timezone.utc) + timedelta(microseconds=len(self.reservations)), "Tags": tags}
        if token:
            self.tokens[token] = (params, reservation_id)
        return {"CapacityReservation": self.reservations[reservation_id]}

    def _DescribeCapacityReservations(self, params: dict) -> dict:  # noqa: N802
        found = [r for r in self.reservations.values() if r["CapacityReservationId"] not in self.hidden_from_describe]
        if "CapacityReservationIds" in params:
            found = [r for r in found if r["CapacityReservationId"] in params["CapacityReservationIds"]]
            if not found:
                raise Ec2Error("InvalidCapacityReservationId.NotFound", "no such reservation")
        for name, values in ((f["Name"], f["Values"]) for f in params.get("Filters", [])):
            if name == "state":
                found = [r for r in found if r["State"] in values]
                continue
            if not name.startswith("tag:"):  # a filter the fake does not know must not pass as "matches all"
                raise NotImplementedError(f"FakeCapacityReservations: filter {name!r}")
            key = name.removeprefix("tag:")
            found = [r for r in found if any(t["Key"] == key and t["Value"] in values for t in r["Tags"])]
        return {"CapacityReservations": found}

    def _CancelCapacityReservation(self, params: dict) -> dict:  # noqa: N802
        if params["CapacityReservationId"] not in self.reservations:
            raise Ec2Error("InvalidCapacityReservationId.NotFound", "no such reservation")
        self.reservations[params["CapacityReservationId"]]["State"] = "cancelled"
        return {"Return": True}

    def _ModifyCapacityReservation(self, params: dict) -> dict:  # noqa: N802
        reservation = self.reservations[params["CapacityReservationId"]]
        if "InstanceCount" in params:
            reservation["TotalInstanceCount"] = reservation["AvailableInstanceCount"] = params["InstanceCount"]
        for key in ("EndDateType", "EndDate"):
            if key in params:
                reservation[key] = params[key]
        return {"Return": True}


@contextlib.contextmanager
def reservations_on_every_client(monkeypatch, *, region: str) -> Iterator[FakeCapacityReservations]:
    """moto for everything it emulates (STS, EKS, VPCs, NAT gateways, addresses); every EC2 client any boto3 session
    makes answers capacity reservations from one FakeCapacityReservations."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": region, "AWS_EC2_METADATA_DISABLED": "true",
                        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        monkeypatch.setenv(name, value)
    fake = FakeCapacityReservations()
    make_client = boto3.session.Session.client

    def client(self, service_name, *args, **kwargs):
        made = make_client(self, service_name, *args, **kwargs)
        if service_name == "ec2":
            fake.attach(made)
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
    with mock_aws():
        yield fake


def killed_after_ec2_answers(fake: FakeCapacityReservations, monkeypatch) -> None:
    """The next CreateCapacityReservation reaches EC2 and is answered; the provider dies before it returns."""
    make_client = boto3.session.Session.client
    fired = []

    def die(parsed, **_):
        if not fired:
            fired.append(parsed["CapacityReservation"]["CapacityReservationId"])
            raise ProviderKilled(f"killed after EC2 made {fired[0]}")

    def client(self, service_name, *args, **kwargs):
        made = make_client(self, service_name, *args, **kwargs)
        if service_name == "ec2":
            made.meta.events.register("after-call.ec2.CreateCapacityReservation", die)
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
