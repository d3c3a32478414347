"""The survey: for every AZ of every searched region, is the type offered, is there quota, a Spot score, a subnet.

Each region is surveyed in its own thread and never raises for an AWS error: what failed lands in the region's
`errors`, and the other regions still answer. `rank` orders the AZs best first; `render_table` prints them.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable

from botocore.exceptions import BotoCoreError, ClientError

from infra.aws.offerings import zones_offering
from tools.capacity.aws import Aws, describe_failure
from tools.capacity.quotas import OnDemandQuota, QuotaUsage, on_demand_quota, quota_usage, vcpus_of
from tools.capacity.stack_file import StackContext
from workload import cli

# Regions are searched in parallel: each waits mostly on the network.
SEARCH_THREADS = 8


@dataclass
class AzReport:
    """What the search found out about one AZ."""

    region: str
    availability_zone: str
    zone_id: str
    offered: bool
    needed_vcpus: int
    quota: QuotaUsage | None = None
    spot_score: int | None = None
    private_subnet: bool | None = None
    probe_ok: bool | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def quota_ok(self) -> bool | None:
        return None if self.quota is None else self.quota.headroom_vcpus >= self.needed_vcpus

    @property
    def qualifies(self) -> bool:
        """Nothing known rules it out (unknown signals, such as a denied quota API, do not)."""
        return self.offered and False not in (self.probe_ok, self.quota_ok, self.private_subnet)


@dataclass
class RegionReport:
    region: str
    azs: list[AzReport] = field(default_factory=list)
    quota: QuotaUsage | None = None
    instance_type_known: bool | None = None
    errors: list[str] = field(default_factory=list)


def _tri(value: bool | None) -> int:
    return {True: 0, None: 1, False: 2}[value]


def rank(azs: Iterable[AzReport]) -> list[AzReport]:
    """Best first: offered, then a passed probe, enough quota, a private subnet, then the higher Spot score.

    A probe outranks the rest because it is the only definite answer; quota comes before the subnet because a
    quota increase takes AWS days while a subnet is a stack change.
    """
    return sorted(azs, key=lambda az: (
        not az.offered, _tri(az.probe_ok), _tri(az.quota_ok), _tri(az.private_subnet),
        -(az.spot_score or 0), az.region, az.availability_zone))


def quota_increase_commands(reports: Iterable[RegionReport], needed_vcpus_by_region: dict[str, int]) -> list[str]:
    """One command per region whose quota is short, among those where the type is offered at all."""
    commands = []
    for report in reports:
        if report.quota is None or not any(az.offered for az in report.azs):
            continue
        command = report.quota.increase_command(report.region, needed_vcpus_by_region[report.region])
        if command:
            commands.append(command)
    return commands


def resolve_regions(aws: Aws, requested: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """The regions to search, and an error for each requested region that cannot be searched."""
    requested = list(requested)
    answer = aws.ec2(aws.home_region).describe_regions(AllRegions=True)["Regions"]
    status = {region["RegionName"]: region.get("OptInStatus", "opt-in-not-required") for region in answer}
    if not requested:
        return sorted(name for name, state in status.items() if state != "not-opted-in"), {}
    unknown = [name for name in requested if name not in status]
    if unknown:
        raise ValueError(f"--regions: unknown region(s) {', '.join(unknown)}; this partition has "
                         f"{', '.join(sorted(status))}")
    errors = {name: (f"--regions {name}: not enabled for this account (an opt-in region); enable it under "
                     "Account > AWS Regions, or drop it from --regions")
              for name in requested if status[name] == "not-opted-in"}
    return [name for name in requested if name not in errors], errors


def spot_placement_scores(ec2, region: str, instance_type: str, count: int) -> dict[str, int]:
    """Score by AZ id, for `count` instances in a single AZ of `region`.

    One call per region: the API returns only the top 10 AZs of all the regions it is asked about.
    """
    scores: dict[str, int] = {}
    request: dict[str, Any] = {"InstanceTypes": [instance_type], "TargetCapacity": count,
                               "TargetCapacityUnitType": "units", "SingleAvailabilityZone": True,
                               "RegionNames": [region]}
    while True:
        answer = ec2.get_spot_placement_scores(**request)
        for score in answer.get("SpotPlacementScores", []):
            if score.get("AvailabilityZoneId"):
                scores[score["AvailabilityZoneId"]] = score["Score"]
        if not answer.get("NextToken"):
            return scores
        request["NextToken"] = answer["NextToken"]


def private_subnet_azs(ec2, cluster_name: str) -> set[str]:
    """AZs where the cluster's VPC has a private subnet, by the tags EKS itself reads."""
    answer = ec2.get_paginator("describe_subnets").paginate(Filters=[
        {"Name": "tag-key", "Values": [f"kubernetes.io/cluster/{cluster_name}"]},
        {"Name": "tag:kubernetes.io/role/internal-elb", "Values": ["1"]},
    ])
    return {subnet["AvailabilityZone"] for page in answer for subnet in page["Subnets"]}


