"""What a stack left billing outside Pulumi's state, found by the stack's tags, and deleted on request.

    python -m tools.leftovers --stack p5            # list them
    python -m tools.leftovers --stack p5 --delete   # and delete them

An `up` killed while AWS was creating something (Ctrl-C twice, a closed laptop, a CI job's timeout) leaves a *pending
create* in the state: Pulumi never learned the id, so `pulumi destroy` does not delete it, and a later `up` may make
another beside it (an auto-named resource gets a new name; the GPU node group's fixed name makes EKS refuse instead,
except on stacks made before it, which keep their auto-name). Everything the stack
makes carries its tags (`project`, `stack`, `cluster`); this command lists the billable ones that carry all three
and are not in `pulumi stack export --stack STACK` (or `--state FILE`, such an export): capacity reservations, EKS
node groups and clusters, NAT gateways and Elastic IPs. After `pulumi destroy` the state is empty, so whatever is
listed is what destroy missed. A leftover that is one of the state's pending creates is named with its URN.

`--delete` cancels or deletes them in dependency order (node groups before their cluster, a NAT gateway before its
address), waiting for each deletion EKS and EC2 take minutes over, so a `pulumi destroy` after it finds the cluster
free of node groups. Then `pulumi refresh --clear-pending-creates --stack STACK` drops the pending creates from the
state. Nothing in the state is ever touched, nor anything without all three tags.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from infra.config import PROJECT_FILE, project_name
from tools.stack import stack_file_config, stack_key
from tools.stack_export import export_problem
from tools.stack_name import add_stack_flag
from workload import cli, user_files
from workload.aws_region import region_problem

# What the capacity reservation provider treats as over (infra/aws/capacity_reservation.py ENDED_STATES); a
# reservation in any other state (active, pending, scheduled, payment-pending) holds or will hold capacity.
ENDED_RESERVATION_STATES = frozenset({"cancelled", "expired", "failed"})
LIVE_NAT_STATES = ["pending", "available"]
# EKS deletes a node group in 5 to 15 minutes (its instances drain and terminate), a cluster in about 10.
WAIT = {"Delay": 20, "MaxAttempts": 90}
EXPORT_TIMEOUT_S = 120
# A stack's export is some KiB per resource: a few MiB for this project's hundred; a bound on what json reads.
MAX_STATE_BYTES = 256 << 20
# Deletion order: what holds another goes first.
KIND_ORDER = ("node group", "capacity reservation", "NAT gateway", "Elastic IP", "EKS cluster")


@dataclass(frozen=True)
class Leftover:
    kind: str
    id: str
    detail: str
    pending_urn: str = ""
    """The URN of the state's pending create this is, when one matches: Pulumi was making it when the `up` died."""


@dataclass(frozen=True)
class StackState:
    """What `pulumi stack export` records: every id and name it knows, and its pending creates."""

    known: frozenset[str]
    pending: tuple[dict[str, Any], ...]

    @classmethod
    def from_export(cls, export: dict[str, Any]) -> StackState:
        deployment = export.get("deployment") or {}
        known: set[str] = set()
        for resource in deployment.get("resources") or []:
            if resource.get("id"):
                known.add(resource["id"])
                # pulumi-aws's node group id is "<cluster>:<node group>"; EKS answers with the name alone.
                if resource.get("type") == "aws:eks/nodeGroup:NodeGroup":
                    known.add(resource["id"].split(":", 1)[-1])
        pending = tuple(op.get("resource") or {} for op in deployment.get("pending_operations") or []
                        if op.get("type") == "creating")
        return cls(frozenset(known), pending)

    def pending_urn(self, resource_type: str, name: str = "") -> str:
        """The URN of the pending create this is: of this type and, where its inputs name it, this name; else the
        only pending create of the type."""
        of_type = [r for r in self.pending if r.get("type") == resource_type]
        named = [r for r in of_type if name and name in
                 ((r.get("inputs") or {}).get("nodeGroupName"), (r.get("inputs") or {}).get("name"))]
        chosen = named or (of_type if len(of_type) == 1 else [])
        return chosen[0].get("urn", "") if chosen else ""


