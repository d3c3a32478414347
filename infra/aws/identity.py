"""The stack's AWS identity for code that calls AWS outside the AWS provider: the capacity reservation's provider,
and the preview's look-up of an existing reservation.

A dynamic provider runs in Pulumi's provider process with boto3, not through pulumi-aws, so it does not get the
stack's `aws:profile` and `aws:assumeRoles` for free. It is given them as an `AwsIdentity` (read and validated at
preview by infra/preview/feasibility.py), `session` builds the same identity with boto3 (the profile, then the role
through STS AssumeRole), and `check_account` refuses to go on when that identity is not in the account the stack was
previewed in. A reservation made with other credentials would bill in an account nobody looks at, and a delete with
them would find nothing and report it gone.
"""
from __future__ import annotations

from typing import Any

from infra.config import AwsIdentity

# What the role's sessions are called in CloudTrail.
ROLE_SESSION_NAME = "raytrain-eks"


class AccountMismatch(RuntimeError):
    """The provider's credentials reach another AWS account than the one the stack was previewed in."""


def identity_from_props(props: dict[str, Any]) -> AwsIdentity:
    return AwsIdentity(profile=props.get("profile") or None, role_arn=props.get("role_arn") or None,
                       account_id=props.get("account_id") or None)


def describe(identity: AwsIdentity) -> str:
    return (f"profile {identity.profile!r}" if identity.profile else "the environment's credentials") + (
        f", then role {identity.role_arn}" if identity.role_arn else "")


def session(identity: AwsIdentity, region: str | None):
    """A boto3 session with the stack's identity: its profile (else the environment), then its role assumed."""
    import boto3

    # A fresh session per call: boto3's default session is not thread-safe, and the provider process may serve
    # several resources at once.
    current = boto3.session.Session(profile_name=identity.profile, region_name=region)
    if not identity.role_arn:
        return current
    credentials = current.client("sts").assume_role(
        RoleArn=identity.role_arn, RoleSessionName=ROLE_SESSION_NAME)["Credentials"]
    return boto3.session.Session(
        aws_access_key_id=credentials["AccessKeyId"], aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"], region_name=region)


def check_account(boto_session, identity: AwsIdentity) -> str:
    """The account `boto_session` is in; AccountMismatch when it is not the stack's."""
    account = boto_session.client("sts").get_caller_identity()["Account"]
    if identity.account_id and account != identity.account_id:
        raise AccountMismatch(
            f"these credentials ({describe(identity)}) reach AWS account {account}, but the stack was previewed in "
            f"account {identity.account_id}; nothing was changed. Use the credentials of the stack's AWS provider "
            "(aws:profile, aws:assumeRoles), or run `pulumi up` again so the preview reads the account anew")
    return account
