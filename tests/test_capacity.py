"""The GPU capacity finder (tools.capacity) and the in-stack reservation (infra.aws.capacity_reservation).

AWS is emulated by moto in-process. moto 5.2 has no capacity reservations, no EC2 service quotas and no Spot
placement scores; those calls are answered by botocore Stubbers, which check every request against the
service model and every canned answer against the real response shape.
"""
from __future__ import annotations

import base64
import io
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import boto3
import dill
import pulumi
import pytest
import yaml
from botocore.stub import ANY, Stubber
from moto import mock_aws
from pulumi.runtime.rpc import unwrap_rpc_secret

from infra.aws import capacity_reservation
from tools.capacity import cli as finder_cli
from tools.capacity import probe as probes
from tools.capacity import quotas, stack_file, survey
from tools.capacity.aws import Aws
from tools.capacity.quotas import OnDemandQuota, QuotaUsage
from tools.capacity.survey import AzReport
from workload import cli
from infra.aws.capacity_reservation import (
    CapacityReservationError,
    GpuCapacityReservation,
    GpuCapacityReservationProvider,
)
from tests.stacks import INSTANCE_FACTS

REPO = Path(__file__).resolve().parent.parent
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


# --- canned answers, in the shapes the services really return -------------------------------------------

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
            self.stubs[kind, region] = Stubber(self.client(service, region))
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


def run_instances(region: str, *types: str, spot: bool = False) -> None:
    ec2 = boto3.client("ec2", region_name=region)
    for instance_type in types:
        extra = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
        ec2.run_instances(ImageId="ami-0123456789abcdef0", MinCount=1, MaxCount=1, InstanceType=instance_type,
                          **extra)


def project_dir(tmp_path: Path, stack_text: str | None = None, stack: str = "g6") -> Path:
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    if stack_text is not None:
        (tmp_path / f"Pulumi.{stack}.yaml").write_text(stack_text)
    return tmp_path


def finder(argv: list[str], aws: Aws, capsys) -> tuple[int, str, str]:
    status = finder_cli.main(argv, aws=aws)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --- quota arithmetic --------------------------------------------------------------------------------------

@pytest.mark.parametrize("instance_type, code", [
    ("g6.12xlarge", "L-DB2E81BA"), ("g6e.48xlarge", "L-DB2E81BA"), ("gr6.4xlarge", "L-DB2E81BA"),
    ("vt1.3xlarge", "L-DB2E81BA"), ("p5.48xlarge", "L-417A185B"), ("p4de.24xlarge", "L-417A185B"),
    ("trn1n.32xlarge", "L-2C3B7624"), ("inf2.48xlarge", "L-1945791B"), ("dl1.24xlarge", "L-6E869C2A"),
])
def test_family_quota_codes(instance_type, code):
    assert quotas.on_demand_quota(instance_type).code == code, f"{instance_type} should draw on quota {code}"


def test_a_family_without_a_gpu_quota_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--instance-type m7i.xlarge"):
        quotas.on_demand_quota("m7i.xlarge")


def test_quota_arithmetic_and_increase_command():
    needed = 2 * G6.vcpus
    short = QuotaUsage(G_AND_VT, limit_vcpus=128, running_vcpus=G6.vcpus, reserved_vcpus=4)
    assert short.headroom_vcpus == 128 - G6.vcpus - 4, "headroom = quota - running - reserved-but-unused"
    assert short.shortfall_vcpus(needed) == needed - (128 - G6.vcpus - 4)
    command = short.increase_command("us-west-2", needed)
    assert command is not None and command.startswith(
        "aws service-quotas request-service-quota-increase --region us-west-2 --service-code ec2 "
        f"--quota-code L-DB2E81BA --desired-value {G6.vcpus + 4 + needed}"), \
        f"the command should ask for today's usage plus the nodes, got {command!r}"
    enough = QuotaUsage(G_AND_VT, limit_vcpus=G6.vcpus + needed, running_vcpus=G6.vcpus)
    assert enough.shortfall_vcpus(needed) == 0 and enough.increase_command("us-west-2", needed) is None, \
        "a quota that exactly fits the nodes needs no increase"


