"""The Ray pods' own AWS identity: an IAM role for their service account through EKS Pod Identity, scoped to the
checkpoint prefix of `trainStoragePath` and, read-only, to an s3:// `trainDataset` file and `trainModelId` directory.

The nodes' roles no longer carry checkpoint access, and with IMDS hop limit 1 (infra/aws/cluster.py) no pod can borrow
them. The EKS Pod Identity webhook gives a pod of an associated service account the container-credentials variables
(AWS_CONTAINER_CREDENTIALS_FULL_URI=http://169.254.170.23/v1/credentials, AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE) and
mounts its own projected token, audience pods.eks.amazonaws.com, whatever the pod's automountServiceAccountToken says
(aws/amazon-eks-pod-identity-webhook, pkg/handler/handler.go), so the Ray pods keep no Kubernetes API token. The
node's agent trades that token for the role's credentials (eks-auth:AssumeRoleForPodIdentity).

Pod Identity rather than IRSA: no OIDC trust policy per cluster, and the association is an EKS resource that the
program declares next to the role. It needs an AWS SDK that knows the container provider with a token file (EKS user
guide, "Use pod identity with the AWS SDK": boto3 1.34.41, C++ 1.11.263, which pyarrow's S3 filesystem under Ray
Train bundles in its recent releases).
"""
from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.aws.trust import pod_identity_conditions
from infra.config import s3_location

# EKS Pod Identity assumes the role as this service principal, and tags the session with the cluster, namespace and
# service account, which the trust policy pins (EKS user guide, "Create IAM role with trust policy required by EKS
# Pod Identity").
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


# What the Ray pods may not do under the stack's MLflow server's prefix, though it lies under trainStoragePath's.
SERVER_ONLY_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


def checkpoint_storage_policy(storage_path: str, dataset: str = "", model: str = "",
                              server_prefix: str = "") -> str | None:
    """The S3 access the Ray pods need: for `trainStoragePath` (s3://bucket/prefix), Ray Train's controller on the
    head and every worker read and write the run's checkpoints (and the job its models and metrics) there; an s3://
    `trainDataset` file is read by the head (the check before training) and every worker: read-only, that one
    object; an s3:// `trainModelId` directory is read by the head (its config.json) and each node's first worker
    (workload/model/files.py): read-only, that prefix. None when none is on S3 (nothing to grant).

    `server_prefix` (the stack's MLflow server's, `experimentTracking: mlflow`, inside trainStoragePath's bucket): an
    explicit Deny on its objects, which no Allow overrides (IAM policy evaluation logic), so the Ray pods can neither
    overwrite the server's stored database (`mlflow/store/mlflow.db`) nor its artifacts; they reach the server through
    its HTTP API only (the client uploads artifacts through it, `--serve-artifacts`), and only the server's own role
    (infra/kubernetes/mlflow_server.py) writes there."""
    statements = []
    location = s3_location(storage_path)
    if location is not None:
        bucket, prefix = location
        objects = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
        listing = {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
                   "Resource": f"arn:aws:s3:::{bucket}"}
        if prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
            # HeadBucket is authorized as s3:ListBucket and carries no s3:prefix (S3 API Reference, HeadBucket,
            # "Permissions"), and pyarrow's create_dir(recursive=True) sends it before writing under any prefix
            # (apache/arrow#49949; the fix, apache/arrow#50793, is unmerged): Ray Train's storage set-up at fit(),
            # every checkpoint, the export and the TensorBoard upload all create directories. So ListBucket is also
            # allowed where the request has no s3:prefix at all. Its cost: a listing without a prefix shows the
            # names (not the contents) of the bucket's other objects. S3 has no narrower action for HeadBucket.
            statements.append({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}",
                               "Condition": {"Null": {"s3:prefix": "true"}}})
            # pyarrow's create_dir(recursive=True) then writes an empty "directory" object for every level from the
            # bucket down ("runs/", "runs/dev/", ...; arrow cpp/src/arrow/filesystem/s3fs.cc, CreateDir, unless
            # check_directory_existence_before_creation, which Ray does not set): the prefix's ancestors' markers,
            # those exact keys and nothing under them, may be written too.
            markers = [f"arn:aws:s3:::{bucket}/{'/'.join(prefix.split('/')[:depth])}/"
                       for depth in range(1, prefix.count("/") + 2)]
            statements.append({"Effect": "Allow", "Action": "s3:PutObject", "Resource": markers})
        statements += [listing, {"Effect": "Allow", "Resource": objects,
                                 "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                                            "s3:AbortMultipartUpload"]}]
    if (dataset_location := s3_location(dataset)) is not None:
        bucket, key = dataset_location
        # pyarrow asks for the object's metadata (HeadObject, under s3:GetObject) and, for a missing one, lists its
        # prefix to tell a file from a directory: ListBucket limited to that key.
        statements += [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/{key}"},
                       {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}",
                        "Condition": {"StringLike": {"s3:prefix": [key, f"{key}/*"]}}}]
    if (model_location := s3_location(model)) is not None:
        bucket, prefix = model_location
        # pyarrow lists the directory (ListObjectsV2 with Prefix "prefix/"), then reads each file.
        statements += [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*"},
                       {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}",
                        "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}}]
    if server_prefix and location is not None:
        statements.append({"Sid": "MlflowServerOnly", "Effect": "Deny", "Action": list(SERVER_ONLY_ACTIONS),
                           "Resource": f"arn:aws:s3:::{location[0]}/{server_prefix}/*"})
    return json.dumps({"Version": "2012-10-17", "Statement": statements}) if statements else None


def trust_policy(cluster_arn: str, cluster_name: str, namespace: str, service_account: str) -> str:
    """Only EKS Pod Identity may assume the role, and only for this stack's cluster (its ARN: account, region, name)
    and its Ray service account: an association elsewhere pointing at the role would be refused by STS
    (infra/aws/trust.py)."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": pod_identity_conditions(cluster_arn=cluster_arn, cluster_name=cluster_name,
                                                 namespace=namespace, service_account=service_account),
        }],
    })


class RayPodIdentity(pulumi.ComponentResource):
    """The Ray pods' IAM role, its S3 policy (checkpoints, an s3:// dataset), and the association of the role with
    their service account."""

    def __init__(
        self,
        name: str,
        *,
        cluster_name: pulumi.Input[str],
        eks_cluster_name: str,
        eks_cluster_arn: str,
        namespace: str,
        service_account: str,
        storage_policy: str,
        tags: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("raytrain:infra:RayPodIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.role = aws.iam.Role(
            f"{name}-role",
            description=f"Ray pods of EKS cluster {eks_cluster_name} ({namespace}/{service_account}): checkpoints",
            assume_role_policy=trust_policy(eks_cluster_arn, eks_cluster_name, namespace, service_account),
            tags=tags,
            opts=child,
        )
        self.policy = aws.iam.RolePolicy(f"{name}-checkpoints", role=self.role.id, policy=storage_policy,
                                         opts=pulumi.ResourceOptions(parent=self.role))
        # The webhook injects credentials into pods created after the association exists: the RayCluster waits for it.
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-association",
            cluster_name=cluster_name,
            namespace=namespace,
            service_account=service_account,
            role_arn=self.role.arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.policy]),
        )
        self.role_arn: pulumi.Output[str] = self.role.arn
        self.register_outputs({"role_arn": self.role_arn, "association_id": self.association.association_id})
