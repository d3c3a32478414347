"""Find the region and AZ where a GPU instance type can be had, before `pulumi up` asks for it.

    python -m infra.capacity --instance-type g6.12xlarge --count 2
    python -m infra.capacity --instance-type g6.12xlarge --count 2 --regions us-east-1,us-west-2 \\
        --stack g6 --probe --write-stack g6

GPU capacity moves between regions and AZs from day to day; a guessed region makes the GPU node group fail
after about 20 minutes. For every AZ of every searched region (--regions, or every region enabled for the
account) this reports:

  offered   whether the AZ offers the instance type (DescribeInstanceTypeOfferings);
  headroom  the region's On-Demand vCPU quota of the instance family (G and VT, P, Trn, Inf, DL), minus the
            vCPUs of its running On-Demand instances and of the unused part of its active capacity
            reservations, against the vCPUs the nodes need (count x the type's vCPUs);
  spot      the EC2 Spot placement score (1-10) for the nodes in that one AZ: a capacity signal, not a
            promise (AWS scores a single instance type low on purpose; compare AZs with each other);
  subnet    with --stack NAME: whether that stack's VPC has a private subnet in the AZ. The VPC is found by
            the EKS subnet tags kubernetes.io/cluster/<clusterName> and kubernetes.io/role/internal-elb=1
            in the stack's aws:region; "-" means no VPC of the stack there (a new VPC covers every AZ);
  probe     with --probe: a real On-Demand Capacity Reservation for the nodes, created and cancelled at once
            in every AZ that passed the checks above: the only definite answer. It bills the On-Demand rate
            for the seconds it lives. Every probe is tagged raytrain:capacity-probe=<run id>, expires by
            itself after an hour, and is cancelled even on Ctrl-C, SIGTERM or an error. To find leftovers:
              aws ec2 describe-capacity-reservations --region R \\
                  --filters Name=tag-key,Values=raytrain:capacity-probe Name=state,Values=active

The output is a ranked table (offered, probe, quota, subnet, then Spot score), then ready-to-run
`aws service-quotas request-service-quota-increase` commands for the regions whose quota is short.
--write-stack NAME sets aws:region, <project>:gpuAvailabilityZone and <project>:capacityCandidateAzs (the
qualifying AZs of the best region, ranked) in Pulumi.NAME.yaml, keeping its comments and other keys.

A failure in one region (disabled, access denied, throttled) is reported and does not stop the others.
Exit status: 0 when at least one AZ qualifies, 1 when none does (or a probe could not be cancelled),
2 on a usage or credentials error, 130 when interrupted.

IAM: ec2:DescribeRegions, DescribeAvailabilityZones, DescribeInstanceTypes, DescribeInstanceTypeOfferings,
DescribeInstances, DescribeCapacityReservations, GetSpotPlacementScores, DescribeSubnets,
servicequotas:GetServiceQuota, GetAWSDefaultServiceQuota, sts:GetCallerIdentity; with --probe also
ec2:CreateCapacityReservation, CancelCapacityReservation and CreateTags.
"""
from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, TextIO

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError, ProfileNotFound
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from infra.capacity_reservation import (
    CAPACITY_ERROR_CODES,
    QUOTA_ERROR_CODES,
    error_code,
    error_message,
    reservation_request,
)

PROJECT_DIR = Path(__file__).resolve().parent.parent

# On-Demand vCPU quotas (service code ec2) by the letters that open the instance family. Codes as Service
# Quotas names them; L-1216C47A is the Standard (A, C, D, H, I, M, R, T, Z) quota, not Inf.
ON_DEMAND_QUOTAS: dict[str, tuple[str, str]] = {
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "gr": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "vt": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
    "dl": ("L-6E869C2A", "Running On-Demand DL instances"),
}

PROBE_TAG_KEY = "raytrain:capacity-probe"
# A probe outlives this process only if it is killed outright (SIGKILL, power loss); then it expires by itself
# (EC2 ends a limited reservation within an hour of its end date).
PROBE_LIFETIME = timedelta(hours=1)

