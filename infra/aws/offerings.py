"""Which AZs offer an instance type (EC2 DescribeInstanceTypeOfferings by availability zone): one look-up for the
preview's check of gpuAvailabilityZone and for the capacity finder's `offered` column (tools/capacity/survey.py).

A GPU node group in an AZ that does not offer its type waits 20-30 minutes in CREATING and ends CREATE_FAILED
("Unsupported" from the launch), so the preview asks EC2 first, as the deployer (the stack's identity). The look-up
is a read the deployer may be denied, or throttled: then it is one warning and the check is left to EC2, as the data
stage's size is (infra/preview/data_cost.py).
"""
from __future__ import annotations

from typing import Callable

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from infra.aws.identity import describe, session
from infra.config import AwsIdentity, StackConfig, config_error

# At preview: two attempts and short timeouts, so an unreachable or throttled EC2 costs seconds and a warning.
_PREVIEW_CLIENT = Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=5, read_timeout=10)


def zones_offering(ec2, instance_type: str) -> set[str]:
    """The names of the AZs of `ec2`'s region that offer `instance_type`; raises botocore's errors."""
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}])
    return {offer["Location"] for page in pages for offer in page["InstanceTypeOfferings"]}


def read_zones_offering(instance_type: str, *, region: str | None, identity: AwsIdentity) -> set[str]:
    """zones_offering in `region` as the stack's identity (aws:profile, then aws:assumeRoles' role)."""
    return zones_offering(session(identity, region).client("ec2", config=_PREVIEW_CLIENT), instance_type)


def offering_problem(instance_type: str, availability_zone: str, offered: set[str], region: str | None) -> str | None:
    """Why gpuAvailabilityZone cannot hold gpuInstanceType's nodes, from the AZs that offer it; None when it can."""
    if availability_zone in offered:
        return None
    allowed = (f"one of {', '.join(sorted(offered))} (the AZs of {region} that offer it)" if offered
               else f"no AZ of {region} offers it: another gpuInstanceType or aws:region")
    return f"EC2 does not offer {instance_type} in {availability_zone}; allowed: {allowed}"


def check_gpu_zone(cfg: StackConfig, *, region: str | None, identity: AwsIdentity,
                   warn: Callable[[str], None], candidate_azs: tuple[str, ...] = ()) -> None:
    """Refuse GPU AZs that do not offer gpuInstanceType: gpuAvailabilityZone for the plain node group; with
    capacityReserve, each AZ of capacityCandidateAzs the deployer listed (a reservation there fails "Unsupported"),
    or, when the candidates are derived (gpuAvailabilityZone, then the VPC's AZs, tried in turn), all of them not
    offering it. An existing reservation is checked against its own AZ."""
    instance_type = cfg.gpu_instance_type
    if cfg.capacity_reservation_id:
        return
    if cfg.capacity_reserve:
        zones, where = candidate_azs, ("capacityCandidateAzs" if cfg.capacity_candidate_azs else "capacityReserve")
    else:
        zones, where = ((cfg.gpu_availability_zone,) if cfg.gpu_availability_zone else ()), "gpuAvailabilityZone"
    if not zones:
        return
    try:
        offered = read_zones_offering(instance_type, region=region, identity=identity)
    except (BotoCoreError, ClientError) as error:
        code = error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else ""
        warn(f"{where} {', '.join(zones)}: whether EC2 offers {instance_type} there could not be read as "
             f"{describe(identity)} (ec2:DescribeInstanceTypeOfferings, {code or type(error).__name__}), so it is "
             "not checked at preview")
        return
    if not cfg.capacity_reserve:
        if (problem := offering_problem(instance_type, zones[0], offered, region)) is not None:
            raise config_error(("gpuAvailabilityZone", "gpuInstanceType"), problem)
        return
    missing = [az for az in zones if az not in offered]
    if not missing or (where == "capacityReserve" and len(missing) < len(zones)):
        return  # a derived candidate that does not offer it is one the reservation moves past
    allowed = (f"AZs that offer it: {', '.join(sorted(offered))}" if offered
               else f"no AZ of {region} offers it: another gpuInstanceType or aws:region")
    keys = ("capacityCandidateAzs", "gpuInstanceType") if where == "capacityCandidateAzs" else \
        ("gpuAvailabilityZone", "vpcAvailabilityZones", "gpuInstanceType")
    raise config_error(keys, f"EC2 does not offer {instance_type} in {', '.join(missing)}, where capacityReserve "
                             f"would reserve it; allowed: {allowed}")
