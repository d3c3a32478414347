"""The security baseline (issue 14) in the rendered resources of every stack, and each way of getting it wrong refused.

Expected values come from the stack files, Pulumi.yaml's defaults, tests/support/pulumi_mocks.py's fake AWS (the deployer's
address, the caller) and the upstream facts the module docstrings cite, not from the code under test; where a value
is the program's own constant (the log types, the EFA capability), the test says which requirement it answers.
"""
from __future__ import annotations

import ipaddress
import json
from unittest import mock

import pytest

from infra.aws import network
from infra.kubernetes import ray_security
from infra.kubernetes.raycluster import KNOWN_IMAGES, containers, ray_cluster_manifest
from tests.program.test_stack import gpu_launch_template, launch_template_of, system_node_group
from tests.support.fake_aws import ACCOUNT_ID, DEPLOYER_IP, DEPLOYER_ROLE_ARN
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import (
    STACKS,
    ProgramRun,
    Secret,
    is_secret_value,
    plain_strings,
    program,
    ray_pods_role,
    run_program,
    run_program_expecting_error,
    stack_settings,
)

EKS_CLUSTER = "eks:index:Cluster"
NAMESPACE = "kubernetes:core/v1:Namespace"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
K8S_SECRET = "kubernetes:core/v1:Secret"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
JOB = "pulumi-python:dynamic/raytrain:TrainingJob"
STORAGE = "s3://ckpt-bucket/runs/dev"
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                         "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}  # Pod Security Standards, baseline


def pod_specs(run: ProgramRun) -> dict[str, dict]:
    spec = run.one(RAYCLUSTER).inputs["spec"]
    return {"head": spec["headGroupSpec"]["template"]["spec"],
            **{group["groupName"]: group["template"]["spec"] for group in spec["workerGroupSpecs"]}}