# Regions are searched in parallel: each waits mostly on the network.
SEARCH_THREADS = 8
_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5})

_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
_REGION_NAME = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_FAMILY_LETTERS = re.compile(r"^([a-z]+)\d")


class CapacityError(RuntimeError):
    """The search cannot run at all (no credentials, an unusable profile)."""


@dataclass(frozen=True)
class OnDemandQuota:
    """The On-Demand vCPU quota that an instance family draws on."""

    code: str
    name: str


def on_demand_quota(instance_type: str) -> OnDemandQuota:
    """The quota of `instance_type`'s family: "g6e.12xlarge" -> G and VT, "trn1n.32xlarge" -> Trn."""
    match = _FAMILY_LETTERS.match(instance_type.split(".", 1)[0])
    letters = match.group(1) if match else ""
    if letters not in ON_DEMAND_QUOTAS:
        raise ValueError(
            f"--instance-type {instance_type}: not an accelerated instance family this finder knows; "
            f"allowed families start with one of {sorted(ON_DEMAND_QUOTAS)} (G and VT, P, Trn, Inf, DL)")
    return OnDemandQuota(*ON_DEMAND_QUOTAS[letters])


@dataclass(frozen=True)
class QuotaUsage:
    """A region's On-Demand vCPU quota of one family and what is already drawn from it."""

    quota: OnDemandQuota
    limit_vcpus: int
    running_vcpus: int
    reserved_vcpus: int = 0
    """Unused vCPUs of active capacity reservations: they count against the quota as if running."""

    @property
    def used_vcpus(self) -> int:
        return self.running_vcpus + self.reserved_vcpus

    @property
    def headroom_vcpus(self) -> int:
        return self.limit_vcpus - self.used_vcpus

    def shortfall_vcpus(self, needed_vcpus: int) -> int:
        return max(0, needed_vcpus - self.headroom_vcpus)

    def increase_command(self, region: str, needed_vcpus: int) -> str | None:
        """The CLI command that asks for just enough quota for the nodes on top of today's usage."""
        if not self.shortfall_vcpus(needed_vcpus):
            return None
        return (f"aws service-quotas request-service-quota-increase --region {region} --service-code ec2 "
                f"--quota-code {self.quota.code} --desired-value {self.used_vcpus + needed_vcpus}"
                f"  # {self.quota.name}: {self.limit_vcpus} vCPUs, {self.used_vcpus} in use, "
                f"{needed_vcpus} needed")


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


class Aws:
    """Where the finder gets its boto3 clients.

    One method per API group, so that tests can answer the APIs that moto does not emulate (capacity
    reservations, service quotas, Spot placement scores) with botocore Stubbers, and the rest with moto.
    """

    def __init__(self, profile: str | None = None):
        try:
            self._session = boto3.session.Session(profile_name=profile)
        except ProfileNotFound as error:
            raise CapacityError(f"--profile {profile}: no such AWS profile ({error})") from error
        self._lock = threading.Lock()  # creating clients from one session is not thread-safe

    @property
    def home_region(self) -> str:
        return self._session.region_name or "us-east-1"

    def client(self, service: str, region: str):
        with self._lock:
            return self._session.client(service, region_name=region, config=_CLIENT_CONFIG)

    def ec2(self, region: str):
        return self.client("ec2", region)

    def quotas(self, region: str):
        return self.client("service-quotas", region)

    def spot_scores(self, region: str):
        return self.client("ec2", region)

    def reservations(self, region: str):
        return self.client("ec2", region)

    def sts(self):
        return self.client("sts", self.home_region)


def check_credentials(aws: Aws) -> str:
    """The caller's account id, or a CapacityError that says how to supply credentials."""
    try:
        return aws.sts().get_caller_identity()["Account"]
    except NoCredentialsError as error:
        raise CapacityError(
            "no AWS credentials found: export AWS_PROFILE (or pass --profile), run `aws sso login` or "
            "`aws configure`, or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY") from error
    except ClientError as error:
        raise CapacityError(
            f"AWS rejected the credentials ({error_code(error)}: {error_message(error)}); refresh them "
            "(`aws sso login`) or pick another --profile") from error


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


