"""Who may act as the stack's roles and use its key, as pure functions: the EKS cluster role's confused-deputy
conditions, the Ray pods' role pinned to this stack's cluster, and the secrets key's explicit key policy.

- The cluster role. EKS assumes it as eks.amazonaws.com; AWS recommends aws:SourceArn (the cluster's ARN) and
  aws:SourceAccount in that trust policy, so that EKS acting for another cluster or account cannot be made to use it
  (EKS user guide, "Cross-service confused deputy prevention in Amazon EKS", whose example is this exact pair; the IAM
  user guide, "The confused deputy problem"). pulumi-eks creates the role itself (nodejs/eks/servicerole.ts: one
  statement, Principal {Service: [eks.amazonaws.com]}, no Condition); a Pulumi transform on the eks.Cluster component
  adds the conditions to that child as it is registered. An assume-role policy changes in place, so a live cluster
  keeps its role.
- The Ray pods' role. EKS Pod Identity assumes it as pods.eks.amazonaws.com and tags the session with eks-cluster-arn,
  eks-cluster-name, kubernetes-namespace, kubernetes-service-account, kubernetes-pod-name and kubernetes-pod-uid (EKS
  user guide, "Create IAM role with trust policy required by EKS Pod Identity", awsdocs/amazon-eks-user-guide#1047).
  The trust policy pins the cluster's ARN (account, region and name: two stacks of one account never share it) with the
  namespace and service account. AWS documents no aws:SourceArn for Pod Identity's AssumeRole, and a condition on a key
  the request lacks never matches, so none is added there.
- The secrets key. Its policy is written out instead of left to KMS's default: the account's IAM decides who uses the
  key (the default key policy's one statement, AWS KMS developer guide "Default key policy": without it only the key
  policy could grant access, and a mistake would lock the account out of its own key), and the principal that creates
  the stack administers it (terraform-aws-eks makes data.aws_iam_session_context.current.issuer_arn its key
  administrator the same way). Use
  of the key by the cluster role is granted in the role's own policy (infra/aws/cluster.py, cluster_role_policy), which
  this statement lets count.
"""
from __future__ import annotations

import json

EKS_SERVICE_PRINCIPAL = "eks.amazonaws.com"
# The key administrator's actions of the AWS KMS console's default key policy ("Allows key administrators to
# administer the KMS key"), without use of the key for cryptography.
KEY_ADMIN_ACTIONS = (
    "kms:Create*", "kms:Describe*", "kms:Enable*", "kms:List*", "kms:Put*", "kms:Update*", "kms:Revoke*",
    "kms:Disable*", "kms:Get*", "kms:Delete*", "kms:TagResource", "kms:UntagResource", "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion", "kms:RotateKeyOnDemand",
)


def eks_cluster_arn(*, partition: str, region: str, account_id: str, cluster_name: str) -> str:
    """arn:PARTITION:eks:REGION:ACCOUNT:cluster/NAME, known at preview (the name is the stack's own)."""
    return f"arn:{partition}:eks:{region}:{account_id}:cluster/{cluster_name}"


def _services(statement: dict) -> list[str]:
    services = (statement.get("Principal") or {}).get("Service") or []
    return [services] if isinstance(services, str) else list(services)


def with_source_conditions(policy: str, *, service: str, account_id: str, source_arn: str) -> str:
    """`policy` (an assume-role policy, JSON) with aws:SourceAccount and aws:SourceArn on every statement that lets
    `service` assume the role; other statements and conditions as they were."""
    document = json.loads(policy)
    for statement in document["Statement"]:
        if statement.get("Effect") == "Allow" and service in _services(statement):
            condition = statement.setdefault("Condition", {})
            condition.setdefault("StringEquals", {})["aws:SourceAccount"] = account_id
            condition.setdefault("ArnEquals", {})["aws:SourceArn"] = source_arn
    return json.dumps(document)


def pod_identity_conditions(*, cluster_arn: str, cluster_name: str, namespace: str, service_account: str) -> dict:
    """The session tags EKS Pod Identity sets, pinned to this stack's cluster and the Ray pods' service account."""
    return {"StringEquals": {
        "aws:RequestTag/eks-cluster-arn": cluster_arn,
        "aws:RequestTag/eks-cluster-name": cluster_name,
        "aws:RequestTag/kubernetes-namespace": namespace,
        "aws:RequestTag/kubernetes-service-account": service_account,
    }}


def secrets_key_policy(*, partition: str, account_id: str, administrator: str) -> str:
    """The secrets key's policy: the account's IAM policies count (so the cluster role's grant works and nobody is
    locked out), and `administrator` (the principal that runs `pulumi up`) manages the key."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountIamPoliciesGrantUse", "Effect": "Allow",
             "Principal": {"AWS": f"arn:{partition}:iam::{account_id}:root"}, "Action": "kms:*", "Resource": "*"},
            {"Sid": "StackCreatorAdministers", "Effect": "Allow", "Principal": {"AWS": administrator},
             "Action": list(KEY_ADMIN_ACTIONS), "Resource": "*"},
        ],
    })
