"""Issue 24 under the mocks and as pure functions: the metrics stack, node repair and the idle stop in every stack,
their pins and values checked against the charts' own values.yaml (tests/reference/charts), the NetworkPolicies
evaluated connection by connection, the system node's budget, and each key's other settings.

Expected values come from the charts' copies, Pulumi.yaml and the stack files, AWS's ARN format and the upstream
facts the modules cite; a pinned version is the program's own constant, asserted so that a bump is a reviewed diff.
"""
from __future__ import annotations

import ipaddress
import json

import jsonschema
import pytest
import yaml

from infra.aws import addon_pins
from infra.aws.node_labels import GPU_TOLERATION
from infra.kubernetes import idle_stop, monitoring
from infra.kubernetes.raycluster import HEAD_CPU, HEAD_MEMORY
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import REFERENCE_DIR, STACKS, ProgramRun, program, run_program, stack_settings

RELEASE = "kubernetes:helm.sh/v3:Release"
ADDON = "aws:eks/addon:Addon"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
CHARTS = REFERENCE_DIR / "charts"


def chart_values(name: str) -> dict:
    return yaml.safe_load((CHARTS / f"{name}-values.yaml").read_text())


def gpu_node_group(run: ProgramRun):
    return run.one(NODE_GROUP, f"{stack_settings(run.stack)['clusterName']}-gpu-ng")


