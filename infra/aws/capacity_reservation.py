"""An On-Demand Capacity Reservation for the GPU nodes, created inside `pulumi up` (config `capacityReserve`).

`GpuCapacityReservation` tries the ranked candidate AZs in order. Insufficient capacity in one AZ moves it to
the next at once, so a starved AZ costs seconds here instead of a node group that fails 20 minutes later.
The GPU node group then lands in `availability_zone` and targets `reservation_id` from its launch template;
`pulumi destroy` cancels the reservation.

The reservation is `targeted`: only instances that name it in their launch template
(`capacity_reservation_specification.capacity_reservation_target`) run in it. An `open` reservation can be
targeted the same way, but it would also absorb any other matching instance of the account in that AZ (a
stray g6.12xlarge dev box), leaving the node group one node short.

Found again, never made twice. p5 capacity bills by the hour from the moment it exists, so a `pulumi up` cut off
after CreateCapacityReservation returned but before Pulumi recorded the result must not leave it unseen:
- every reservation carries the resource's URN as a tag (URN_TAG); create first adopts a live one carrying it
  (an earlier create that was cut off) and cancels any extra, and delete cancels every one carrying it;
- the ClientToken is derived from the URN and what is reserved, so EC2 itself answers a retried request with
  the reservation it already made instead of a second one;
- `capacityReservationHours` gives it an end date, a hard stop that holds even if nobody runs `destroy`.

It is a dynamic resource: the provider runs in Pulumi's provider process, which unpickles it by reference
(`infra.aws.capacity_reservation`, importable from the project root), so it holds no client or session: each
call builds its boto3 session from the stack's identity (infra/aws/identity.py: aws:profile, then the role of
aws:assumeRoles) and `region`, and checks that it is in the account the stack was previewed in before it
touches anything. Only a change of what is reserved (instance type, region, account, an AZ dropped from the
candidates) replaces the reservation; new credentials for the same account do not.

With `placement_group_arn` the reservation is made inside that cluster placement group, so the nodes that use it
are co-located; EC2 then only lets instances launched into that group use it. The program reads an existing
reservation at preview (`describe_existing`) through the same identity.
"""
from __future__ import annotations

import hashlib
import json
import sys
import uuid
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any

import pulumi
from botocore.config import Config
from botocore.exceptions import ClientError
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from infra.aws.identity import check_account, describe, identity_from_props, session
from infra.config import AwsIdentity, config_error

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

# The tag naming the Pulumi resource a reservation belongs to (its value: the URN). Tag values may hold 256
# characters; a URN longer than that is refused at preview.
URN_TAG = "raytrain:urn"
MAX_TAG_VALUE = 256
# EC2 keeps a ClientToken for a while after the reservation it made has ended, and answers a reuse with that
# ended reservation. A token is therefore derived with a generation counter: a reuse that comes back ended (or
# that EC2 refuses as IdempotentParameterMismatch, a token first sent with another end date) moves on to the
# next. Each destroy-then-up of the same resource within EC2's memory of the token spends one.
TOKEN_GENERATIONS = 16
PLATFORM = "Linux/UNIX"  # EKS's AL2023 GPU AMIs; a reservation only serves instances of its platform.
TENANCY = "default"  # what the GPU launch template launches; a dedicated reservation serves only dedicated instances
MATCH_CRITERIA = "targeted"

# Standard mode retries throttling and 5xx. EC2 answers InsufficientInstanceCapacity with a 500, so a starved AZ
# is retried twice (about a second) before the next AZ is tried; the ClientToken keeps those retries from ever
# creating a second reservation.
_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3})

# What is reserved, and where: a change of any of these is a new reservation (one cannot move into or out of a
# placement group either). Credentials (profile, role_arn) for the same account are not: a new profile must not
# give scarce capacity back.
_REPLACE_KEYS = ("instance_type", "region", "account_id", "placement_group_arn")


class CapacityReservationError(RuntimeError):
    """No candidate AZ could hold the reservation, or AWS refused it for a reason that no other AZ can fix."""


