"""Issue 31, item 4: the monitoring namespaces held as the Ray namespace is: Pod Security labels that enforce
(baseline for Prometheus, Grafana and the operator; privileged only for the DaemonSets that need the host, in a
namespace of their own), and NetworkPolicies under which Prometheus answers only Grafana, the Ray head and its own
scrapes, and the DCGM exporter's 9400 only Prometheus.

The manifests are validated against the Kubernetes schema of the stack's version (kubernetes-validate); who may reach
what is decided by `admits`, which applies NetworkPolicy's ingress rules as the API documents them (networking.k8s.io/v1
NetworkPolicy: a pod selected by any policy admits what some rule of one of them allows; rules are ORs of peers, a peer
with both selectors needs both, no `ports` means every port).
"""
from __future__ import annotations

import ipaddress

import kubernetes_validate
import pytest

from infra.kubernetes import monitoring, monitoring_security
from tests.support.pulumi_mocks import SCHEMA, program

KUBERNETES = SCHEMA["kubernetesVersion"]["default"]
NAMESPACE = "kubernetes:core/v1:Namespace"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RELEASE = "kubernetes:helm.sh/v3:Release"
MON, HOST = monitoring.MONITORING_NAMESPACE, monitoring_security.MONITORING_HOST_NAMESPACE
PROMETHEUS = (MON, dict(monitoring.SCRAPER_LABEL), None)
GRAFANA = (MON, {"app.kubernetes.io/name": "grafana"}, None)
KUBE_STATE_METRICS = (MON, {"app.kubernetes.io/name": "kube-state-metrics"}, None)
RAY_HEAD = ("ray", {"ray.io/cluster": "ray-train", "ray.io/node-type": "head"}, None)
RAY_WORKER = ("ray", {"ray.io/cluster": "ray-train", "ray.io/node-type": "worker"}, None)
DCGM = (HOST, {"app.kubernetes.io/name": "dcgm-exporter"}, None)
IDLE_STOP = ("ray", {"app.kubernetes.io/name": "ray-idle-stop"}, None)
API_SERVER = (None, {}, "10.0.12.7")


@pytest.fixture(scope="module")
def dev_program():
    return program("dev")


def policies(dev_program, namespace: str) -> list[dict]:
    return [p.inputs for p in dev_program.of_type(NETWORK_POLICY) if p.inputs["metadata"]["namespace"] == namespace]


def _matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def _peer_admits(peer: dict, source: tuple, own_namespace: str) -> bool:
    namespace, labels, address = source
    if "ipBlock" in peer:
        return address is not None and ipaddress.ip_address(address) in ipaddress.ip_network(peer["ipBlock"]["cidr"])
    if namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not _matches(peer["namespaceSelector"], {"kubernetes.io/metadata.name": namespace}):
            return False
    elif namespace != own_namespace:
        return False
    return _matches(peer.get("podSelector") or {}, labels)


def admits(dev_program, target: tuple, port: int, source: tuple) -> bool:
    namespace, labels, _ = target
    selecting = [p for p in policies(dev_program, namespace) if _matches(p["spec"]["podSelector"], labels)
                 and "Ingress" in p["spec"]["policyTypes"]]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports and not any(p["port"] == port for p in ports):
                continue
            if any(_peer_admits(peer, source, namespace) for peer in rule.get("from") or []):
                return True
    return False


def test_the_manifests_are_valid_kubernetes_objects(dev_program):
    for namespace in (MON, HOST):
        for policy in policies(dev_program, namespace):
            kubernetes_validate.validate(policy, KUBERNETES, strict=True)
    for registration in dev_program.of_type(NAMESPACE):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": registration.inputs["metadata"]}, KUBERNETES, strict=True)


def test_pod_security_is_privileged_only_where_the_daemonsets_need_the_host(dev_program):
    labels = {r.inputs["metadata"]["name"]: r.inputs["metadata"].get("labels") for r in dev_program.of_type(NAMESPACE)}
    assert labels[MON] == {"pod-security.kubernetes.io/enforce": "baseline",
                           "pod-security.kubernetes.io/warn": "restricted",
                           "pod-security.kubernetes.io/audit": "restricted"}, labels[MON]
    assert labels[HOST]["pod-security.kubernetes.io/enforce"] == "privileged", labels[HOST]
    releases = {r.inputs["name"]: r.inputs for r in dev_program.of_type(RELEASE)}
    assert releases["kube-prometheus-stack"]["values"]["prometheus-node-exporter"]["namespaceOverride"] == HOST
    assert releases["dcgm-exporter"]["namespace"] == HOST
    network_policies = {p.urn for p in dev_program.of_type(NETWORK_POLICY) if p.inputs["metadata"]["namespace"] in (MON, HOST)}
    for name in ("kube-prometheus-stack", "dcgm-exporter"):
        (release,) = [r for r in dev_program.of_type(RELEASE) if r.inputs["name"] == name]
        assert network_policies <= set(release.dependencies), f"{name}: installed after the namespaces' policies"


@pytest.mark.parametrize("source, allowed", [
    (GRAFANA, True), (RAY_HEAD, True), (PROMETHEUS, True),
    (RAY_WORKER, False), (KUBE_STATE_METRICS, False), (IDLE_STOP, False), (DCGM, False), (API_SERVER, False),
])
def test_prometheus_answers_grafana_and_the_ray_head_only(dev_program, source, allowed):
    assert admits(dev_program, PROMETHEUS, monitoring.PROMETHEUS_PORT, source) is allowed, source


@pytest.mark.parametrize("source, allowed", [
    (PROMETHEUS, True), (GRAFANA, False), (RAY_HEAD, False), (RAY_WORKER, False), (API_SERVER, False),
    (KUBE_STATE_METRICS, False),
])
def test_the_dcgm_exporter_answers_prometheus_only(dev_program, source, allowed):
    assert admits(dev_program, DCGM, monitoring_security.DCGM_EXPORTER_PORT, source) is allowed, source


