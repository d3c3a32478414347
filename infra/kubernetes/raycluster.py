"""The RayCluster: a head on the system nodes and one GPU worker pod per GPU node, declared as a KubeRay CR.

`ray_cluster_manifest` builds it from plain values (tests render it per stack into tests/golden/ and validate it
against the KubeRay CRD schema); `RayCluster` creates its namespace (Pod Security Admission labels), the pods' service
account and secret env, the namespace's NetworkPolicies (infra/kubernetes/ray_security.py) and the custom resource.
"""
from __future__ import annotations

import hashlib
import json
import re
import string

import pulumi
import pulumi_kubernetes as k8s

from infra.aws.node_labels import GPU_TOLERATION, GPU_WORKER_NODE_SELECTOR, SYSTEM_NODE_SELECTOR
from infra.aws.pod_identity import checkpoint_storage_policy
from infra.config import InstanceFacts, StackConfig, check_efa_gpu, config_error
from infra.config.gpu_cuda import check_image_cuda
from infra.config.schema import warn
from infra.kubernetes import admission, local_storage, monitoring, ray_security
from infra.kubernetes.addons import KUBERAY_OPERATOR_NAMESPACE
from infra.kubernetes.devices import worker_resources
from infra.kubernetes.images import KNOWN_IMAGES, ImageFacts, check_image, mutable_tag_warning, unpinned_image_warning  # noqa: F401  (the names tests and the program read here)
from workload.config.fields import shown_value

# The CRD version that kuberay-operator 1.7.0 serves and stores (infra/kubernetes/addons.py pins the operator).
RAYCLUSTER_API_VERSION = "ray.io/v1"


# KubeRay refuses authOptions.mode=token below this Ray (ray-operator/controllers/ray/utils/validation.go).
TOKEN_AUTH_MIN_RAY_VERSION = (2, 52, 0)

# The head only schedules and serves the job API; the driver of a job runs here, the ranks do not. 2 CPU / 8Gi
# fits an m7i.xlarge system node (4 vCPU, 16 GiB) next to kube-system and the operator.
HEAD_CPU = "2"
HEAD_MEMORY = "8Gi"
GCS_PORT = 6379
DASHBOARD_PORT = 8265  # also the job server
CLIENT_PORT = 10001
WORKER_GROUP_NAME = "gpu-workers"

# Pulling the multi-GB training image onto fresh GPU nodes takes minutes; wait this long for every pod to be
# ready before `pulumi up` moves on to the job.
READY_TIMEOUT_SECONDS = 1800

# KubeRay names derived objects through CheckName: it keeps the last 50 characters and replaces a leading
# digit or punctuation with "r". The secret and service names below are computed the same way.
_KUBERAY_NAME_MAX = 50
# KubeRay's limit for a RayCluster name, so that "<name>-serve-svc" stays a valid service name.
_RAYCLUSTER_NAME_MAX = 53
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# The stack creates and deletes the Ray namespace, so it cannot be one that exists already or is the operator's.
_RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", KUBERAY_OPERATOR_NAMESPACE)


def kuberay_name(name: str) -> str:
    """The name KubeRay gives an object it derives from `name` (utils.CheckName in the operator)."""
    if len(name) > _KUBERAY_NAME_MAX:
        name = name[len(name) - _KUBERAY_NAME_MAX:]
    if name[0].isdigit() or name[0] in string.punctuation:
        name = "r" + name[1:]
    return name


def head_service_name(cluster_name: str) -> str:
    """The ClusterIP service in front of the head: GCS on 6379, the job server on 8265."""
    return kuberay_name(f"{cluster_name}-head-svc")


def auth_secret_name(cluster_name: str) -> str:
    """The Secret (key auth_token) that KubeRay generates for authOptions.mode=token when no secretName is given."""
    return kuberay_name(cluster_name)


def pod_service_account_name(cluster_name: str) -> str:
    """The service account of the head and worker pods; EKS Pod Identity maps it to their IAM role. Not the
    cluster's own name, which KubeRay gives the autoscaler's service account when autoscaling is on."""
    return f"{cluster_name}-pods"


def secret_env_name(cluster_name: str) -> str:
    """The Secret whose keys (trainSecretEnv) every Ray container gets as environment variables."""
    return f"{cluster_name}-secret-env"


