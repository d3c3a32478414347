"""Is this machine ready for the first `pulumi up`? Each item of docs/cluster-setup.md's "Before the first `pulumi up`",
checked here, one line each: `ok` and what was found, or `fix` and what to do.

    python -m tools.doctor --stack dev

  python      Python 3.11 or newer, running from this repository's .venv (scripts/setup.sh makes it)
  pulumi      the Pulumi CLI 3.x on PATH (`pulumi version`)
  backend     logged in to a backend (`pulumi whoami --json`)
  passphrase  for a self-managed backend (s3://, file://, ...): PULUMI_CONFIG_PASSPHRASE or _FILE set
  aws         the AWS CLI v2 on PATH (the stack's kubeconfig runs `aws eks get-token`)
  credentials AWS credentials that STS accepts (`aws sts get-caller-identity`; AWS_PROFILE or the defaults)
  address     this machine's public address (checkip.amazonaws.com), unless the stack sets apiPublicAccessCidrs
  quota       the On-Demand vCPU quota of the stack's GPU family in its region, against what its nodes need

Nothing is created or changed; the quota check reads Service Quotas, EC2 instances and capacity reservations.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from tools.stack_name import add_stack_flag
from workload import cli
from workload.aws_profile import aws_profile

REPO = Path(__file__).resolve().parents[1]
MIN_PYTHON = (3, 11)
# `pulumi whoami` and `--version` answer in well under a second; a CLI that hangs (a prompt, a dead backend) is
# reported rather than waited on.
COMMAND_TIMEOUT_S = 30
SELF_MANAGED_BACKENDS = ("s3://", "gs://", "azblob://", "file://")
INSTALL_PULUMI = "install it: https://www.pulumi.com/docs/iac/download-install/ (curl -fsSL https://get.pulumi.com | sh)"
INSTALL_AWS = "install it: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    said: str
    """What was found (ok), or what to do (not ok)."""

    def line(self) -> str:
        return f"{'ok ' if self.ok else 'fix'}  {self.name:<11} {self.said}"


def run_command(argv: list[str]) -> tuple[int, str]:
    """(exit code, stdout and stderr) of a CLI; 127 when it is not on PATH."""
    if shutil.which(argv[0]) is None:
        return 127, ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"`{' '.join(argv)}` did not answer within {COMMAND_TIMEOUT_S} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    venv = REPO / ".venv"
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", False, f"Python {version}; the project needs 3.11 or newer: `bash scripts/setup.sh` "
                                      "makes .venv with one (PYTHON=python3.12 picks another)")
    if Path(sys.prefix).resolve() != venv.resolve():
        return Check("python", False, f"Python {version} from {sys.prefix}, not this repository's .venv: the Pulumi "
                                      "CLI runs the program in .venv (Pulumi.yaml); `bash scripts/setup.sh` makes it")
    return Check("python", True, f"Python {version} in {venv}")


def check_pulumi(run: Callable[[list[str]], tuple[int, str]]) -> list[Check]:
    code, out = run(["pulumi", "version"])
    if code == 127:
        return [Check("pulumi", False, f"no `pulumi` on PATH: {INSTALL_PULUMI}")]
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", out)
    if code or not match:
        return [Check("pulumi", False, f"`pulumi version` failed: {out.splitlines()[-1] if out else code}")]
    version = ".".join(match.groups())
    checks = [Check("pulumi", match.group(1) == "3", f"Pulumi CLI {version}" if match.group(1) == "3"
                    else f"Pulumi CLI {version}; this program needs 3.x: {INSTALL_PULUMI}")]
    code, out = run(["pulumi", "whoami", "--json"])
    try:
        who = json.loads(out) if code == 0 else None
    except json.JSONDecodeError:
        who = None
    if not isinstance(who, dict) or not who.get("url"):
        checks.append(Check("backend", False, "not logged in to a Pulumi backend: `pulumi login` (Pulumi Cloud), or "
                                              "`pulumi login s3://<bucket>` / `pulumi login --local` (self-managed)"))
        return checks
    url = who["url"]
    checks.append(Check("backend", True, f"{url} as {who.get('user', '?')}"))
    if url.startswith(SELF_MANAGED_BACKENDS):
        checks.append(check_passphrase())
    return checks


def check_passphrase() -> Check:
    """A self-managed backend encrypts the stack's secrets with a passphrase (Pulumi Cloud needs none)."""
    if os.environ.get("PULUMI_CONFIG_PASSPHRASE"):
        return Check("passphrase", True, "PULUMI_CONFIG_PASSPHRASE is set")
    path = os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
    if path and os.path.isfile(path):
        return Check("passphrase", True, f"PULUMI_CONFIG_PASSPHRASE_FILE={path}")
    if path:
        return Check("passphrase", False, f"PULUMI_CONFIG_PASSPHRASE_FILE={path}: no such file")
    return Check("passphrase", False, "a self-managed backend encrypts the stack's secrets (the kubeconfig, trainEnv) "
                                      "with a passphrase: export PULUMI_CONFIG_PASSPHRASE (or _FILE) before "
                                      "`pulumi stack init`, and keep it")


