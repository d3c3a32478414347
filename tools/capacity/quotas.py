"""On-Demand vCPU quotas: which one an instance family draws on, and how much of it a region has left."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from botocore.exceptions import ClientError

from infra.aws.capacity_reservation import error_code
from infra.preview.instance_facts import OnDemandQuota, on_demand_quota


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


def vcpus_of(ec2, instance_types: Iterable[str]) -> dict[str, int]:
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
                    vcpus.update(vcpus_of(ec2, [name]))
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
    vcpus = vcpus_of(ec2, set(running) | set(unused))
    return QuotaUsage(quota=quota, limit_vcpus=limit,
                      running_vcpus=sum(vcpus.get(name, 0) * n for name, n in running.items()),
                      reserved_vcpus=sum(vcpus.get(name, 0) * n for name, n in unused.items()))


def _same_quota(instance_type: str, quota: OnDemandQuota) -> bool:
    try:
        return on_demand_quota(instance_type).code == quota.code
    except ValueError:
        return False