def test_quota_usage_counts_only_the_family_on_demand_and_unused_reservations():
    with mock_aws():
        run_instances("us-east-1", "g6.12xlarge", "g5.xlarge", "p4d.24xlarge", "m7i.xlarge")
        run_instances("us-east-1", "g6.xlarge", spot=True)
        aws = FakeAws()
        aws.stub("reservations", "us-east-1").add_response("describe_capacity_reservations", {
            "CapacityReservations": [reservation("cr-0000000000000000a", "us-east-1a", total=2, available=1),
                                     reservation("cr-0000000000000000b", "us-east-1a", instance_type="p5.48xlarge")]})
        aws.stub("quotas", "us-east-1").add_response("get_service_quota", quota_answer("us-east-1", G_AND_VT.code, 192))
        usage = quotas.quota_usage(aws.ec2("us-east-1"), aws.reservations("us-east-1"), aws.quotas("us-east-1"),
                                     G_AND_VT)
    assert usage.running_vcpus == G6.vcpus + 4, \
        "running G vCPUs: g6.12xlarge (48) + g5.xlarge (4); p4d, m7i and the Spot g6.xlarge do not count"
    assert usage.reserved_vcpus == G6.vcpus, "one unused g6.12xlarge of the G reservation; the P one does not count"
    assert usage.headroom_vcpus == 192 - 2 * G6.vcpus - 4


# --- the search, ranked -----------------------------------------------------------------------------------

def make_stack_vpc(region: str, cluster_name: str, private_azs: list[str]) -> None:
    """A VPC tagged the way infra/aws/network.py tags it, with a private subnet in each of `private_azs`."""
    ec2 = boto3.client("ec2", region_name=region)
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    for index, az in enumerate(private_azs):
        for tier, role in (("public", "elb"), ("private", "internal-elb")):
            cidr = f"10.0.{2 * index + (tier == 'private')}.0/24"
            ec2.create_subnet(VpcId=vpc_id, AvailabilityZone=az, CidrBlock=cidr,
                              TagSpecifications=[{"ResourceType": "subnet", "Tags": [
                                  {"Key": f"kubernetes.io/cluster/{cluster_name}", "Value": "shared"},
                                  {"Key": f"kubernetes.io/role/{role}", "Value": "1"}]}])
    # A public-only subnet in us-west-2d: it must not count as a private one.
    ec2.create_subnet(VpcId=vpc_id, AvailabilityZone=f"{region}d", CidrBlock="10.0.100.0/24",
                      TagSpecifications=[{"ResourceType": "subnet", "Tags": [
                          {"Key": f"kubernetes.io/cluster/{cluster_name}", "Value": "shared"},
                          {"Key": "kubernetes.io/role/elb", "Value": "1"}]}])


def test_ranking_table_quota_commands_and_write_stack(tmp_path, capsys):
    stack_text = ("# g6 stack: 2 x g6.12xlarge\nconfig:\n  aws:region: us-west-2\n"
                  "  raytrain-eks:gpuNodeCount: 2  # two nodes\n  raytrain-eks:capacityReserve: true\n")
    root = project_dir(tmp_path, stack_text)
    with mock_aws():
        # The stack sets no clusterName: its cluster is ray-train-g6 (infra/config/naming.py), whose subnets the finder looks for.
        make_stack_vpc("us-west-2", "ray-train-g6", ["us-west-2a", "us-west-2b", "us-west-2c"])
        aws = FakeAws()
        # us-east-1: quota too small for 2 x 48 vCPUs. us-west-2: enough, and two AZs scored.
        aws.answer_survey("us-east-1", 64, {"use1-az1": 10})
        aws.answer_survey("us-west-2", 256, {"usw2-az1": 9, "usw2-az2": 3})
        aws.answer_survey("eu-west-1", 64, {})
        status, out, _ = finder(["--instance-type", "g6.12xlarge", "--count", "2",
                                 "--regions", "us-east-1,us-west-2,eu-west-1",
                                 "--write-stack", "g6", "--project-dir", str(root)], aws, capsys)
        aws.assert_all_answered()
    assert status == 0, f"an AZ qualifies, so exit 0:\n{out}"
    table = [line.split() for line in out.splitlines()[1:] if line.split() and line.split()[1:2] and
             line.split()[1] in ("us-east-1", "us-west-2", "eu-west-1")]
    ranked = [(row[0], row[2]) for row in table]
    assert ranked[:3] == [("1", "us-west-2b"), ("2", "us-west-2a"), ("3", "us-west-2c")], \
        f"us-west-2 first, by Spot score (usw2-az1=us-west-2b: 9, usw2-az2=us-west-2a: 3, then unscored): {ranked}"
    assert {zone for rank_, zone in ranked if rank_ == "-"} >= {"us-west-2d", "us-east-1b", "eu-west-1a"}, \
        ("us-west-2d (no private subnet of the stack), us-east-1 (quota short, even with Spot score 10) and "
         f"eu-west-1 (not offered) must not qualify: {ranked}")
    assert ranked.index(("-", "us-west-2d")) < ranked.index(("-", "us-east-1b")), \
        "a missing subnet (a stack change) ranks above a short quota (days of waiting)"
    assert ranked.index(("-", "us-east-1b")) < ranked.index(("-", "eu-west-1a")), \
        "an AZ that offers the type ranks above one that does not"
    assert (f"--region us-east-1 --service-code ec2 --quota-code L-DB2E81BA --desired-value {2 * G6.vcpus}"
            in out), "us-east-1's quota command should ask for 96 vCPUs (nothing running there)"
    assert "--region us-west-2 " not in out and "--region eu-west-1 " not in out, \
        "no increase where quota suffices, nor where the type is not offered"
    written = (root / "Pulumi.g6.yaml").read_text()
    config = yaml.safe_load(written)["config"]
    assert (config["aws:region"], config["raytrain-eks:gpuAvailabilityZone"]) == ("us-west-2", "us-west-2b"), written
    assert config["raytrain-eks:capacityCandidateAzs"] == ["us-west-2b", "us-west-2a", "us-west-2c"], \
        f"capacityCandidateAzs should list us-west-2's qualifying AZs in rank order:\n{written}"
    assert "# g6 stack: 2 x g6.12xlarge" in written and "raytrain-eks:gpuNodeCount: 2  # two nodes" in written, \
        f"the stack file's comments and other keys must survive:\n{written}"