def exported_stack(export: dict[str, Any]) -> str | None:
    """The stack a `pulumi stack export` is of: what its resources' URNs name (urn:pulumi:<stack>::<project>::...)."""
    for resource in (export.get("deployment") or {}).get("resources") or []:
        urn = str(resource.get("urn", ""))
        if urn.startswith("urn:pulumi:") and "::" in urn:
            return urn.removeprefix("urn:pulumi:").split("::", 1)[0]
    return None


def stack_tags(stack: str) -> dict[str, str]:
    """The tags __main__.py puts on everything the stack makes."""
    from infra.config.naming import default_cluster_name

    return {"project": project_name(), "stack": stack,
            "cluster": str(stack_key(stack, "clusterName") or default_cluster_name(stack))}


def _has_tags(tags: dict[str, str] | list[dict[str, str]] | None, wanted: dict[str, str]) -> bool:
    if isinstance(tags, list):
        tags = {tag["Key"]: tag["Value"] for tag in tags}
    return all((tags or {}).get(key) == value for key, value in wanted.items())


def _tag_filters(tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{key}", "Values": [value]} for key, value in sorted(tags.items())]


def find(boto_session, tags: dict[str, str], state: StackState) -> list[Leftover]:
    """The billable resources carrying all of `tags` that `state` does not know, in deletion order."""
    from infra.aws.capacity_reservation import RESOURCE_TYPE as RESERVATION_TYPE

    ec2, eks = boto_session.client("ec2"), boto_session.client("eks")
    found: list[Leftover] = []
    pages = ec2.get_paginator("describe_capacity_reservations").paginate(Filters=_tag_filters(tags))
    for reservation in (r for page in pages for r in page["CapacityReservations"]):
        reservation_id = reservation["CapacityReservationId"]
        if reservation["State"] not in ENDED_RESERVATION_STATES and reservation_id not in state.known:
            found.append(Leftover("capacity reservation", reservation_id,
                                  f"{reservation['TotalInstanceCount']} x {reservation['InstanceType']} in "
                                  f"{reservation['AvailabilityZone']}, {reservation['State']}",
                                  state.pending_urn(RESERVATION_TYPE)))
    cluster = tags["cluster"]
    try:
        described = eks.describe_cluster(name=cluster)["cluster"]
    except eks.exceptions.ResourceNotFoundException:
        described = None
    # Node groups by their own tags (the cluster's name is the stack's); the cluster itself only with the stack's tags.
    if described is not None:
        for page in eks.get_paginator("list_nodegroups").paginate(clusterName=cluster):
            for name in page["nodegroups"]:
                group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
                if name in state.known or not _has_tags(group.get("tags"), tags) or group["status"] == "DELETING":
                    continue
                scaling = group.get("scalingConfig") or {}
                found.append(Leftover("node group", f"{cluster}:{name}",
                                      f"{','.join(group.get('instanceTypes') or ['?'])}, desired "
                                      f"{scaling.get('desiredSize')}, {group['status']}",
                                      state.pending_urn("aws:eks/nodeGroup:NodeGroup", name)))
        if cluster not in state.known and described["status"] != "DELETING" and _has_tags(described.get("tags"), tags):
            found.append(Leftover("EKS cluster", cluster, described["status"],
                                  state.pending_urn("aws:eks/cluster:Cluster", cluster)))
    for nat in ec2.describe_nat_gateways(Filters=[*_tag_filters(tags), {"Name": "state", "Values": LIVE_NAT_STATES}]
                                         )["NatGateways"]:
        if nat["NatGatewayId"] not in state.known:
            found.append(Leftover("NAT gateway", nat["NatGatewayId"], f"{nat['State']} in {nat.get('SubnetId')}",
                                  state.pending_urn("aws:ec2/natGateway:NatGateway")))
    for address in ec2.describe_addresses(Filters=_tag_filters(tags))["Addresses"]:
        if address.get("AllocationId") and address["AllocationId"] not in state.known:
            found.append(Leftover("Elastic IP", address["AllocationId"], address.get("PublicIp", ""),
                                  state.pending_urn("aws:ec2/eip:Eip")))
    return sorted(found, key=lambda leftover: KIND_ORDER.index(leftover.kind))


def delete(boto_session, leftovers: Sequence[Leftover], on_progress: Callable[[str], None]) -> None:
    """Cancel or delete each, in the order `find` gives, waiting where what follows needs it gone."""
    ec2, eks = boto_session.client("ec2"), boto_session.client("eks")
    groups = [leftover.id.split(":", 1) for leftover in leftovers if leftover.kind == "node group"]
    for cluster, name in groups:
        on_progress(f"deleting node group {name} of {cluster}")
        eks.delete_nodegroup(clusterName=cluster, nodegroupName=name)
    for cluster, name in groups:
        # Its cluster cannot be deleted before it is gone, by this command or by `pulumi destroy`.
        eks.get_waiter("nodegroup_deleted").wait(clusterName=cluster, nodegroupName=name, WaiterConfig=WAIT)
        on_progress(f"deleted node group {name}")
    for leftover in leftovers:
        if leftover.kind == "capacity reservation":
            ec2.cancel_capacity_reservation(CapacityReservationId=leftover.id)
            on_progress(f"cancelled capacity reservation {leftover.id}")
    nats = [leftover.id for leftover in leftovers if leftover.kind == "NAT gateway"]
    for nat in nats:
        ec2.delete_nat_gateway(NatGatewayId=nat)
        on_progress(f"deleting NAT gateway {nat}")
    if nats:  # its Elastic IP stays associated, and cannot be released, until it is gone
        ec2.get_waiter("nat_gateway_deleted").wait(NatGatewayIds=nats, WaiterConfig=WAIT)
    for leftover in leftovers:
        if leftover.kind == "Elastic IP":
            ec2.release_address(AllocationId=leftover.id)
            on_progress(f"released Elastic IP {leftover.id}")
        elif leftover.kind == "EKS cluster":
            eks.delete_cluster(name=leftover.id)
            on_progress(f"deleting EKS cluster {leftover.id} (EKS takes about 10 minutes)")


def read_state(stack: str, state_file: Path | None) -> dict[str, Any]:
    """`--state FILE`, else `pulumi stack export --stack STACK`; of an export's shape (tools/stack_export.py)."""
    if state_file is not None:
        try:
            export = json.loads(user_files.read_bytes(state_file, MAX_STATE_BYTES))  # a FIFO is refused, not waited on
        except user_files.Refused as error:
            raise cli.UsageError(f"--state {state_file} {error.why}") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
            raise cli.UsageError(f"--state {state_file}: not a `pulumi stack export` JSON file "
                                 f"({type(error).__name__})") from None
        if (why := export_problem(export)) is not None:
            raise cli.UsageError(f"--state {state_file}: not a `pulumi stack export` file: {why}")
        return export
    if shutil.which("pulumi") is None:
        raise cli.EnvironmentProblem("the Pulumi CLI is not on PATH; install it, or pass --state FILE from "
                                     "`pulumi stack export --stack STACK --file FILE`")
    done = subprocess.run(["pulumi", "stack", "export", "--stack", stack], capture_output=True, text=True,
                          timeout=EXPORT_TIMEOUT_S, cwd=PROJECT_FILE.parent, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise cli.EnvironmentProblem(f"`pulumi stack export --stack {stack}` failed: {last}")
    try:
        export = json.loads(done.stdout)
    except (json.JSONDecodeError, RecursionError) as error:
        raise cli.EnvironmentProblem(f"`pulumi stack export --stack {stack}` printed no JSON ({type(error).__name__})"
                                     ) from None
    if (why := export_problem(export)) is not None:  # a Pulumi CLI whose export this reader does not know
        raise cli.EnvironmentProblem(f"`pulumi stack export --stack {stack}` printed an export this command cannot "
                                     f"read: {why}")
    return export


def stack_session(stack: str, region: str | None):
    """boto3 as the stack's AWS provider: aws:profile, then aws:assumeRoles' one role, in aws:region."""
    from infra.aws.identity import session
    from infra.config import AwsIdentity

    config = stack_file_config(stack)
    roles = config.get("aws:assumeRoles") or []
    identity = AwsIdentity(profile=config.get("aws:profile") or None,
                           role_arn=(roles[0] or {}).get("roleArn") if roles else None)
    given = bool(region)
    region = region or str(config.get("aws:region") or "")
    if not region:
        raise cli.UsageError(f"--region: Pulumi.{stack}.yaml sets no aws:region; name the stack's region")
    problem = region_problem(region)
    if problem:
        raise cli.UsageError(f"--region: {problem}" if given else f"Pulumi.{stack}.yaml's aws:region: {problem}")
    return session(identity, region)


@contextlib.contextmanager
def _aws_errors(kind: type[cli.CommandError], what: str) -> Iterator[None]:
    """botocore's errors (no credentials, access denied, a waiter that gave up) as one line, no traceback."""
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise kind(f"{what}: {error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser("python -m tools.leftovers", __doc__,
                        check_failed="leftovers were found and not deleted (run again with --delete)")
    add_stack_flag(parser, required=True, help="the stack whose tags to look for (Pulumi.<stack>.yaml)")
    parser.add_argument("--state", type=Path, help="a `pulumi stack export` file; unset: run it")
    parser.add_argument("--region", help="unset: the stack's aws:region")
    parser.add_argument("--delete", action="store_true", help="cancel or delete what is found")
    args = parser.parse_args(argv)
    stack_file_config(args.stack)  # a missing stack file, or one Pulumi would refuse, before AWS is asked
    with _aws_errors(cli.EnvironmentProblem, f"Pulumi.{args.stack}.yaml's AWS identity"):  # a profile that is none
        boto_session = stack_session(args.stack, args.region)  # first: a misspelt region is named before all else
    export = read_state(args.stack, args.state)
    if args.state is not None and (other := exported_stack(export)) not in (None, args.stack):
        # Another stack's state would make every live resource of this one look like a leftover to delete.
        raise cli.UsageError(f"--state {args.state} is stack {other}'s export, not {args.stack}'s; give "
                             f"`pulumi stack export --stack {args.stack} --file FILE`, or --stack {other}")
    state = StackState.from_export(export)
    with _aws_errors(cli.EnvironmentProblem, "AWS refused the look-up"):
        leftovers = find(boto_session, stack_tags(args.stack), state)
    if not leftovers:
        print(f"No billable resource of stack {args.stack} outside its state.")
        return cli.OK
    print("\n".join(cli.table([("kind", "id", "what", "pending create"),
                               *((item.kind, item.id, item.detail, item.pending_urn or "-") for item in leftovers)])))
    if not args.delete:
        print(f"\n{len(leftovers)} billable resource(s) outside the state; delete them with "
              f"`python -m tools.leftovers --stack {args.stack} --delete`.")
        return cli.CHECK_FAILED
    with _aws_errors(cli.CheckFailed, "a deletion failed; run the command again to see what is left"):
        delete(boto_session, leftovers, print)
    if state.pending:
        print(f"Now drop the pending creates: pulumi refresh --clear-pending-creates --stack {args.stack}")
    return cli.OK


if __name__ == "__main__":
    sys.exit(cli.run(main))
