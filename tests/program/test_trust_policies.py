"""Who may act as the stack's roles, use its key and administer its cluster (issue 22, items 9 and 12).

Policies are judged by tests/support/iam_policy.py (conditions honoured, explicit deny first) on the requests AWS makes:
EKS assuming the cluster role (EKS user guide, "Cross-service confused deputy prevention in Amazon EKS": aws:SourceArn
is the cluster's ARN, aws:SourceAccount its account), EKS Pod Identity assuming the pods' role with its session tags
(EKS user guide, "Create IAM role with trust policy required by EKS Pod Identity"), and KMS key-policy checks.
"""
from __future__ import annotations

import json

import pulumi

from infra.aws.cluster import cluster_role_trust
from tests.support.fake_aws import ACCOUNT_ID, DEPLOYER_ROLE_ARN
from tests.support.iam_policy import Request, decide
from tests.support.pulumi_mocks import program, ray_pods_role, run_program

CLUSTER_ARN = f"arn:aws:eks:us-west-2:{ACCOUNT_ID}:cluster/ray-train"  # the dev stack's, as EKS names it
# pulumi-eks's cluster role trust (nodejs/eks/servicerole.ts, with cluster.ts's assumeRoleActions), verbatim.
PULUMI_EKS_CLUSTER_ROLE_TRUST = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Action": ["sts:AssumeRole", "sts:TagSession"], "Effect": "Allow",
    "Principal": {"Service": ["eks.amazonaws.com"]}}]})
NODE_ROLE_TRUST = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})


def _transformed(type_: str, props: dict) -> dict:
    transform = cluster_role_trust(account_id=ACCOUNT_ID, cluster_arn=CLUSTER_ARN)
    result = transform(pulumi.ResourceTransformArgs(True, type_, "ray-train-eks-eksRole-role", props,
                                                    pulumi.ResourceOptions()))
    return props if result is None else result.props


def test_the_cluster_role_admits_eks_only_for_this_cluster():
    assert program("dev").one("eks:index:Cluster").transforms == 1, "the transform rides on the eks.Cluster"
    trust = _transformed("aws:iam/role:Role", {"assumeRolePolicy": PULUMI_EKS_CLUSTER_ROLE_TRUST,
                                               "description": "Allows EKS to manage clusters on your behalf."})
    policy = trust["assumeRolePolicy"]

    def eks_assumes(context: dict) -> str:
        return decide([policy], Request("sts:AssumeRole", context=context, principal_service="eks.amazonaws.com"))

    assert eks_assumes({"aws:SourceAccount": ACCOUNT_ID, "aws:SourceArn": CLUSTER_ARN}) == "Allow"
    assert eks_assumes({"aws:SourceAccount": ACCOUNT_ID,
                        "aws:SourceArn": CLUSTER_ARN.replace("ray-train", "ray-train-g6e")}) == "ImplicitDeny", \
        "EKS acting for another cluster of the account"
    assert eks_assumes({"aws:SourceAccount": "210987654321",
                        "aws:SourceArn": CLUSTER_ARN.replace(ACCOUNT_ID, "210987654321")}) == "ImplicitDeny"
    assert eks_assumes({}) == "ImplicitDeny", "a request without the keys is refused"
    assert trust["description"] == "Allows EKS to manage clusters on your behalf.", "other inputs pass unchanged"
    assert _transformed("aws:iam/role:Role", {"assumeRolePolicy": NODE_ROLE_TRUST})["assumeRolePolicy"] \
        == NODE_ROLE_TRUST, "pulumi-eks's other roles are left alone"
    assert _transformed("aws:eks/cluster:Cluster", {"name": "ray-train"}) == {"name": "ray-train"}


def test_the_pods_role_admits_pod_identity_only_for_this_stacks_cluster_and_service_account():
    run = program("dev", (("trainStoragePath", "s3://ckpt-bucket/runs/dev"),))
    role = ray_pods_role(run)
    policy = role.inputs["assumeRolePolicy"]
    tags = {"aws:RequestTag/eks-cluster-arn": CLUSTER_ARN, "aws:RequestTag/eks-cluster-name": "ray-train",
            "aws:RequestTag/kubernetes-namespace": "ray", "aws:RequestTag/kubernetes-service-account": "ray-train-pods",
            "aws:RequestTag/kubernetes-pod-name": "ray-train-head-x", "aws:RequestTag/kubernetes-pod-uid": "u-1"}

    def pod_identity_assumes(**changed: str) -> str:
        context = {**tags, **{f"aws:RequestTag/{k.replace('_', '-')}": v for k, v in changed.items()}}
        return decide([policy], Request("sts:AssumeRole", context=context, principal_service="pods.eks.amazonaws.com"))

    assert pod_identity_assumes() == "Allow"
    # Same cluster name, other region or account: the stacks that once all were "ray-train".
    assert pod_identity_assumes(eks_cluster_arn=CLUSTER_ARN.replace("us-west-2", "us-east-1")) == "ImplicitDeny"
    assert pod_identity_assumes(eks_cluster_arn=CLUSTER_ARN.replace(ACCOUNT_ID, "210987654321")) == "ImplicitDeny"
    assert pod_identity_assumes(kubernetes_service_account="default") == "ImplicitDeny"
    assert pod_identity_assumes(kubernetes_namespace="kube-system") == "ImplicitDeny"


def test_the_secrets_key_has_an_explicit_policy_the_account_governs():
    key = program("dev").one("aws:kms/key:Key")
    policy = key.inputs.get("policy")
    assert policy, "the key policy is declared, not KMS's implicit default"
    root = f"arn:aws:iam::{ACCOUNT_ID}:root"
    statements = json.loads(policy)["Statement"]
    principals = {s["Principal"]["AWS"]: s for s in statements}
    assert set(principals) == {root, DEPLOYER_ROLE_ARN}, f"who the key policy names: {sorted(principals)}"
    assert decide([{"Statement": [principals[root]]}], Request("kms:Decrypt")) == "Allow", \
        "the account's IAM policies count (the cluster role's grant, infra/aws/cluster.py), so no lockout"
    creator = {"Statement": [principals[DEPLOYER_ROLE_ARN]]}
    assert decide([creator], Request("kms:PutKeyPolicy")) == "Allow" and \
        decide([creator], Request("kms:ScheduleKeyDeletion")) == "Allow", "the creator administers the key"
    assert decide([creator], Request("kms:Decrypt")) == "ImplicitDeny", "administering is not using"


def test_the_cluster_admins_output_names_the_creator_and_the_named_admins():
    admin = f"arn:aws:iam::{ACCOUNT_ID}:role/platform-admin"
    exports = run_program("dev", {"clusterAdmins": [admin]}).exports
    assert exports["clusterAdmins"] == {"creator": DEPLOYER_ROLE_ARN, "named": [admin]}, exports["clusterAdmins"]
