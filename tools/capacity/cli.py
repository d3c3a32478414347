"""Find the region and AZ where a GPU instance type can be had, before `pulumi up` asks for it.

    python -m tools.capacity --instance-type g6.12xlarge --count 2
    python -m tools.capacity --instance-type g6.12xlarge --count 2 --regions us-east-1,us-west-2 \\
        --probe --write-stack dev

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
--write-stack NAME sets aws:region and <project>:gpuAvailabilityZone (the best AZ) in Pulumi.NAME.yaml (made for a
new stack, which `pulumi stack init NAME` then takes), keeping its comments and other keys; when that stack has capacityReserve true, also <project>:capacityCandidateAzs (the
qualifying AZs of the best region, ranked), which `pulumi up` then tries in order.

A failure in one region (disabled, access denied, throttled) is reported and does not stop the others.

IAM: ec2:DescribeRegions, DescribeAvailabilityZones, DescribeInstanceTypes, DescribeInstanceTypeOfferings,
DescribeInstances, DescribeCapacityReservations, GetSpotPlacementScores, DescribeSubnets,
servicequotas:GetServiceQuota, GetAWSDefaultServiceQuota, sts:GetCallerIdentity; with --probe also
ec2:CreateCapacityReservation, CancelCapacityReservation and CreateTags.
"""
from __future__ import annotations

import argparse
import re
import sys
import uuid
from pathlib import Path
from typing import Sequence, TextIO

from botocore.exceptions import BotoCoreError, ClientError

from tools.capacity.aws import Aws, check_credentials, describe_failure
from tools.capacity.probe import probe
from tools.capacity.quotas import on_demand_quota
from tools.capacity.stack_file import StackContext, load_stack, write_stack_file
from tools.capacity.survey import AzReport, quota_increase_commands, rank, render_table, resolve_regions, search
from tools.stack_name import STACK_NAME, add_stack_flag
from workload import cli
from workload.aws_profile import aws_profile
from workload.aws_region import region_problem

PROJECT_DIR = Path(__file__).resolve().parents[2]

_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
_INSTANCE_SIZE = re.compile(r"nano|micro|small|medium|large|\d*xlarge|metal(-\d+xl)?")


def _type_of_gpu(name: str) -> str:
    """'; did you mean TYPE (N x GPU)?' when `name` is a GPU's name (H100, a100) of one of the project's known instance
    types (infra/preview/instance_facts.py, EC2's own figures), else ''."""
    from infra.preview.instance_facts import KNOWN_GPU_INSTANCE_TYPES

    types = [f"{instance_type} ({known.gpus} x {known.gpu_name})" for instance_type, known
             in KNOWN_GPU_INSTANCE_TYPES.items() if known.gpu_name.lower() == name.strip().lower()]
    return f"; {name.strip()} is a GPU: did you mean {' or '.join(types)}?" if types else ""


