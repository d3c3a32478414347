"""Issue 34, item 2: the stack's own MLflow tracking server (`experimentTracking: mlflow`), reviewed as the other
in-cluster components are: its image pinned at the client's version, restricted Pod Security (and admitted by the Ray
namespace's admission policy), NetworkPolicies that let only the Ray pods in and only DNS, S3 and the Pod Identity
agent out, an IAM role limited to the stack's `mlflow/` prefix, the job pointed at it; `none` creates nothing. The
manifests are validated against the Kubernetes schema (kubernetes-validate). The pod's entrypoint (its store copied
to and restored from S3) runs against moto's S3.
"""
from __future__ import annotations

import copy
import json
import re
import sqlite3
from pathlib import Path

import celpy
import kubernetes_validate
import pytest

from infra import config
from infra.config.experiment_tracking import in_cluster_uri
from infra.kubernetes import image_pins, mlflow_serve, mlflow_server
from tests.program.test_admission import POD_IDENTITY_VOLUME, refusals
from tests.program.test_monitoring_security import _matches, _peer_admits
from tests.program.test_refusals_at_preview import DEV, refusal
from tests.support.iam_policy import Request, decide
from tests.support.pulumi_mocks import SCHEMA, program

KUBERNETES = SCHEMA["kubernetesVersion"]["default"]
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
STORAGE = "s3://team-bucket/runs/dev"
MLFLOW_ON = (("experimentTracking", "mlflow"), ("trainStoragePath", STORAGE), ("trainEnabled", True),
             ("trainReportTo", "tensorboard,mlflow"))
SERVER = ("ray", dict(mlflow_server.SERVER_LABELS), None)
RAY_HEAD = ("ray", {"ray.io/cluster": "ray-train", "ray.io/node-type": "head"}, None)
RAY_WORKER = ("ray", {"ray.io/cluster": "ray-train", "ray.io/node-type": "worker"}, None)
IDLE_STOP = ("ray", {"app.kubernetes.io/name": "ray-idle-stop"}, None)
OTHER_NAMESPACE = ("default", {"ray.io/cluster": "ray-train"}, None)


@pytest.fixture(scope="module")
def mlflow_program():
    return program("dev", MLFLOW_ON)


def _manifest(registration) -> dict:
    group_version = registration.type.split(":")[1]
    api_version = group_version.removeprefix("core/")
    kind = registration.type.rsplit(":", 1)[1]
    return {"apiVersion": api_version, "kind": kind,
            **{key: value for key, value in registration.inputs.items() if not key.startswith("__")}}


def server_resources(mlflow_program) -> list:
    return [r for r in mlflow_program.resources if r.type.startswith("kubernetes:") and r.name.startswith("ray-train-mlflow")]


def pod(mlflow_program) -> dict:
    return mlflow_program.one(DEPLOYMENT, "ray-train-mlflow-deployment").inputs["spec"]["template"]["spec"]


def test_the_manifests_are_valid_kubernetes_objects(mlflow_program):
    kinds = set()
    for registration in server_resources(mlflow_program):
        manifest = _manifest(registration)
        if "automount_service_account_token" in manifest:  # the SDK's snake_case argument
            manifest["automountServiceAccountToken"] = manifest.pop("automount_service_account_token")
        kubernetes_validate.validate(manifest, KUBERNETES, strict=True)
        kinds.add(manifest["kind"])
    assert kinds == {"ServiceAccount", "ConfigMap", "NetworkPolicy", "Deployment", "Service"}
    assert mlflow_program.one(SERVICE, "ray-train-mlflow-service").inputs["spec"]["type"] == "ClusterIP"


def test_the_image_is_the_pinned_one_at_the_clients_version(mlflow_program):
    (container,) = pod(mlflow_program)["containers"]
    assert container["image"] == image_pins.MLFLOW.reference() == "ghcr.io/mlflow/mlflow:v3.17.2-full"
    assert image_pins.MLFLOW in image_pins.ALL_IMAGES
    client = re.search(r"^mlflow-skinny==(\S+)", Path("requirements.txt").read_text(), re.M).group(1)
    assert image_pins.MLFLOW.tag == f"v{client}-full", "server and client at one MLflow version"


