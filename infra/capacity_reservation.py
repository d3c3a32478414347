"""An On-Demand Capacity Reservation for the GPU nodes, created inside `pulumi up` (config `capacityReserve`).

`GpuCapacityReservation` tries the ranked candidate AZs in order. Insufficient capacity in one AZ moves it to
the next at once, so a starved AZ costs seconds here instead of a node group that fails 20 minutes later.
The GPU node group then lands in `availability_zone` and targets `reservation_id` from its launch template;
`pulumi destroy` cancels the reservation.

The reservation is `targeted`: only instances that name it in their launch template
(`capacity_reservation_specification.capacity_reservation_target`) run in it. An `open` reservation can be
targeted the same way, but it would also absorb any other matching instance of the account in that AZ (a
stray g6.12xlarge dev box), leaving the node group one node short.

With `placement_group_arn` the reservation is made inside that cluster placement group, so the nodes that use it
are co-located; EC2 then only lets instances launched into that group use it.

It is a dynamic resource: the provider runs in Pulumi's provider process, which unpickles it by reference
(`infra.capacity_reservation`, importable from the project root), so it holds no client or session: each
call builds its boto3 client from the optional `region`, `profile` and `role_arn` inputs (the stack's aws:region,
aws:profile and the role of aws:assumeRoles), else the environment. The program reads an existing reservation at
preview (`describe_existing`) through the same session.
"""
from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import boto3
import pulumi
from botocore.config import Config
from botocore.exceptions import ClientError
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

# AWS's answers that mean "not here, not now": the next AZ may well have the capacity. "Unsupported" is what
# EC2 says when the AZ does not offer the instance type at all.
CAPACITY_ERROR_CODES = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "ReservationCapacityExceeded",
    "Unsupported",
})
# The On-Demand vCPU quota is regional (reservations count against it), so no other AZ can help.
QUOTA_ERROR_CODES = frozenset({"InstanceLimitExceeded", "VcpuLimitExceeded", "ReservationLimitExceeded"})
# States from which a reservation will never hold capacity again.
ENDED_STATES = frozenset({"cancelled", "expired", "failed"})

PLATFORM = "Linux/UNIX"  # EKS's AL2023 GPU AMIs; a reservation only serves instances of its platform.
TENANCY = "default"  # what the GPU launch template launches; a dedicated reservation serves only dedicated instances
MATCH_CRITERIA = "targeted"
ROLE_SESSION_NAME = "raytrain-eks"

# Standard mode retries throttling and 5xx. EC2 answers InsufficientInstanceCapacity with a 500, so a starved AZ
# is retried twice (about a second) before the next AZ is tried; the ClientToken keeps those retries from ever
# creating a second reservation.
_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3})

_INPUT_KEYS = ("instance_type", "instance_count", "candidate_azs", "tags", "region", "profile", "role_arn",
               "placement_group_arn")
# A reservation cannot be moved into or out of a placement group, nor to another type or account: a new one.
_REPLACE_KEYS = ("instance_type", "region", "profile", "role_arn", "placement_group_arn")


class CapacityReservationError(RuntimeError):
    """No candidate AZ could hold the reservation, or AWS refused it for a reason that no other AZ can fix."""


def reservation_request(*, instance_type: str, instance_count: int, availability_zone: str,
                        tags: dict[str, str], end_date=None, placement_group_arn: str | None = None) -> dict[str, Any]:
    """The CreateCapacityReservation parameters, shared by the stack's reservation and the finder's probes.

    `end_date` (a datetime) makes the reservation expire by itself: the finder's probes set it as a safety net
    for a process that is killed before it can cancel. The stack's reservation is unlimited: destroy ends it.
    """
    request: dict[str, Any] = {
        "ClientToken": uuid.uuid4().hex,
        "InstanceType": instance_type,
        "InstancePlatform": PLATFORM,
        "AvailabilityZone": availability_zone,
        "InstanceCount": instance_count,
        "InstanceMatchCriteria": MATCH_CRITERIA,
        "Tenancy": TENANCY,
        "EndDateType": "limited" if end_date is not None else "unlimited",
    }
    if end_date is not None:
        request["EndDate"] = end_date
    if placement_group_arn:
        request["PlacementGroupArn"] = placement_group_arn
    if tags:
        request["TagSpecifications"] = [{
            "ResourceType": "capacity-reservation",
            "Tags": [{"Key": key, "Value": value} for key, value in sorted(tags.items())],
        }]
    return request


def error_code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "Unknown")