def image_facts(cfg: StackConfig) -> ImageFacts:
    """dlcImage's Ray and CUDA: the stack's figures for a known image (rayVersion/imageCudaVersion may repeat
    them, not contradict them), the config's for any other."""
    # A known image pinned by digest (repo:tag@sha256:...) bundles what its tag does.
    known = KNOWN_IMAGES.get(cfg.dlc_image) or KNOWN_IMAGES.get(cfg.dlc_image.partition("@")[0])
    if known is None:
        missing = [key for key, value in (("rayVersion", cfg.ray_version), ("imageCudaVersion",
                                                                             cfg.image_cuda_version)) if not value]
        if missing:
            raise config_error(tuple(missing), f"dlcImage {shown_value(cfg.dlc_image)} is not an image the stack knows "
                               f"({sorted(KNOWN_IMAGES)}), so set rayVersion and imageCudaVersion to the Ray release "
                               "and CUDA major.minor it bundles (e.g. 2.58.0 and 13.0)")
        facts = ImageFacts(ray_version=cfg.ray_version, cuda_version=cfg.image_cuda_version)
    else:
        for key, configured, bundled in (("rayVersion", cfg.ray_version, known.ray_version),
                                         ("imageCudaVersion", cfg.image_cuda_version, known.cuda_version)):
            if configured and configured != bundled:
                raise ValueError(f"config key {key!r}: {configured} contradicts dlcImage {cfg.dlc_image}, which "
                                 f"bundles {bundled}; allowed: empty or {bundled}")
        facts = known
    if tuple(int(part) for part in facts.ray_version.split(".")) < TOKEN_AUTH_MIN_RAY_VERSION:
        minimum = ".".join(map(str, TOKEN_AUTH_MIN_RAY_VERSION))
        raise ValueError(
            f"config key 'rayVersion': Ray {facts.ray_version} is below {minimum}, which KubeRay requires for the "
            f"RayCluster's token authentication; allowed: {minimum} or later (an image that bundles it)")
    return facts


def check_config(cfg: StackConfig, facts: InstanceFacts) -> ImageFacts:
    """Every check `ray_cluster_manifest` makes, on the stack's config, and dlcImage's facts; the program runs it
    before any resource, so a bad RayCluster setting fails before AWS resources are created."""
    assert facts.instance_type == cfg.gpu_instance_type, "facts must describe cfg.gpu_instance_type"
    _check_settings(name=cfg.ray_cluster_name, namespace=cfg.ray_namespace, image=cfg.dlc_image,
                    gpu_node_count=cfg.gpu_node_count, facts=facts)
    if warning := mutable_tag_warning(cfg.dlc_image) or unpinned_image_warning(cfg.dlc_image):
        warn(warning)
    image = image_facts(cfg)
    check_image_cuda(image=cfg.dlc_image, image_cuda_version=image.cuda_version,
                     configured_cuda_version=cfg.image_cuda_version, instance_type=facts.instance_type,
                     gpu_name=facts.gpu_name)
    return image


def _check_settings(
    *, name: str, namespace: str, image: str, gpu_node_count: int, facts: InstanceFacts,
) -> None:
    if len(name) > _RAYCLUSTER_NAME_MAX or not _DNS1035_LABEL.fullmatch(name):
        raise config_error("rayClusterName", f"{name!r} must be a DNS-1035 label (lowercase letters, digits and '-', "
                           f"starting with a letter) of at most {_RAYCLUSTER_NAME_MAX} characters")
    if len(namespace) > 63 or not _DNS1123_LABEL.fullmatch(namespace):
        raise config_error("rayNamespace",
                           f"{shown_value(namespace)} must be a DNS-1123 label of at most 63 characters")
    if namespace in _RESERVED_NAMESPACES:
        raise config_error("rayNamespace", f"{shown_value(namespace)} is created and deleted with the stack, so it "
                           f"cannot be one of {list(_RESERVED_NAMESPACES)}")
    check_image(image)
    if gpu_node_count < 1:
        raise config_error("gpuNodeCount", f"{gpu_node_count} must be at least 1 (one Ray worker pod runs per GPU node)")
    check_efa_gpu(facts)
    worker_resources(facts)  # raises for a node with no room left for a worker after its reservations