# ---- nodes: IMDS, volumes, roles ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_every_node_group_has_imds_hop_limit_1_and_an_encrypted_root(stack):
    run = program(stack)
    for template in (launch_template_of(run, system_node_group(run)), gpu_launch_template(run)):
        metadata = template.inputs["metadataOptions"]
        assert (metadata["httpTokens"], metadata["httpPutResponseHopLimit"]) == ("required", 1), \
            f"{stack}: {template.name} must require IMDSv2 with hop limit 1 (no pod reaches the node role)"
        assert template.inputs["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true", \
            f"{stack}: {template.name}'s root volume must be encrypted"


# ---- the control plane ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_api_endpoint_admits_the_deployer_only_and_keeps_private_access(stack):
    inputs = program(stack).one(EKS_CLUSTER).inputs
    assert inputs["endpointPrivateAccess"] is True, f"{stack}: nodes reach the API server privately"
    assert inputs["endpointPublicAccess"] is True and inputs["publicAccessCidrs"] == [f"{DEPLOYER_IP}/32"], \
        f"{stack}: the public endpoint answers the deployer's address only, got {inputs['publicAccessCidrs']}"


@pytest.mark.parametrize("stack", STACKS)
def test_control_plane_logs_go_to_a_log_group_with_retention_made_first(stack):
    run = program(stack)
    cluster = run.one(EKS_CLUSTER)
    assert sorted(cluster.inputs["enabledClusterLogTypes"]) == ["api", "audit", "authenticator"], \
        f"{stack}: CIS EKS 2.1.1 asks for api, audit and authenticator logs"
    group = run.one("aws:cloudwatch/logGroup:LogGroup")
    assert group.inputs["name"] == f"/aws/eks/{stack_settings(stack)['clusterName']}/cluster", \
        f"{stack}: EKS writes to /aws/eks/<cluster>/cluster: the stack's group must be that one"
    assert group.inputs["retentionInDays"] == stack_settings(stack)["controlPlaneLogRetentionDays"], stack
    assert group.urn in cluster.dependencies, f"{stack}: the group must exist before EKS would create it"


def test_log_retention_follows_its_key():
    group = run_program("dev", {"controlPlaneLogRetentionDays": 365}).one("aws:cloudwatch/logGroup:LogGroup")
    assert group.inputs["retentionInDays"] == 365


@pytest.mark.parametrize("stack", STACKS)
def test_secrets_are_envelope_encrypted_with_a_rotated_key_the_cluster_role_may_use(stack):
    run = program(stack)
    key = run.one("aws:kms/key:Key")
    assert key.inputs["enableKeyRotation"] is True, f"{stack}: the secrets key must rotate"
    cluster = run.one(EKS_CLUSTER)
    assert cluster.inputs["encryptionConfigKeyArn"] == key.outputs["arn"], f"{stack}: Secrets use the stack's key"
    policy = run.one(ROLE_POLICY, f"{stack_settings(stack)['clusterName']}-cluster-role")
    statements = json.loads(policy.inputs["policy"])["Statement"]
    assert {"Effect": "Allow", "Resource": key.outputs["arn"],
            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"]} in statements, stack
    assert {"Effect": "Deny", "Resource": "*", "Action": ["logs:CreateLogGroup"]} in statements, \
        f"{stack}: the cluster role must not recreate its log group on destroy"
    # pulumi-eks names its cluster role `<component>-eksRole-<suffix>` (the mock's eksCluster state says so).
    assert policy.inputs["role"].startswith(f"{stack_settings(stack)['clusterName']}-eks-eksRole-"), policy.inputs


@pytest.mark.parametrize("stack", STACKS)
def test_network_policy_agent_and_pod_identity_agent_are_on(stack):
    run = program(stack)
    assert run.one(EKS_CLUSTER).inputs["vpcCniOptions"]["enableNetworkPolicy"] is True, \
        f"{stack}: the VPC CNI must enforce NetworkPolicies"
    agent = run.one("aws:eks/addon:Addon", f"{stack_settings(stack)['clusterName']}-pod-identity-agent")
    assert agent.inputs["addonName"] == "eks-pod-identity-agent", stack
    tolerations = json.loads(agent.inputs["configurationValues"])["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations, \
        f"{stack}: the agent must run on the tainted GPU nodes, where the Ray workers need it"


def test_access_entries_name_admins_and_viewers():
    admin, viewer = f"arn:aws:iam::{ACCOUNT_ID}:role/platform-admin", f"arn:aws:iam::{ACCOUNT_ID}:user/auditor"
    entries = run_program("dev", {"clusterAdmins": [admin], "clusterViewers": [viewer]}).one(EKS_CLUSTER) \
        .inputs["accessEntries"]
    by_principal = {entry["principalArn"]: entry for entry in entries.values()}
    assert set(by_principal) == {admin, viewer}, entries
    for arn, policy in ((admin, "AmazonEKSClusterAdminPolicy"), (viewer, "AmazonEKSViewPolicy")):
        (association,) = by_principal[arn]["accessPolicies"].values()
        assert association == {"policyArn": f"arn:aws:eks::aws:cluster-access-policy/{policy}",
                               "accessScope": {"type": "cluster"}}, f"{arn}: {association}"
    assert program("dev").one(EKS_CLUSTER).inputs["accessEntries"] == {}, "no key, no entry beyond the creator's"


def test_public_cidrs_keep_the_deployer_and_open_to_the_world_only_when_listed():
    office = "52.95.110.0/24"
    cidrs = run_program("dev", {"apiPublicAccessCidrs": [office]}).one(EKS_CLUSTER).inputs["publicAccessCidrs"]
    assert cidrs == [office, f"{DEPLOYER_IP}/32"], cidrs
    covered = run_program("dev", {"apiPublicAccessCidrs": ["54.240.196.0/24"]}).one(EKS_CLUSTER)
    assert covered.inputs["publicAccessCidrs"] == ["54.240.196.0/24"], "a listed block holding the deployer suffices"
    world = run_program("dev", {"apiPublicAccessCidrs": ["0.0.0.0/0"]}).one(EKS_CLUSTER)
    assert world.inputs["publicAccessCidrs"] == ["0.0.0.0/0"]


def test_an_unreadable_deployer_address_is_refused_unless_cidrs_are_listed():
    assert network.api_public_access_cidrs(("52.95.110.0/24",), None) == ("52.95.110.0/24",)
    with pytest.raises(ValueError, match="apiPublicAccessCidrs.*checkip.amazonaws.com.*/32"):
        network.api_public_access_cidrs((), None)
    with mock.patch("urllib.request.urlopen", side_effect=OSError("offline")):
        assert network.deployer_public_ip() is None, "no address, no guess"


def test_deployer_address_is_read_from_aws_checkip():
    class Answer:
        def __init__(self, body: bytes): self.body = body
        def __enter__(self): return self
        def __exit__(self, *exc): return False
        def read(self, limit): return self.body[:limit]

    with mock.patch("urllib.request.urlopen", return_value=Answer(b"54.240.196.170\n")) as urlopen:
        assert network.deployer_public_ip() == "54.240.196.170"
    assert urlopen.call_args.args[0] == network.CHECKIP_URL
    for body in (b"10.1.2.3\n", b"<html>captive portal</html>"):
        with mock.patch("urllib.request.urlopen", return_value=Answer(body)):
            assert network.deployer_public_ip() is None, f"{body!r} is no public address"


# ---- the Ray pods' AWS identity ------------------------------------------------------------------------------------

def test_checkpoint_access_is_the_ray_pods_own_role_scoped_to_the_prefix():
    run = program("dev", (("trainStoragePath", STORAGE),))
    role = ray_pods_role(run)
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    specs = pod_specs(run)
    service_account = specs["head"]["serviceAccountName"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"} and \
        sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"], trust
    # EKS Pod Identity's session tags (EKS user guide, "Create IAM role with trust policy required by EKS Pod
    # Identity"); the cluster's ARN is the one EKS gives it (the mock's eksCluster), unique per account and region.
    assert trust["Condition"]["StringEquals"] == {
        "aws:RequestTag/eks-cluster-arn": f"arn:aws:eks:us-west-2:{ACCOUNT_ID}:cluster/ray-train",
        "aws:RequestTag/eks-cluster-name": "ray-train", "aws:RequestTag/kubernetes-namespace": "ray",
        "aws:RequestTag/kubernetes-service-account": service_account}, "only this cluster's Ray service account"
    (policy,) = [r for r in run.of_type(ROLE_POLICY) if r.parent == role.urn]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    resources = {resource for s in statements for resource in
                 (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])}
    assert resources == {"arn:aws:s3:::ckpt-bucket", "arn:aws:s3:::ckpt-bucket/runs/dev/*",
                         "arn:aws:s3:::ckpt-bucket/runs/", "arn:aws:s3:::ckpt-bucket/runs/dev/"}, \
        "the bucket (listing, HeadBucket), the prefix's objects and its directory markers (tests/program/test_storage_policy.py)"
    listing = next(s for s in statements if "s3:GetBucketLocation" in s["Action"])
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["runs/dev", "runs/dev/*"]}}, "listing the prefix only"
    association = run.one(ASSOCIATION, "ray-train-ray-pods-association")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"], association.inputs["roleArn"]) == \
        ("ray", service_account, role.outputs["arn"]), association.inputs
    assert {spec["serviceAccountName"] for spec in specs.values()} == {service_account}, "head and workers alike"
    assert association.urn in run.one(RAYCLUSTER).dependencies, "pods must be created after the association"


