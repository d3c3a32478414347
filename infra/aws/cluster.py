"""The EKS control plane (through pulumi-eks), its core add-ons and the system node group.

Access is by EKS access entries (authentication mode API, no aws-auth ConfigMap). The deployer's entry is the
one EKS creates for the cluster creator: pulumi-eks always sets bootstrapClusterCreatorAdminPermissions=true,
and declaring a second entry for the same principal fails with ResourceInUseException. Managed node groups
get their node-role entries from EKS itself.

The kubeconfig authenticates as the creator too, and must carry the stack's AWS identity, or `aws eks get-token`
runs as whatever credentials the environment has, which hold no access entry: Helm, the RayCluster and the dynamic
resources would get 401 a quarter of an hour into `up`, with the node groups billing. pulumi-eks's `kubeconfig` output
does not carry it: createCore builds two kubeconfigs and returns `kubeconfigWithoutProfile`, keeping the one with
`--profile` for its own internal provider (generateKubeconfig(..., includeProfile) in pulumi/pulumi-eks
nodejs/eks/cluster/cluster.ts; pulumi/pulumi-eks#1426, #1207). So the program asks for its own,
`Cluster.get_kubeconfig(profile_name=aws:profile, role_arn=aws:assumeRoles' role)` (the same file's getKubeconfig,
which writes `--role` and then `--profile`), and uses it for its Kubernetes provider, the GPU gate, the job and the
`kubeconfig` output.

The control plane's security settings live here too (docs/security.md lists them): the API endpoint's
public side open only to named CIDRs and the deployer's own address, private access on; api, audit and authenticator
logs into a log group with a retention; Kubernetes Secrets envelope-encrypted with a customer-managed KMS key;
named admins and viewers as access entries; the VPC CNI's network-policy agent; the EKS Pod Identity agent.
"""
from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from infra.aws import trust
from infra.aws.node_labels import GPU_TOLERATION, SYSTEM_NODE_SELECTOR
from infra.config import AwsIdentity, StackConfig, arn_parts
from infra.config.schema import warn

SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
# The Ray head runs the training image (the DLC: tens of GiB, and containerd keeps both the compressed layers and
# the unpacked snapshot) next to the add-ons' images; EKS's default 20 GiB, or 50, fills up and evicts the head.
SYSTEM_DISK_GIB = 100
ROOT_DEVICE_NAME = "/dev/xvda"  # the AL2023 EKS AMIs' root device
# 1: a container's packets to IMDS cross one more hop (the pod's veth) than the node's own, so with a limit of 1 only
# the node and host-network pods (aws-node, kube-proxy, the Pod Identity agent) get an IMDSv2 token, and no pod can
# act as the node (EKS Best Practices, IAM: "Restrict access to the instance profile assigned to the worker node").
# The Ray pods get their own AWS credentials through EKS Pod Identity (infra/aws/pod_identity.py).
IMDS_HOP_LIMIT = 1

# What a node needs and no more, per the EKS user guide's "Amazon EKS node IAM role": the kubelet's EC2 reads and the
# Pod Identity agent's eks-auth:AssumeRoleForPodIdentity (AmazonEKSWorkerNodePolicy), image pulls
# (AmazonEC2ContainerRegistryPullOnly, narrower than ReadOnly), and the VPC CNI's ENI calls, which aws-node makes with
# the node's role from the host network. Moving those to a role of the vpc-cni add-on's own would take them off the
# node too; it is not done here because aws-node must have them before any node is Ready, which cannot be tried here.
# Checkpoint access is the Ray pods' own role, not the nodes'.
NODE_POLICY_ARNS = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)

# The control-plane logs a security review asks for (CIS EKS 2.1.1; terraform-aws-eks enables the same three by
# default). controllerManager and scheduler add volume, not an audit trail. Ingestion bills per GB, audit the most.
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator")
# EKS writes control-plane logs to this group, and creates it without a retention if it does not exist yet.
CONTROL_PLANE_LOG_GROUP = "/aws/eks/{cluster_name}/cluster"
# EKS access policies for clusterAdmins and clusterViewers (arn:<partition>:eks::aws:cluster-access-policy/NAME).
ADMIN_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"
VIEW_ACCESS_POLICY = "AmazonEKSViewPolicy"


