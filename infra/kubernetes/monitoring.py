"""GPU, fabric and job metrics (issue 24): Prometheus and Grafana (kube-prometheus-stack) scraping Ray's metrics
endpoints, the NVIDIA DCGM exporter on the GPU nodes, Grafana with Ray's own dashboards and one of ours, and the Ray
head wired to both so the Ray dashboard's Metrics view works. Or, with `monitoring: cloudwatch`, the CloudWatch
Observability EKS add-on (Container Insights with its GPU and EFA metrics) instead; `none` deploys neither.

Why Prometheus by default: it is what Ray and KubeRay document (KubeRay's "Using Prometheus and Grafana"), the Ray
dashboard's Metrics view and Ray's Grafana dashboards query it, the job's own metrics (tokens/s, step time, exported
through Ray's metrics agent) reach it with no agent config, and it costs only a share of the system node (no per-metric
billing: Container Insights bills per observation, and its enhanced observability counts each GPU and EFA device's
metrics as extra ones). What it lacks and the add-on has: EFA device counters. EFA traffic bypasses the kernel (OS
bypass), so the pod network's byte counters (cAdvisor, which Prometheus reads from every kubelet) show only the TCP
side (bootstrap, S3, NCCL's socket fallback); the add-on reads the EFA driver's own counters on each GPU node.

What lands where. Only the DCGM exporter runs on the GPU nodes (tolerating their taint); Prometheus, its operator,
Grafana, kube-state-metrics and node-exporter are pinned to the system nodes (node-exporter tolerates every NoSchedule
taint by default, so it is given the system nodes' selector). Every container has requests, so the system node's sum is
known: `system_node_requests` lists them, and tests/program/test_monitoring.py checks they fit the default system node
beside the Ray head, the add-ons and kube-system, with the margin docs/metrics.md states.

Network. The Ray namespace is default-deny (infra/kubernetes/ray_security.py); `scrape_network_policies` admits exactly
the Prometheus pods (by a label this chart gives them) to Ray's metrics port, and the Ray head to Prometheus's and
Grafana's ports (the dashboard's server queries both). Nothing else is opened.

Login. Grafana's admin password is a random password held as a Pulumi secret (pulumi-random) and a Kubernetes Secret
the chart reads (admin.existingSecret); the stack outputs the port-forward command and the password (secret).
"""
from __future__ import annotations

import functools
import json

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from infra.aws import addon_pins
from infra.aws.node_labels import GPU_PRESENT_LABEL, GPU_TOLERATION, SYSTEM_NODE_SELECTOR
from infra.kubernetes import image_pins
from infra.kubernetes import monitoring_security as security
from infra.kubernetes.portforward import CLUSTER_LABEL, NODE_TYPE_LABEL

# kube-prometheus-stack 88.5.3 (prometheus-operator v0.93.1; subcharts grafana 12.11.1, kube-state-metrics 8.4.0,
# prometheus-node-exporter 4.56.1): the release whose values.yaml (and its subcharts') the keys below were checked
# against (copies in tests/reference/charts, tests/program/test_monitoring.py walks every key). The chart installs the
# Prometheus operator's CRDs (PodMonitor, ServiceMonitor), which the DCGM chart's ServiceMonitor and our PodMonitor
# need; like KubeRay's, Helm never upgrades CRDs, so bumping this pin on a live stack needs them applied by hand.
KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_REPO = "https://prometheus-community.github.io/helm-charts"
KUBE_PROMETHEUS_STACK_VERSION = "88.5.3"
KUBE_PROMETHEUS_STACK_RELEASE = "kube-prometheus-stack"
# NVIDIA's dcgm-exporter chart 4.8.2 (image 4.5.3-4.8.2): its default counters (etc/default-counters.csv at the same
# tag) include every per-GPU figure the issue asks for: DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED,
# DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_SM_CLOCK, DCGM_FI_DEV_XID_ERRORS, plus DCGM_FI_PROF_PIPE_TENSOR_ACTIVE.
DCGM_EXPORTER_CHART = "dcgm-exporter"
DCGM_EXPORTER_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"
DCGM_EXPORTER_VERSION = "4.8.2"
DCGM_EXPORTER_RELEASE = "dcgm-exporter"
MONITORING_NAMESPACE = "monitoring"
MONITORING_HOST_NAMESPACE = security.MONITORING_HOST_NAMESPACE  # node-exporter and the DCGM exporter
# The CloudWatch Observability add-on (Container Insights, with enhanced observability: GPU metrics through its own
# DCGM exporter, EFA metrics through its EFA collector) and the managed policy its agent needs (EKS user guide,
# "Install the CloudWatch agent with the Amazon CloudWatch Observability EKS add-on"), at the version pinned with its
# source in infra/aws/addon_pins.py.
CLOUDWATCH_ADDON = addon_pins.CLOUDWATCH_ADDON
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_SERVICE_ACCOUNT = "cloudwatch-agent"
CLOUDWATCH_AGENT_POLICY = "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"