def test_no_aws_identity_for_the_pods_without_s3_checkpoints():
    run = program("dev")
    # The idle check's association (issue 24) is for its own service account, not the Ray pods'.
    assert not [r for r in run.of_type(ASSOCIATION) if r.inputs["serviceAccount"] == "ray-train-pods"] and not [
        r for r in run.of_type(ROLE) if '"ray-train-pods"' in r.inputs["assumeRolePolicy"]]


@pytest.mark.parametrize("path", ["s3://*", "s3://*/runs", "s3://ckpt-*/runs", "s3://Ckpt-Bucket/runs",
                                  "s3://ckpt-bucket/runs/*", "s3://ckpt-bucket/run?", "s3://ab/runs",
                                  "s3://ckpt-bucket/${aws:username}"])
def test_storage_path_must_name_one_bucket_without_wildcards(path):
    failed = run_program_expecting_error("dev", {"trainStoragePath": path})
    assert isinstance(failed.error, ValueError) and "trainStoragePath" in str(failed.error), failed.error
    assert failed.resources == [], f"{path}: refused before any resource"


# ---- the Ray namespace: pod security, service account, network policies ------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_ray_containers_drop_capabilities_but_what_efa_needs(stack):
    specs = pod_specs(program(stack))
    for group, spec in specs.items():
        assert spec["automountServiceAccountToken"] is False, f"{stack} {group}: no Kubernetes API token"
        (container,) = spec["containers"]
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"], group
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, f"{stack} {group}: seccomp RuntimeDefault"
        assert not context.get("privileged"), group
        added = context["capabilities"].get("add", [])
        # EFA memory registration pins pages against RLIMIT_MEMLOCK unless CAP_IPC_LOCK (infra/kubernetes/ray_security.py).
        assert added == (["IPC_LOCK"] if group != "head" else []), f"{stack} {group}: added {added}"
        assert {"secretRef": {"name": "ray-train-secret-env"}} in container["envFrom"], f"{stack} {group}"