def error_message(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Message", str(error))


@dataclass(frozen=True)
class ReservationInputs:
    """The inputs of a GpuCapacityReservation, as the provider receives them."""

    instance_type: str
    instance_count: int
    candidate_azs: list[str]
    tags: dict[str, str] = field(default_factory=dict)
    region: str | None = None
    profile: str | None = None
    """The stack's aws:profile: the reservation must land in the account the rest of the stack is in."""
    role_arn: str | None = None
    """The role of the stack's aws:assumeRoles, for the same reason."""
    placement_group_arn: str | None = None
    """The cluster placement group to reserve in (the GPU nodes launch into it)."""

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> ReservationInputs:
        return cls(
            instance_type=props["instance_type"],
            instance_count=int(props["instance_count"]),
            candidate_azs=list(props["candidate_azs"]),
            tags=dict(props.get("tags") or {}),
            region=props.get("region") or None,
            profile=props.get("profile") or None,
            role_arn=props.get("role_arn") or None,
            placement_group_arn=props.get("placement_group_arn") or None,
        )

    def validate(self) -> None:
        if not isinstance(self.instance_type, str) or not self.instance_type:
            raise ValueError(
                f"instance_type must be an EC2 instance type such as g6.12xlarge, got {self.instance_type!r}")
        if isinstance(self.instance_count, bool) or not isinstance(self.instance_count, int) or self.instance_count < 1:
            raise ValueError(f"instance_count (gpuNodeCount) must be an integer >= 1, got {self.instance_count!r}")
        if not self.candidate_azs or not all(isinstance(az, str) and az for az in self.candidate_azs):
            raise ValueError(f"candidate_azs (capacityCandidateAzs) must be a non-empty list of AZ names, "
                             f"got {self.candidate_azs!r}")
        if len(set(self.candidate_azs)) != len(self.candidate_azs):
            raise ValueError(f"candidate_azs (capacityCandidateAzs) lists an AZ twice: {self.candidate_azs!r}")

    def outputs(self, reservation_id: str, availability_zone: str, skipped_azs: list[str]) -> dict[str, Any]:
        return {**asdict(self), "reservation_id": reservation_id, "availability_zone": availability_zone,
                "skipped_azs": skipped_azs}


def aws_session(*, region: str | None, profile: str | None, role_arn: str | None) -> boto3.session.Session:
    """The stack's AWS identity: aws:profile (else the environment's credentials), then aws:assumeRoles' role.

    A fresh session per call: boto3's default session is not thread-safe, and the provider process may serve
    several resources at once.
    """
    session = boto3.session.Session(profile_name=profile or None, region_name=region or None)
    if not role_arn:
        return session
    credentials = session.client("sts", config=_CLIENT_CONFIG).assume_role(
        RoleArn=role_arn, RoleSessionName=ROLE_SESSION_NAME)["Credentials"]
    return boto3.session.Session(
        aws_access_key_id=credentials["AccessKeyId"], aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"], region_name=region or None)


def _ec2_client(props: dict[str, Any]):
    session = aws_session(region=props.get("region"), profile=props.get("profile"), role_arn=props.get("role_arn"))
    return session.client("ec2", config=_CLIENT_CONFIG)


class GpuCapacityReservationProvider(ResourceProvider):
    """Creates the reservation in the first candidate AZ that has the capacity; cancels it on delete."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        inputs = ReservationInputs.from_props(props)
        inputs.validate()
        ec2 = _ec2_client(asdict(inputs))
        skipped: list[str] = []
        for az in inputs.candidate_azs:
            request = reservation_request(instance_type=inputs.instance_type, instance_count=inputs.instance_count,
                                          availability_zone=az, tags=inputs.tags,
                                          placement_group_arn=inputs.placement_group_arn)
            try:
                reservation = ec2.create_capacity_reservation(**request)["CapacityReservation"]
            except ClientError as error:
                code = error_code(error)
                skipped.append(f"{az}: {code}: {error_message(error)}")
                if code in CAPACITY_ERROR_CODES:
                    continue
                hint = ("the On-Demand vCPU quota of the instance family is regional, so no other AZ can help; "
                        "`python -m tools.capacity` prints the quota-increase command"
                        if code in QUOTA_ERROR_CODES else "this is not a capacity shortage, so no other AZ was tried")
                raise CapacityReservationError(
                    f"capacity reservation for {inputs.instance_count} x {inputs.instance_type} failed ({hint}):\n  "
                    + "\n  ".join(skipped)) from error
            reservation_id = reservation["CapacityReservationId"]
            return CreateResult(reservation_id, inputs.outputs(reservation_id, az, skipped))
        raise CapacityReservationError(
            f"no candidate AZ has capacity for {inputs.instance_count} x {inputs.instance_type} right now; "
            "each AZ answered:\n  " + "\n  ".join(skipped)
            + "\nRank other AZs or regions with `python -m tools.capacity`, then set capacityCandidateAzs.")

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [key for key in _REPLACE_KEYS if olds.get(key) != news.get(key)]
        # A new ranking alone must not move a live reservation (and the GPU nodes in it): only an AZ dropped
        # from the candidates forces a new one.
        if olds.get("availability_zone") not in (news.get("candidate_azs") or []):
            replaces.append("candidate_azs")
        changed = replaces or [key for key in _INPUT_KEYS if olds.get(key) != news.get(key)]
        # An in-place update keeps the reservation and its AZ. Pulumi's Python dynamic-provider host does not pass
        # `stables` on and dynamic resources are not previewed, so a preview still shows both outputs as unknown
        # (and the GPU node group as replaced); the update itself changes neither. Delete first on replace: side
        # by side, the old and the new reservation would need twice the vCPU quota.
        stables = [] if replaces else ["reservation_id", "availability_zone"]
        return DiffResult(changes=bool(changed), replaces=replaces, stables=stables, delete_before_replace=True)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        old, new = ReservationInputs.from_props(olds), ReservationInputs.from_props(news)
        new.validate()
        ec2 = _ec2_client(asdict(new))
        if new.instance_count != old.instance_count:
            ec2.modify_capacity_reservation(CapacityReservationId=id_, InstanceCount=new.instance_count)
        removed = [{"Key": key} for key in old.tags if key not in new.tags]
        if removed:
            ec2.delete_tags(Resources=[id_], Tags=removed)
        changed = [{"Key": key, "Value": value} for key, value in new.tags.items() if old.tags.get(key) != value]
        if changed:
            ec2.create_tags(Resources=[id_], Tags=changed)
        return UpdateResult(new.outputs(id_, olds["availability_zone"], list(olds.get("skipped_azs") or [])))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        reservation = _describe(_ec2_client(props), id_)
        if reservation is None or reservation["State"] in ENDED_STATES:
            return ReadResult("", {})  # gone: a refresh drops it from the state, the next up creates a new one
        return ReadResult(id_, {**props, "instance_count": reservation["TotalInstanceCount"],
                                "availability_zone": reservation["AvailabilityZone"]})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        ec2 = _ec2_client(props)
        reservation = _describe(ec2, id_)
        if reservation is None or reservation["State"] in ENDED_STATES:
            return
        ec2.cancel_capacity_reservation(CapacityReservationId=id_)


def _describe(ec2, reservation_id: str) -> dict[str, Any] | None:
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as error:
        if error_code(error) == "InvalidCapacityReservationId.NotFound":
            return None
        raise
    return found[0] if found else None


def describe_existing(reservation_id: str, *, cluster_name: str, region: str | None, profile: str | None,
                      role_arn: str | None) -> dict[str, Any] | None:
    """A reservation made outside the stack, as DescribeCapacityReservations returns it, plus `ClusterInstances`:
    how many of the instances running in it are already this cluster's nodes. None if it does not exist.

    pulumi-aws 7.51 has no invoke for On-Demand Capacity Reservations (only for Capacity Blocks), so the program
    reads it here at preview, before any resource, as the stack's own identity. A re-run finds its own nodes in
    the reservation; they count as capacity the stack has, not capacity it lacks.
    """
    ec2 = _ec2_client({"region": region, "profile": profile, "role_arn": role_arn})
    reservation = _describe(ec2, reservation_id)
    if reservation is None:
        return None
    # EKS tags every instance of a managed node group with eks:cluster-name.
    filters = [{"Name": "capacity-reservation-id", "Values": [reservation_id]},
               {"Name": "tag:eks:cluster-name", "Values": [cluster_name]},
               {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
    instances = sum(len(group["Instances"]) for page in pages for group in page["Reservations"])
    return {**reservation, "ClusterInstances": instances}


class GpuCapacityReservation(pulumi.dynamic.Resource, module="raytrain", name="GpuCapacityReservation"):
    """An On-Demand Capacity Reservation in the first of `candidate_azs` that has the capacity."""

    reservation_id: pulumi.Output[str]
    """The reservation (cr-...) the GPU launch template targets."""
    availability_zone: pulumi.Output[str]
    """The AZ it landed in: the GPU node group's one AZ."""
    skipped_azs: pulumi.Output[list[str]]
    """The candidates tried before it, each with AWS's answer."""

    def __init__(self, name: str, *, instance_type: str, instance_count: int, candidate_azs: list[str],
                 tags: dict[str, str], region: str | None = None, profile: str | None = None,
                 role_arn: str | None = None, placement_group_arn: pulumi.Input[str] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        inputs = ReservationInputs(instance_type=instance_type, instance_count=instance_count,
                                   candidate_azs=list(candidate_azs), tags=dict(tags), region=region,
                                   profile=profile, role_arn=role_arn)
        inputs.validate()
        super().__init__(
            GpuCapacityReservationProvider(), name,
            {**asdict(inputs), "placement_group_arn": placement_group_arn,
             "reservation_id": None, "availability_zone": None, "skipped_azs": None},
            opts)