def reservation_request(*, instance_type: str, instance_count: int, availability_zone: str,
                        tags: dict[str, str], end_date=None, client_token: str | None = None,
                        placement_group_arn: str | None = None) -> dict[str, Any]:
    """The CreateCapacityReservation parameters, shared by the stack's reservation and the finder's probes.

    `end_date` (a datetime) makes the reservation expire by itself: the finder's probes set it as a safety net
    for a process that is killed before it can cancel, the stack's reservation with `capacityReservationHours`.
    `client_token` (default: a random one) makes a repeated request return the reservation the first one made.
    """
    request: dict[str, Any] = {
        "ClientToken": client_token or uuid.uuid4().hex,
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
    urn: str = ""
    """This resource's URN: the tag that finds its reservation again, and the seed of its ClientToken."""
    account_id: str | None = None
    """The stack's AWS account (aws.get_caller_identity at preview); every call checks its credentials reach it."""
    role_arn: str | None = None
    """The role of the stack's aws:assumeRoles, assumed after the profile, as the stack's AWS provider does."""
    end_hours: int = 0
    """capacityReservationHours: the reservation ends this many hours after it is made; 0 never (destroy ends it)."""
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
            urn=props.get("urn") or "",
            account_id=props.get("account_id") or None,
            role_arn=props.get("role_arn") or None,
            end_hours=int(props.get("end_hours") or 0),
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
        if isinstance(self.end_hours, bool) or not isinstance(self.end_hours, int) or self.end_hours < 0:
            raise ValueError(f"end_hours (capacityReservationHours) must be an integer >= 0, got {self.end_hours!r}")

    @property
    def identity(self) -> AwsIdentity:
        return AwsIdentity(self.profile, self.role_arn, self.account_id)

    @property
    def reservation_tags(self) -> dict[str, str]:
        return {**self.tags, URN_TAG: self.urn}

    def end_date(self) -> datetime | None:
        """end_hours from now, rounded up to the hour: a request retried within the hour is then the same request,
        which EC2 answers from its ClientToken (another end date would be IdempotentParameterMismatch)."""
        if not self.end_hours:
            return None
        hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
        return hour + timedelta(hours=self.end_hours + 1)

    def client_token(self, availability_zone: str, generation: int) -> str:
        """The same for every retry of one resource's request in one AZ (EC2 then returns the first answer), and
        different for anything else that is reserved."""
        what = [self.urn, self.account_id, self.region, self.instance_type, self.instance_count, availability_zone,
                generation]
        return "raytrain-" + hashlib.sha256(json.dumps(what).encode()).hexdigest()[:48]  # EC2 allows 64 characters

    def outputs(self, reservation_id: str, availability_zone: str, skipped_azs: list[str]) -> dict[str, Any]:
        return {**asdict(self), "reservation_id": reservation_id, "availability_zone": availability_zone,
                "skipped_azs": skipped_azs}


def _ec2_client(props: dict[str, Any]):
    """EC2 with the stack's identity, once STS has said it is in the stack's account (AccountMismatch if not)."""
    identity = identity_from_props(props)
    boto_session = session(identity, props.get("region") or None)
    check_account(boto_session, identity)
    return boto_session.client("ec2", config=_CLIENT_CONFIG)


def _log(line: str) -> None:
    # The provider process's stderr is what Pulumi shows under the resource (pulumi.log cannot reach the engine).
    print(line, file=sys.stderr, flush=True)


class GpuCapacityReservationProvider(ResourceProvider):
    """Creates the reservation in the first candidate AZ that has the capacity, or adopts the one an interrupted
    create left; cancels it (and any stray one carrying its URN) on delete."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        inputs = ReservationInputs.from_props(props)
        inputs.validate()
        if not inputs.urn:
            raise ValueError("urn: a GpuCapacityReservation needs its URN to find its reservation again")
        ec2 = _ec2_client(asdict(inputs))
        adopted = _adopt(ec2, inputs)
        if adopted is not None:
            return CreateResult(adopted["CapacityReservationId"],
                                inputs.outputs(adopted["CapacityReservationId"], adopted["AvailabilityZone"], []))
        skipped: list[str] = []
        for az in inputs.candidate_azs:
            try:
                reservation = _create_in(ec2, inputs, az)
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
            return CreateResult(reservation_id, inputs.outputs(reservation_id, reservation["AvailabilityZone"], skipped))
        raise CapacityReservationError(
            f"no candidate AZ has capacity for {inputs.instance_count} x {inputs.instance_type} right now; "
            "each AZ answered:\n  " + "\n  ".join(skipped)
            + "\nRank other AZs or regions with `python -m tools.capacity`, then set capacityCandidateAzs.")

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # A state written before account_id existed has none: that is not a change of account.
        replaces = [key for key in _REPLACE_KEYS
                    if olds.get(key) != news.get(key) and not (key == "account_id" and olds.get(key) is None)]
        # A new ranking alone must not move a live reservation (and the GPU nodes in it): only an AZ dropped
        # from the candidates forces a new one.
        if olds.get("availability_zone") not in (news.get("candidate_azs") or []):
            replaces.append("candidate_azs")
        changed = replaces or [field.name for field in fields(ReservationInputs)
                               if olds.get(field.name) != news.get(field.name)]
        # An in-place update keeps the reservation and its AZ. Pulumi's Python dynamic-provider host does not pass
        # `stables` on and dynamic resources are not previewed, so a preview still shows both outputs as unknown
        # (and the GPU node group as replaced); the update itself changes neither. Delete first on replace: side
        # by side, the old and the new reservation would need twice the vCPU quota.
        stables = [] if replaces else ["reservation_id", "availability_zone"]
        return DiffResult(changes=bool(changed), replaces=replaces, stables=stables, delete_before_replace=True)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        old, new = ReservationInputs.from_props(olds), ReservationInputs.from_props(news)
        new.validate()
        ec2 = _ec2_client(news)
        # New credentials for the same account: they must see the reservation, or later calls would think it gone.
        if _describe(ec2, id_) is None:
            raise CapacityReservationError(f"capacity reservation {id_} is not visible with the new credentials "
                                           f"({describe(new.identity)}); nothing was changed")
        if new.instance_count != old.instance_count:
            ec2.modify_capacity_reservation(CapacityReservationId=id_, InstanceCount=new.instance_count)
        if new.end_hours != old.end_hours:
            end_date = new.end_date()
            ec2.modify_capacity_reservation(
                CapacityReservationId=id_, EndDateType="limited" if end_date else "unlimited",
                **({"EndDate": end_date} if end_date else {}))
        removed = [{"Key": key} for key in old.tags if key not in new.tags]
        if removed:
            ec2.delete_tags(Resources=[id_], Tags=removed)
        changed = [{"Key": key, "Value": value} for key, value in new.reservation_tags.items()
                   if old.reservation_tags.get(key) != value]
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
        live = {} if (found := _describe(ec2, id_)) is None or found["State"] in ENDED_STATES else {id_: found}
        # A create that was cut off after EC2 answered left a reservation only its tag knows of.
        live.update({r["CapacityReservationId"]: r for r in _tagged(ec2, props.get("urn") or "")})
        for reservation_id in sorted(live):
            ec2.cancel_capacity_reservation(CapacityReservationId=reservation_id)
            if reservation_id != id_:
                _log(f"cancelled capacity reservation {reservation_id}: it carried this resource's tag but was not "
                     "in Pulumi's state (an interrupted create)")


def _create_in(ec2, inputs: ReservationInputs, availability_zone: str) -> dict[str, Any]:
    """CreateCapacityReservation in one AZ with this resource's ClientToken; the live reservation it answers."""
    for generation in range(TOKEN_GENERATIONS):
        request = reservation_request(
            instance_type=inputs.instance_type, instance_count=inputs.instance_count,
            availability_zone=availability_zone, tags=inputs.reservation_tags, end_date=inputs.end_date(),
            client_token=inputs.client_token(availability_zone, generation),
            placement_group_arn=inputs.placement_group_arn)
        try:
            reservation = ec2.create_capacity_reservation(**request)["CapacityReservation"]
        except ClientError as error:
            if error_code(error) != "IdempotentParameterMismatch":
                raise
            # The token was first sent with another end date: by an interrupted create (then its reservation is
            # live and tagged), or for a reservation since ended.
            if (adopted := _adopt(ec2, inputs)) is not None:
                return adopted
            continue
        if reservation["State"] not in ENDED_STATES:
            return reservation
    raise CapacityReservationError(
        f"{TOKEN_GENERATIONS} ClientTokens of {inputs.urn} in {availability_zone} all name ended reservations; "
        "rename the resource (clusterName) or wait a day for EC2 to forget them")


def _tagged(ec2, urn: str) -> list[dict[str, Any]]:
    """The live reservations carrying this resource's URN tag, oldest first."""
    if not urn:
        return []
    pages = ec2.get_paginator("describe_capacity_reservations").paginate(
        Filters=[{"Name": f"tag:{URN_TAG}", "Values": [urn]}])
    found = [r for page in pages for r in page["CapacityReservations"] if r["State"] not in ENDED_STATES]
    return sorted(found, key=lambda r: (r.get("CreateDate") or datetime.min.replace(tzinfo=timezone.utc),
                                        r["CapacityReservationId"]))


def _adopt(ec2, inputs: ReservationInputs) -> dict[str, Any] | None:
    """The live reservation an earlier, interrupted create of this resource made, if it fits what is asked (the
    type, an AZ among the candidates, the earliest ranked first); every other one carrying the tag is cancelled."""
    tagged = _tagged(ec2, inputs.urn)
    fitting = [r for az in inputs.candidate_azs for r in tagged
               if r["AvailabilityZone"] == az and r["InstanceType"] == inputs.instance_type]
    keep = fitting[0] if fitting else None
    for reservation in tagged:
        if reservation is not keep:
            ec2.cancel_capacity_reservation(CapacityReservationId=reservation["CapacityReservationId"])
            _log(f"cancelled capacity reservation {reservation['CapacityReservationId']} "
                 f"({reservation['InstanceType']} in {reservation['AvailabilityZone']}): an extra one carrying "
                 "this resource's tag")
    if keep is None:
        return None
    if keep["TotalInstanceCount"] != inputs.instance_count:
        ec2.modify_capacity_reservation(CapacityReservationId=keep["CapacityReservationId"],
                                        InstanceCount=inputs.instance_count)
    _log(f"adopted capacity reservation {keep['CapacityReservationId']} in {keep['AvailabilityZone']}: an earlier "
         "create of this resource made it and was cut off before Pulumi recorded it")
    return keep


def _describe(ec2, reservation_id: str) -> dict[str, Any] | None:
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as error:
        if error_code(error) == "InvalidCapacityReservationId.NotFound":
            return None
        raise
    return found[0] if found else None


def describe_existing(reservation_id: str, *, cluster_name: str, region: str | None,
                      identity: AwsIdentity) -> dict[str, Any] | None:
    """A reservation made outside the stack, as DescribeCapacityReservations returns it, plus `ClusterInstances`:
    how many of the instances running in it are already this cluster's nodes. None if it does not exist.

    pulumi-aws 7.51 has no invoke for On-Demand Capacity Reservations (only for Capacity Blocks), so the program
    reads it here at preview, before any resource, as the stack's own identity. A re-run finds its own nodes in
    the reservation; they count as capacity the stack has, not capacity it lacks.
    """
    ec2 = _ec2_client({"region": region, **asdict(identity)})
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


RESOURCE_TYPE = "pulumi-python:dynamic/raytrain:GpuCapacityReservation"


class GpuCapacityReservation(pulumi.dynamic.Resource, module="raytrain", name="GpuCapacityReservation"):
    """An On-Demand Capacity Reservation in the first of `candidate_azs` that has the capacity."""

    reservation_id: pulumi.Output[str]
    """The reservation (cr-...) the GPU launch template targets."""
    availability_zone: pulumi.Output[str]
    """The AZ it landed in: the GPU node group's one AZ."""
    skipped_azs: pulumi.Output[list[str]]
    """The candidates tried before it, each with AWS's answer."""

    def __init__(self, name: str, *, instance_type: str, instance_count: int, candidate_azs: list[str],
                 tags: dict[str, str], region: str | None = None, identity: AwsIdentity | None = None,
                 end_hours: int = 0, placement_group_arn: pulumi.Input[str] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        identity = identity or AwsIdentity()
        # The URN it will have, as an input of its own: create needs it before Pulumi has recorded anything.
        urn = f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{RESOURCE_TYPE}::{name}"
        if opts is not None and opts.parent is not None:
            raise ValueError("GpuCapacityReservation is a top-level resource: its URN tag assumes no parent")
        if len(urn) > MAX_TAG_VALUE:
            raise config_error("clusterName", f"the reservation's URN {urn!r} is longer than an EC2 tag value "
                                              f"({MAX_TAG_VALUE} characters); choose a shorter clusterName or stack name")
        inputs = ReservationInputs(instance_type=instance_type, instance_count=instance_count,
                                   candidate_azs=list(candidate_azs), tags=dict(tags), region=region,
                                   profile=identity.profile, urn=urn, account_id=identity.account_id,
                                   role_arn=identity.role_arn, end_hours=end_hours)
        inputs.validate()
        super().__init__(
            GpuCapacityReservationProvider(), name,
            {**asdict(inputs), "placement_group_arn": placement_group_arn,
             "reservation_id": None, "availability_zone": None, "skipped_azs": None},
            opts)