@pytest.mark.parametrize("stack", STACKS)
def test_namespace_enforces_the_strictest_level_the_efa_pods_meet_and_warns_at_restricted(stack):
    run = program(stack)
    # The Ray namespace (the monitoring namespace of issue 24 is another).
    labels = run.one(NAMESPACE, f"{stack_settings(stack)['clusterName']}-ray-namespace").inputs["metadata"]["labels"]
    added = {cap for spec in pod_specs(run).values() for c in spec["containers"]
             for cap in c["securityContext"]["capabilities"].get("add", [])}
    expected = "privileged" if added - BASELINE_CAPABILITIES else "baseline"
    assert labels == {"pod-security.kubernetes.io/enforce": expected, "pod-security.kubernetes.io/warn": "restricted",
                      "pod-security.kubernetes.io/audit": "restricted"}, f"{stack}: {labels}"
    account = run.one(SERVICE_ACCOUNT, f"{stack_settings(stack)['clusterName']}-ray-pods")
    assert account.inputs["automountServiceAccountToken"] is False and \
        account.inputs["metadata"]["name"] == pod_specs(run)["head"]["serviceAccountName"], account.inputs


def test_pod_security_level_follows_the_capabilities():
    manifest = ray_cluster_manifest(name="ray-train", namespace="ray", image=list(KNOWN_IMAGES)[0],
                                    ray_version="2.58.0", gpu_node_count=2, facts=INSTANCE_FACTS["g6.12xlarge"],
                                    transport_env={})
    assert ray_security.pod_security_level(containers(manifest)) == "privileged", "IPC_LOCK is beyond baseline"
    for container in containers(manifest):
        container["securityContext"]["capabilities"].pop("add", None)
    assert ray_security.pod_security_level(containers(manifest)) == "baseline"
    containers(manifest)[0]["securityContext"]["privileged"] = True
    assert ray_security.pod_security_level(containers(manifest)) == "privileged"


def _allows(rule_peers: list[dict], address: str) -> bool:
    for peer in rule_peers:
        block = peer.get("ipBlock")
        if block and ipaddress.ip_address(address) in ipaddress.ip_network(block["cidr"]) and not any(
                ipaddress.ip_address(address) in ipaddress.ip_network(c) for c in block.get("except", [])):
            return True
    return False


