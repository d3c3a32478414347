"""What the Ray namespace enforces, as pure functions: the containers' securityContext, the Pod Security Admission
labels, and the NetworkPolicies.

Capabilities. Every Ray container drops them all. The workers add back one, IPC_LOCK, for EFA: libfabric's EFA
provider registers (pins) host memory for its bounce buffers (libfabric prov/efa/docs/overview.md asks for a raised
locked-memory limit), and the kernel charges pinned pages against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK
(ib_umem_get in drivers/infiniband/core/umem.c). A pod cannot raise its rlimits (Kubernetes has no field for them),
and the EKS AL2023 AMI's containerd base runtime spec sets RLIMIT_NOFILE only (amazon-eks-ami
nodeadm/internal/containerd/base-runtime-spec.json), so the memlock limit is whatever containerd inherits. AWS's own
EKS EFA training samples add the same capability (awslabs/awsome-distributed-ai, 3.test_cases/pytorch/nvrx/kubernetes).
The capability is only effective for a process running as root, which the training image does (and it is why the
containers do not set runAsNonRoot). The EFA device files themselves come through the device plugin's allocation, not
through a capability, a hostPath or privileged mode.

Pod Security Admission. IPC_LOCK is outside the baseline level's list of capabilities a container may add
(AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID,
SYS_CHROOT), so the strictest level the worker pods meet is privileged, and the namespace enforces that (derived from
the manifest, `pod_security_level`: without IPC_LOCK it would be baseline). warn and audit are at restricted, so every
departure from it shows up in kubectl's warnings and the audit log. The head meets baseline, and restricted but for
runAsNonRoot.

NetworkPolicies. Default deny in and out; then the Ray pods to and from each other on every port (GCS, raylets,
object managers, workers, and NCCL's socket bootstrap on the pod network: NCCL_SOCKET_IFNAME=eth0), DNS to CoreDNS,
HTTPS to public addresses (S3 through the NAT gateway, the Hugging Face hub, PyPI for trainPip: a NetworkPolicy cannot
name hosts, so this is "public addresses on 443"), and the Pod Identity agent. The VPC CNI enforces policies with eBPF
programs on each pod's host-side veth (aws/aws-network-policy-agent README), so:
- EFA traffic, which goes from user space to the EFA device (OS bypass), never passes there; the EFA security group
  (infra/aws/gpu_nodes.py) governs it;
- `kubectl port-forward` and the job resource's port-forward reach the head through the kubelet and containerd, which
  dial localhost inside the pod's network namespace (containerd internal/cri/server/sandbox_portforward_linux.go):
  no rule is needed, and none opens the dashboard to other pods;
- the kubelet's HTTP probes (KubeRay 1.7 uses HTTP probes for Ray 2.53 and later) come from the node's own address,
  which the agent always admits (aws-network-policy-agent pkg/fwruleprocessor/fw_rule_processor.go);
- DNS through the kube-dns ClusterIP is allowed because the network policy controller adds the ClusterIPs of services
  whose selector matches an egress peer's podSelector (amazon-network-policy-controller-k8s
  pkg/resolvers/endpoints.go); the same covers the workers' connection to the head's service.
"""
from __future__ import annotations

import ipaddress
from typing import Iterable

from infra.kubernetes.portforward import CLUSTER_LABEL  # KubeRay labels every pod of a RayCluster with its name

# The one capability EFA needs in the worker containers (see the module docstring).
EFA_CAPABILITIES = ("IPC_LOCK",)
# Pod Security Standards, baseline: the capabilities a container may add beyond the runtime's defaults
# (kubernetes.io/docs/concepts/security/pod-security-standards, "Capabilities").
BASELINE_ADDABLE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
PSA_WARN_LEVEL = "restricted"
PSA_AUDIT_LEVEL = "restricted"

# CoreDNS as the EKS coredns add-on labels it, in kube-system.
DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
# The EKS Pod Identity agent: a host-network DaemonSet answering on this link-local address (EKS user guide,
# "Understand how EKS Pod Identity works"); a default-deny egress blocks it like any other address.
POD_IDENTITY_AGENT_CIDR = "169.254.170.23/32"
POD_IDENTITY_AGENT_PORT = 80
HTTPS_PORT = 443
# Everything that is not a public address: the VPC and any peered network, the service CIDR (the API server's
# kubernetes.default among them), the link-local addresses (IMDS, the agent), carrier-grade NAT.
NON_PUBLIC_CIDRS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")


