"""`monitoring: cloudwatch`: the CloudWatch Observability EKS add-on (Container Insights with its GPU and EFA metrics;
infra/kubernetes/monitoring.py says when to choose it), its agent's IAM role through EKS Pod Identity, and its
namespace held as the others are: Pod Security labels and NetworkPolicies (monitoring_security.py says which).

The namespace is created here, with its labels and policies, before the add-on: EKS creates the add-on's namespace
only when it is missing, so the add-on's first pods are admitted under the labels and start behind the default deny.
"""
from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.aws import addon_pins
from infra.aws.pod_identity import trust_policy
from infra.kubernetes import monitoring_security as security
from infra.kubernetes.monitoring import (
    CLOUDWATCH_ADDON,
    CLOUDWATCH_AGENT_POLICY,
    CLOUDWATCH_NAMESPACE,
    CLOUDWATCH_SERVICE_ACCOUNT,
)


class CloudWatchMonitoring(pulumi.ComponentResource):
    """The CloudWatch Observability add-on, its agent's IAM role through EKS Pod Identity (the nodes' roles carry no
    CloudWatch rights), its namespace's labels and NetworkPolicies; metrics and dashboards are Container Insights'
    own, in the CloudWatch console."""

    def __init__(self, name: str, *, provider: k8s.Provider, cluster_name: pulumi.Input[str], eks_cluster_name: str,
                 eks_cluster_arn: str, control_plane_cidrs: tuple[str, ...], vpc_cidr: str, tags: dict[str, str],
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("raytrain:infra:CloudWatchMonitoring", name, None, opts)
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata={
            "name": CLOUDWATCH_NAMESPACE,
            "labels": security.namespace_labels(security.CLOUDWATCH_ENFORCE, security.CLOUDWATCH_WARN)},
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on)))
        policies = [
            k8s.networking.v1.NetworkPolicy(f"{name}-{policy['metadata']['name']}", metadata=policy["metadata"],
                                            spec=policy["spec"],
                                            opts=pulumi.ResourceOptions(parent=self, provider=provider,
                                                                        depends_on=[namespace]))
            for policy in security.cloudwatch_network_policies(
                namespace=CLOUDWATCH_NAMESPACE, control_plane_cidrs=control_plane_cidrs, vpc_cidr=vpc_cidr)]
        role = aws.iam.Role(f"{name}-agent", assume_role_policy=trust_policy(
            eks_cluster_arn, eks_cluster_name, CLOUDWATCH_NAMESPACE, CLOUDWATCH_SERVICE_ACCOUNT), tags=tags,
            opts=pulumi.ResourceOptions(parent=self))
        attachment = aws.iam.RolePolicyAttachment(f"{name}-agent-policy", role=role.name,
                                                  policy_arn=CLOUDWATCH_AGENT_POLICY,
                                                  opts=pulumi.ResourceOptions(parent=role))
        self.addon = aws.eks.Addon(
            f"{name}-addon", cluster_name=cluster_name, addon_name=CLOUDWATCH_ADDON,
            addon_version=addon_pins.CLOUDWATCH_VERSION,
            pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
                role_arn=role.arn, service_account=CLOUDWATCH_SERVICE_ACCOUNT)],
            resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE", tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attachment, namespace, *policies, *depends_on]))
        self.dashboard_command: pulumi.Output[str] = self.addon.id.apply(
            lambda _: "AWS console: CloudWatch > Insights > Container Insights (cluster "
                      f"{eks_cluster_name}; GPU and EFA views under Performance monitoring)")
        self.register_outputs({"dashboard_command": self.dashboard_command})
