"""gpuAvailabilityZone must offer gpuInstanceType (EC2 DescribeInstanceTypeOfferings, infra/aws/offerings.py): refused
at preview naming both keys and the AZs that do offer it; a look-up that cannot be made is one warning.

moto 5.2.5's offering data (moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz), which the
moto cases read through the program: in us-east-1, g6e.12xlarge in us-east-1a-d (not 1e or 1f) and p5.48xlarge in all
six AZs; in us-west-2, g6e.12xlarge and p5.48xlarge in us-west-2a-d, p5en.48xlarge in us-west-2a, 2c and 2d (not 2b).
"""
from __future__ import annotations

import logging
import time

import boto3
import pytest
from botocore.exceptions import ClientError, NoCredentialsError
from botocore.stub import Stubber

from infra import config
from infra.aws import offerings
from infra.config import AwsIdentity
from tests.program.test_refusals_at_preview import program_refusal
from tests.support import pulumi_mocks
from tests.support.pulumi_mocks import run_program, stack_settings

REAL_LOOKUP = offerings.read_zones_offering


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "DescribeInstanceType" in
            r.getMessage()]


@pytest.fixture
def moto_offerings(aws_env, monkeypatch):
    """The program's look-up is the real one (boto3, as the deployer), against moto."""
    monkeypatch.setattr(pulumi_mocks, "read_zones_offering", REAL_LOOKUP)


def test_moto_lists_the_zones_the_docstring_cites(aws_env):
    def offered(region: str, instance_type: str) -> list[str]:
        return sorted(offerings.zones_offering(boto3.client("ec2", region_name=region), instance_type))

    assert offered("us-east-1", "g6e.12xlarge") == ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    assert offered("us-east-1", "p5.48xlarge") == [f"us-east-1{letter}" for letter in "abcdef"]
    assert offered("us-west-2", "p5en.48xlarge") == ["us-west-2a", "us-west-2c", "us-west-2d"]


def test_a_zone_that_does_not_offer_the_type_is_refused_against_moto(moto_offerings):
    message = program_refusal({"gpuAvailabilityZone": "us-east-1f"}, stack="g6e")
    assert message == ("config keys 'gpuAvailabilityZone', 'gpuInstanceType': EC2 does not offer g6e.12xlarge in "
                       "us-east-1f; allowed: one of us-east-1a, us-east-1b, us-east-1c, us-east-1d (the AZs of "
                       "us-east-1 that offer it)"), message


def test_the_request_and_the_refusal_take_under_a_second(aws_env, monkeypatch):
    """Timed from the request on: building botocore's EC2 client class (some 700 methods) alone takes a second or two on
    this shared 2-core machine under load, the same on any machine for every boto3 session."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    offerings.zones_offering(ec2, "g6e.12xlarge")  # moto's offering data loaded once

    class Session:
        def client(self, name, config=None):
            assert name == "ec2", name
            return ec2

    monkeypatch.setattr(offerings, "session", lambda identity, region: Session())
    cfg = config.parse(stack_settings("g6e") | {"gpuAvailabilityZone": "us-east-1e"})
    started = time.perf_counter()
    with pytest.raises(ValueError, match="does not offer g6e.12xlarge in us-east-1e"):
        offerings.check_gpu_zone(cfg, region="us-east-1", identity=AwsIdentity(), warn=pytest.fail)
    assert time.perf_counter() - started < 1.0, "one request and the rule"


def test_a_zone_that_offers_the_type_passes_against_moto(moto_offerings, caplog):
    with caplog.at_level(logging.WARNING):
        run_program("g6e", {"gpuAvailabilityZone": "us-east-1d"})
        run_program("g6e", {"gpuInstanceType": "p5.48xlarge", "gpuAvailabilityZone": "us-east-1f",
                            "gpuNodeCount": 1})
    assert not warnings_of(caplog), "the offerings were read"


def test_the_fake_aws_refuses_the_same_way():
    """tests/support/fake_aws.py's UNOFFERED: p5.48xlarge is not offered in us-west-2d there."""
    message = program_refusal({"gpuInstanceType": "p5.48xlarge", "gpuAvailabilityZone": "us-west-2d"})
    assert message.startswith("config keys 'gpuAvailabilityZone', 'gpuInstanceType': EC2 does not offer "
                              "p5.48xlarge in us-west-2d; allowed: one of us-west-2a, us-west-2b, us-west-2c"), message


def test_the_stacks_own_reservation_tries_its_candidates_itself():
    run_program("dev", {"gpuInstanceType": "p5.48xlarge", "gpuAvailabilityZone": "us-west-2d",
                        "capacityReserve": True})


@pytest.mark.parametrize("error", [
    NoCredentialsError(),
    ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, "DescribeInstanceTypeOfferings"),
    ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, "DescribeInstanceTypeOfferings"),
], ids=["no credentials", "throttled", "denied"])
def test_a_lookup_that_cannot_be_made_is_one_warning(monkeypatch, caplog, error):
    def fails(instance_type, *, region, identity):
        raise error

    monkeypatch.setattr(pulumi_mocks, "read_zones_offering", fails)
    with caplog.at_level(logging.WARNING):
        run_program("dev")
    (warning,) = warnings_of(caplog)
    code = error.response["Error"]["Code"] if isinstance(error, ClientError) else "NoCredentialsError"
    assert warning == (f"gpuAvailabilityZone us-west-2a: whether EC2 offers g6.12xlarge there could not be read as "
                       f"the environment's credentials (ec2:DescribeInstanceTypeOfferings, {code}), so it is not "
                       "checked at preview"), warning


def test_the_capacity_finder_and_the_preview_share_one_lookup():
    """tools/capacity/survey.py's `offered` column comes from the same function (no copy of the request)."""
    from tools.capacity import survey

    assert survey.zones_offering is offerings.zones_offering
    ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
    with Stubber(ec2) as stubber:
        stubber.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": [
            {"InstanceType": "g6.12xlarge", "LocationType": "availability-zone", "Location": "us-west-2b"}]},
            {"LocationType": "availability-zone", "Filters": [{"Name": "instance-type", "Values": ["g6.12xlarge"]}]})
        assert offerings.zones_offering(ec2, "g6.12xlarge") == {"us-west-2b"}


def test_each_listed_candidate_az_must_offer_the_type():
    """capacityReserve with capacityCandidateAzs: a listed AZ without the type is refused (fake AWS: no p5 in 2d)."""
    message = program_refusal({"gpuInstanceType": "p5.48xlarge", "capacityReserve": True,
                               "capacityCandidateAzs": ["us-west-2b", "us-west-2d"]})
    assert message.startswith("config keys 'capacityCandidateAzs', 'gpuInstanceType': EC2 does not offer p5.48xlarge "
                              "in us-west-2d, where capacityReserve would reserve it; allowed: AZs that offer it: "
                              "us-west-2a, us-west-2b, us-west-2c"), message
    run_program("dev", {"gpuInstanceType": "p5.48xlarge", "capacityReserve": True,
                        "capacityCandidateAzs": ["us-west-2c", "us-west-2b"]})


def test_derived_candidates_are_refused_only_when_none_offers_the_type(monkeypatch):
    monkeypatch.setattr(pulumi_mocks, "read_zones_offering", lambda instance_type, *, region, identity: {"us-west-2z"})
    message = program_refusal({"gpuInstanceType": "p5.48xlarge", "capacityReserve": True})
    assert message.startswith("config keys 'gpuAvailabilityZone', 'vpcAvailabilityZones', 'gpuInstanceType': EC2 does "
                              "not offer p5.48xlarge in "), message