# Ray's metrics export port: KubeRay's default metrics-export-port, set explicitly on every Ray node and named
# "metrics" on the containers, which the PodMonitor scrapes by name.
RAY_METRICS_PORT = 8080
RAY_METRICS_PORT_NAME = "metrics"
RAY_METRICS_PATH = "/metrics"
SCRAPE_INTERVAL = "15s"
PROMETHEUS_PORT = 9090  # the chart's prometheus.service.port and the container's port
GRAFANA_PORT = 3000  # Grafana's container port; the service is set to the same so a NetworkPolicy port is one number
# The label the Prometheus pods get (prometheusSpec.podMetadata) and the Ray namespace's policy admits.
SCRAPER_LABEL = {"raytrain.io/metrics-scraper": "prometheus"}
# Seven days of samples on the pod's emptyDir: the metrics of one fine-tune, not an archive. A restarted Prometheus
# starts empty (no persistent volume: the cluster has no EBS CSI driver); a long-term store is the user's choice.
PROMETHEUS_RETENTION = "7d"
PROMETHEUS_RETENTION_SIZE = "6GB"
GRAFANA_ADMIN_USER = "admin"
GRAFANA_ADMIN_SECRET = "grafana-admin"
# Where docs/metrics.md's port-forward puts Grafana, and what the Ray dashboard's iframes load.
GRAFANA_LOCAL_PORT = 3000
DASHBOARD_LABEL = {"grafana_dashboard": "1"}  # the Grafana sidecar's default label (kube-prometheus-stack values)
TRAINING_DASHBOARD_UID = "raytrain-gpus"

# Requests (== limits for memory, so a leak is killed instead of evicting the Ray head) of everything this module puts
# on the system nodes. Prometheus's memory grows with series: a 2-node p5 run is about 16 GPUs x ~30 DCGM series plus
# Ray's and cAdvisor's, well under 1 GiB resident; 1.5Gi leaves room for a few more nodes.
RESOURCES = {
    "prometheus": {"requests": {"cpu": "200m", "memory": "1536Mi"}, "limits": {"memory": "1536Mi"}},
    "prometheus-operator": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "128Mi"}},
    "grafana": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
    "grafana-sidecar": {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "96Mi"}},
    "kube-state-metrics": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    "node-exporter": {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
    # On the GPU nodes, the one thing there besides the Ray worker and the node agents (the chart's own figures).
    "dcgm-exporter": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "200m", "memory": "512Mi"}},
}


def prometheus_service() -> str:
    """The chart's Prometheus service: <fullname>-prometheus, the release name being the fullname (it contains the
    chart's name; kube-prometheus-stack _helpers.tpl)."""
    return f"{KUBE_PROMETHEUS_STACK_RELEASE}-prometheus"


def grafana_service() -> str:
    """The grafana subchart's service: <release>-grafana."""
    return f"{KUBE_PROMETHEUS_STACK_RELEASE}-grafana"


