"""The stack's own MLflow tracking server (`experimentTracking: mlflow`, issue 34): one pod in the Ray namespace, a
ClusterIP Service the Ray pods report to (http://mlflow.<namespace>.svc:5000), its artifacts under trainStoragePath's
S3 prefix (`mlflow/`) through an IAM role of its own (EKS Pod Identity), reachable by port-forward as the Ray dashboard
is, never exposed.

Choices, each the simplest that holds:
- Image: the official ghcr.io/mlflow/mlflow at the version requirements.txt pins for the job's client
  (mlflow-skinny), its `-full` variant, the one with boto3 for the S3 artifact store (mlflow docker/README.md: the
  default image "contains only the core MLflow package"; docker/Dockerfile.full installs mlflow[extras,...]).
  Registered in image_pins.py with its digest slot empty, as every image there.
- Store: SQLite on the pod's emptyDir, restored from and copied to S3 (`mlflow/store/mlflow.db`) every 5 minutes and at
  shutdown (infra/kubernetes/mlflow_serve.py says why no volume: the cluster has no EBS CSI driver). One replica,
  Recreate. Artifacts go to S3 directly through the server (`--serve-artifacts`): the job's client needs no S3 right.
- Pod Security: restricted in full (non-root uid, read-only root filesystem with emptyDirs for the store and /tmp, no
  privilege escalation, every capability dropped, seccomp RuntimeDefault), requests and limits set, on the system
  nodes. No Kubernetes API token is mounted; Pod Identity mounts its own (infra/aws/pod_identity.py).
- Host header: MLflow 3 refuses a Host it does not know (its DNS-rebinding guard, mlflow/server/security.py); the
  server allows its Service's name and localhost (port-forward), and the kubelet's probe sends Host: localhost.
- NetworkPolicies, on top of the namespace's default deny (infra/kubernetes/ray_security.py): the server admits the
  Ray pods on 5000 only; it may reach DNS, public addresses on 443 (S3) and the Pod Identity agent; and the Ray pods
  get one egress rule more, to the server's pods on 5000. A port-forward reaches the pod through the kubelet and
  containerd, which dial localhost in the pod's network namespace: no rule is needed for it, and none admits other
  pods (ray_security.py's docstring has the source).
"""
from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.aws.node_labels import SYSTEM_NODE_SELECTOR
from infra.aws.pod_identity import trust_policy
from infra.config.experiment_tracking import MLFLOW_PORT, MLFLOW_SERVICE, artifacts_location, in_cluster_uri
from infra.kubernetes import image_pins
from infra.kubernetes.portforward import CLUSTER_LABEL
from infra.kubernetes.ray_security import (
    DNS_PEER,
    HTTPS_PORT,
    NON_PUBLIC_CIDRS,
    POD_IDENTITY_AGENT_CIDR,
    POD_IDENTITY_AGENT_PORT,
)

SERVER_LABELS = {"app.kubernetes.io/name": "mlflow", "app.kubernetes.io/component": "tracking-server"}
# The python:3.x-slim base's `nobody` is 65534; any non-root uid works, the image writes nothing of its own.
RUN_AS_USER = 65534
STORE_DIRECTORY = "/var/lib/mlflow"
ENTRYPOINT_DIRECTORY = "/opt/mlflow-serve"
ENTRYPOINT = Path(__file__).with_name("mlflow_serve.py")
STORE_KEY = "store/mlflow.db"  # under the artifacts prefix
STORE_COPY_SECONDS = 300
# One uvicorn worker: a single user's handful of runs; each worker imports MLflow's server (some 300 MiB).
RESOURCES = {"requests": {"cpu": "250m", "memory": "768Mi"}, "limits": {"cpu": "1", "memory": "1536Mi"}}