def test_the_pod_is_restricted_and_bounded(mlflow_program):
    spec = pod(mlflow_program)
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "mlflow"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # Every path the server writes is an emptyDir; the entrypoint is mounted read-only.
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert writable == {"/var/lib/mlflow", "/tmp"}
    assert all("emptyDir" in volumes[m["name"]] for m in container["volumeMounts"] if not m.get("readOnly"))


def test_the_namespaces_admission_policy_admits_the_server_and_its_breaks_are_refused(mlflow_program):
    env = celpy.Environment()
    policy = mlflow_program.one("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
                     "ray-train-ray-pod-security").inputs["spec"]
    compiled = ([(v["message"], env.program(env.compile(v["expression"]))) for v in policy["validations"]],
                {v["name"]: env.program(env.compile(v["expression"])) for v in policy["variables"]})
    spec = copy.deepcopy(pod(mlflow_program))
    spec["volumes"].append(POD_IDENTITY_VOLUME)  # what the Pod Identity webhook adds
    server_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mlflow", "namespace": "ray"}, "spec": spec}
    assert refusals(compiled, server_pod) == []
    server_pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    assert refusals(compiled, server_pod)


def _ingress_admits(mlflow_program, target: tuple, port: int, source: tuple) -> bool:
    namespace, labels, _ = target
    selecting = [p.inputs for p in mlflow_program.of_type(NETWORK_POLICY) if p.inputs["metadata"]["namespace"] == namespace
                 and _matches(p.inputs["spec"]["podSelector"], labels) and "Ingress" in p.inputs["spec"]["policyTypes"]]
    return any(any(_peer_admits(peer, source, namespace) for peer in rule.get("from") or [])
               and any(p["port"] == port for p in rule.get("ports") or [{"port": port}])
               for policy in selecting for rule in policy["spec"].get("ingress") or [])


def _egress_ports(mlflow_program, source: tuple, target: tuple) -> set:
    """The ports `source` may open to the pod `target` (in-cluster peers only)."""
    namespace, labels, _ = source
    ports = set()
    for registration in mlflow_program.of_type(NETWORK_POLICY):
        policy = registration.inputs
        if policy["metadata"]["namespace"] != namespace or not _matches(policy["spec"]["podSelector"], labels):
            continue
        for rule in policy["spec"].get("egress") or []:
            if any(_peer_admits(peer, target, namespace) for peer in rule.get("to") or []):
                ports |= {p["port"] for p in rule.get("ports") or [{"port": "any"}]}
    return ports


@pytest.mark.parametrize("source, allowed", [(RAY_HEAD, True), (RAY_WORKER, True), (IDLE_STOP, False),
                                             (OTHER_NAMESPACE, False)])
def test_the_server_answers_the_ray_pods_only_on_its_port(mlflow_program, source, allowed):
    assert _ingress_admits(mlflow_program, SERVER, 5000, source) is allowed
    assert not _ingress_admits(mlflow_program, SERVER, 8080, source)