def kube_prometheus_stack_values() -> dict:
    """Prometheus, its operator, Grafana and kube-state-metrics on the system nodes; node-exporter there too (it would
    tolerate the GPU taint); no Alertmanager, and no scrapes of what EKS runs out of reach (etcd, scheduler,
    controller manager) or binds to localhost (kube-proxy's metrics), which would only show as targets down."""
    system = dict(SYSTEM_NODE_SELECTOR)
    return {
        "alertmanager": {"enabled": False},
        "kubeEtcd": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeControllerManager": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "prometheusOperator": {
            "nodeSelector": system,
            "resources": RESOURCES["prometheus-operator"],
            "admissionWebhooks": {"patch": {"nodeSelector": system}},
        },
        "prometheus": {
            "prometheusSpec": {
                "nodeSelector": system,
                "resources": RESOURCES["prometheus"],
                "retention": PROMETHEUS_RETENTION,
                "retentionSize": PROMETHEUS_RETENTION_SIZE,
                "scrapeInterval": SCRAPE_INTERVAL,
                # Select every PodMonitor and ServiceMonitor, not only those labelled with this release: the DCGM
                # chart's ServiceMonitor and the Ray PodMonitor are not.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "podMetadata": {"labels": dict(SCRAPER_LABEL)},
            },
        },
        "grafana": {
            "nodeSelector": system,
            "resources": RESOURCES["grafana"],
            "admin": {"existingSecret": GRAFANA_ADMIN_SECRET, "userKey": "admin-user", "passwordKey": "admin-password"},
            "service": {"port": GRAFANA_PORT, "targetPort": GRAFANA_PORT},
            # The Ray dashboard embeds Grafana panels in iframes (Ray docs, "Embedding Grafana visualizations into
            # Ray Dashboard"); anonymous access stays off, so the browser logs in to Grafana once.
            "grafana.ini": {"security": {"allow_embedding": True}},
            "sidecar": {"resources": RESOURCES["grafana-sidecar"]},
        },
        "kube-state-metrics": {"nodeSelector": system, "resources": RESOURCES["kube-state-metrics"]},
        # In the namespace for host access (monitoring_security.py): the rest of the stack's namespace stays baseline.
        "prometheus-node-exporter": {"nodeSelector": system, "resources": RESOURCES["node-exporter"],
                                     "namespaceOverride": MONITORING_HOST_NAMESPACE},
    }


def dcgm_exporter_values() -> dict:
    """Only on GPU nodes, tolerating their taint (the chart's own toleration is for control-plane nodes, and Helm
    replaces a list instead of merging it). Its ServiceMonitor (on by default) is what Prometheus scrapes."""
    return {
        "nodeSelector": {GPU_PRESENT_LABEL: "true"},
        "tolerations": [dict(GPU_TOLERATION)],
        "resources": RESOURCES["dcgm-exporter"],
        # The exporter's own Hostname label is its pod's name (it does not run on the host network): the node comes
        # from service discovery instead (the chart's commented relabeling example, as `node`).
        "serviceMonitor": {"enabled": True, "interval": SCRAPE_INTERVAL, "relabelings": [
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]},
    }


def ray_pod_monitor(*, namespace: str, cluster_name: str) -> dict:
    """The scrape configuration of the Ray pods: every pod of the RayCluster (head and workers) on its "metrics" port.
    Each target gets the pod's node and Ray node type as labels, which the training dashboard groups by."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": f"{cluster_name}-ray", "namespace": MONITORING_NAMESPACE},
        "spec": {
            "namespaceSelector": {"matchNames": [namespace]},
            "selector": {"matchLabels": {CLUSTER_LABEL: cluster_name}},
            "podMetricsEndpoints": [{
                "port": RAY_METRICS_PORT_NAME,
                "path": RAY_METRICS_PATH,
                "interval": SCRAPE_INTERVAL,
                "relabelings": [
                    {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
                    {"sourceLabels": [f"__meta_kubernetes_pod_label_{_label_name(NODE_TYPE_LABEL)}"],
                     "targetLabel": "ray_node_type"},
                ],
            }],
        },
    }


def _label_name(label: str) -> str:
    """A Kubernetes label as Prometheus's service discovery names it (every character outside [a-zA-Z0-9_] -> _)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in label)


def ray_metrics_start_params() -> dict[str, str]:
    """rayStartParams of every Ray node: the metrics port the PodMonitor scrapes."""
    return {"metrics-export-port": str(RAY_METRICS_PORT)}


def ray_metrics_container_port() -> dict:
    return {"name": RAY_METRICS_PORT_NAME, "containerPort": RAY_METRICS_PORT}