def policy_document(bucket: str, prefix: str) -> str:
    """The server's S3 access: read, write and delete objects under the artifacts prefix (runs' artifacts and the
    store's copy; MLflow deletes a deleted run's artifacts), list that prefix only (MLflow's list_artifacts is a
    ListObjectsV2 with Prefix and Delimiter, mlflow/store/artifact/s3_artifact_repo.py). Nothing else of the bucket."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
         "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*"},
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}",
         "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}},
    ]})


def server_args(bucket: str, prefix: str, namespace: str) -> list[str]:
    """`mlflow server`'s flags after its store (mlflow_serve.py adds --backend-store-uri)."""
    service_host = f"{MLFLOW_SERVICE}.{namespace}.svc"
    return ["--host", "0.0.0.0", "--port", str(MLFLOW_PORT), "--workers", "1",
            "--serve-artifacts", "--artifacts-destination", f"s3://{bucket}/{prefix}",
            "--allowed-hosts", f"{service_host}:{MLFLOW_PORT},{service_host},localhost:*,127.0.0.1:*"]


def deployment(*, namespace: str, bucket: str, prefix: str, config_map: str) -> dict:
    """The server's Deployment: one pod, restricted Pod Security, the entrypoint from `config_map`."""
    probe = {"httpGet": {"path": "/health", "port": MLFLOW_PORT,
                         "httpHeaders": [{"name": "Host", "value": f"localhost:{MLFLOW_PORT}"}]},
             "periodSeconds": 10, "timeoutSeconds": 5}
    container = {
        "name": "mlflow",
        "image": image_pins.MLFLOW.reference(),
        "command": ["python", f"{ENTRYPOINT_DIRECTORY}/{ENTRYPOINT.name}"],
        "args": server_args(bucket, prefix, namespace),
        "env": [{"name": "MLFLOW_STORE_BUCKET", "value": bucket},
                {"name": "MLFLOW_STORE_KEY", "value": f"{prefix}/{STORE_KEY}"},
                {"name": "MLFLOW_STORE_FILE", "value": f"{STORE_DIRECTORY}/mlflow.db"},
                {"name": "MLFLOW_STORE_COPY_SECONDS", "value": str(STORE_COPY_SECONDS)},
                # The server runs no jobs (they want huey, and nothing here submits one).
                {"name": "MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "value": "false"},
                {"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": "http", "containerPort": MLFLOW_PORT, "protocol": "TCP"}],
        # The first start migrates an empty SQLite store (some 30 s on a small node): the startup probe waits 5 min.
        "startupProbe": {**probe, "failureThreshold": 30},
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 6},
        "resources": RESOURCES,
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": "store", "mountPath": STORE_DIRECTORY}, {"name": "tmp", "mountPath": "/tmp"},
                         {"name": "entrypoint", "mountPath": ENTRYPOINT_DIRECTORY, "readOnly": True}],
    }
    return {
        "metadata": {"name": MLFLOW_SERVICE, "namespace": namespace, "labels": dict(SERVER_LABELS)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(SERVER_LABELS)},
            "template": {
                "metadata": {"labels": dict(SERVER_LABELS)},
                "spec": {
                    "serviceAccountName": MLFLOW_SERVICE,
                    "automountServiceAccountToken": False,
                    "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
                    # Time for the last copy of the store after the server stops.
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER,
                                        "fsGroup": RUN_AS_USER, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "store", "emptyDir": {"sizeLimit": "2Gi"}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                                {"name": "entrypoint", "configMap": {"name": config_map, "defaultMode": 0o444}}],
                },
            },
        },
    }


def service(namespace: str) -> dict:
    return {"metadata": {"name": MLFLOW_SERVICE, "namespace": namespace, "labels": dict(SERVER_LABELS)},
            "spec": {"type": "ClusterIP", "selector": dict(SERVER_LABELS),
                     "ports": [{"name": "http", "port": MLFLOW_PORT, "targetPort": MLFLOW_PORT, "protocol": "TCP"}]}}


def network_policies(*, namespace: str, ray_cluster_name: str) -> list[dict]:
    """The server's ingress (the Ray pods, on its port) and egress (DNS, S3 on 443, the Pod Identity agent), and the
    Ray pods' egress to it; the namespace's default deny (ray_security.py) refuses the rest."""
    ray_pods = {"podSelector": {"matchLabels": {CLUSTER_LABEL: ray_cluster_name}}}
    server = {"podSelector": {"matchLabels": dict(SERVER_LABELS)}}
    port = [{"protocol": "TCP", "port": MLFLOW_PORT}]

    def policy(name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    return [
        policy(f"{MLFLOW_SERVICE}-server", {
            "podSelector": dict(server["podSelector"]),
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [ray_pods], "ports": port}],
            "egress": [
                {"to": [DNS_PEER], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(NON_PUBLIC_CIDRS)}}],
                 "ports": [{"protocol": "TCP", "port": HTTPS_PORT}]},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                 "ports": [{"protocol": "TCP", "port": POD_IDENTITY_AGENT_PORT}]},
            ],
        }),
        policy(f"{ray_cluster_name}-to-{MLFLOW_SERVICE}", {
            "podSelector": dict(ray_pods["podSelector"]),
            "policyTypes": ["Egress"],
            "egress": [{"to": [server], "ports": port}],
        }),
    ]