def ray_cluster_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    ray_version: str,
    gpu_node_count: int,
    facts: InstanceFacts,
    transport_env: dict[str, str],
    head_env: dict[str, str] | None = None,
) -> dict:
    """The RayCluster custom resource as a plain dict; a worker takes all of its node's GPUs (`facts.gpus`).
    `head_env`: more environment of the head (infra/kubernetes/monitoring.py's Prometheus and Grafana addresses)."""
    _check_settings(name=name, namespace=namespace, image=image, gpu_node_count=gpu_node_count, facts=facts)
    gpus = facts.gpus
    head_resources = {"cpu": HEAD_CPU, "memory": HEAD_MEMORY}
    resources = worker_resources(facts)
    pod_identity = {
        # AWS credentials come from EKS Pod Identity's own projected token (infra/aws/pod_identity.py), and nothing in
        # a Ray pod calls the Kubernetes API (KubeRay's token auth reads its Secret into an env var; no autoscaler),
        # so the pods mount no Kubernetes service-account token: job code cannot use one.
        "serviceAccountName": pod_service_account_name(name),
        "automountServiceAccountToken": False,
    }
    # trainSecretEnv's values: a Secret the program writes from a Pulumi secret, read by the kubelet, never part of
    # the job's runtime_env (which Ray's dashboard shows) or of this manifest.
    secret_env = ({"secretRef": {"name": secret_env_name(name)}},)
    return {
        "apiVersion": RAYCLUSTER_API_VERSION,
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {
                # Without it Pulumi marks the CR ready as soon as the API server stores it.
                "pulumi.com/waitFor": "condition=RayClusterProvisioned",
                "pulumi.com/timeoutSeconds": str(READY_TIMEOUT_SECONDS),
            },
        },
        "spec": {
            "rayVersion": ray_version,
            # Anyone who can reach the head service could otherwise run code on every GPU node.
            "authOptions": {"mode": "token"},
            "headGroupSpec": {
                "serviceType": "ClusterIP",  # jobs are submitted from inside the cluster; 8265 is never exposed
                "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0",
                                   **monitoring.ray_metrics_start_params()},
                "template": {
                    "spec": {
                        **pod_identity,
                        "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
                        "containers": [{
                            "name": "ray-head",
                            "image": image,
                            # The image's NVIDIA hook fails on a node without GPUs unless told there are none.
                            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                                    *({"name": key, "value": value} for key, value in (head_env or {}).items())],
                            "envFrom": list(secret_env),
                            "ports": [
                                {"name": "gcs-server", "containerPort": GCS_PORT},
                                {"name": "dashboard", "containerPort": DASHBOARD_PORT},
                                {"name": "client", "containerPort": CLIENT_PORT},
                                monitoring.ray_metrics_container_port(),
                            ],
                            "resources": {"requests": dict(head_resources), "limits": dict(head_resources)},
                            "securityContext": ray_security.container_security_context(efa=False),
                        }],
                    },
                },
            },
            "workerGroupSpecs": [{
                "groupName": WORKER_GROUP_NAME,
                "replicas": gpu_node_count,
                "minReplicas": gpu_node_count,
                "maxReplicas": gpu_node_count,
                # Ray's GPU count and the pod's GPU request come from the same value.
                "rayStartParams": {"num-gpus": str(gpus), **monitoring.ray_metrics_start_params()},
                "template": {
                    "spec": {
                        **pod_identity,
                        "nodeSelector": dict(GPU_WORKER_NODE_SELECTOR),
                        "tolerations": [dict(GPU_TOLERATION)],
                        "containers": [{
                            "name": "ray-worker",
                            "image": image,
                            "env": [{"name": key, "value": value}
                                    for key, value in {**transport_env, **local_storage.env()}.items()],
                            "envFrom": list(secret_env),
                            "ports": [monitoring.ray_metrics_container_port()],
                            # requests == limits puts the pod in Guaranteed QoS, so no rank is throttled or
                            # evicted ahead of the others and stalls the collective. Requesting the EFA resource is
                            # what makes the EFA device plugin mount the interfaces into the pod.
                            "resources": {"requests": dict(resources), "limits": dict(resources)},
                            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                             *local_storage.volume_mounts()],
                            "securityContext": ray_security.container_security_context(efa=True),
                        }],
                        # NCCL and Ray's object store need far more than the 64 MiB /dev/shm a container gets. A
                        # memory-backed volume counts against the pod's memory limit, which bounds it.
                        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}, local_storage.volume()],
                    },
                },
            }],
        },
    }


def containers(manifest: dict) -> list[dict]:
    """Every container of the RayCluster's head and worker pod templates."""
    templates = [manifest["spec"]["headGroupSpec"]["template"],
                 *(group["template"] for group in manifest["spec"]["workerGroupSpecs"])]
    return [container for template in templates for container in template["spec"]["containers"]]


def stack_manifest(cfg: StackConfig, facts: InstanceFacts) -> dict:
    """The stack's RayCluster, from its config: what RayCluster creates, and what spec_digest digests. (The preview's
    check_config has run by then: its warnings are not repeated here.)"""
    image = image_facts(cfg)
    manifest = ray_cluster_manifest(
        name=cfg.ray_cluster_name,
        namespace=cfg.ray_namespace,
        image=cfg.dlc_image,
        ray_version=image.ray_version,
        gpu_node_count=cfg.gpu_node_count,
        facts=facts,
        transport_env=cfg.transport_env,
        head_env=monitoring.ray_head_env() if cfg.monitoring == "prometheus" else None,
    )  # __main__.py gives the pods a Pod Identity association exactly when this policy is not None:
    policy = checkpoint_storage_policy(cfg.train.storage_path, dataset=cfg.train.dataset, model=cfg.train.model_id)
    return manifest if policy else ray_security.without_aws_credentials(manifest)