def ray_head_env() -> dict[str, str]:
    """What the Ray dashboard's Metrics view needs on the head (Ray docs, "Configuring and managing Ray Dashboard"):
    its server queries Prometheus and checks Grafana in the cluster; the browser loads Grafana's iframes from the
    docs/metrics.md's port-forward."""
    return {
        "RAY_PROMETHEUS_HOST": f"http://{prometheus_service()}.{MONITORING_NAMESPACE}.svc:{PROMETHEUS_PORT}",
        "RAY_GRAFANA_HOST": f"http://{grafana_service()}.{MONITORING_NAMESPACE}.svc:{GRAFANA_PORT}",
        "RAY_GRAFANA_IFRAME_HOST": f"http://localhost:{GRAFANA_LOCAL_PORT}",
        "RAY_PROMETHEUS_NAME": "Prometheus",  # the chart's default data source's name, which Ray's dashboards use
    }


def scrape_network_policies(*, namespace: str, cluster_name: str) -> list[dict]:
    """The Ray namespace's openings for metrics, beside its default deny: Prometheus in, to Ray's metrics port only;
    the head out, to Prometheus and Grafana only. (Policies are additive: these allow nothing else.)"""
    ray_pods = {"matchLabels": {CLUSTER_LABEL: cluster_name}}
    head = {"matchLabels": {CLUSTER_LABEL: cluster_name, NODE_TYPE_LABEL: "head"}}
    monitoring_namespace = {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}}

    def policy(name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    return [
        policy(f"{cluster_name}-metrics-scrape", {
            "podSelector": ray_pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": monitoring_namespace,
                                   "podSelector": {"matchLabels": dict(SCRAPER_LABEL)}}],
                         "ports": [{"protocol": "TCP", "port": RAY_METRICS_PORT}]}],
        }),
        policy(f"{cluster_name}-dashboard-metrics", {
            "podSelector": head,
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"namespaceSelector": monitoring_namespace,
                         "podSelector": {"matchLabels": dict(SCRAPER_LABEL)}}],
                 "ports": [{"protocol": "TCP", "port": PROMETHEUS_PORT}]},
                {"to": [{"namespaceSelector": monitoring_namespace,
                         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "grafana"}}}],
                 "ports": [{"protocol": "TCP", "port": GRAFANA_PORT}]},
            ],
        }),
    ]


def dashboard_command(kubeconfig: str = "kubeconfig.json") -> str:
    """How a user opens Grafana (and so the Ray dashboard's Metrics view): a port-forward, then the login."""
    return (f"kubectl --kubeconfig {kubeconfig} -n {MONITORING_NAMESPACE} port-forward svc/{grafana_service()} "
            f"{GRAFANA_LOCAL_PORT}:{GRAFANA_PORT}  # then http://localhost:{GRAFANA_LOCAL_PORT}, user "
            f"{GRAFANA_ADMIN_USER}, password: pulumi stack output grafanaAdminPassword --show-secrets")


# ---- Grafana dashboards -------------------------------------------------------------------------------------------

# One row per question a user asks of a running fine-tune: (title, PromQL, unit, what it says). docs/metrics.md's panel
# table is this list. Every series carries `node`: DCGM's and Ray's from their scrape configs' relabelings, cAdvisor's
# from the Prometheus operator's kubelet endpoints (their target is the Node).
TRAINING_PANELS = (
    ("GPU utilization", "avg by (node, gpu) (DCGM_FI_DEV_GPU_UTIL)", "percent",
     "share of time each GPU ran a kernel; a healthy FSDP run sits near 100 on every GPU, one low GPU is a straggler"),
    ("Tensor core activity", "avg by (node, gpu) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", "percentunit",
     "share of cycles the tensor cores were busy: closer to MFU than utilization"),
    ("GPU memory used", "avg by (node, gpu) (DCGM_FI_DEV_FB_USED) * 1048576", "bytes",
     "frame buffer in use per GPU; flat during training, equal across ranks under FSDP"),
    ("GPU power", "avg by (node, gpu) (DCGM_FI_DEV_POWER_USAGE)", "watt",
     "board power draw; drops with utilization when a GPU waits on the network"),
    ("SM clock", "avg by (node, gpu) (DCGM_FI_DEV_SM_CLOCK)", "rotmhz",
     "falls when a GPU throttles (power or thermal)"),
    ("XID errors", "max by (node, gpu) (DCGM_FI_DEV_XID_ERRORS)", "none",
     "the last XID the driver raised per GPU; any non-zero value is a driver or hardware fault to look up"),
    ("Node network (pod network)",
     'sum by (node) (rate(container_network_transmit_bytes_total{namespace="ray"}[1m]) '
     '+ rate(container_network_receive_bytes_total{namespace="ray"}[1m]))', "Bps",
     "bytes per second through each Ray pod's eth0: bootstrap, S3, and NCCL only if it fell back to sockets "
     "(EFA traffic bypasses the kernel and is not counted here)"),
    ("Job tokens/s", "max by (node) (ray_raytrain_tokens_per_second)", "none",
     "the job's throughput as rank 0 measures it each step (the same figure its log line prints)"),
    ("Job step time", "max by (node) (ray_raytrain_step_time_seconds)", "s",
     "seconds per optimizer step on rank 0; rising with flat GPU utilization points at the network"),
)