def check_aws_cli(run: Callable[[list[str]], tuple[int, str]]) -> Check:
    code, out = run(["aws", "--version"])
    if code == 127:
        return Check("aws", False, f"no `aws` on PATH (the kubeconfig runs `aws eks get-token`): {INSTALL_AWS}")
    match = re.search(r"aws-cli/(\d+)\.(\d+)\.(\d+)", out)
    if code or not match:
        return Check("aws", False, f"`aws --version` failed: {out.splitlines()[-1] if out else code}")
    version = ".".join(match.groups())
    if match.group(1) != "2":
        return Check("aws", False, f"AWS CLI {version}; docs/cluster-setup.md asks for v2: {INSTALL_AWS}")
    return Check("aws", True, f"AWS CLI {version}")


def stack_config(stack: str) -> dict:
    """The stack's settings: Pulumi.<stack>.yaml over Pulumi.yaml's defaults, keys without the project prefix
    (aws:* keys as they are)."""
    from infra.config import project_name, schema
    from tools.stack import stack_file_config

    settings = {key: spec.get("default") for key, spec in schema().items()}
    prefix = project_name() + ":"
    for key, value in stack_file_config(stack).items():
        settings[key[len(prefix):] if key.startswith(prefix) else key] = value
    return settings


def check_aws(aws, settings: dict) -> list[Check]:
    """Credentials, then the quota of the stack's GPU family (only with credentials that work)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tools.capacity.aws import check_credentials, describe_failure
    from tools.capacity.quotas import on_demand_quota, quota_usage, vcpus_of

    try:
        account = check_credentials(aws)
    except cli.CommandError as error:
        return [Check("credentials", False, f"{error}; {error.hint}" if error.hint else str(error))]
    checks = [Check("credentials", True, f"AWS account {account}")]
    region, instance_type, count = settings.get("aws:region"), settings["gpuInstanceType"], int(settings["gpuNodeCount"])
    if not region:
        return [*checks, Check("quota", False, "the stack sets no aws:region: `python -m tools.capacity ... "
                                               "--write-stack STACK` picks one")]
    try:
        quota = on_demand_quota(instance_type)
        needed = vcpus_of(aws.ec2(region), [instance_type]).get(instance_type, 0) * count
        usage = quota_usage(aws.ec2(region), aws.reservations(region), aws.quotas(region), quota)
    except (BotoCoreError, ClientError) as error:
        return [*checks, Check("quota", False, f"{region}: cannot be read ({describe_failure(error)}); the preview "
                                               "skips the check too, and `pulumi up` fails late if it is short")]
    said = (f"{quota.name} in {region}: {usage.headroom_vcpus} of {usage.limit_vcpus} vCPUs free, {needed} needed "
            f"({count} x {instance_type})")
    command = usage.increase_command(region, needed)
    return [*checks, Check("quota", command is None, said if command is None else f"{said}; ask: {command}")]


def check_address(settings: dict, read_address: Callable[[], str | None]) -> Check:
    from infra.aws.network import CHECKIP_URL

    if settings.get("apiPublicAccessCidrs"):
        return Check("address", True, f"apiPublicAccessCidrs {settings['apiPublicAccessCidrs']} (set in the stack)")
    address = read_address()
    if address is None:
        return Check("address", False, f"{CHECKIP_URL} did not answer with a public address (offline, a proxy?): "
                                       "`pulumi config set --path 'apiPublicAccessCidrs[0]' <your address>/32`")
    return Check("address", True, f"{address}, admitted to the API endpoint as {address}/32")


def main(argv: Sequence[str] | None = None, aws=None,
         run: Callable[[list[str]], tuple[int, str]] = run_command) -> int:
    parser = cli.parser("python -m tools.doctor", __doc__, check_failed="an item needs fixing (its `fix` line says how)")
    add_stack_flag(parser, default="dev", help="the stack whose region, GPU type and count are checked")
    parser.add_argument("--profile", type=aws_profile,
                        help="AWS profile; unset: AWS_PROFILE or the default credentials")
    args = parser.parse_args(argv)
    settings = stack_config(args.stack)
    from infra.aws.network import deployer_public_ip
    from tools.capacity.aws import Aws

    checks = [check_python(), *check_pulumi(run), check_aws_cli(run),
              *check_aws(aws or Aws(args.profile), settings), check_address(settings, deployer_public_ip)]
    for check in checks:
        print(check.line(), flush=True)
    failed = [check.name for check in checks if not check.ok]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} ok" + (f"; to fix: {', '.join(failed)}" if failed else
                                                                   f": ready for `pulumi up` on stack {args.stack}"))
    return cli.CHECK_FAILED if failed else cli.OK


if __name__ == "__main__":
    sys.exit(cli.run(main))