# The most GPU nodes --count takes: one probe is one On-Demand Capacity Reservation of --count instances, and
# CreateCapacityReservation's InstanceCount has "Valid range: 1 - 1000" (Amazon EC2 API Reference); EKS's "Nodes per
# managed node group" quota is 450 unless raised (infra/preview/feasibility.py). Checked as the flag is parsed, before
# credentials are looked for: 10**20 nodes is bad input (2), not a missing credential (3).
MAX_COUNT = 1000


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = cli.parser("python -m tools.capacity", __doc__,
                        check_failed="no AZ qualifies, or a probe reservation could not be cancelled")
    parser.add_argument("--instance-type", required=True, help="EC2 instance type of the GPU nodes, e.g. g6.12xlarge")
    parser.add_argument("--count", required=True, type=int,
                        help=f"number of GPU nodes (all in one AZ), 1 to {MAX_COUNT:,}")
    parser.add_argument("--regions", default="",
                        help="comma-separated regions to search; empty: every region enabled for the account")
    add_stack_flag(parser, help="stack whose VPC must have a private subnet in the AZ (its aws:region); "
                                        "default: the --write-stack stack")
    parser.add_argument("--probe", action="store_true",
                        help="create and cancel at once a real capacity reservation in each qualifying AZ")
    parser.add_argument("--write-stack", metavar="NAME",
                        help="write the best region and AZ (and, with capacityReserve, the ranked AZs) into "
                             "Pulumi.NAME.yaml")
    parser.add_argument("--profile", type=aws_profile,
                        help="AWS profile; unset: AWS_PROFILE or the default credentials")
    parser.add_argument("--project-dir", type=Path, default=PROJECT_DIR,
                        help="directory of Pulumi.yaml and the stack files")
    args = parser.parse_args(argv)
    if not 1 <= args.count <= MAX_COUNT:
        got = f"{args.count}" if abs(args.count) < 10**12 else f"a number of {len(str(abs(args.count))):,} digits"
        raise ValueError(f"--count must be from 1 to {MAX_COUNT:,} GPU nodes (a capacity reservation's most instances); "
                         f"got {got}")
    name = args.write_stack  # --stack is checked by its own type (tools/stack_name.py), with the same rule
    if name is not None and (not STACK_NAME.fullmatch(name) or ".." in name):
        raise ValueError(f"--write-stack {cli.shown(name)}: a stack name is letters, digits, '-', '_' and '.' (no '/' "
                         "or '..'), as in Pulumi.<name>.yaml beside Pulumi.yaml, such as dev or g6e")
    if not _INSTANCE_TYPE.fullmatch(args.instance_type):
        raise ValueError(f"--instance-type {cli.shown(args.instance_type)}: expected an EC2 instance type such as "
                         "g6.12xlarge" + _type_of_gpu(args.instance_type))
    family, size = args.instance_type.split(".", 1)
    if not _INSTANCE_SIZE.fullmatch(size):
        # EC2's sizes (the instance types' naming conventions): nano to xlarge, Nxlarge, metal (metal-24xl, ...).
        whole = re.sub(r"^(\d*)x?l(a(r(ge?)?)?)?$", r"\1xlarge", size)
        hint = f"; did you mean {family}.{whole}?" if _INSTANCE_SIZE.fullmatch(whole) else ""
        raise ValueError(f"--instance-type {args.instance_type}: {size} is no EC2 size (nano, micro, small, medium, "
                         f"large, xlarge, 2xlarge ... 48xlarge, metal){hint}")
    if args.regions.strip().lower() in ("all", "*", "any", "every"):
        raise ValueError(f"--regions {args.regions.strip()!r}: leave --regions unset to search every region enabled "
                         "for the account; or list regions, such as us-east-1,us-west-2")
    args.region_list = cli.comma_list("--regions", args.regions, "us-east-1,us-west-2") if args.regions.strip() else []
    problems = [problem for problem in map(region_problem, args.region_list) if problem]
    if problems:
        raise ValueError(f"--regions: {'; '.join(problems)}")
    on_demand_quota(args.instance_type)  # refuse a family without a known quota before calling AWS
    return args


def run(args: argparse.Namespace, aws: Aws, out: TextIO | None = None, log: TextIO | None = None) -> int:
    out, log = out or sys.stdout, log or sys.stderr
    # The stack written is also the one whose subnets are checked, unless --stack names another.
    target = load_stack(args.project_dir, args.write_stack, "--write-stack") if args.write_stack else None
    stack = load_stack(args.project_dir, args.stack, "--stack") if args.stack else target
    check_credentials(aws)
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
        return cli.CHECK_FAILED
    best = [az for az in azs if az.qualifies]
    if not best:
        print("\nNo AZ qualifies.", file=out)
        return cli.CHECK_FAILED
    if target is not None:
        _write(target, best, out)
    return cli.OK


def _write(target: StackContext, best: list[AzReport], out: TextIO) -> None:
    region = best[0].region
    ranked = [az.availability_zone for az in best if az.region == region]
    # Without capacityReserve the program refuses capacityCandidateAzs: the node group asks EC2 in one AZ.
    candidates = ranked if target.capacity_reserve else None
    replaced = write_stack_file(target.path, target.project, region, ranked[0], candidates)
    written = f"aws:region={region}, {target.project}:gpuAvailabilityZone={ranked[0]}"
    if candidates:
        written += f", {target.project}:capacityCandidateAzs={candidates}"
    print(f"\nWrote {target.path.name}: {written}", file=out)
    if candidates is None and len(ranked) > 1:
        print(f"  ({target.project}:capacityReserve is off, so the other qualifying AZs {ranked[1:]} are not "
              "written; a stack that reserves its capacity tries them in order)", file=out)
    if replaced:
        print(f"WARNING: aws:region was {replaced}; if that stack is deployed, `pulumi up` now replaces "
              "every resource in the new region", file=out)


def main(argv: Sequence[str] | None = None, aws: Aws | None = None) -> int:
    """The command; tests pass `aws` to answer AWS with moto and Stubbers."""

    def command(argv: Sequence[str] | None) -> int:
        args = parse_args(argv)
        try:
            return run(args, aws or Aws(args.profile))
        except (BotoCoreError, ClientError) as error:  # beyond the per-region errors the survey reports itself
            raise cli.EnvironmentProblem(f"AWS: {describe_failure(error)}") from None

    return cli.run(command, argv)