def training_dashboard() -> dict:
    """Our dashboard: the panels above, in a two-column grid, on the chart's default Prometheus data source."""
    panels = []
    for index, (title, expression, unit, description) in enumerate(TRAINING_PANELS):
        panels.append({
            "id": index + 1, "type": "timeseries", "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "prometheus"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"expr": expression, "refId": "A", "legendFormat": "__auto"}],
        })
    return {"uid": TRAINING_DASHBOARD_UID, "title": "Ray Train on EKS: GPUs, network, job", "schemaVersion": 39,
            "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "panels": panels, "tags": ["raytrain"]}


@functools.cache
def ray_dashboards() -> dict[str, str]:
    """Ray's own Grafana dashboards (the ones the Ray dashboard's Metrics view embeds), generated by Ray's factory of
    the Ray this program runs with (requirements.txt), as the head itself writes them under
    /tmp/ray/session_latest/metrics/grafana/dashboards (KubeRay's Prometheus guide copies those by hand)."""
    from ray.dashboard.modules.metrics import grafana_dashboard_factory as factory

    dashboards = {}
    for generate in (factory.generate_default_grafana_dashboard, factory.generate_train_grafana_dashboard):
        content, uid = generate()
        dashboards[f"{uid}.json"] = content
    return dashboards


# ---- components ------------------------------------------------------------------------------------------------------

class PrometheusMonitoring(pulumi.ComponentResource):
    """kube-prometheus-stack and the DCGM exporter, the dashboards, the Ray PodMonitor and the Ray namespace's
    scrape policies; Grafana's admin password as a Pulumi secret."""

    def __init__(self, name: str, *, provider: k8s.Provider, ray_namespace: pulumi.Input[str], ray_namespace_name: str,
                 ray_cluster_name: str, depends_on: list[pulumi.Resource], control_plane_cidrs: tuple[str, ...],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("raytrain:infra:PrometheusMonitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on))
        # Two namespaces, Pod Security and NetworkPolicies: infra/kubernetes/monitoring_security.py says why.
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata={"name": MONITORING_NAMESPACE, "labels":
            security.namespace_labels(security.MONITORING_ENFORCE, security.MONITORING_WARN)}, opts=child)
        host_namespace = k8s.core.v1.Namespace(f"{name}-host-namespace", metadata={
            "name": security.MONITORING_HOST_NAMESPACE,
            "labels": security.namespace_labels(security.HOST_ENFORCE, security.HOST_WARN)}, opts=child)
        self.monitoring_policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{policy['metadata']['namespace']}-{policy['metadata']['name']}", metadata=policy["metadata"],
                spec=policy["spec"], opts=pulumi.ResourceOptions(parent=self, provider=provider,
                                                                 depends_on=[namespace, host_namespace]))
            for policy in security.network_policies(
                monitoring_namespace=MONITORING_NAMESPACE, ray_namespace=ray_namespace_name,
                ray_cluster_name=ray_cluster_name, scraper_label=SCRAPER_LABEL, prometheus_port=PROMETHEUS_PORT,
                grafana_port=GRAFANA_PORT, control_plane_cidrs=control_plane_cidrs)]
        namespace_ready = [namespace, host_namespace, *self.monitoring_policies]
        in_namespace = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[*namespace_ready,
                                                                                        *depends_on])
        self.grafana_password = random.RandomPassword(
            f"{name}-grafana-admin", length=24, special=False, opts=pulumi.ResourceOptions(parent=self))
        # pulumi-random marks `result` secret itself (additionalSecretOutputs); wrapping it says so here too.
        self.admin_password: pulumi.Output[str] = pulumi.Output.secret(self.grafana_password.result)
        admin_secret = k8s.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata={"name": GRAFANA_ADMIN_SECRET, "namespace": MONITORING_NAMESPACE},
            string_data={"admin-user": GRAFANA_ADMIN_USER, "admin-password": self.admin_password},
            opts=in_namespace)
        dashboards = {"training": {f"{TRAINING_DASHBOARD_UID}.json": json.dumps(training_dashboard())},
                      **{key.removesuffix(".json").lower(): {key: value} for key, value in ray_dashboards().items()}}
        # One ConfigMap per dashboard: Ray's default one alone is ~200 KB, and a ConfigMap holds 1 MiB.
        dashboard_maps = [
            k8s.core.v1.ConfigMap(f"{name}-dashboard-{key}",
                                  metadata={"name": f"dashboard-{key}", "namespace": MONITORING_NAMESPACE,
                                            "labels": dict(DASHBOARD_LABEL)},
                                  data=data, opts=in_namespace)
            for key, data in dashboards.items()]

        def release(suffix: str, release_name: str, chart: str, version: str, repo: str, values: dict,
                    after: list[pulumi.Resource], release_namespace: str = MONITORING_NAMESPACE) -> k8s.helm.v3.Release:
            return k8s.helm.v3.Release(
                f"{name}-{suffix}",
                k8s.helm.v3.ReleaseArgs(name=release_name, chart=chart, version=version,
                                        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo),
                                        namespace=release_namespace, values=values),
                opts=pulumi.ResourceOptions(parent=self, provider=provider,
                                            depends_on=[*namespace_ready, *depends_on, *after]))

        # Each image by digest once infra/kubernetes/image_pins.py has it (nothing changes until then).
        self.stack = release("kube-prometheus-stack", KUBE_PROMETHEUS_STACK_RELEASE, KUBE_PROMETHEUS_STACK_CHART,
                             KUBE_PROMETHEUS_STACK_VERSION, KUBE_PROMETHEUS_STACK_REPO,
                             image_pins.merged(kube_prometheus_stack_values(),
                                               image_pins.chart_values(KUBE_PROMETHEUS_STACK_RELEASE)),
                             [admin_secret, *dashboard_maps])
        # After the stack: its ServiceMonitor is a CRD the stack installs.
        self.dcgm_exporter = release("dcgm-exporter", DCGM_EXPORTER_RELEASE, DCGM_EXPORTER_CHART,
                                     DCGM_EXPORTER_VERSION, DCGM_EXPORTER_REPO,
                                     image_pins.merged(dcgm_exporter_values(),
                                                       image_pins.chart_values(DCGM_EXPORTER_RELEASE)), [self.stack],
                                     release_namespace=security.MONITORING_HOST_NAMESPACE)
        monitor = ray_pod_monitor(namespace=ray_namespace_name, cluster_name=ray_cluster_name)
        self.pod_monitor = k8s.apiextensions.CustomResource(
            f"{name}-ray-pod-monitor", api_version=monitor["apiVersion"], kind=monitor["kind"],
            metadata=monitor["metadata"], spec=monitor["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[self.stack]))
        # In the Ray namespace, whose name comes from the RayCluster component (so it exists first).
        self.network_policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{policy['metadata']['name']}",
                metadata={**policy["metadata"], "namespace": ray_namespace}, spec=policy["spec"],
                opts=pulumi.ResourceOptions(parent=self, provider=provider))
            for policy in scrape_network_policies(namespace=ray_namespace_name, cluster_name=ray_cluster_name)]
        self.dashboard_command: pulumi.Output[str] = self.stack.status.apply(lambda _: dashboard_command())
        self.register_outputs({"dashboard_command": self.dashboard_command,
                               "grafana_admin_password": self.admin_password})


def system_node_requests() -> dict[str, dict[str, str]]:
    """Requests of what this module schedules on the system nodes (the DCGM exporter runs on the GPU nodes)."""
    return {name: spec["requests"] for name, spec in RESOURCES.items() if name != "dcgm-exporter"}