def port_forward_command(namespace: str, kubeconfig: str = "kubeconfig.json") -> str:
    return (f"kubectl --kubeconfig {kubeconfig} -n {namespace} port-forward svc/{MLFLOW_SERVICE} "
            f"{MLFLOW_PORT}:{MLFLOW_PORT}  # then http://localhost:{MLFLOW_PORT}")


class MlflowServer(pulumi.ComponentResource):
    """The tracking server: its IAM role and Pod Identity association, ServiceAccount, entrypoint ConfigMap,
    NetworkPolicies, Deployment and Service, in the Ray namespace (`depends_on`: the namespace and its admission
    policy's binding, so the pod is checked like the Ray pods)."""

    def __init__(self, name: str, *, provider: k8s.Provider, cluster_name: pulumi.Input[str], eks_cluster_name: str,
                 eks_cluster_arn: str, namespace_name: str, ray_cluster_name: str,
                 storage_path: str, tags: dict[str, str], depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("raytrain:infra:MlflowServer", name, None, opts)
        bucket, prefix = artifacts_location(storage_path)
        role = aws.iam.Role(
            f"{name}-role",
            description=f"MLflow server of EKS cluster {eks_cluster_name} ({namespace_name}/{MLFLOW_SERVICE}): "
                        f"s3://{bucket}/{prefix}",
            assume_role_policy=trust_policy(eks_cluster_arn, eks_cluster_name, namespace_name, MLFLOW_SERVICE),
            tags=tags, opts=pulumi.ResourceOptions(parent=self))
        role_policy = aws.iam.RolePolicy(f"{name}-artifacts", role=role.id, policy=policy_document(bucket, prefix),
                                         opts=pulumi.ResourceOptions(parent=role))
        # The webhook gives credentials to pods created after the association exists: the Deployment waits for it.
        association = aws.eks.PodIdentityAssociation(
            f"{name}-association", cluster_name=cluster_name, namespace=namespace_name,
            service_account=MLFLOW_SERVICE, role_arn=role.arn, tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role_policy]))
        in_namespace = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on)
        metadata = {"name": MLFLOW_SERVICE, "namespace": namespace_name, "labels": dict(SERVER_LABELS)}
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=metadata, automount_service_account_token=False,
                                             opts=in_namespace)
        entrypoint = k8s.core.v1.ConfigMap(
            f"{name}-entrypoint", metadata={**metadata, "name": f"{MLFLOW_SERVICE}-entrypoint"},
            data={ENTRYPOINT.name: ENTRYPOINT.read_text()}, opts=in_namespace)
        policies = [k8s.networking.v1.NetworkPolicy(f"{name}-{manifest['metadata']['name']}",
                                                    metadata=manifest["metadata"], spec=manifest["spec"],
                                                    opts=in_namespace)
                    for manifest in network_policies(namespace=namespace_name, ray_cluster_name=ray_cluster_name)]
        manifest = deployment(namespace=namespace_name, bucket=bucket, prefix=prefix,
                              config_map=f"{MLFLOW_SERVICE}-entrypoint")
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider,
                                        depends_on=[*depends_on, account, entrypoint, association, *policies]))
        svc = service(namespace_name)
        self.service = k8s.core.v1.Service(f"{name}-service", metadata=svc["metadata"], spec=svc["spec"],
                                           opts=in_namespace)
        self.uri: pulumi.Output[str] = self.service.metadata.apply(lambda _: in_cluster_uri(namespace_name))
        self.port_forward_command: pulumi.Output[str] = self.deployment.metadata.apply(
            lambda _: port_forward_command(namespace_name))
        self.register_outputs({"uri": self.uri, "port_forward_command": self.port_forward_command,
                               "role_arn": role.arn})