def _vcpus_of(ec2, instance_types: Iterable[str]) -> dict[str, int]:
    """DefaultVCpus of each type EC2 knows in this region; unknown types are simply absent."""
    types = sorted(set(instance_types))
    vcpus: dict[str, int] = {}
    for start in range(0, len(types), 100):  # DescribeInstanceTypes takes at most 100 names
        batch = types[start:start + 100]
        try:
            pages = list(ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=batch))
        except ClientError as error:
            if error_code(error) != "InvalidInstanceType":
                raise
            if len(batch) > 1:  # one unknown name fails the whole batch: ask one by one
                for name in batch:
                    vcpus.update(_vcpus_of(ec2, [name]))
            continue
        vcpus.update({item["InstanceType"]: item["VCpuInfo"]["DefaultVCpus"]
                      for page in pages for item in page["InstanceTypes"]})
    return vcpus


def _quota_limit(quotas, quota: OnDemandQuota) -> int:
    try:
        value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=quota.code)["Quota"]["Value"]
    except ClientError as error:
        if error_code(error) != "NoSuchResourceException":
            raise
        # An account that never had the quota applied only has AWS's default.
        value = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=quota.code)["Quota"]["Value"]
    return int(value)


def quota_usage(ec2, reservations, quotas, quota: OnDemandQuota) -> QuotaUsage:
    """The region's quota of the family, its running On-Demand vCPUs and its reserved but unused vCPUs."""
    limit = _quota_limit(quotas, quota)
    running: Counter[str] = Counter()
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for group in page["Reservations"]:
            for instance in group["Instances"]:
                # Spot instances draw on the separate Spot quotas.
                if instance.get("InstanceLifecycle") != "spot" and _same_quota(instance["InstanceType"], quota):
                    running[instance["InstanceType"]] += 1
    unused: Counter[str] = Counter()
    pages = reservations.get_paginator("describe_capacity_reservations").paginate(
        Filters=[{"Name": "state", "Values": ["active"]}])
    for page in pages:
        for reservation in page["CapacityReservations"]:
            if _same_quota(reservation["InstanceType"], quota):
                unused[reservation["InstanceType"]] += reservation["AvailableInstanceCount"]
    vcpus = _vcpus_of(ec2, set(running) | set(unused))
    return QuotaUsage(quota=quota, limit_vcpus=limit,
                      running_vcpus=sum(vcpus.get(name, 0) * n for name, n in running.items()),
                      reserved_vcpus=sum(vcpus.get(name, 0) * n for name, n in unused.items()))


def _same_quota(instance_type: str, quota: OnDemandQuota) -> bool:
    try:
        return on_demand_quota(instance_type).code == quota.code
    except ValueError:
        return False


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


def _describe_failure(error: Exception) -> str:
    if isinstance(error, ClientError):
        code = error_code(error)
        if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
            return f"access denied ({code}): {error_message(error)}"
        if code in ("AuthFailure", "UnrecognizedClientException", "OptInRequired"):
            return f"{code}: the account cannot use this region (not enabled?): {error_message(error)}"
        return f"{code}: {error_message(error)}"
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class StackContext:
    """What the finder needs from a stack: where its VPC is and what its subnets are tagged with."""

    name: str
    path: Path
    project: str
    cluster_name: str
    region: str | None
    vpc_azs: tuple[str, ...] = ()
    """vpcAvailabilityZones, when the stack pins them; empty means a new VPC covers every AZ."""