def container_security_context(*, efa: bool) -> dict:
    """Drop every capability (the workers keep IPC_LOCK for EFA), no privilege escalation, the runtime's seccomp
    profile. KubeRay copies the Ray container's securityContext onto the workers' wait-gcs-ready init container
    (ray-operator/controllers/ray/common/pod.go in v1.7.0), so that one is covered too."""
    capabilities: dict = {"drop": ["ALL"]}
    if efa:
        capabilities["add"] = list(EFA_CAPABILITIES)
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": capabilities,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_level(containers: Iterable[dict]) -> str:
    """The strictest Pod Security Standards level every container here meets, as far as this manifest varies: none
    of them is privileged or uses host namespaces or paths, and none runs as non-root (the image's user is root), so
    it is baseline unless a container adds a capability outside baseline's list, and then privileged."""
    for container in containers:
        context = container.get("securityContext") or {}
        added = set((context.get("capabilities") or {}).get("add") or ())
        if context.get("privileged") or added - BASELINE_ADDABLE_CAPABILITIES:
            return "privileged"
    return "baseline"


def namespace_labels(enforce: str) -> dict[str, str]:
    """Pod Security Admission labels of the Ray namespace."""
    return {
        "pod-security.kubernetes.io/enforce": enforce,
        "pod-security.kubernetes.io/warn": PSA_WARN_LEVEL,
        "pod-security.kubernetes.io/audit": PSA_AUDIT_LEVEL,
    }


def network_policies(*, namespace: str, cluster_name: str, vpc_cidr: str) -> list[dict]:
    """The Ray namespace's NetworkPolicies: default deny, then what a RayCluster and its training job need."""
    ray_pods = {"matchLabels": {CLUSTER_LABEL: cluster_name}}
    vpc = ipaddress.IPv4Network(vpc_cidr)
    not_public = [*NON_PUBLIC_CIDRS]
    if not any(vpc.subnet_of(ipaddress.IPv4Network(block)) for block in NON_PUBLIC_CIDRS):
        not_public.append(vpc_cidr)  # a VPC on public addresses: its other hosts are not "the internet" either

    def policy(name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    return [
        # Selects every pod of the namespace and allows nothing: whatever no later policy allows is refused.
        policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        policy(f"{cluster_name}-internal", {
            "podSelector": ray_pods,
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": ray_pods}]}],
            "egress": [{"to": [{"podSelector": ray_pods}]}],
        }),
        policy(f"{cluster_name}-egress", {
            "podSelector": ray_pods,
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [DNS_PEER], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": not_public}}],
                 "ports": [{"protocol": "TCP", "port": HTTPS_PORT}]},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                 "ports": [{"protocol": "TCP", "port": POD_IDENTITY_AGENT_PORT}]},
            ],
        }),
    ]


def operator_network_policies(*, namespace: str, vpc_cidr: str) -> list[dict]:
    """The KubeRay operator's namespace (issue 22): default deny in and out, then DNS and HTTPS to the API server,
    which is all the operator talks to for RayClusters (it reconciles pods and services through the API; it serves
    no webhook in the chart's defaults, and nothing scrapes its metrics here). The API server is reached through the
    `kubernetes` service's ClusterIP and, after kube-proxy, the control plane's ENIs in the VPC: both private
    addresses, which NON_PUBLIC_CIDRS covers (plus a VPC on public addresses). The kubelet's probes come from the
    node and are always admitted (see the module docstring)."""
    private = [*NON_PUBLIC_CIDRS]
    vpc = ipaddress.IPv4Network(vpc_cidr)
    if not any(vpc.subnet_of(ipaddress.IPv4Network(block)) for block in NON_PUBLIC_CIDRS):
        private.append(vpc_cidr)

    def policy(name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    return [
        policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        policy("kuberay-operator-egress", {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [DNS_PEER], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"ipBlock": {"cidr": block}} for block in private if block != "169.254.0.0/16"],
                 "ports": [{"protocol": "TCP", "port": HTTPS_PORT}]},
            ],
        }),
    ]


# On the Ray pods' templates when they have no AWS credentials (nothing the job uses is on S3).
AWS_CREDENTIALS_ANNOTATION = "raytrain/aws-credentials"


def without_aws_credentials(manifest: dict) -> dict:
    """The RayCluster with its pod templates marked as having no Pod Identity association.

    EKS injects Pod Identity's credentials into a pod only when the pod is created after the association exists (EKS
    user guide, "Assign an IAM role to a Kubernetes service account": running pods keep what they had). A stack that
    gains its first s3:// location on a later `up` (a dataset, a model, trainStoragePath) gets the association then,
    and the Ray pods made before it would meet NoCredentialsError on the head. Having none is therefore part of the
    pods' spec: gaining one replaces the RayCluster, and, through its spec digest, wakes a stopped GPU group. Marked
    when absent rather than when present, so that stacks that have S3 keep their RayCluster across this change."""
    spec = manifest["spec"]
    for template in (spec["headGroupSpec"]["template"], *(group["template"] for group in spec["workerGroupSpecs"])):
        template.setdefault("metadata", {}).setdefault("annotations", {})[AWS_CREDENTIALS_ANNOTATION] = "none"
    return manifest