def root_volume(size_gib: int,
                performance: tuple[int, int] | None = None) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """A node's root volume: gp3 and encrypted (EKS's own launch template leaves encryption to the account), at gp3's
    baseline (125 MiB/s, 3000 IOPS) unless `performance` gives (throughput MiB/s, IOPS)."""
    throughput, iops = performance or (None, None)
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name=ROOT_DEVICE_NAME,
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib, volume_type="gp3", encrypted="true", delete_on_termination="true",
            throughput=throughput, iops=iops),
    )


def instance_metadata() -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    """IMDS settings of every node's launch template (system and GPU)."""
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=IMDS_HOP_LIMIT)


def node_tag_specifications(tags: dict[str, str], name: str) -> list[aws.ec2.LaunchTemplateTagSpecificationArgs]:
    """The stack's tags on what a node launches (its instance, volumes and network interfaces)."""
    return [aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags={**tags, "Name": name})
            for kind in ("instance", "volume", "network-interface")]


def node_role(name: str, *, tags: dict[str, str], parent: pulumi.Resource) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
    """An EC2 instance role for a managed node group, and its policies, which the node group must depend on:
    nodes must not boot before the CNI policy is attached, nor lose it while they drain on destroy."""
    role = aws.iam.Role(
        f"{name}-role",
        assume_role_policy=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                           "Action": "sts:AssumeRole"}],
        }),
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    policies: list[pulumi.Resource] = [
        aws.iam.RolePolicyAttachment(
            f"{name}-{arn.rsplit('/', 1)[1]}",
            role=role.name,
            policy_arn=arn,
            opts=pulumi.ResourceOptions(parent=role),
        )
        for arn in NODE_POLICY_ARNS
    ]
    return role, policies