def test_a_failing_region_does_not_stop_the_others(tmp_path, capsys):
    with mock_aws():
        aws = FakeAws()
        aws.answer_survey("us-west-2", None, {"usw2-az1": 7})  # quota API denied
        aws.answer_survey("us-east-2", 256, None)  # Spot placement scores denied
        status, out, err = finder(["--instance-type", "g6.12xlarge", "--count", "2",
                                   "--regions", "ap-east-1,us-west-2,us-east-2"], aws, capsys)
        aws.assert_all_answered()
    assert status == 0, f"us-west-2 still qualifies with an unknown quota:\n{out}{err}"
    assert "--regions ap-east-1: not enabled for this account" in out, "the opt-in region is named, with the flag"
    assert "us-west-2: quota L-DB2E81BA unknown: access denied (AccessDeniedException)" in out, \
        "a denied quota API is reported as such"
    assert "us-east-2: Spot placement score unknown: access denied (UnauthorizedOperation)" in out
    ranked_us_east_2 = [line.split()[0] for line in out.splitlines() if line.split()[1:2] == ["us-east-2"]]
    assert ranked_us_east_2 and all(rank_.isdigit() for rank_ in ranked_us_east_2), \
        f"us-east-2's AZs still qualify without a Spot score: {ranked_us_east_2}"
    rows = [line.split() for line in out.splitlines() if line.split()[1:2] in (["us-west-2"], ["us-east-2"])]
    first_unknown = next(index for index, row in enumerate(rows) if row[1] == "us-west-2")
    assert all(row[1] == "us-east-2" for row in rows[:first_unknown]), \
        f"a quota known to suffice ranks above an unknown one: {[row[2] for row in rows]}"
    assert rows[first_unknown][2] == "us-west-2b" and rows[first_unknown][5] == f"?/{2 * G6.vcpus}", \
        f"us-west-2b (Spot score 7) leads us-west-2, its headroom shown as unknown: {rows[first_unknown]}"


def test_unknown_instance_type_names_the_flag(capsys):
    with mock_aws():
        status, _, err = finder(["--instance-type", "g6.13xlarge", "--count", "2", "--regions", "us-east-1"],
                                FakeAws(), capsys)
    assert status == 2 and "--instance-type g6.13xlarge: EC2 knows no such instance type" in err, err


