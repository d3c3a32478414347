"""The stack's AWS identity, for code that calls AWS outside the AWS provider (the capacity reservation's provider).

A dynamic provider runs in Pulumi's provider process with boto3, not through pulumi-aws, so it does not get the
stack's `aws:profile` and `aws:assumeRoles` for free. `StackIdentity` carries them (read at preview with
`from_stack_config`), `session` builds the same identity with boto3 (the profile, then the role through STS
AssumeRole), and `check_account` refuses to go on when that identity is not in the account the stack was
previewed in (`aws.get_caller_identity()` through the stack's own AWS provider). A reservation made with other
credentials would bill in an account nobody looks at, and a delete with them would find nothing and report it gone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

# What the role's sessions are called in CloudTrail.
ROLE_SESSION_NAME = "raytrain-eks"


class AccountMismatch(RuntimeError):
    """The provider's credentials reach another AWS account than the one the stack was previewed in."""


@dataclass(frozen=True)
class StackIdentity:
    """Who the stack acts as: aws:profile (else the environment's credentials), then aws:assumeRoles' role, and
    the account that reaches."""

    profile: str | None = None
    role_arn: str | None = None
    account_id: str | None = None
    """What `aws.get_caller_identity()` answered at preview; None skips the check (state written before it)."""

    @classmethod
    def from_stack_config(cls, account_id: str | None = None) -> StackIdentity:
        """aws:profile and aws:assumeRoles as the stack's AWS provider (pulumi-aws 7) reads them, refused where the
        rest of the stack could not follow: pulumi-eks writes one `--role` into the kubeconfig's
        `aws eks get-token`, which can neither chain roles nor pass an externalId."""
        aws = pulumi.Config("aws")
        profile = aws.get("profile") or None
        if aws.get("assumeRole"):
            raise ValueError(
                "config key 'aws:assumeRole' is pulumi-aws 6's; this project's pulumi-aws 7 reads only "
                "aws:assumeRoles (a list), so the stack would run as the ambient identity. Allowed: aws:assumeRoles "
                "with one role, e.g. [{roleArn: arn:aws:iam::123456789012:role/deployer}]")
        roles = aws.get_object("assumeRoles") or []
        if not roles:
            return cls(profile, None, account_id)
        if len(roles) > 1 or not isinstance(roles[0], dict) or not roles[0].get("roleArn"):
            raise ValueError(
                f"config key 'aws:assumeRoles': {roles!r} must be one role with a roleArn, e.g. "
                "[{roleArn: arn:aws:iam::123456789012:role/deployer}] (a chain cannot reach the kubeconfig's "
                "`aws eks get-token --role`; an aws:profile whose own AWS config chains them can)")
        if roles[0].get("externalId"):
            raise ValueError(
                "config key 'aws:assumeRoles': `aws eks get-token` in the kubeconfig cannot pass the role's "
                "externalId. Allowed: a role without externalId, or an aws:profile that sets role_arn and "
                "external_id in its AWS config")
        return cls(profile, roles[0]["roleArn"], account_id)

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> StackIdentity:
        return cls(props.get("profile") or None, props.get("role_arn") or None, props.get("account_id") or None)

    def describe(self) -> str:
        return (f"profile {self.profile!r}" if self.profile else "the environment's credentials") + (
            f", then role {self.role_arn}" if self.role_arn else "")


def session(identity: StackIdentity, region: str | None):
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


def check_account(boto_session, identity: StackIdentity) -> str:
    """The account `boto_session` is in; AccountMismatch when it is not the stack's."""
    account = boto_session.client("sts").get_caller_identity()["Account"]
    if identity.account_id and account != identity.account_id:
        raise AccountMismatch(
            f"these credentials ({identity.describe()}) reach AWS account {account}, but the stack was previewed in "
            f"account {identity.account_id}; nothing was changed. Use the credentials of the stack's AWS provider "
            "(aws:profile, aws:assumeRoles), or run `pulumi up` again so the preview reads the account anew")
    return account
