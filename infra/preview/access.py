"""Who runs the preview and who will administer the cluster: the deployer's AWS identity, the principal behind
it, and the EKS access entries that follow (clusterAdmins)."""
from __future__ import annotations

from typing import Any

import pulumi_aws as aws

from infra.config import AwsIdentity, StackConfig, arn_parts, config_error


def aws_identity(aws_config: Any) -> AwsIdentity:
    """aws:profile and the role of aws:assumeRoles, which the kubeconfig and the dynamic providers must use too;
    refused where they cannot (pulumi-eks writes one `--role` into the kubeconfig's `aws eks get-token`)."""
    if aws_config.get("assumeRole"):
        raise config_error(
            "aws:assumeRole", "pulumi-aws 6's; this project's pulumi-aws 7 reads only aws:assumeRoles "
            "(a list), so the stack would run as the ambient identity. Allowed: aws:assumeRoles with one role, "
            "e.g. [{roleArn: arn:aws:iam::123456789012:role/deployer}]")
    roles = aws_config.get_object("assumeRoles") or []
    profile = aws_config.get("profile") or None
    if not roles:
        return AwsIdentity(profile=profile)
    if len(roles) > 1:
        raise ValueError(
            f"config key 'aws:assumeRoles': a chain of {len(roles)} roles cannot reach the kubeconfig, whose "
            "`aws eks get-token --role` assumes one role from the ambient credentials, so Helm and the RayCluster "
            "would get 401. Allowed: one role, or an aws:profile whose own AWS config chains the roles")
    role = roles[0]
    if not role.get("roleArn"):
        raise ValueError("config key 'aws:assumeRoles': the role has no roleArn; "
                         "allowed: [{roleArn: arn:aws:iam::...}]")
    if role.get("externalId"):
        raise ValueError(
            "config key 'aws:assumeRoles': `aws eks get-token` in the kubeconfig cannot pass the role's externalId, "
            "so Helm and the RayCluster would get 401. Allowed: a role without externalId, or an aws:profile that "
            "sets role_arn and external_id in its AWS config")
    return AwsIdentity(profile=profile, role_arn=role["roleArn"])


def principal_of(caller_arn: str) -> str:
    """The IAM principal behind a caller: an assumed-role session (arn:aws:sts::A:assumed-role/ROLE/SESSION) is its
    role, arn:aws:iam::A:role/ROLE; a user is itself."""
    partition, account, resource = arn_parts(caller_arn)
    if resource.startswith("assumed-role/"):
        return f"arn:{partition}:iam::{account}:role/{resource.split('/')[1]}"
    return caller_arn


def creator_of(caller_arn: str) -> str:
    """The IAM principal behind the caller with its path (a role's session ARN shows none): what EKS makes the
    bootstrap cluster admin and the key policy names (aws.iam.get_session_context, as terraform-aws-eks does for its
    key administrators)."""
    return aws.iam.get_session_context(arn=caller_arn).issuer_arn or principal_of(caller_arn)


def _same_principal(a: str, b: str) -> bool:
    """Equal but for an IAM path (role/team/ROLE is ROLE to an assumed-role session, which shows no path)."""
    def key(arn: str) -> tuple[str, str, str]:
        _, account, resource = arn_parts(arn)
        kind, _, rest = resource.partition("/")
        return account, kind, rest.rsplit("/", 1)[-1]
    return key(a) == key(b)


def check_access_entries(cfg: StackConfig, caller_arn: str) -> None:
    """EKS gives the principal that creates the cluster an access entry of its own (pulumi-eks always sets
    bootstrapClusterCreatorAdminPermissions), and a second entry for it fails the cluster's creation with
    ResourceInUseException, twenty minutes in."""
    creator = principal_of(caller_arn)
    partition = arn_parts(caller_arn)[0]  # the stack's: its access policies are arn:<partition>:eks::aws:...
    for key, principals in (("clusterAdmins", cfg.cluster_admins), ("clusterViewers", cfg.cluster_viewers)):
        for arn in principals:
            if arn_parts(arn)[0] != partition:  # IAM principals exist in one partition; EKS refuses another's
                raise ValueError(f"config key {key!r}: {arn} is in the {arn_parts(arn)[0]} partition and the stack "
                                 f"deploys in {partition} (aws, aws-cn for cn-*, aws-us-gov for us-gov-* regions), "
                                 f"where no such principal exists; allowed: arn:{partition}:iam::ACCOUNT:role/NAME")
            if _same_principal(arn, creator):
                raise ValueError(
                    f"config key {key!r}: {arn} is the identity that runs `pulumi up` ({creator}), which EKS already "
                    "makes the cluster's admin as its creator, and a second access entry for it fails; allowed: "
                    "other principals")