def test_the_ray_pods_may_reach_it_and_it_only_dns_s3_and_the_agent(mlflow_program):
    assert _egress_ports(mlflow_program, RAY_WORKER, SERVER) == {5000} and _egress_ports(mlflow_program, RAY_HEAD, SERVER) == {5000}
    (policy,) = [r.inputs for r in mlflow_program.of_type(NETWORK_POLICY) if r.inputs["metadata"]["name"] == "mlflow-server"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    peers = {json.dumps(rule["to"], sort_keys=True): sorted(p["port"] for p in rule["ports"])
             for rule in policy["spec"]["egress"]}
    assert sorted(peers.values()) == [[53, 53], [80], [443]]
    https = next(rule for rule in policy["spec"]["egress"] if rule["ports"][0]["port"] == 443)
    assert "10.0.0.0/8" in https["to"][0]["ipBlock"]["except"], "S3 through the NAT: public addresses only"
    assert _egress_ports(mlflow_program, SERVER, RAY_HEAD) == set(), "the server opens nothing to the Ray pods"


def test_its_role_reaches_the_mlflow_prefix_only(mlflow_program):
    (role,) = [r for r in mlflow_program.of_type("aws:iam/role:Role") if r.name == "ray-train-mlflow-role"]
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert trust["aws:RequestTag/kubernetes-service-account"] == "mlflow"
    assert trust["aws:RequestTag/kubernetes-namespace"] == "ray"
    policy = json.loads(mlflow_program.one("aws:iam/rolePolicy:RolePolicy", "ray-train-mlflow-artifacts").inputs["policy"])
    for statement in policy["Statement"]:
        if statement["Resource"] == "arn:aws:s3:::team-bucket":
            assert statement["Action"] == "s3:ListBucket"
            assert statement["Condition"]["StringLike"]["s3:prefix"] == ["runs/dev/mlflow", "runs/dev/mlflow/*"]
        else:
            assert statement["Resource"] == "arn:aws:s3:::team-bucket/runs/dev/mlflow/*"
            assert "s3:*" not in statement["Action"]
    association = mlflow_program.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "ray-train-mlflow-association")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == ("ray", "mlflow")
    args = pod(mlflow_program)["containers"][0]["args"]
    assert args[args.index("--artifacts-destination") + 1] == "s3://team-bucket/runs/dev/mlflow"
    assert "--serve-artifacts" in args


def test_the_ray_pods_cannot_touch_the_servers_store_and_the_server_can(mlflow_program):
    """The store's copy (mlflow/store/mlflow.db) and the server's artifacts lie under trainStoragePath's prefix, which
    the Ray pods write: an explicit Deny on the server's prefix wins over their Allow, so only the server's role
    writes there, and the Ray pods reach the server through its HTTP API only."""
    ray_role = mlflow_program.one("aws:iam/role:Role", "ray-train-ray-pods-role")
    (ray_policy,) = [r.inputs["policy"] for r in mlflow_program.of_type("aws:iam/rolePolicy:RolePolicy")
                     if r.parent == ray_role.urn]
    server_policy = mlflow_program.one("aws:iam/rolePolicy:RolePolicy", "ray-train-mlflow-artifacts").inputs["policy"]
    store = "arn:aws:s3:::team-bucket/runs/dev/mlflow/store/mlflow.db"
    artifact = "arn:aws:s3:::team-bucket/runs/dev/mlflow/1/abc/artifacts/model.txt"
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:GetObject", "s3:AbortMultipartUpload"):
        for key in (store, artifact):
            assert decide([ray_policy], Request(action, key)) == "ExplicitDeny", (action, key)
            assert decide([server_policy], Request(action, key)) == "Allow", (action, key)
    checkpoint = "arn:aws:s3:::team-bucket/runs/dev/ray-train-fsdp-llm-run/checkpoint_000001/model.pt"
    assert decide([ray_policy], Request("s3:PutObject", checkpoint)) == "Allow", "checkpoints stay the Ray pods'"
    # Without the stack's server nothing is denied (a team's own server keeps its store elsewhere).
    plain = program("dev", (("trainStoragePath", STORAGE),))
    plain_role = plain.one("aws:iam/role:Role", "ray-train-ray-pods-role")
    (plain_policy,) = [r.inputs["policy"] for r in plain.of_type("aws:iam/rolePolicy:RolePolicy")
                       if r.parent == plain_role.urn]
    assert "Deny" not in plain_policy