def load_stack(project_dir: Path, name: str, flag: str) -> StackContext:
    project_file = project_dir / "Pulumi.yaml"
    if not project_file.exists():
        raise ValueError(f"--project-dir {project_dir}: no Pulumi.yaml there")
    project = YAML(typ="safe").load(project_file.read_text())
    project_name = project["name"]
    path = project_dir / f"Pulumi.{name}.yaml"
    stack_config: dict[str, Any] = {}
    if path.exists():
        stack_config = (YAML(typ="safe").load(path.read_text()) or {}).get("config") or {}
    elif flag == "--stack":
        raise ValueError(f"--stack {name}: {path} does not exist (stacks here: "
                         f"{', '.join(sorted(p.name for p in project_dir.glob('Pulumi.*.yaml'))) or 'none'})")
    default_cluster = project.get("config", {}).get("clusterName", {}).get("default", "")
    return StackContext(name=name, path=path, project=project_name,
                        cluster_name=stack_config.get(f"{project_name}:clusterName", default_cluster),
                        region=stack_config.get("aws:region"),
                        vpc_azs=tuple(stack_config.get(f"{project_name}:vpcAvailabilityZones") or ()))


def survey_region(aws: Aws, region: str, instance_type: str, count: int, quota: OnDemandQuota,
                  stack: StackContext | None) -> RegionReport:
    """Every signal for every AZ of one region. Never raises for an AWS error: it lands in `errors`."""
    report = RegionReport(region)
    try:
        ec2 = aws.ec2(region)
        vcpus = _vcpus_of(ec2, [instance_type]).get(instance_type)
        report.instance_type_known = vcpus is not None
        if vcpus is None:
            report.errors.append(f"{region}: EC2 does not offer {instance_type} in this region")
            return report
        zones = [zone for zone in ec2.describe_availability_zones()["AvailabilityZones"]
                 if zone.get("ZoneType", "availability-zone") == "availability-zone"
                 and zone.get("State", "available") == "available"]
        offerings = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}])
        offered = {offer["Location"] for page in offerings for offer in page["InstanceTypeOfferings"]}
    except (ClientError, BotoCoreError) as error:
        report.errors.append(f"{region}: {_describe_failure(error)}")
        return report
    report.azs = [AzReport(region=region, availability_zone=zone["ZoneName"], zone_id=zone["ZoneId"],
                           offered=zone["ZoneName"] in offered, needed_vcpus=vcpus * count)
                  for zone in sorted(zones, key=lambda zone: zone["ZoneName"])]

    # Each further signal is optional: its failure is a note on the region, not a lost region.
    try:
        report.quota = quota_usage(ec2, aws.reservations(region), aws.quotas(region), quota)
    except (ClientError, BotoCoreError) as error:
        report.errors.append(f"{region}: quota {quota.code} unknown: {_describe_failure(error)}")
    for az in report.azs:
        az.quota = report.quota
    try:
        scores = spot_placement_scores(aws.spot_scores(region), region, instance_type, count)
        for az in report.azs:
            az.spot_score = scores.get(az.zone_id)
    except (ClientError, BotoCoreError) as error:
        report.errors.append(f"{region}: Spot placement score unknown: {_describe_failure(error)}")
    if stack is not None and stack.region == region:
        try:
            covered = private_subnet_azs(ec2, stack.cluster_name)
        except (ClientError, BotoCoreError) as error:
            report.errors.append(f"{region}: stack {stack.name}'s subnets unknown: {_describe_failure(error)}")
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


