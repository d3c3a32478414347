"""The stack's AWS identity, for code that calls AWS outside the AWS provider (the dynamic providers).

A dynamic provider runs in Pulumi's provider process with boto3, not through pulumi-aws, so it does not get the
stack's `aws:profile` and `aws:assumeRoles` for free. `StackIdentity` carries them (read at preview with
`from_stack_config`), `session` builds the same identity with boto3 (the profile, then each role assumed in
turn through STS, as pulumi-aws chains them), and `check_account` refuses to go on when that identity is not in
the account the stack was previewed in (`aws.get_caller_identity()` through the stack's own AWS provider). A
reservation made with the wrong credentials would otherwise bill in an account nobody looks at, and a delete
with them would find nothing and report it gone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi

# pulumi-aws 7 reads `aws:assumeRoles` (a list: roles assumed in turn); 6.x and older stacks say `aws:assumeRole`
# (one object). Either is honoured, with the same keys.
ASSUME_ROLES_KEYS = ("assumeRoles", "assumeRole")
# The keys of an assumed role passed on to STS AssumeRole. Others (duration, policy, tags...) are refused at
# preview rather than silently dropped: a role whose trust policy wants them would fail later and less clearly.
ASSUME_ROLE_FIELDS = {"roleArn": "RoleArn", "sessionName": "RoleSessionName", "externalId": "ExternalId"}
# pulumi-aws's own default when no sessionName is given is a random one; a fixed name makes CloudTrail readable.
DEFAULT_SESSION_NAME = "raytrain-eks-dynamic-provider"
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")


class AccountMismatch(RuntimeError):
    """The provider's credentials reach another AWS account than the one the stack was previewed in."""


@dataclass(frozen=True)
class StackIdentity:
    """How to reach the stack's AWS account: its profile, the roles to assume (in order) and the account id."""

    profile: str | None = None
    assume_roles: list[dict[str, str]] = field(default_factory=list)
    """Each {"roleArn", "sessionName", "externalId"}, the keys as the stack's config spells them."""
    account_id: str | None = None
    """What `aws.get_caller_identity()` answered at preview; None skips the check (state written before it)."""

    @classmethod
    def from_stack_config(cls, account_id: pulumi.Input[str] | None = None) -> StackIdentity:
        """`aws:profile` and `aws:assumeRoles` (or `aws:assumeRole`) of the stack, validated."""
        aws = pulumi.Config("aws")
        roles: list[dict[str, str]] = []
        for key in ASSUME_ROLES_KEYS:
            if value := aws.get_object(key):
                roles = check_assume_roles(f"aws:{key}", value if isinstance(value, list) else [value])
                break
        return cls(aws.get("profile") or None, roles, account_id)

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> StackIdentity:
        return cls(props.get("profile") or None, [dict(role) for role in props.get("assume_roles") or []],
                   props.get("account_id") or None)

    def as_props(self) -> dict[str, Any]:
        return {"profile": self.profile, "assume_roles": self.assume_roles, "account_id": self.account_id}


def check_assume_roles(key: str, roles: list[Any]) -> list[dict[str, str]]:
    """The assumed roles as the stack's config gives them; a ValueError naming `key` for anything else."""
    checked = []
    for index, role in enumerate(roles):
        if not isinstance(role, dict) or not _ROLE_ARN.match(str(role.get("roleArn", ""))):
            raise ValueError(f"config key {key!r}: entry {index} must be an object with a roleArn like "
                             f"arn:aws:iam::123456789012:role/NAME, got {role!r}")
        unknown = sorted(set(role) - set(ASSUME_ROLE_FIELDS))
        if unknown:
            raise ValueError(f"config key {key!r}: entry {index} sets {unknown}, which the capacity reservation's "
                             f"provider cannot pass on; supported: {list(ASSUME_ROLE_FIELDS)}")
        checked.append({name: str(value) for name, value in role.items()})
    return checked


def session(identity: StackIdentity, region: str | None):
    """A boto3 session with the stack's identity: its profile (else the environment), then each role assumed."""
    import boto3

    # A fresh session per call: boto3's default session is not thread-safe, and the provider process may serve
    # several resources at once.
    current = boto3.session.Session(profile_name=identity.profile, region_name=region)
    for role in identity.assume_roles:
        request = {ASSUME_ROLE_FIELDS[name]: value for name, value in role.items()}
        request.setdefault("RoleSessionName", DEFAULT_SESSION_NAME)
        credentials = current.client("sts").assume_role(**request)["Credentials"]
        current = boto3.session.Session(
            aws_access_key_id=credentials["AccessKeyId"], aws_secret_access_key=credentials["SecretAccessKey"],
            aws_session_token=credentials["SessionToken"], region_name=region)
    return current


def check_account(boto_session, identity: StackIdentity) -> str:
    """The account `boto_session` is in; AccountMismatch when it is not the stack's."""
    account = boto_session.client("sts").get_caller_identity()["Account"]
    if identity.account_id and account != identity.account_id:
        how = (f"profile {identity.profile!r}" if identity.profile else "the environment's credentials") + (
            f", then role {identity.assume_roles[-1]['roleArn']}" if identity.assume_roles else "")
        raise AccountMismatch(
            f"these credentials ({how}) reach AWS account {account}, but the stack was previewed in account "
            f"{identity.account_id}; nothing was changed. Use the credentials of the stack's AWS provider "
            "(aws:profile, aws:assumeRoles), or run `pulumi up` again so the preview reads the account anew")
    return account