@pytest.mark.parametrize("stack", STACKS)
def test_network_policies_deny_by_default_and_allow_what_ray_needs(stack):
    run = program(stack)
    in_ray = [p for p in run.of_type(NETWORK_POLICY) if p.inputs["metadata"]["namespace"] == "ray"]
    policies = {p.inputs["metadata"]["name"]: p.inputs["spec"] for p in in_ray}
    assert {p.inputs["metadata"]["namespace"] for p in run.of_type(NETWORK_POLICY)} == {
        "ray", "kuberay-system", "monitoring", "monitoring-host"}, \
        f"{stack}: the Ray namespace's, the operator's (tests/program/test_admission.py) and the monitoring namespaces' " \
        "(tests/program/test_monitoring_security.py)"
    deny = policies["default-deny"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}, f"{stack}: default deny in and out"
    ray_pods = {"matchLabels": {"ray.io/cluster": "ray-train"}}
    internal = policies["ray-train-internal"]
    assert internal["podSelector"] == ray_pods and internal["ingress"] == [{"from": [{"podSelector": ray_pods}]}] \
        and internal["egress"] == [{"to": [{"podSelector": ray_pods}]}], \
        f"{stack}: head and workers reach each other on every port (GCS, raylets, NCCL's socket bootstrap)"
    egress = policies["ray-train-egress"]["egress"]
    # Issue 24's openings (Prometheus to the metrics port, the idle check to the job server) are evaluated connection
    # by connection in tests/program/test_monitoring.py; beside them, nothing outside the RayCluster may connect in.
    issue_24 = {"ray-train-metrics-scrape", "ray-train-idle-stop-to-head"}
    ingress_rules = [rule for name, spec in policies.items() if name not in issue_24
                     for rule in spec.get("ingress", [])]
    assert ingress_rules == internal["ingress"], f"{stack}: nothing outside the RayCluster may connect in"
    dns = next(rule for rule in egress if any("namespaceSelector" in peer for peer in rule["to"]))
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}} and \
        {p["port"] for p in dns["ports"]} == {53}, f"{stack}: DNS"
    https = next(rule for rule in egress if rule["ports"] == [{"protocol": "TCP", "port": 443}])
    # S3 and the Hugging Face hub are public addresses; the VPC, the service CIDR and link-local ones are not.
    assert _allows(https["to"], "52.216.0.10") and _allows(https["to"], "18.164.0.1"), f"{stack}: S3, the hub"
    vpc_host = str(next(ipaddress.ip_network(stack_settings(stack)["vpcCidr"]).hosts()))
    for private in (vpc_host, "172.20.0.1", "169.254.169.254"):
        assert not _allows(https["to"], private), f"{stack}: 443 to {private} must stay closed"
    agent = next(rule for rule in egress if rule["ports"] == [{"protocol": "TCP", "port": 80}])
    assert _allows(agent["to"], "169.254.170.23") and not _allows(agent["to"], "169.254.169.254"), \
        f"{stack}: the Pod Identity agent, not IMDS"
    rc = run.one(RAYCLUSTER)
    # The RayCluster's own policies (the deny among them) come before its pods; issue 24's openings come after.
    assert {p.urn for p in run.of_type(NETWORK_POLICY) if "raytrain:infra:RayCluster$" in p.urn} <= \
        set(rc.dependencies), "policies before the pods"


# ---- secrets stay secret ------------------------------------------------------------------------------------------

TOKEN = "hf_sentinel_0123456789abcdef"
ENV_TOKEN = "env_sentinel_fedcba9876543210"


@pytest.fixture(scope="module")
def with_secrets():
    """One run with both kinds of env set; its stdout, stderr and Pulumi log messages (the mock engine hands
    pulumi.log to Python's root logger) are kept."""
    import contextlib
    import io
    import logging

    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    root = logging.getLogger()
    root.addHandler(handler)
    previous_level = root.level
    root.setLevel(logging.DEBUG)
    with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
        run = run_program("dev", {"trainEnabled": True, "trainModelConfig": "tiny", "trainSeqLen": 256,
                                  "trainExpectTransport": "any", "trainStoragePath": STORAGE,
                                  "trainEnv": [f"MY_SETTING={ENV_TOKEN}"],
                                  "trainSecretEnv": Secret((f"HF_TOKEN={TOKEN}",))})
    root.removeHandler(handler)
    root.setLevel(previous_level)
    return run, captured.getvalue()


def test_secret_values_appear_nowhere_in_plain_inputs_outputs_exports_or_logs(with_secrets):
    run, logs = with_secrets
    for resource in run.resources:
        for where, value in (("inputs", resource.inputs), ("outputs", resource.outputs)):
            leaked = [text for text in plain_strings(value) if TOKEN in text or ENV_TOKEN in text]
            assert not leaked, f"{resource.type} {resource.name}: a secret in plain {where}"
    for name, value in run.exports.items():
        if name not in run.secret_exports:
            assert TOKEN not in json.dumps(value, default=str) and ENV_TOKEN not in json.dumps(value, default=str), name
    assert TOKEN not in logs and ENV_TOKEN not in logs, "the program's output must not show a secret"


