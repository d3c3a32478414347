"""The stack's own capacity reservation (`capacityReserve`) after it has ended, seen at preview.

A reservation with an end date (`capacityReservationHours`) expires by itself; EC2 may also cancel or fail it, and an
operator may cancel it by hand. The GPU launch template keeps targeting it with no fallback (a targeted reservation
serves only the instances that name it), so after its end no GPU node can launch: a group the idle stop has scaled to
0 can never wake, and a replaced node never comes back. Pulumi does not notice: `pulumi up` compares inputs, which
have not changed, and only `pulumi refresh` reads the reservation again (GpuCapacityReservationProvider.read drops an
ended one from the state, so the next `up` makes a new one).

The preview cannot read Pulumi's state, so it finds the reservation as the provider does, by its URN tag, with the
stack's own identity: when every reservation carrying the tag has ended, it warns, naming the keys and the recovery
(docs/troubleshooting.md, "The stack's reservation ended"). It warns rather than refuses: the `up` that follows the
recovery's `pulumi refresh` sees the same ended reservation (EC2 keeps ended ones for a while) and must go on.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pulumi

from infra.aws.capacity_reservation import ENDED_STATES, RESOURCE_TYPE, URN_TAG, _ec2_client
from infra.config import AwsIdentity
from infra.config.schema import warn


def reservation_urn(name: str, stack: str, project: str) -> str:
    """The URN GpuCapacityReservation tags its reservation with (a top-level resource of that name)."""
    return f"urn:pulumi:{stack}::{project}::{RESOURCE_TYPE}::{name}"


def describe_tagged(urn: str, *, region: str | None, identity: AwsIdentity) -> list[dict[str, Any]]:
    """Every reservation carrying the URN tag, in any state (ended ones too, for as long as EC2 lists them)."""
    ec2 = _ec2_client({"region": region, "profile": identity.profile, "role_arn": identity.role_arn,
                       "account_id": identity.account_id})
    pages = ec2.get_paginator("describe_capacity_reservations").paginate(
        Filters=[{"Name": f"tag:{URN_TAG}", "Values": [urn]}])
    return [r for page in pages for r in page["CapacityReservations"]]


def ended_reservation(tagged: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest of them when none is live (then the launch template targets an ended one); None otherwise."""
    if not tagged or any(r["State"] not in ENDED_STATES for r in tagged):
        return None
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return max(tagged, key=lambda r: (r.get("CreateDate") or epoch, r["CapacityReservationId"]))


def ended_message(reservation: dict[str, Any], *, end_hours: int, idle_stop_minutes: int) -> str:
    ended = reservation.get("EndDate") or reservation.get("CancelledDate")
    when = f" since {ended:%Y-%m-%d %H:%M} UTC" if isinstance(ended, datetime) else ""
    why = (f"capacityReservationHours is {end_hours}: it ended by itself" if end_hours and reservation["State"] ==
           "expired" else "it was cancelled outside `pulumi destroy`, or EC2 failed it")
    stopped = (" The idle stop (gpuIdleStopMinutes) scales the GPU group to 0 when it idles: stopped, it cannot wake."
               if idle_stop_minutes else "")
    return (f"capacityReserve: this stack's capacity reservation {reservation['CapacityReservationId']} "
            f"({reservation['InstanceType']} in {reservation['AvailabilityZone']}) is {reservation['State']}{when} "
            f"({why}). The GPU launch template still targets it, so no GPU node can launch.{stopped} Recover: "
            "`pulumi refresh` (drops the ended reservation from the state), then `pulumi up` (reserves anew, "
            "capacityReservationHours from now); or set capacityReserve false (with gpuAvailabilityZone) for "
            "On-Demand nodes. If you just ran `pulumi refresh`, this `up` makes the new one: go on.")


def warn_if_ended(name: str, *, region: str | None, identity: AwsIdentity, end_hours: int,
                  idle_stop_minutes: int) -> str | None:
    """The warning for the stack's reservation `name`, logged at preview; None when a live one exists (or none yet:
    a first `up`). An AWS error here is reported and skipped: it never stops a preview."""
    urn = reservation_urn(name, pulumi.get_stack(), pulumi.get_project())
    try:
        tagged = describe_tagged(urn, region=region, identity=identity)
    except Exception as error:  # noqa: BLE001 a check that cannot run must not block the deploy
        pulumi.log.info(f"capacityReserve: could not read this stack's reservation's state ({error}); not checked")
        return None
    reservation = ended_reservation(tagged)
    if reservation is None:
        return None
    message = ended_message(reservation, end_hours=end_hours, idle_stop_minutes=idle_stop_minutes)
    warn(message)
    return message
