"""The GPU capacity finder (tools.capacity): quotas, the survey's ranking and stack file, and the probes.

AWS is emulated by moto in-process. moto 5.2 has no capacity reservations, no EC2 service quotas and no Spot
placement scores; those calls are answered by botocore Stubbers (tests/support/fake_ec2_capacity.py), which check every request
against the service model and every canned answer against the real response shape."""
from __future__ import annotations

import io
import os
import signal
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.stub import ANY
from moto import mock_aws

from tests.support.fake_ec2_capacity import (
    G6,
    G_AND_VT,
    FakeAws,
    capacity_error,
    fake_credentials,  # noqa: F401 (an autouse fixture: no real AWS credentials)
    quota_answer,
    reservation,
)
from tools.capacity import cli as finder_cli
from tools.capacity import probe as probes
from tools.capacity import quotas, stack_file
from tools.capacity.aws import Aws
from tools.capacity.quotas import QuotaUsage
from tools.capacity.survey import AzReport
from workload import cli

REPO = Path(__file__).resolve().parents[2]


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


class _NoAws:
    """Stands for AWS where nothing may be asked: any use is the test's failure."""

    def __getattr__(self, name):
        raise AssertionError(f"AWS was asked ({name}) before the stack files were read")


@pytest.mark.parametrize("flag", ["--stack", "--write-stack"])
def test_a_stack_file_pulumi_would_refuse_is_named_before_aws(tmp_path, capsys, flag):
    """Pulumi.yaml and Pulumi.<stack>.yaml are read by the tools' one YAML reader (workload/config_file.py
    read_document: a regular file within its bound, no aliases, no key twice): a FIFO (which would wait for a
    writer), a file of holes, text that is not YAML, or a project file that is no mapping are exit 2 naming the
    file, before AWS is asked."""
    root = project_dir(tmp_path, "config:\n  aws:region: [us-east-1\n", stack="broken")
    os.mkfifo(root / "Pulumi.pipe.yaml")
    with open(root / "Pulumi.holes.yaml", "wb") as holes:
        holes.truncate(2**30)
    (tmp_path / "listed").mkdir()
    (tmp_path / "listed" / "Pulumi.yaml").write_text("- name\n- raytrain-eks\n")
    cases = ((root, "broken", "Pulumi.broken.yaml: not YAML (line 3)"),
             (root, "pipe", "Pulumi.pipe.yaml is a FIFO (named pipe), not a regular file"),
             (root, "holes", "Pulumi.holes.yaml is 1,073,741,824 bytes; allowed: at most"),
             (tmp_path / "listed", "g6", "Pulumi.yaml is not a Pulumi project file"))
    for directory, stack, said in cases:
        status, _, err = finder(["--instance-type", "g6.12xlarge", "--count", "2", "--regions", "us-east-1", flag,
                                 stack, "--project-dir", str(directory)], _NoAws(), capsys)
        assert status == cli.USAGE and said in err and "Traceback" not in err, err