def test_secret_env_reaches_the_pods_from_a_kubernetes_secret_not_the_job(with_secrets):
    run, _ = with_secrets
    secret = run.one(K8S_SECRET, "ray-train-ray-secret-env")  # (Grafana's admin Secret of issue 24 is another)
    assert is_secret_value(secret.inputs["stringData"]) and secret.inputs["stringData"]["value"] == {"HF_TOKEN": TOKEN}
    job = run.one(JOB)
    assert is_secret_value(job.inputs["env_vars"]) and "HF_TOKEN" not in job.inputs["env_vars"]["value"], \
        "trainSecretEnv never goes through the job's runtime_env (Ray's dashboard shows it)"
    assert job.inputs["env_vars"]["value"]["MY_SETTING"] == ENV_TOKEN, "trainEnv does, as a secret input"
    trigger = run.one(RAYCLUSTER).replacement_trigger
    assert is_secret_value(trigger) and trigger["value"] == {"HF_TOKEN": TOKEN}, \
        "new values must replace the RayCluster (pods read env once), with the trigger kept secret"


def test_a_plain_text_secret_env_is_refused_without_showing_it():
    failed = run_program_expecting_error("dev", {"trainSecretEnv": [f"HF_TOKEN={TOKEN}"]})
    assert isinstance(failed.error, ValueError) and "trainSecretEnv" in str(failed.error) \
        and "--secret" in str(failed.error), failed.error
    assert TOKEN not in str(failed.error) and failed.resources == []


@pytest.mark.parametrize("key", ["trainSecretEnv", "trainEnv"])
def test_malformed_secret_entries_are_refused_without_showing_them(key):
    for bad in ([f"HF TOKEN={TOKEN}"], f"not-json-{TOKEN}", [f"HF_TOKEN={TOKEN}", f"HF_TOKEN={TOKEN}"]):
        failed = run_program_expecting_error("dev", {key: Secret(bad) if key == "trainSecretEnv" else bad})
        assert isinstance(failed.error, ValueError) and key in str(failed.error), failed.error
        assert TOKEN not in str(failed.error), f"{key}: the refusal quotes the value: {failed.error}"


# ---- bad security config, refused before any resource -------------------------------------------------------------

BAD = {
    "private CIDR": ({"apiPublicAccessCidrs": ["10.0.0.0/8"]}, ["apiPublicAccessCidrs", "public"]),
    "not a CIDR": ({"apiPublicAccessCidrs": ["my-office"]}, ["apiPublicAccessCidrs", "IPv4"]),
    "retention CloudWatch lacks": ({"controlPlaneLogRetentionDays": 45}, ["controlPlaneLogRetentionDays", "90"]),
    "admin not an ARN": ({"clusterAdmins": ["alice"]}, ["clusterAdmins", "arn:aws:iam::"]),
    "admin and viewer": ({"clusterAdmins": [f"arn:aws:iam::{ACCOUNT_ID}:role/ops"],
                          "clusterViewers": [f"arn:aws:iam::{ACCOUNT_ID}:role/ops"]}, ["clusterViewers", "one"]),
    "the creator as admin": ({"clusterAdmins": [DEPLOYER_ROLE_ARN]}, ["clusterAdmins", "creator"]),
    "a key in both env keys": ({"trainEnv": ["A=1"], "trainSecretEnv": Secret(("A=2",))}, ["trainSecretEnv", "A"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_security_config_is_refused_before_any_resource(case):
    overrides, words = BAD[case]
    failed = run_program_expecting_error("dev", overrides)
    assert isinstance(failed.error, ValueError), f"{case}: {failed.error!r}"
    assert all(word in str(failed.error) for word in words), f"{case}: {failed.error}"
    assert failed.resources == [], f"{case}: no resource may be registered"