def survey_region(aws: Aws, region: str, instance_type: str, count: int, quota: OnDemandQuota,
                  stack: StackContext | None) -> RegionReport:
    """Every signal for every AZ of one region. Never raises for an AWS error: it lands in `errors`."""
    report = RegionReport(region)
    try:
        ec2 = aws.ec2(region)
        vcpus = vcpus_of(ec2, [instance_type]).get(instance_type)
        report.instance_type_known = vcpus is not None
        if vcpus is None:
            report.errors.append(f"{region}: EC2 does not offer {instance_type} in this region")
            return report
        zones = [zone for zone in ec2.describe_availability_zones()["AvailabilityZones"]
                 if zone.get("ZoneType", "availability-zone") == "availability-zone"
                 and zone.get("State", "available") == "available"]
        offered = zones_offering(ec2, instance_type)
    except (ClientError, BotoCoreError) as error:
        report.errors.append(f"{region}: {describe_failure(error)}")
        return report
    report.azs = [AzReport(region=region, availability_zone=zone["ZoneName"], zone_id=zone["ZoneId"],
                           offered=zone["ZoneName"] in offered, needed_vcpus=vcpus * count)
                  for zone in sorted(zones, key=lambda zone: zone["ZoneName"])]

    # Each further signal is optional: its failure is a note on the region, not a lost region.
    try:
        report.quota = quota_usage(ec2, aws.reservations(region), aws.quotas(region), quota)
    except (ClientError, BotoCoreError) as error:
        report.errors.append(f"{region}: quota {quota.code} unknown: {describe_failure(error)}")
    for az in report.azs:
        az.quota = report.quota
    try:
        scores = spot_placement_scores(aws.spot_scores(region), region, instance_type, count)
        for az in report.azs:
            az.spot_score = scores.get(az.zone_id)
    except (ClientError, BotoCoreError) as error:
        report.errors.append(f"{region}: Spot placement score unknown: {describe_failure(error)}")
    if stack is not None and stack.region == region:
        try:
            covered = private_subnet_azs(ec2, stack.cluster_name)
        except (ClientError, BotoCoreError) as error:
            report.errors.append(f"{region}: stack {stack.name}'s subnets unknown: {describe_failure(error)}")
        else:
            if not covered and stack.vpc_azs:  # not deployed yet: the VPC it will build
                covered = set(stack.vpc_azs)
                report.errors.append(f"{region}: stack {stack.name} has no VPC yet; its vpcAvailabilityZones "
                                     "decide the subnets")
            elif not covered:
                report.errors.append(f"{region}: no private subnet tagged for cluster {stack.cluster_name} "
                                     f"(stack {stack.name} not deployed yet? its new VPC will cover every AZ)")
            for az in report.azs:
                az.private_subnet = (az.availability_zone in covered) if covered else None
    return report


def search(aws: Aws, regions: list[str], instance_type: str, count: int,
           stack: StackContext | None) -> list[RegionReport]:
    quota = on_demand_quota(instance_type)

    def survey(region: str) -> RegionReport:
        try:
            return survey_region(aws, region, instance_type, count, quota, stack)
        except Exception as error:  # noqa: BLE001 - one region's surprise must not cost the others their answer
            return RegionReport(region, errors=[f"{region}: unexpected {type(error).__name__}: {error}"])

    with ThreadPoolExecutor(max_workers=SEARCH_THREADS) as pool:
        reports = list(pool.map(survey, regions))
    known = [report.instance_type_known for report in reports if report.instance_type_known is not None]
    if known and not any(known):
        raise ValueError(f"--instance-type {instance_type}: EC2 knows no such instance type in "
                         f"{', '.join(regions)} (a typo? see `aws ec2 describe-instance-types`)")
    return reports



def render_table(azs: list[AzReport]) -> str:
    header = ("rank", "region", "az", "zone id", "offered", "vCPU headroom/needed", "spot", "private subnet",
              "probe", "notes")
    rows = [header]
    for position, az in enumerate(azs, start=1):
        headroom = "?" if az.quota is None else str(az.quota.headroom_vcpus)
        rows.append((
            str(position) if az.qualifies else "-", az.region, az.availability_zone, az.zone_id,
            "yes" if az.offered else "no", f"{headroom}/{az.needed_vcpus}",
            "-" if az.spot_score is None else str(az.spot_score),
            {True: "yes", False: "no", None: "-"}[az.private_subnet],
            {True: "ok", False: "failed", None: "-"}[az.probe_ok], "; ".join(az.notes)))
    return "\n".join(cli.table(rows))