def test_the_job_reports_to_it_and_the_port_forward_is_an_output(mlflow_program):
    train_args = mlflow_program.one("pulumi-python:dynamic/raytrain:TrainingJob").inputs["train_args"]
    assert train_args[train_args.index("--mlflow_tracking_uri") + 1] == "http://mlflow.ray.svc:5000"
    assert mlflow_program.exports["mlflowCommand"].startswith("kubectl --kubeconfig kubeconfig.json -n ray port-forward "
                                                   "svc/mlflow 5000:5000")
    args = pod(mlflow_program)["containers"][0]["args"]
    allowed_hosts = args[args.index("--allowed-hosts") + 1].split(",")
    assert "mlflow.ray.svc:5000" in allowed_hosts and "localhost:*" in allowed_hosts


def test_none_creates_nothing():
    run = program("dev")
    assert config.parse(DEV).experiment_tracking == "none"
    assert not [r for r in run.resources if "mlflow" in r.name]
    assert "mlflowCommand" not in run.exports


MLFLOW = {"experimentTracking": "mlflow", "trainStoragePath": STORAGE}


@pytest.mark.parametrize("overrides, expected", [
    ({"experimentTracking": "mlfow"}, "config key 'experimentTracking': 'mlfow' is not one of ['none', 'mlflow']"),
    ({"experimentTracking": "mlflow"}, "config key 'experimentTracking': mlflow keeps its artifacts"),
    ({"trainReportTo": "mlflow"}, "config key 'trainReportTo': mlflow needs trainMlflowTrackingUri"),
    (MLFLOW | {"trainReportTo": "mlflow", "trainMlflowTrackingUri": "http://mlflow.other.svc:5000"},
     "config key 'trainMlflowTrackingUri'"),
])
def test_refusals_name_the_key(overrides, expected):
    assert refusal(overrides).startswith(expected)


def test_the_uri_rule_admits_the_stacks_own_server_and_a_team_server_wins():
    own = in_cluster_uri("ray")
    assert config.parse(DEV | MLFLOW | {"trainReportTo": "mlflow"}).train.mlflow_tracking_uri == own
    assert config.parse(DEV | MLFLOW | {"trainReportTo": "mlflow", "trainMlflowTrackingUri": own}) \
        .train.mlflow_tracking_uri == own
    team = "https://mlflow.example.com"
    assert config.parse(DEV | MLFLOW | {"trainReportTo": "mlflow", "trainMlflowTrackingUri": team}) \
        .train.mlflow_tracking_uri == team
    assert config.parse(DEV | MLFLOW).train.mlflow_tracking_uri == "", "trainReportTo without mlflow: no URI"


def test_the_store_copy_round_trips_through_s3(tmp_path):
    import boto3
    from moto import mock_aws

    store = tmp_path / "mlflow.db"
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="team-bucket")
        assert mlflow_serve.restore(s3, "team-bucket", "runs/mlflow/store/mlflow.db", str(store)) is False
        with sqlite3.connect(store) as db:
            db.execute("create table runs (name text)")
            db.execute("insert into runs values ('sft-1')")
        assert mlflow_serve.copy(s3, "team-bucket", "runs/mlflow/store/mlflow.db", str(store)) is True
        store.unlink()
        assert mlflow_serve.restore(s3, "team-bucket", "runs/mlflow/store/mlflow.db", str(store)) is True
        with sqlite3.connect(store) as db:
            assert db.execute("select name from runs").fetchall() == [("sft-1",)]
        # A failing upload warns and returns; the server is never stopped by it.
        assert mlflow_serve.copy(s3, "no-such-bucket", "k", str(store)) is False


def test_it_fits_in_the_system_nodes_stated_margin():
    """On the system nodes, beside the Ray head and monitoring: within the margin tests/program/test_monitoring.py holds the
    default m7i.xlarge to (0.75 CPU, 2.3 GiB), with room left."""
    requests = mlflow_server.RESOURCES["requests"]
    assert float(requests["cpu"].removesuffix("m")) / 1000 <= 0.75 / 2
    assert float(requests["memory"].removesuffix("Mi")) <= 2.3 * 1024 / 2
    assert mlflow_server.deployment(namespace="ray", bucket="b", prefix="p", config_map="c")["spec"]["template"][
        "spec"]["nodeSelector"] == {"role": "system"}
