"""The monitoring namespaces held as the Ray namespace is (issue 31, item 4): Pod Security labels that enforce, and
NetworkPolicies that admit each component's callers and nobody else. Pure functions; monitoring.py creates them.

Two namespaces, split by what their pods need of the host:
- `monitoring` (Prometheus, its operator, Grafana, kube-state-metrics): Pod Security `baseline` enforced, which none
  of them goes beyond (no host namespaces, ports or paths, no capability beyond baseline's), and `restricted` warned
  and audited, so a chart change that leaves restricted shows in `kubectl` and the audit log;
- `monitoring-host` (node-exporter: the host's network, PIDs and root filesystem; NVIDIA's DCGM exporter: SYS_ADMIN and
  the kubelet's pod-resources socket): `privileged`, which they need, and only they run there (node-exporter through
  the subchart's namespaceOverride, the DCGM exporter as a release of that namespace). Prometheus finds both through
  their ServiceMonitors in any namespace (prometheusSpec.serviceMonitorNamespaceSelector: {}, the chart's default).

NetworkPolicies (ingress; the VPC CNI enforces them as it does the Ray namespace's): every pod of `monitoring` denies
by default; Prometheus (9090) admits Grafana and the Ray head (the dashboard's metrics queries), and every component
admits Prometheus's scrapes; Grafana (3000) admits the Ray head; the operator's admission webhook (10250) admits the API
server only: its calls come from the control plane's ENIs, which EKS places in the subnets the cluster was given, so
the rule admits those subnets' CIDRs (`control_plane_cidrs`), not the whole VPC, where every node and pod lives. A
NetworkPolicy cannot name a security group, so the cluster security group is no option here. In `monitoring-host` the DCGM exporter's 9400 admits only
Prometheus. node-exporter runs on the host's network, where no NetworkPolicy applies: its 9100 is the node's port, open
to what the nodes' security groups admit (the cluster's own nodes and pods).
"""
from __future__ import annotations

from infra.kubernetes.portforward import CLUSTER_LABEL, NODE_TYPE_LABEL
from infra.kubernetes.ray_security import DNS_PEER, HTTPS_PORT, POD_IDENTITY_AGENT_CIDR, POD_IDENTITY_AGENT_PORT

MONITORING_HOST_NAMESPACE = "monitoring-host"
MONITORING_ENFORCE = "baseline"
MONITORING_WARN = "restricted"
HOST_ENFORCE = "privileged"
HOST_WARN = "baseline"
# kube-prometheus-stack 88.5.3 values: prometheusOperator.tls.internalPort, the operator's webhook and metrics port.
OPERATOR_WEBHOOK_PORT = 10250
# dcgm-exporter 4.8.2 values: service.port and the exporter's listen address.
DCGM_EXPORTER_PORT = 9400
GRAFANA_SELECTOR = {"app.kubernetes.io/name": "grafana"}  # the grafana subchart's name label
# The CloudWatch Observability add-on (its chart, amazon-cloudwatch-observability, at the version addon_pins.py pins):
# its agent runs on the host's network (values agent.hostNetwork: true) as does fluent-bit, the DCGM exporter needs
# the kubelet's pod-resources socket (a hostPath), so the namespace is `privileged` as monitoring-host is.
CLOUDWATCH_ENFORCE = "privileged"
CLOUDWATCH_WARN = "baseline"
# values manager.ports.webhookPort: the operator's webhooks, among them a mutating one on every pod (mpod.kb.io).
CLOUDWATCH_WEBHOOK_PORT = 9443
# What the host-network agent scrapes: the DCGM exporter (dcgmExporter.service.port), neuron-monitor
# (neuronMonitor.service.port), kube-state-metrics (kubeStateMetrics.service.port), node-exporter's default.
CLOUDWATCH_SCRAPED_PORTS = (9400, 8000, 8443, 9100)


def namespace_labels(enforce: str, warn: str) -> dict[str, str]:
    return {"pod-security.kubernetes.io/enforce": enforce, "pod-security.kubernetes.io/warn": warn,
            "pod-security.kubernetes.io/audit": warn}


def _policy(name: str, namespace: str, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"policyTypes": ["Ingress"], **spec}}