def test_grafana_and_the_operators_webhook_admit_their_callers_only(dev_program):
    assert admits(dev_program, GRAFANA, monitoring.GRAFANA_PORT, RAY_HEAD)
    assert not admits(dev_program, GRAFANA, monitoring.GRAFANA_PORT, RAY_WORKER)
    operator = (MON, {"app": "kube-prometheus-stack-operator"}, None)
    assert admits(dev_program, operator, monitoring_security.OPERATOR_WEBHOOK_PORT, API_SERVER), "the API server's webhook call"
    assert not admits(dev_program, operator, monitoring_security.OPERATOR_WEBHOOK_PORT, RAY_WORKER)
    assert admits(dev_program, KUBE_STATE_METRICS, 8080, PROMETHEUS) and not admits(dev_program, KUBE_STATE_METRICS, 8080, RAY_HEAD)



# ---- webhooks answer the control plane only; the CloudWatch namespace held like the others ----------------------

SUBNET = "aws:ec2/subnet:Subnet"


def _webhook_blocks(policy_list: list[dict]) -> list[str]:
    (webhook,) = [p for p in policy_list if p["metadata"]["name"] == "operator-webhook"]
    (rule,) = webhook["spec"]["ingress"]
    return [peer["ipBlock"]["cidr"] for peer in rule["from"]]


def _subnet_cidrs(run) -> dict[str, str]:
    return {r.name: r.inputs["cidrBlock"] for r in run.of_type(SUBNET)}


def test_the_prometheus_operators_webhook_admits_the_control_planes_subnets_not_the_vpc(dev_program):
    """EKS puts the control plane's ENIs in the subnets the cluster is given; the API server calls webhooks from
    them. Every other address of the VPC (nodes and pods of the other AZs, say) is refused."""
    blocks = _webhook_blocks(policies(dev_program, MON))
    subnets = _subnet_cidrs(dev_program)
    assert "10.0.0.0/16" not in blocks and blocks, blocks
    assert set(blocks) <= set(subnets.values()), (blocks, subnets)
    operator = (MON, {"app": "kube-prometheus-stack-operator"}, None)
    # The VPC's addresses outside every control-plane subnet (10.0.128.0/17 here is unallocated) and a peered network.
    for address in ("10.0.150.9", "10.1.0.5"):
        assert not admits(dev_program, operator, monitoring_security.OPERATOR_WEBHOOK_PORT, (None, {}, address)), address


@pytest.fixture(scope="module")
def cloudwatch_program():
    return program("dev", (("monitoring", "cloudwatch"),))


CLOUDWATCH = monitoring.CLOUDWATCH_NAMESPACE


def test_the_cloudwatch_namespace_has_pod_security_labels_and_a_default_deny(cloudwatch_program):
    (namespace,) = [r for r in cloudwatch_program.of_type(NAMESPACE) if r.inputs["metadata"]["name"] == CLOUDWATCH]
    labels = namespace.inputs["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged", "the agent and fluent-bit use the host"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline" == labels["pod-security.kubernetes.io/audit"]
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Namespace", "metadata": namespace.inputs["metadata"]},
                                 KUBERNETES, strict=True)
    own = policies(cloudwatch_program, CLOUDWATCH)
    for policy in own:
        kubernetes_validate.validate(policy, KUBERNETES, strict=True)
    (deny,) = [p for p in own if p["metadata"]["name"] == "default-deny"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    addon = cloudwatch_program.one("aws:eks/addon:Addon", "ray-train-cloudwatch-addon")
    policy_urns = {p.urn for p in cloudwatch_program.of_type(NETWORK_POLICY)
                   if p.inputs["metadata"]["namespace"] == CLOUDWATCH}
    assert policy_urns | {namespace.urn} <= set(addon.dependencies), "the add-on's pods start behind the policies"


@pytest.mark.parametrize("port, source, allowed", [
    (monitoring_security.CLOUDWATCH_WEBHOOK_PORT, API_SERVER, True),
    (monitoring_security.CLOUDWATCH_WEBHOOK_PORT, RAY_WORKER, False),
    (monitoring_security.CLOUDWATCH_WEBHOOK_PORT, (None, {}, "10.0.150.9"), False),
    (9400, (None, {}, "10.0.40.9"), True),  # the host-network agent, from another node
    (9400, RAY_WORKER, False),
    (5000, (None, {}, "10.0.12.7"), False),
    (8080, (CLOUDWATCH, {"app.kubernetes.io/name": "amazon-cloudwatch-observability"}, None), True),
])
def test_the_cloudwatch_namespace_admits_the_control_plane_and_the_agent_only(cloudwatch_program, port, source,
                                                                              allowed):
    operator = (CLOUDWATCH, {"app.kubernetes.io/name": "amazon-cloudwatch-observability",
                             "control-plane": "controller-manager"}, None)
    assert admits(cloudwatch_program, operator, port, source) is allowed, (port, source)


def test_the_cloudwatch_namespace_may_reach_dns_https_and_the_pod_identity_agent_only(cloudwatch_program):
    egress = [rule for p in policies(cloudwatch_program, CLOUDWATCH) if "Egress" in p["spec"]["policyTypes"]
              for rule in p["spec"].get("egress") or []]
    ports = sorted(sorted(port["port"] for port in rule.get("ports") or []) for rule in egress)
    assert ports == [[], [53, 53], [80], [443]], ports  # [] is the namespace's own pods
    (own,) = [rule for rule in egress if not rule.get("ports")]
    assert own["to"] == [{"podSelector": {}}], "no port limit only within the namespace"