def spec_digest(cfg: StackConfig, facts: InstanceFacts) -> str:
    """A digest of the RayCluster's spec: it changes exactly when `pulumi up` replaces the RayCluster for its spec
    (replace_on_changes below), which then waits for every worker (GpuNodesAwake wakes the nodes first)."""
    spec = json.dumps(stack_manifest(cfg, facts)["spec"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(spec.encode()).hexdigest()


class RayCluster(pulumi.ComponentResource):
    """The Ray namespace and the RayCluster CR; it depends on the KubeRay operator, so destroy removes it first."""

    def __init__(
        self,
        name: str,
        *,
        provider: k8s.Provider,
        cfg: StackConfig,
        facts: InstanceFacts,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        manifest = stack_manifest(cfg, facts)
        super().__init__("raytrain:infra:RayCluster", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=provider)

        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": cfg.ray_namespace,
                      "labels": ray_security.namespace_labels(ray_security.pod_security_level(containers(manifest)))},
            opts=in_cluster,
        )
        self.namespace_resource = namespace  # for what else lives in the namespace (the MLflow server)
        in_namespace = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[namespace])
        service_account = k8s.core.v1.ServiceAccount(
            f"{name}-pods",
            metadata={"name": pod_service_account_name(cfg.ray_cluster_name), "namespace": cfg.ray_namespace},
            automount_service_account_token=False,
            opts=in_namespace,
        )
        # Created even when trainSecretEnv is empty: the pods' envFrom names it, so the RayCluster's spec does not
        # change when a secret is first set.
        secret_values = pulumi.Output.secret(cfg.train.secret_env.reveal())
        secret_env = k8s.core.v1.Secret(
            f"{name}-secret-env",
            metadata={"name": secret_env_name(cfg.ray_cluster_name), "namespace": cfg.ray_namespace},
            type="Opaque",
            string_data=secret_values,
            opts=in_namespace,
        )
        self.network_policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{policy['metadata']['name']}", metadata=policy["metadata"], spec=policy["spec"],
                opts=in_namespace)
            for policy in ray_security.network_policies(namespace=cfg.ray_namespace,
                                                        cluster_name=cfg.ray_cluster_name, vpc_cidr=cfg.vpc_cidr)
        ]
        # restricted for every pod of the namespace but IPC_LOCK and root (infra/kubernetes/admission.py): the
        # namespace's own Pod Security label can only say privileged. Bound before any pod is made.
        policy_name = f"{cfg.ray_namespace}-pod-security"
        policy = admission.pod_security_policy(policy_name)
        self.admission_policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-pod-security", metadata=policy["metadata"], spec=policy["spec"], opts=in_cluster)
        binding = admission.pod_security_binding(policy_name, policy_name=policy_name, namespace=cfg.ray_namespace)
        self.admission_binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-pod-security-binding", metadata=binding["metadata"], spec=binding["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[self.admission_policy]))
        # Depending on the operator (passed in depends_on) orders `pulumi destroy` so that the RayCluster goes
        # while the operator still runs its finalizer; the other way round the delete hangs.
        self.custom_resource = k8s.apiextensions.CustomResource(
            f"{name}-raycluster",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            # KubeRay does not recreate running pods when the spec changes (image, env, resources), so a changed
            # spec replaces the RayCluster; its name is fixed, so the old one goes first. Pods read their
            # environment once, so new trainSecretEnv values replace it too: the trigger is the values themselves,
            # kept a secret in the state (no hash of them in plain sight).
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider,
                depends_on=[namespace, service_account, secret_env, *self.network_policies, self.admission_binding,
                            *depends_on],
                replace_on_changes=["spec"], delete_before_replace=True, replacement_trigger=secret_values),
        )
        # Derived from the CR's id, so whoever uses these waits until the RayCluster is up.
        created = self.custom_resource.id
        self.cluster_name: pulumi.Output[str] = created.apply(lambda _: cfg.ray_cluster_name)
        self.namespace: pulumi.Output[str] = created.apply(lambda _: cfg.ray_namespace)
        self.head_service_name: pulumi.Output[str] = created.apply(lambda _: head_service_name(cfg.ray_cluster_name))
        self.auth_secret_name: pulumi.Output[str] = created.apply(lambda _: auth_secret_name(cfg.ray_cluster_name))
        self.register_outputs({
            "cluster_name": self.cluster_name,
            "namespace": self.namespace,
            "head_service_name": self.head_service_name,
            "auth_secret_name": self.auth_secret_name,
        })
