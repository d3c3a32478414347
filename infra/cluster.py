"""The EKS control plane (through pulumi-eks), its core add-ons and the system node group.

Access is by EKS access entries (authentication mode API, no aws-auth ConfigMap). The deployer's entry is the
one EKS creates for the cluster creator: pulumi-eks always sets bootstrapClusterCreatorAdminPermissions=true,
and declaring a second entry for the same principal fails with ResourceInUseException. Managed node groups
get their node-role entries from EKS itself.

The kubeconfig authenticates as the creator too. pulumi-eks writes `aws eks get-token` into it with aws:profile
(or AWS_PROFILE) only, so a stack deployed through aws:assumeRoles would reach its own cluster with the ambient
identity, which has no access entry: Helm, the RayCluster and the dynamic resources would get 401. The role is
passed as providerCredentialOpts.roleArn, which pulumi-eks turns into `--role <arn>` (generateKubeconfig in
pulumi/pulumi-eks nodejs/eks/cluster/cluster.ts); given that, it no longer adds aws:profile itself, so the profile
is passed with it.
"""
from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from infra.addons import SYSTEM_NODE_SELECTOR
from infra.config import AwsIdentity, StackConfig

SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
# The Ray head runs the training image (the DLC: tens of GiB, and containerd keeps both the compressed layers and
# the unpacked snapshot) next to the add-ons' images; EKS's default 20 GiB, or 50, fills up and evicts the head.
SYSTEM_DISK_GIB = 100
ROOT_DEVICE_NAME = "/dev/xvda"  # the AL2023 EKS AMIs' root device
# 2, not 1: pods that are not on the host network (Ray workers writing checkpoints to S3 with the node role)
# reach IMDS through one extra hop.
IMDS_HOP_LIMIT = 2

# What every EKS worker node needs; ECR read-only lets it pull the add-on images.
NODE_POLICY_ARNS = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)


def checkpoint_storage_policy(storage_path: str, dataset: str = "") -> str | None:
    """The S3 access Ray Train needs for `trainStoragePath` (s3://bucket/prefix): the head's controller and every
    worker read and write the run's checkpoints (and the job its models and metrics) there with their node's role.
    An s3:// `trainDataset` file is read by the head (the check before training) and by every worker: read-only,
    that one object. None when neither is on S3."""
    statements = []
    if storage_path.startswith("s3://"):
        bucket, _, prefix = storage_path[len("s3://"):].partition("/")
        prefix = prefix.strip("/")
        objects = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
        listing = {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
                   "Resource": f"arn:aws:s3:::{bucket}"}
        if prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
        statements += [listing, {"Effect": "Allow", "Resource": objects,
                                 "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                                            "s3:AbortMultipartUpload"]}]
    if dataset.startswith("s3://"):
        bucket, _, key = dataset[len("s3://"):].partition("/")
        # pyarrow asks for the object's metadata (HeadObject, under s3:GetObject) and, for a missing one, lists its
        # prefix to tell a file from a directory: ListBucket limited to that key.
        statements += [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/{key}"},
                       {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}",
                        "Condition": {"StringLike": {"s3:prefix": [key, f"{key}/*"]}}}]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}) if statements else None


def root_volume(size_gib: int) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """A node's root volume: gp3 and encrypted (EKS's own launch template leaves encryption to the account)."""
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name=ROOT_DEVICE_NAME,
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib, volume_type="gp3", encrypted="true", delete_on_termination="true"),
    )


def instance_metadata() -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    """IMDS settings of every node's launch template (system and GPU)."""
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=IMDS_HOP_LIMIT)


def node_tag_specifications(tags: dict[str, str], name: str) -> list[aws.ec2.LaunchTemplateTagSpecificationArgs]:
    """The stack's tags on what a node launches (its instance, volumes and network interfaces)."""
    return [aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags={**tags, "Name": name})
            for kind in ("instance", "volume", "network-interface")]


def node_role(name: str, *, tags: dict[str, str], parent: pulumi.Resource,
              storage_policy: str | None = None) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
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
    if storage_policy:
        policies.append(aws.iam.RolePolicy(
            f"{name}-checkpoints", role=role.id, policy=storage_policy, opts=pulumi.ResourceOptions(parent=role)))
    return role, policies


class EksCluster(pulumi.ComponentResource):
    """Control plane, OIDC provider, core add-ons, system node group and a Kubernetes provider for it."""

    def __init__(
        self,
        name: str,
        *,
        cfg: StackConfig,
        identity: AwsIdentity,
        vpc_id: pulumi.Input[str],
        control_plane_public_subnet_ids: list[pulumi.Input[str]],
        control_plane_private_subnet_ids: list[pulumi.Input[str]],
        system_subnet_ids: list[pulumi.Input[str]],
        tags: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("raytrain:infra:EksCluster", name, None, opts)

        self.cluster = eks.Cluster(
            f"{name}-eks",
            name=cfg.cluster_name,
            version=cfg.kubernetes_version,
            vpc_id=vpc_id,
            public_subnet_ids=control_plane_public_subnet_ids,
            private_subnet_ids=control_plane_private_subnet_ids,
            endpoint_public_access=True,
            endpoint_private_access=True,  # nodes reach the API server inside the VPC
            authentication_mode=eks.AuthenticationMode.API,
            create_oidc_provider=True,
            skip_default_node_group=True,
            # Managed node groups use the security group EKS creates for the cluster; pulumi-eks's own pair is
            # for its self-managed node groups, which this stack has none of.
            skip_default_security_groups=True,
            # vpc-cni and kube-proxy become EKS add-ons here; pulumi-eks leaves coredns out when there is no
            # default node group, so it is added below, after the system nodes it runs on.
            use_default_vpc_cni=False,
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(enabled=True),
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            provider_credential_opts=eks.KubeconfigOptionsArgs(
                role_arn=identity.role_arn, profile_name=identity.profile) if identity.role_arn else None,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.cluster_name: pulumi.Output[str] = self.cluster.eks_cluster.name
        # The EKS-created cluster security group (skip_default_security_groups): every managed node joins it,
        # and it lets nodes and control plane reach each other.
        self.cluster_security_group_id: pulumi.Output[str] = self.cluster.cluster_security_group_id
        self.oidc_provider_arn = self.cluster.oidc_provider_arn
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(self.cluster.kubeconfig_json)

        # The Ray head runs here, and Ray Train's controller on it writes the run's state to the storage path.
        system_role, system_policies = node_role(f"{name}-system-node", tags=tags, parent=self,
                                                 storage_policy=checkpoint_storage_policy(cfg.train.storage_path,
                                                                                          dataset=cfg.train.dataset))
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