class SignalGuard:
    """Turns SIGINT, SIGTERM and SIGHUP into KeyboardInterrupt, held back inside `hold()`.

    Held back, because an interrupt between CreateCapacityReservation's answer and the line that records the
    reservation would leave one that nothing cancels; and a second Ctrl-C must not cut the cleanup short.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._holding = False
        self._pending: int | None = None

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame) -> None:
        if self._holding:
            self._pending = signum
            return
        raise KeyboardInterrupt(signal.Signals(signum).name)

    @contextmanager
    def hold(self):
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._pending is not None:
            signum, self._pending = self._pending, None
            raise KeyboardInterrupt(signal.Signals(signum).name)


class ProbeError(RuntimeError):
    """AWS refused a probe for a reason that no other AZ would change (permissions, a bad request)."""


def probe(aws: Aws, azs: list[AzReport], instance_type: str, count: int, *, run_id: str,
          log: TextIO) -> list[str]:
    """Creates and at once cancels a reservation for the nodes in each AZ; sets `probe_ok` on each.

    Returns the reservations that could not be cancelled (each also printed to `log` with its command).

    Every reservation is recorded before anything else can happen, and whatever is recorded is cancelled on
    the way out, whether the loop ends, raises, or is interrupted.
    """
    end_date = datetime.now(timezone.utc) + PROBE_LIFETIME
    tags = {PROBE_TAG_KEY: run_id, "Name": f"raytrain-capacity-probe-{run_id}"}
    outstanding: dict[str, str] = {}  # reservation id -> region
    with SignalGuard() as guard:
        try:
            for az in azs:
                request = reservation_request(instance_type=instance_type, instance_count=count,
                                              availability_zone=az.availability_zone, tags=tags,
                                              end_date=end_date)
                with guard.hold():
                    try:
                        answer = aws.reservations(az.region).create_capacity_reservation(**request)
                    except ClientError as error:
                        code = error_code(error)
                        if code not in CAPACITY_ERROR_CODES and code not in QUOTA_ERROR_CODES:
                            raise ProbeError(f"--probe: {az.availability_zone}: {_describe_failure(error)}") from error
                        az.probe_ok = False
                        az.notes.append(f"probe: {code}")
                        print(f"probe {az.availability_zone}: {code}", file=log)
                        continue
                    reservation_id = answer["CapacityReservation"]["CapacityReservationId"]
                    outstanding[reservation_id] = az.region
                az.probe_ok = True
                print(f"probe {az.availability_zone}: reserved {reservation_id}", file=log)
                with guard.hold():
                    _cancel_all(aws, outstanding, log)  # a failed cancel stays outstanding for the last try
        finally:
            with guard.hold():
                _cancel_all(aws, outstanding, log, last_try=True)
    return sorted(outstanding)


def _cancel_all(aws: Aws, outstanding: dict[str, str], log: TextIO, *, last_try: bool = False) -> None:
    for reservation_id, region in list(outstanding.items()):
        try:
            aws.reservations(region).cancel_capacity_reservation(CapacityReservationId=reservation_id)
        except (ClientError, BotoCoreError) as error:
            if not last_try:
                print(f"probe {reservation_id}: cancel failed ({_describe_failure(error)}), trying again", file=log)
                continue
            print(f"WARNING: probe reservation {reservation_id} in {region} is NOT cancelled "
                  f"({_describe_failure(error)}); it expires by itself within {PROBE_LIFETIME * 2}, or run:\n"
                  f"  aws ec2 cancel-capacity-reservation --region {region} "
                  f"--capacity-reservation-id {reservation_id}", file=log)
        else:
            del outstanding[reservation_id]
            print(f"probe {reservation_id}: cancelled", file=log)


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
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def write_stack_file(path: Path, project: str, region: str, availability_zone: str,
                     candidate_azs: list[str]) -> str | None:
    """Sets the region and the GPU AZs in a stack file, keeping its comments and other keys.

    Returns the region it replaced, if it was another one.
    """
    yaml = YAML()  # round-trip: comments, key order and quoting survive
    yaml.indent(mapping=2, sequence=4, offset=2)
    document = yaml.load(path.read_text()) if path.exists() else None
    if document is None:
        document = CommentedMap()
    config = document.get("config")
    if config is None:
        config = document["config"] = CommentedMap()
    previous = config.get("aws:region")
    config["aws:region"] = region
    config[f"{project}:gpuAvailabilityZone"] = availability_zone
    config[f"{project}:capacityCandidateAzs"] = CommentedSeq(candidate_azs)
    with path.open("w") as stream:
        yaml.dump(document, stream)
    return previous if previous not in (None, region) else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m infra.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instance-type", required=True, help="EC2 instance type of the GPU nodes, e.g. g6.12xlarge")
    parser.add_argument("--count", required=True, type=int, help="number of GPU nodes (all in one AZ)")
    parser.add_argument("--regions", default="",
                        help="comma-separated regions to search; default: every region enabled for the account")
    parser.add_argument("--stack", help="stack whose VPC must have a private subnet in the AZ (its aws:region)")
    parser.add_argument("--probe", action="store_true",
                        help="create and cancel at once a real capacity reservation in each qualifying AZ")
    parser.add_argument("--write-stack", metavar="NAME",
                        help="write the best region and its ranked AZs into Pulumi.NAME.yaml")
    parser.add_argument("--profile", help="AWS profile (default: AWS_PROFILE or the default profile)")
    parser.add_argument("--project-dir", type=Path, default=PROJECT_DIR,
                        help="directory of Pulumi.yaml and the stack files (default: this project)")
    args = parser.parse_args(argv)
    if args.count < 1:
        raise ValueError(f"--count must be at least 1, got {args.count}")
    if not _INSTANCE_TYPE.match(args.instance_type):
        raise ValueError(f"--instance-type {args.instance_type!r}: expected an EC2 instance type such as g6.12xlarge")
    args.region_list = [name.strip() for name in args.regions.split(",") if name.strip()]
    bad = [name for name in args.region_list if not _REGION_NAME.match(name)]
    if bad:
        raise ValueError(f"--regions: {', '.join(bad)} is not a region name such as us-east-1")
    on_demand_quota(args.instance_type)  # refuse a family without a known quota before calling AWS
    return args


def run(args: argparse.Namespace, aws: Aws, out: TextIO | None = None, log: TextIO | None = None) -> int:
    out, log = out or sys.stdout, log or sys.stderr
    check_credentials(aws)
    # The stack written is also the one whose subnets are checked, unless --stack names another.
    target = load_stack(args.project_dir, args.write_stack, "--write-stack") if args.write_stack else None
    stack = load_stack(args.project_dir, args.stack, "--stack") if args.stack else target
    regions, region_errors = resolve_regions(aws, args.region_list)
    if stack is not None and stack.region is None and args.stack:
        region_errors["--stack"] = f"--stack {stack.name}: its stack file sets no aws:region, so no subnet was checked"
    reports = search(aws, regions, args.instance_type, args.count, stack) if regions else []
    azs = rank(az for report in reports for az in report.azs)

    if args.probe:
        to_probe = [az for az in azs if az.qualifies]
        print(f"probing {len(to_probe)} AZ(s) with a {args.count} x {args.instance_type} reservation each",
              file=log)
        leftovers = probe(aws, to_probe, args.instance_type, args.count, run_id=uuid.uuid4().hex[:12], log=log)
        azs = rank(azs)

    print(render_table(azs), file=out)
    errors = list(region_errors.values()) + [error for report in reports for error in report.errors]
    if errors:
        print("\nNot searched or partly searched:", file=out)
        for error in errors:
            print(f"  {error}", file=out)
    needed = {report.region: report.azs[0].needed_vcpus for report in reports if report.azs}
    commands = quota_increase_commands(reports, needed)
    if commands:
        print("\nOn-Demand vCPU quota is short; ask for an increase (AWS answers in hours to days):", file=out)
        for command in commands:
            print(f"  {command}", file=out)

    if args.probe and leftovers:
        print(f"\nProbe reservations left active: {', '.join(leftovers)} (see the warnings above)", file=out)
        return 1
    best = [az for az in azs if az.qualifies]
    if not best:
        print("\nNo AZ qualifies.", file=out)
        return 1
    if args.write_stack:
        region = best[0].region
        candidates = [az.availability_zone for az in best if az.region == region]
        replaced = write_stack_file(target.path, target.project, region, candidates[0], candidates)
        print(f"\nWrote {target.path.name}: aws:region={region}, "
              f"{target.project}:gpuAvailabilityZone={candidates[0]}, "
              f"{target.project}:capacityCandidateAzs={candidates}", file=out)
        if replaced:
            print(f"WARNING: aws:region was {replaced}; if that stack is deployed, `pulumi up` now replaces "
                  "every resource in the new region", file=out)
    return 0


def main(argv: list[str] | None = None, aws: Aws | None = None) -> int:
    try:
        args = parse_args(argv)
        return run(args, aws or Aws(args.profile))
    except (ValueError, CapacityError, ProbeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (NoCredentialsError, NoRegionError) as error:
        print(f"error: {error}; export AWS_PROFILE/AWS_REGION or pass --profile", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