def access_entries(admins: tuple[str, ...], viewers: tuple[str, ...]) -> dict[str, eks.AccessEntryArgs]:
    """clusterAdmins and clusterViewers as EKS access entries with a cluster-wide access policy each. Keyed by the
    principal (not its position), so adding or removing one leaves the others' entries alone."""
    entries = {}
    for principals, role, policy in ((admins, "admin", ADMIN_ACCESS_POLICY), (viewers, "viewer", VIEW_ACCESS_POLICY)):
        for arn in principals:
            partition, account, resource = arn_parts(arn)
            entries[f"{role}-{account}-{resource.rsplit('/', 1)[-1]}"] = eks.AccessEntryArgs(
                principal_arn=arn,
                access_policies={policy: eks.AccessPolicyAssociationArgs(
                    policy_arn=f"arn:{partition}:eks::aws:cluster-access-policy/{policy}",
                    access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"))},
            )
    return entries


def cluster_role_policy(key_arn: str) -> str:
    """What the cluster's IAM role gets besides AmazonEKSClusterPolicy: use of the secrets key (the statement
    terraform-aws-eks attaches for its own key), and no logs:CreateLogGroup, so that logs written while the cluster is
    destroyed cannot recreate the stack's log group outside Pulumi, with no retention (terraform-aws-eks issue 920)."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Resource": key_arn,
             "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"]},
            {"Effect": "Deny", "Resource": "*", "Action": ["logs:CreateLogGroup"]},
        ],
    })


def cluster_role_trust(*, account_id: str, cluster_arn: str):
    """A Pulumi transform for the eks.Cluster component: the confused-deputy conditions (infra/aws/trust.py) on the
    cluster role pulumi-eks makes, the child whose assume-role policy lets eks.amazonaws.com in. Every other child,
    and a policy not yet known, passes unchanged."""
    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != "aws:iam/role:Role":
            return None
        policy = args.props.get("assumeRolePolicy")
        if not isinstance(policy, str):
            # Not seen in pulumi-eks 4.4 (its policy is a constant); say so rather than skip it silently.
            warn(f"{args.name}: its assume-role policy is not known yet, so the confused-deputy conditions "
                 "(aws:SourceAccount, aws:SourceArn) were not added to it")
            return None
        if trust.EKS_SERVICE_PRINCIPAL not in policy:
            return None
        conditioned = trust.with_source_conditions(policy, service=trust.EKS_SERVICE_PRINCIPAL,
                                                   account_id=account_id, source_arn=cluster_arn)
        return pulumi.ResourceTransformResult(props={**args.props, "assumeRolePolicy": conditioned}, opts=args.opts)
    return transform


class EksCluster(pulumi.ComponentResource):
    """Control plane, OIDC provider, core add-ons, system node group and a Kubernetes provider for it."""

    def __init__(
        self,
        name: str,
        *,
        cfg: StackConfig,
        identity: AwsIdentity,
        creator: str,
        account_id: str,
        partition: str,
        region: str,
        vpc_id: pulumi.Input[str],
        control_plane_public_subnet_ids: list[pulumi.Input[str]],
        control_plane_private_subnet_ids: list[pulumi.Input[str]],
        system_subnet_ids: list[pulumi.Input[str]],
        public_access_cidrs: tuple[str, ...],
        tags: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("raytrain:infra:EksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # Known at preview: the name is the stack's own (infra/config/naming.py), the account and partition the
        # caller's.
        self.cluster_arn = trust.eks_cluster_arn(partition=partition, region=region, account_id=account_id,
                                                 cluster_name=cfg.cluster_name)
        # EKS makes this principal the cluster's admin (see access_entries): what the clusterAdmin output says.
        self.creator = creator
        # Envelope encryption of Kubernetes Secrets (CIS EKS 5.3.1) with a key the account controls: rotated yearly,
        # its use visible in CloudTrail, revocable. Its key policy is explicit (infra/aws/trust.py).
        self.secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS {cfg.cluster_name}: envelope encryption of Kubernetes Secrets",
            enable_key_rotation=True,
            policy=trust.secrets_key_policy(partition=partition, account_id=account_id, administrator=creator),
            tags=tags,
            opts=child,
        )
        aws.kms.Alias(f"{name}-secrets", name=f"alias/{cfg.cluster_name}-eks-secrets",
                      target_key_id=self.secrets_key.key_id, opts=child)
        # Created before the cluster, which would otherwise create it on its first log line with no retention.
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=CONTROL_PLANE_LOG_GROUP.format(cluster_name=cfg.cluster_name),
            retention_in_days=cfg.control_plane_log_retention_days,
            tags=tags,
            opts=child,
        )
        self.cluster = eks.Cluster(
            f"{name}-eks",
            # Through the log group's name: the aws.eks.Cluster inside pulumi-eks's component takes the name as an
            # input and so waits for the group, whereas depends_on on the component would rely on pulumi-eks
            # passing it on to that child.
            name=self.log_group.name.apply(lambda _: cfg.cluster_name),
            version=cfg.kubernetes_version,
            vpc_id=vpc_id,
            public_subnet_ids=control_plane_public_subnet_ids,
            private_subnet_ids=control_plane_private_subnet_ids,
            # The public endpoint answers only public_access_cidrs (CIS EKS 5.4.1); `pulumi up` itself talks to the
            # API server (Helm, the RayCluster, the job), so the deployer's address is among them
            # (feasibility.api_public_access_cidrs). Nodes reach the API server through the private endpoint.
            endpoint_public_access=True,
            public_access_cidrs=list(public_access_cidrs),
            endpoint_private_access=True,
            enabled_cluster_log_types=list(CONTROL_PLANE_LOG_TYPES),
            encryption_config_key_arn=self.secrets_key.arn,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries=access_entries(cfg.cluster_admins, cfg.cluster_viewers),
            create_oidc_provider=True,
            skip_default_node_group=True,
            # Managed node groups use the security group EKS creates for the cluster; pulumi-eks's own pair is
            # for its self-managed node groups, which this stack has none of.
            skip_default_security_groups=True,
            # vpc-cni and kube-proxy become EKS add-ons here; pulumi-eks leaves coredns out when there is no
            # default node group, so it is added below, after the system nodes it runs on.
            use_default_vpc_cni=False,
            # The VPC CNI's network-policy agent (eBPF on each pod's host-side veth, aws/aws-network-policy-agent)
            # enforces the Ray namespace's NetworkPolicies; pulumi-eks sets the add-on's enableNetworkPolicy.
            vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=True),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(enabled=True),
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            # For pulumi-eks's internal provider (its kubeconfig with the profile); without a role it would read
            # aws:profile itself, but only with one given here does it write `--role`.
            provider_credential_opts=eks.KubeconfigOptionsArgs(
                role_arn=identity.role_arn, profile_name=identity.profile) if identity.role_arn else None,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, transforms=[
                cluster_role_trust(account_id=account_id, cluster_arn=self.cluster_arn)]),
        )
        self.cluster_name: pulumi.Output[str] = self.cluster.eks_cluster.name
        # The EKS-created cluster security group (skip_default_security_groups): every managed node joins it,
        # and it lets nodes and control plane reach each other.
        self.cluster_security_group_id: pulumi.Output[str] = self.cluster.cluster_security_group_id
        self.oidc_provider_arn = self.cluster.oidc_provider_arn
        # The stack's profile and role in `aws eks get-token` (see the module docstring); with neither, the
        # environment's credentials are the stack's too, and pulumi-eks's own kubeconfig is the same.
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            self.cluster.get_kubeconfig(profile_name=identity.profile, role_arn=identity.role_arn)
            if identity.profile or identity.role_arn else self.cluster.kubeconfig_json)
        # pulumi-eks makes the cluster's role; its name is the last part of the ARN (the role has no path).
        aws.iam.RolePolicy(
            f"{name}-cluster-role",
            role=self.cluster.eks_cluster.role_arn.apply(lambda arn: arn.rsplit("/", 1)[-1]),
            policy=self.secrets_key.arn.apply(cluster_role_policy),
            opts=child,
        )

        system_role, system_policies = node_role(f"{name}-system-node", tags=tags, parent=self)
        # A launch template only for the root volume's size and encryption (node group disk_size cannot encrypt)
        # and the IMDS settings; EKS still picks the AMI and the bootstrap.
        self.system_launch_template = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            description=f"EKS system nodes ({cfg.system_instance_type})",
            block_device_mappings=[root_volume(SYSTEM_DISK_GIB)],
            metadata_options=instance_metadata(),
            tag_specifications=node_tag_specifications(tags, f"{name}-system"),
            update_default_version=True,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.system_node_group = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=self.cluster_name,
            node_role_arn=system_role.arn,
            subnet_ids=system_subnet_ids,
            instance_types=[cfg.system_instance_type],
            ami_type=SYSTEM_AMI_TYPE,
            capacity_type="ON_DEMAND",
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.system_launch_template.id,
                version=self.system_launch_template.latest_version.apply(str),
            ),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=cfg.system_node_count,
                min_size=cfg.system_node_count,
                max_size=cfg.system_node_count,
            ),
            labels=SYSTEM_NODE_SELECTOR,  # what the KubeRay operator and the Ray head select
            version=cfg.kubernetes_version,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster, *system_policies]),
        )
        self.coredns = aws.eks.Addon(
            f"{name}-coredns",
            cluster_name=self.cluster_name,
            addon_name="coredns",
            # EKS bootstraps a self-managed coredns; the managed add-on takes it over.
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_node_group]),
        )
        # Serves the Ray pods' AWS credentials (EKS Pod Identity) on 169.254.170.23 from the host network of every
        # node. The add-on's DaemonSet tolerates no taint by default (aws/containers-roadmap#2261); the Ray workers
        # run on the GPU nodes, so it must tolerate theirs.
        self.pod_identity_agent = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=self.cluster_name,
            addon_name="eks-pod-identity-agent",
            configuration_values=json.dumps({"tolerations": [GPU_TOLERATION]}),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_node_group]),
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({
            "cluster_name": self.cluster_name,
            "kubeconfig": self.kubeconfig,
            "system_node_group_name": self.system_node_group.node_group_name,
        })