def test_no_credentials_is_a_clear_error(monkeypatch, tmp_path, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    status, _, err = finder(["--instance-type", "g6.12xlarge", "--count", "2"], Aws(), capsys)
    assert status == cli.ENVIRONMENT and "no AWS credentials found" in err and "--profile" in err, err


@pytest.mark.parametrize("argv, flag", [
    (["--instance-type", "g6.12xlarge", "--count", "0"], "--count"),
    (["--instance-type", "g6", "--count", "2"], "--instance-type"),
    (["--instance-type", "g6.12xlarge", "--count", "2", "--regions", "useast1"], "--regions"),
])
def test_bad_flags_are_refused_before_any_aws_call(argv, flag, capsys):
    status, _, err = finder(argv, None, capsys)  # no Aws at all: it must not be needed
    assert status == 2 and f"error: {flag}" in err, f"the error should name {flag}: {err}"


# --- the stack file --------------------------------------------------------------------------------------

def test_write_stack_file_keeps_comments_and_other_keys(tmp_path):
    path = tmp_path / "Pulumi.g6.yaml"
    path.write_text(
        "# Two g6.12xlarge nodes.\n"
        "encryptionsalt: v1:abc\n"
        "config:\n"
        "  aws:region: us-east-1  # chosen by the finder\n"
        "  # the GPU type of this stack\n"
        "  raytrain-eks:gpuInstanceType: g6.12xlarge\n"
        "  raytrain-eks:capacityCandidateAzs:\n"
        "    - us-east-1a\n")
    replaced = stack_file.write_stack_file(path, "raytrain-eks", "us-west-2", "us-west-2b", ["us-west-2b", "us-west-2c"])
    assert replaced == "us-east-1", "the previous region is returned so the CLI can warn about it"
    assert path.read_text() == (
        "# Two g6.12xlarge nodes.\n"
        "encryptionsalt: v1:abc\n"
        "config:\n"
        "  aws:region: us-west-2  # chosen by the finder\n"
        "  # the GPU type of this stack\n"
        "  raytrain-eks:gpuInstanceType: g6.12xlarge\n"
        "  raytrain-eks:capacityCandidateAzs:\n"
        "    - us-west-2b\n"
        "    - us-west-2c\n"
        "  raytrain-eks:gpuAvailabilityZone: us-west-2b\n"), path.read_text()


def test_write_stack_file_without_candidates_drops_a_stale_list(tmp_path):
    """Without capacityReserve the program refuses capacityCandidateAzs, so the finder must not leave one behind."""
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config:\n  aws:region: us-east-1\n  raytrain-eks:capacityCandidateAzs:\n    - us-east-1a\n")
    stack_file.write_stack_file(path, "raytrain-eks", "us-west-2", "us-west-2b", None)
    assert yaml.safe_load(path.read_text())["config"] == {
        "aws:region": "us-west-2", "raytrain-eks:gpuAvailabilityZone": "us-west-2b"}, path.read_text()


# --- probes ----------------------------------------------------------------------------------------------

def candidates(*zones: str) -> list[AzReport]:
    return [AzReport(region="us-east-1", availability_zone=zone, zone_id="", offered=True, needed_vcpus=96)
            for zone in zones]


def test_probe_cancels_the_reservation_when_sigterm_strikes_mid_probe():
    aws = FakeAws()
    stub = aws.stub("reservations", "us-east-1")
    capacity_error(stub, "create_capacity_reservation", "InsufficientInstanceCapacity", status=500,
                   AvailabilityZone="us-east-1a", ClientToken=ANY, InstanceType="g6.12xlarge",
                   InstancePlatform="Linux/UNIX", InstanceCount=2, InstanceMatchCriteria="targeted",
                   Tenancy="default", EndDateType="limited", EndDate=ANY, TagSpecifications=ANY)
    stub.add_response("create_capacity_reservation",
                      {"CapacityReservation": reservation("cr-0b0000000000000b1", "us-east-1b")})
    stub.add_response("cancel_capacity_reservation", {"Return": True},
                      {"CapacityReservationId": "cr-0b0000000000000b1"})

    def terminate_self(parsed, **_):  # the signal lands while the reservation's answer is being recorded
        if "CapacityReservation" in parsed:
            os.kill(os.getpid(), signal.SIGTERM)
    stub.client.meta.events.register("after-call.ec2.CreateCapacityReservation", terminate_self)
    handler_before = signal.getsignal(signal.SIGTERM)
    azs = candidates("us-east-1a", "us-east-1b", "us-east-1c")

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        probes.probe(aws, azs, "g6.12xlarge", 2, run_id="test", log=io.StringIO())

    stub.assert_no_pending_responses()  # cr-...b1 was cancelled; us-east-1c was never tried
    assert azs[0].probe_ok is False and "InsufficientInstanceCapacity" in azs[0].notes[0]
    assert signal.getsignal(signal.SIGTERM) is handler_before, "the probe must restore the SIGTERM handler"


def test_probe_error_mid_probe_still_cancels_what_it_holds():
    aws = FakeAws()
    stub = aws.stub("reservations", "us-east-1")
    stub.add_response("create_capacity_reservation",
                      {"CapacityReservation": reservation("cr-0a0000000000000a1", "us-east-1a")})
    capacity_error(stub, "cancel_capacity_reservation", "RequestLimitExceeded", status=503)
    capacity_error(stub, "create_capacity_reservation", "UnauthorizedOperation",
                   "You are not authorized to perform: ec2:CreateCapacityReservation")
    stub.add_response("cancel_capacity_reservation", {"Return": True},
                      {"CapacityReservationId": "cr-0a0000000000000a1"})
    log = io.StringIO()

    with pytest.raises(probes.ProbeError, match="--probe: us-east-1b: access denied"):
        probes.probe(aws, candidates("us-east-1a", "us-east-1b"), "g6.12xlarge", 2, run_id="test", log=log)

    stub.assert_no_pending_responses()
    assert "cr-0a0000000000000a1: cancelled" in log.getvalue(), \
        f"the reservation whose first cancel failed must be cancelled on the way out:\n{log.getvalue()}"


def test_a_failed_probe_demotes_the_az_it_was_made_in(capsys):
    with mock_aws():
        aws = FakeAws()
        aws.answer_survey("us-west-2", 256, {"usw2-az1": 9})
        stub = aws.stub("reservations", "us-west-2")
        # Probed in rank order: us-west-2b (score 9) first, then a, c, d.
        capacity_error(stub, "create_capacity_reservation", "InsufficientInstanceCapacity", status=500)
        for index, zone in enumerate(("us-west-2a", "us-west-2c", "us-west-2d")):
            reservation_id = f"cr-0{index}00000000000000{index}"
            stub.add_response("create_capacity_reservation", {"CapacityReservation": reservation(reservation_id, zone)},
                              {**dict.fromkeys(("ClientToken", "EndDate", "TagSpecifications", "InstanceType",
                                                "InstancePlatform", "InstanceCount", "InstanceMatchCriteria",
                                                "Tenancy", "EndDateType"), ANY), "AvailabilityZone": zone})
            stub.add_response("cancel_capacity_reservation", {"Return": True},
                              {"CapacityReservationId": reservation_id})
        status, out, _ = finder(["--instance-type", "g6.12xlarge", "--count", "2", "--regions", "us-west-2", "--probe"],
                                aws, capsys)
        aws.assert_all_answered()
    rows = {line.split()[2]: line.split() for line in out.splitlines() if line.split()[1:2] == ["us-west-2"]}
    assert status == 0 and rows["us-west-2a"][0] == "1" and rows["us-west-2a"][8] == "ok", \
        f"us-west-2a, whose probe held, ranks first:\n{out}"
    assert rows["us-west-2b"][0] == "-" and rows["us-west-2b"][8] == "failed", \
        f"us-west-2b's probe found no capacity, so despite its Spot score it does not qualify:\n{out}"


def test_probe_tags_every_reservation_and_makes_it_expire():
    aws = FakeAws()
    stub = aws.stub("reservations", "us-east-1")
    stub.add_response("create_capacity_reservation",
                      {"CapacityReservation": reservation("cr-0a0000000000000a1", "us-east-1a")},
                      {"ClientToken": ANY, "InstanceType": "g6.12xlarge", "InstancePlatform": "Linux/UNIX",
                       "AvailabilityZone": "us-east-1a", "InstanceCount": 2, "InstanceMatchCriteria": "targeted",
                       "Tenancy": "default", "EndDateType": "limited", "EndDate": ANY,
                       "TagSpecifications": [{"ResourceType": "capacity-reservation", "Tags": [
                           {"Key": "Name", "Value": "raytrain-capacity-probe-run42"},
                           {"Key": "raytrain:capacity-probe", "Value": "run42"}]}]})
    stub.add_response("cancel_capacity_reservation", {"Return": True})
    azs = candidates("us-east-1a")
    leftovers = probes.probe(aws, azs, "g6.12xlarge", 2, run_id="run42", log=io.StringIO())
    stub.assert_no_pending_responses()
    assert leftovers == [] and azs[0].probe_ok is True


# --- the in-stack reservation ------------------------------------------------------------------------------

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