def _tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def cloudwatch_network_policies(*, namespace: str, control_plane_cidrs: tuple[str, ...] | list[str],
                                vpc_cidr: str) -> list[dict]:
    """The CloudWatch add-on's namespace: default deny in and out, then
    - its pods to and from each other;
    - the operator's webhooks (9443) from the control plane's subnets only (see `network_policies`); with no rule the
      API server could not reach them, and their pod webhook would hold up pod creation in every namespace;
    - the exporters' ports from the VPC: the agent scrapes them from the host's network, so its address is a node's,
      which no selector names and a subnet shares with pods; these ports only serve metrics;
    - egress: DNS, HTTPS (CloudWatch's and STS's public endpoints, and the API server through the `kubernetes`
      service: an ipBlock cannot tell them apart, so 443 to any address), the Pod Identity agent.
    Nothing here applies to the host-network pods themselves (the agent, fluent-bit): NetworkPolicy never does."""
    own = {"podSelector": {}}
    return [
        _policy("default-deny", namespace, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy("within-namespace", namespace, {
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [own]}], "egress": [{"to": [own]}]}),
        _policy("operator-webhook", namespace, {
            "podSelector": {},
            "ingress": [{"from": [{"ipBlock": {"cidr": cidr}} for cidr in control_plane_cidrs],
                         "ports": _tcp(CLOUDWATCH_WEBHOOK_PORT)}]}),
        _policy("agent-scrapes", namespace, {
            "podSelector": {},
            "ingress": [{"from": [{"ipBlock": {"cidr": vpc_cidr}}], "ports": _tcp(*CLOUDWATCH_SCRAPED_PORTS)}]}),
        _policy("egress", namespace, {
            "podSelector": {}, "policyTypes": ["Egress"],
            "egress": [
                {"to": [DNS_PEER], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": _tcp(HTTPS_PORT)},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}], "ports": _tcp(POD_IDENTITY_AGENT_PORT)},
            ]}),
    ]


def network_policies(*, monitoring_namespace: str, ray_namespace: str, ray_cluster_name: str,
                     scraper_label: dict[str, str], prometheus_port: int, grafana_port: int,
                     control_plane_cidrs: tuple[str, ...] | list[str]) -> list[dict]:
    """Both namespaces' NetworkPolicies."""
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring_namespace}},
               "podSelector": {"matchLabels": dict(scraper_label)}}
    ray_head = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ray_namespace}},
                "podSelector": {"matchLabels": {CLUSTER_LABEL: ray_cluster_name, NODE_TYPE_LABEL: "head"}}}
    grafana = {"podSelector": {"matchLabels": dict(GRAFANA_SELECTOR)}}
    tcp = lambda port: [{"protocol": "TCP", "port": port}]  # noqa: E731
    return [
        _policy("default-deny", monitoring_namespace, {"podSelector": {}}),
        _policy("scrapes", monitoring_namespace, {"podSelector": {}, "ingress": [{"from": [scraper]}]}),
        _policy("prometheus", monitoring_namespace, {
            # Prometheus's pods carry the scraper label the program gives them (prometheusSpec.podMetadata).
            "podSelector": {"matchLabels": dict(scraper_label)},
            "ingress": [{"from": [grafana, ray_head], "ports": tcp(prometheus_port)}]}),
        _policy("grafana", monitoring_namespace, {
            "podSelector": {"matchLabels": dict(GRAFANA_SELECTOR)},
            "ingress": [{"from": [ray_head], "ports": tcp(grafana_port)}]}),
        # Every pod, on the webhook's port only: just the operator listens there, and no chart label is relied on.
        _policy("operator-webhook", monitoring_namespace, {
            "podSelector": {},
            "ingress": [{"from": [{"ipBlock": {"cidr": cidr}} for cidr in control_plane_cidrs],
                         "ports": tcp(OPERATOR_WEBHOOK_PORT)}]}),
        _policy("default-deny", MONITORING_HOST_NAMESPACE, {"podSelector": {}}),
        _policy("dcgm-exporter", MONITORING_HOST_NAMESPACE, {
            "podSelector": {}, "ingress": [{"from": [scraper], "ports": tcp(DCGM_EXPORTER_PORT)}]}),
    ]