# ---- what every stack renders ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_renders_the_pinned_metrics_stack_node_repair_and_idle_stop(stack):
    run = program(stack)
    releases = {r.inputs["name"]: r.inputs for r in run.of_type(RELEASE)}
    expected = {
        "kube-prometheus-stack": ("kube-prometheus-stack", "88.5.3",
                                  "https://prometheus-community.github.io/helm-charts", "monitoring"),
        # Issue 31: the DaemonSets that need the host run in a privileged namespace of their own.
        "dcgm-exporter": ("dcgm-exporter", "4.8.2", "https://nvidia.github.io/dcgm-exporter/helm-charts",
                          "monitoring-host"),
    }
    for release, (chart, version, repo, namespace) in expected.items():
        got = releases[release]
        assert (got["chart"], got["version"], got["repositoryOpts"]["repo"], got["namespace"]) == (
            chart, version, repo, namespace), f"{stack}: {release} must be {chart} {version} from {repo}: {got}"
    monitor = run.one("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    assert monitor.inputs["spec"]["namespaceSelector"] == {"matchNames": ["ray"]}, stack
    assert monitor.inputs["spec"]["podMetricsEndpoints"][0]["port"] == "metrics", stack
    # The PodMonitor's port name is the one the Ray containers declare, on the port Ray exports to.
    rc = run.one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    for group in (rc["headGroupSpec"], *rc["workerGroupSpecs"]):
        ports = {p["name"]: p["containerPort"] for p in group["template"]["spec"]["containers"][0]["ports"]}
        assert ports["metrics"] == int(group["rayStartParams"]["metrics-export-port"]) == 8080, (stack, ports)
    head_env = {e["name"]: e.get("value") for e in rc["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    assert head_env["RAY_PROMETHEUS_HOST"] == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090", head_env
    assert head_env["RAY_GRAFANA_HOST"] == "http://kube-prometheus-stack-grafana.monitoring.svc:3000", head_env

    agent = run.one(ADDON, f"{stack_settings(stack)['clusterName']}-node-monitoring-agent")
    assert agent.inputs["addonName"] == "eks-node-monitoring-agent", stack
    # Issue 31: pinned, not EKS's default (which may predate the dcgmAgent key the configuration sets).
    assert agent.inputs["addonVersion"] == "v1.6.6-eksbuild.1", f"{stack}: {agent.inputs.get('addonVersion')}"
    repair = gpu_node_group(run).inputs["nodeRepairConfig"]
    assert repair == {"enabled": True, "maxParallelNodesRepairedCount": 1, "maxUnhealthyNodeThresholdCount": 1}, \
        f"{stack}: repair on, one node at a time: {repair}"
    assert run.one("kubernetes:batch/v1:CronJob").inputs["spec"]["schedule"] == "*/5 * * * *", stack
    assert {"grafanaCommand", "grafanaAdminPassword", "gpuWakeCommand"} <= set(run.exports), sorted(run.exports)
    assert "grafanaAdminPassword" in run.secret_exports, f"{stack}: Grafana's password must be a Pulumi secret"
    assert "port-forward svc/kube-prometheus-stack-grafana 3000:3000" in run.exports["grafanaCommand"]


def test_node_monitoring_agents_configuration_is_valid_and_lets_its_dcgm_onto_the_gpu_nodes():
    # The schema of the pinned version (issue 31): a bump without copying its schema fails here.
    schema = json.loads((CHARTS / f"eks-node-monitoring-agent-{addon_pins.NODE_MONITORING_AGENT_SCHEMA_TAG}"
                                  "-configuration.schema.json").read_text())
    assert addon_pins.NODE_MONITORING_AGENT_VERSION.startswith(addon_pins.NODE_MONITORING_AGENT_SCHEMA_TAG + "-eksbuild.")
    configuration = json.loads(program("dev").one(
        ADDON, "ray-train-node-monitoring-agent").inputs["configurationValues"])
    jsonschema.validate(configuration, schema)
    assert GPU_TOLERATION in configuration["dcgmAgent"]["tolerations"], configuration
    with pytest.raises(jsonschema.ValidationError):  # the schema is strict: a misspelt key would be refused by EKS
        jsonschema.validate({"dcgmAgents": {"tolerations": []}}, schema)


def test_add_on_versions_are_pinned_in_one_place_and_every_pinned_add_on_uses_its_pin():
    """Issue 31, item 7: the pins live in infra/aws/addon_pins.py only, and each Addon the program creates under a
    pinned name is given that version (the cloudwatch stack brings the CloudWatch add-on)."""
    from pathlib import Path
    infra = Path(addon_pins.__file__).parents[1]
    elsewhere = [str(f.relative_to(infra)) for f in infra.rglob("*.py")
                 if "-eksbuild." in f.read_text() and f.name != "addon_pins.py"]
    assert elsewhere == [], f"add-on versions outside infra/aws/addon_pins.py: {elsewhere}"
    given = {}
    for run in (program("dev"), run_program("dev", {"monitoring": "cloudwatch"})):
        given.update({a.inputs["addonName"]: a.inputs.get("addonVersion") for a in run.of_type(ADDON)})
    assert {name: given.get(name) for name in addon_pins.ADDON_VERSIONS} == addon_pins.ADDON_VERSIONS, given


# ---- chart values: every key the program sets exists in the pinned chart ---------------------------------------------

# Keys whose value is free-form in the chart (an ini file, a pod spec fragment): their own keys are not in values.yaml.
FREE_FORM = {"grafana.ini", "resources", "nodeSelector", "podMetadata", "tolerations"}


def missing_keys(ours: dict, chart: dict, path: str = "") -> list[str]:
    missing = []
    for key, value in ours.items():
        where = f"{path}.{key}" if path else key
        if key not in chart:
            missing.append(where)
        elif isinstance(value, dict) and key not in FREE_FORM:
            if not isinstance(chart[key], dict):
                missing.append(f"{where} (the chart's is {type(chart[key]).__name__})")
            else:
                missing += missing_keys(value, chart[key], where)
    return missing


def merged(base: dict, override: dict) -> dict:
    """Helm's merge of a parent chart's values for a subchart over the subchart's own: dicts key by key."""
    result = dict(base)
    for key, value in override.items():
        result[key] = merged(result[key], value) if isinstance(value, dict) and isinstance(result.get(key), dict) \
            else value
    return result


def test_kube_prometheus_stack_values_exist_in_the_chart_and_its_subcharts():
    chart = chart_values("kube-prometheus-stack-88.5.3")
    # A subchart's values live under its name; the parent's values.yaml holds only what it overrides.
    for subchart, file in (("grafana", "grafana-12.11.1"), ("kube-state-metrics", "kube-state-metrics-8.4.0"),
                           ("prometheus-node-exporter", "prometheus-node-exporter-4.56.1")):
        chart[subchart] = merged(chart_values(file), chart[subchart])
    assert missing_keys(monitoring.kube_prometheus_stack_values(), chart) == []


def test_dcgm_exporter_values_exist_in_the_chart_and_its_counters_hold_the_panels_metrics():
    assert missing_keys(monitoring.dcgm_exporter_values(), chart_values("dcgm-exporter-4.8.2")) == []
    counters = {line.split(",")[0].strip() for line in (CHARTS / "dcgm-exporter-4.8.2-default-counters.csv")
                .read_text().splitlines() if line.strip() and not line.startswith("#")}
    queried = {word for _, expression, _, _ in monitoring.TRAINING_PANELS for word in
               expression.replace("(", " ").replace(")", " ").split() if word.startswith("DCGM_")}
    assert queried and queried <= counters, f"panels query DCGM fields not exported: {queried - counters}"
    for field in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
                  "DCGM_FI_DEV_XID_ERRORS"):
        assert field in queried, f"the issue's per-GPU figure {field} needs a panel"


def test_only_the_dcgm_exporter_goes_to_the_gpu_nodes():
    values = monitoring.kube_prometheus_stack_values()
    for path in (("prometheusOperator",), ("prometheus", "prometheusSpec"), ("grafana",), ("kube-state-metrics",),
                 ("prometheus-node-exporter",)):
        section = values
        for key in path:
            section = section[key]
        assert section["nodeSelector"] == {"role": "system"}, f"{'.'.join(path)} must be on the system nodes"
        assert "tolerations" not in section, f"{'.'.join(path)} must not tolerate the GPU taint"
    # node-exporter's chart tolerates every NoSchedule taint: only the selector keeps it off the GPU nodes.
    node_exporter = chart_values("prometheus-node-exporter-4.56.1")
    assert {"effect": "NoSchedule", "operator": "Exists"} in node_exporter["tolerations"]
    dcgm = monitoring.dcgm_exporter_values()
    assert dcgm["nodeSelector"] == {"nvidia.com/gpu.present": "true"} and dcgm["tolerations"] == [GPU_TOLERATION]


def test_ray_dashboards_come_from_rays_factory_with_the_uids_its_metrics_view_embeds():
    run = program("dev")
    maps = {r.inputs["metadata"]["name"]: r.inputs for r in run.of_type("kubernetes:core/v1:ConfigMap")
            if r.inputs["metadata"].get("labels") == {"grafana_dashboard": "1"}}
    uids = {json.loads(content)["uid"] for m in maps.values() for content in m["data"].values()}
    assert uids == {"rayDefaultDashboard", "rayTrainDashboard", "raytrain-gpus"}, uids
    ours = json.loads(maps["dashboard-training"]["data"]["raytrain-gpus.json"])
    assert [p["title"] for p in ours["panels"]] == [title for title, *_ in monitoring.TRAINING_PANELS]


# ---- NetworkPolicies: which connections they admit ------------------------------------------------------------------

def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict, pod: dict, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(pod["ip"])
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(cidr) for cidr in block.get("except", []))
    namespace_ok = (_selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": pod["namespace"]})
                    if "namespaceSelector" in peer else pod["namespace"] == policy_namespace)
    return namespace_ok and _selects(peer.get("podSelector", {}), pod["labels"])


def _direction_allows(policies: list[dict], pod: dict, peer: dict, port: int, direction: str) -> bool:
    """NetworkPolicy semantics for one side: not isolated (no policy of that type selects the pod) allows; else
    any rule of any selecting policy whose peers and ports match allows."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies if p["metadata"]["namespace"] == pod["namespace"]
                 and _selects(p["spec"]["podSelector"], pod["labels"]) and direction in p["spec"]["policyTypes"]]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(key, []):
            peers_ok = "from" not in rule and "to" not in rule or any(
                _peer_matches(candidate, peer, policy["metadata"]["namespace"]) for candidate in rule[peers_key])
            ports_ok = "ports" not in rule or any(p["port"] == port for p in rule["ports"])
            if peers_ok and ports_ok:
                return True
    return False


def allows(policies: list[dict], source: dict, destination: dict, port: int) -> bool:
    return (_direction_allows(policies, source, destination, port, "Egress")
            and _direction_allows(policies, destination, source, port, "Ingress"))


def pod(namespace: str, ip: str, **labels: str) -> dict:
    return {"namespace": namespace, "ip": ip, "labels": labels}


PROMETHEUS = pod("monitoring", "10.0.32.10", **{"raytrain.io/metrics-scraper": "prometheus",
                                                "app.kubernetes.io/name": "prometheus"})
GRAFANA = pod("monitoring", "10.0.32.11", **{"app.kubernetes.io/name": "grafana"})
KUBE_STATE_METRICS = pod("monitoring", "10.0.32.12", **{"app.kubernetes.io/name": "kube-state-metrics"})
HEAD = pod("ray", "10.0.33.2", **{"ray.io/cluster": "ray-train", "ray.io/node-type": "head"})
WORKER = pod("ray", "10.0.33.3", **{"ray.io/cluster": "ray-train", "ray.io/node-type": "worker"})
IDLE_CHECK = pod("ray", "10.0.33.4", **{"app.kubernetes.io/name": "ray-idle-stop"})
ELSEWHERE = pod("default", "10.0.34.5", **{"raytrain.io/metrics-scraper": "prometheus"})
# Outside the cluster: the regional EKS API endpoint (a public address through the NAT gateway).
EKS_API = pod("internet", "52.94.133.131")


@pytest.mark.parametrize("stack", STACKS)
def test_network_policies_admit_the_scrapes_and_the_idle_check_and_nothing_more(stack):
    policies = [{"metadata": r.inputs["metadata"], "spec": r.inputs["spec"]} for r in program(stack).of_type(
        NETWORK_POLICY)]
    admitted = [
        (PROMETHEUS, HEAD, 8080), (PROMETHEUS, WORKER, 8080),  # Ray's metrics
        (HEAD, PROMETHEUS, 9090), (HEAD, GRAFANA, 3000),  # the Ray dashboard's Metrics view
        (IDLE_CHECK, HEAD, 8265), (IDLE_CHECK, EKS_API, 443),  # the idle check: the job server, then EKS
        (HEAD, WORKER, 6379), (WORKER, HEAD, 8265),  # Ray itself, as before
    ]
    refused = [
        (PROMETHEUS, HEAD, 8265), (PROMETHEUS, HEAD, 6379), (PROMETHEUS, WORKER, 10001),  # only the metrics port
        (GRAFANA, HEAD, 8080), (KUBE_STATE_METRICS, WORKER, 8080),  # only Prometheus scrapes
        (ELSEWHERE, WORKER, 8080),  # the scraper's label in another namespace
        (WORKER, PROMETHEUS, 9090), (WORKER, GRAFANA, 3000), (HEAD, KUBE_STATE_METRICS, 8080),  # only the head, there
        (HEAD, PROMETHEUS, 8080), (HEAD, GRAFANA, 9090),  # only their ports
        (IDLE_CHECK, WORKER, 8265), (IDLE_CHECK, HEAD, 6379), (IDLE_CHECK, PROMETHEUS, 9090),
        (IDLE_CHECK, EKS_API, 80),
    ]
    for source, destination, port in admitted:
        assert allows(policies, source, destination, port), f"{stack}: {source['labels']} -> " \
            f"{destination['labels'] or destination['ip']}:{port} must be admitted"
    for source, destination, port in refused:
        assert not allows(policies, source, destination, port), f"{stack}: {source['labels']} -> " \
            f"{destination['labels'] or destination['ip']}:{port} must be refused"


# ---- idle stop -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_idle_stop_is_scoped_to_the_gpu_node_group_and_pulumi_up_leaves_its_size_alone(stack):
    run = program(stack)
    group = gpu_node_group(run)
    count = stack_settings(stack)["gpuNodeCount"]
    assert group.inputs["scalingConfig"] == {"desiredSize": count, "minSize": 0, "maxSize": count}, stack
    assert group.ignore_changes == ["nodeGroupName", "scalingConfig"], f"{stack}: `pulumi up` must not fight a stopped group (issue 31: " \
        "nor send a stale desired size above a lowered max; GpuNodesAwake sets the sizes)"
    name = stack_settings(stack)["clusterName"]
    policy = json.loads(run.one("aws:iam/rolePolicy:RolePolicy", f"{name}-idle-stop-scaling").inputs["policy"])
    assert policy["Statement"] == [{"Effect": "Allow", "Action": ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"],
                                    "Resource": group.outputs["arn"]}], f"{stack}: the GPU node group only: {policy}"
    assert group.outputs["arn"].startswith(f"arn:aws:eks:{run.config['aws:region']}:"), group.outputs["arn"]
    association = run.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", f"{name}-idle-stop-association")
    cron = run.one("kubernetes:batch/v1:CronJob").inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
        "ray", cron["serviceAccountName"])
    env = {e["name"]: e.get("value") or e.get("valueFrom") for e in cron["containers"][0]["env"]}
    assert env["IDLE_MINUTES"] == "60" and env["GPU_NODEGROUP"] == group.outputs["nodeGroupName"], env
    assert env["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": "ray-train", "key": "auth_token"}}, env
    assert cron["nodeSelector"] == {"role": "system"}, "the check runs on the system node"
    script = run.one("kubernetes:core/v1:ConfigMap", f"{name}-idle-stop-script").inputs["data"]
    assert script == {"idle_check.py": idle_stop.CHECK_SCRIPT.read_text()}, "the CronJob runs the tested script"


def test_idle_stop_and_repair_off_and_cloudwatch_instead_of_prometheus():
    """One run with each key at its other setting."""
    run = run_program("dev", {"gpuIdleStopMinutes": 0, "gpuNodeRepair": False, "monitoring": "cloudwatch"})
    group = gpu_node_group(run)
    assert group.inputs["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 2}
    assert group.ignore_changes == ["nodeGroupName"], "without the idle stop, pulumi up restores the count"
    assert group.inputs["nodeRepairConfig"] == {"enabled": False}, "gpuNodeRepair false turns repair off explicitly"
    assert not run.of_type("kubernetes:batch/v1:CronJob") and "gpuWakeCommand" not in run.exports, "no idle check"
    assert {r.inputs["name"] for r in run.of_type(RELEASE)} == {
        "nvidia-device-plugin", "aws-efa-k8s-device-plugin", "kuberay-operator"}, "cloudwatch: no Prometheus stack"
    head = run.one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]["headGroupSpec"]["template"]["spec"]
    assert not any(e["name"].startswith("RAY_GRAFANA") for e in head["containers"][0]["env"])
    addon = run.one(ADDON, "ray-train-cloudwatch-addon")
    assert addon.inputs["addonName"] == "amazon-cloudwatch-observability"
    assert addon.inputs["addonVersion"] == "v6.4.0-eksbuild.1", addon.inputs.get("addonVersion")  # issue 31
    (association,) = addon.inputs["podIdentityAssociations"]
    assert association["serviceAccount"] == "cloudwatch-agent"
    assert "CloudWatch" in run.exports["grafanaCommand"] and "grafanaAdminPassword" not in run.exports


@pytest.mark.parametrize("overrides, key", [
    ({"monitoring": "grafana"}, "monitoring"),
    ({"gpuIdleStopMinutes": 5}, "gpuIdleStopMinutes"),
    ({"gpuIdleStopMinutes": -1}, "gpuIdleStopMinutes"),
])
def test_bad_keys_are_refused_naming_them(overrides, key):
    from tests.support.pulumi_mocks import run_program_expecting_error

    failed = run_program_expecting_error("dev", overrides)
    assert isinstance(failed.error, ValueError) and key in str(failed.error), failed.error
    assert not failed.resources, "refused before any resource"


# ---- the system node's budget ----------------------------------------------------------------------------------------

# Requests of what runs on a system node beside the Ray head, with where each figure comes from. The add-ons' own
# figures are EKS's defaults for its managed add-ons (coredns 100m/70Mi per replica, two replicas; kube-proxy 100m;
# aws-node 25m), the node monitoring agent's chart (10m/30Mi), the KubeRay chart's limits (requests default to them),
# node-feature-discovery's chart defaults for its master (100m/128Mi) and gc (10m/128Mi), this repository's own.
KUBE_SYSTEM_REQUESTS = {
    "coredns": ("200m", "140Mi"), "kube-proxy": ("100m", "0"), "aws-node": ("25m", "0"),
    "node-monitoring-agent": ("10m", "30Mi"), "kuberay-operator": ("100m", "512Mi"),
    "nfd-master": ("100m", "128Mi"), "nfd-gc": ("10m", "128Mi"),
    "idle-check": (idle_stop.CHECK_RESOURCES["requests"]["cpu"], idle_stop.CHECK_RESOURCES["requests"]["memory"]),
}


def _cpu(value: str) -> float:
    return float(value.removesuffix("m")) / 1000 if value.endswith("m") else float(value)


def _mib(value: str) -> float:
    return float(value.removesuffix("Gi")) * 1024 if value.endswith("Gi") else float(value.removesuffix("Mi") or 0)


def allocatable(instance_type: str) -> tuple[float, float]:
    """(CPUs, MiB) a node of this type offers pods on the EKS AL2023 AMI: kube-reserved CPU 6% of the first core,
    1% of the second, 0.5% of the next two, 0.25% beyond; memory 255 MiB + 11 MiB per pod (max pods for the default
    m7i.xlarge: 58, from its ENIs), eviction threshold 100 MiB; of the memory the kernel leaves (taken as 95%)."""
    facts = INSTANCE_FACTS[instance_type]
    cores = facts.vcpus
    reserved_cpu = 0.06 + 0.01 * (cores > 1) + 0.005 * min(max(cores - 2, 0), 2) + 0.0025 * max(cores - 4, 0)
    return cores - reserved_cpu, facts.memory_mib * 0.95 - (255 + 11 * 58) - 100


def test_the_default_system_node_holds_everything_with_the_stated_margin():
    pods = {**{name: (r["cpu"], r["memory"]) for name, r in monitoring.system_node_requests().items()},
            **KUBE_SYSTEM_REQUESTS}
    addons_cpu = sum(_cpu(cpu) for cpu, _ in pods.values())
    addons_mib = sum(_mib(memory) for _, memory in pods.values())
    # infra/preview/feasibility.py refuses a system type smaller than head + these reserves: they must cover the real sum.
    from infra.preview.feasibility import SYSTEM_ADDONS_CPU, SYSTEM_ADDONS_MEMORY_GIB

    assert addons_cpu <= SYSTEM_ADDONS_CPU and addons_mib <= SYSTEM_ADDONS_MEMORY_GIB * 1024, (addons_cpu, addons_mib)
    cpu, mib = allocatable("m7i.xlarge")
    used_cpu, used_mib = _cpu(HEAD_CPU) + addons_cpu, _mib(HEAD_MEMORY) + addons_mib
    margin = (cpu - used_cpu, (mib - used_mib) / 1024)
    # The README's figure ("about 0.8 CPU and 2.5 GiB to spare"): a change of requests that eats it fails here.
    assert margin[0] >= 0.75 and margin[1] >= 2.3, f"m7i.xlarge margin {margin[0]:.2f} CPU, {margin[1]:.2f} GiB"


def test_tools_status_prints_the_dashboard_command_and_why_gpu_nodes_are_missing(tmp_path):
    from pathlib import Path

    from tools.status import dashboard_lines

    lines = dashboard_lines("dev", Path("kubeconfig.json"), gpu_nodes=2)
    assert lines == [f"Metrics (Grafana; the Ray dashboard's Metrics view embeds it): "
                     f"{monitoring.dashboard_command('kubeconfig.json')}"], lines
    assert "port-forward svc/kube-prometheus-stack-grafana 3000:3000" in lines[0]
    stopped = dashboard_lines("dev", None, gpu_nodes=0)
    assert len(stopped) == 2 and "gpuWakeCommand" in stopped[1] and "60 minutes" in stopped[1], stopped
