"""Pod Security that enforces (issue 22, item 11): the Ray namespace's ValidatingAdmissionPolicy and its binding, and
the KubeRay operator's namespace labels and NetworkPolicies.

The manifests are validated against the Kubernetes OpenAPI schema of the stack's version (kubernetes-validate). The
policy's CEL is compiled and evaluated with cel-python on pods as the API server would see them: the RayCluster's
head and workers as KubeRay 1.7 makes them (the Ray container's securityContext copied onto the workers'
wait-gcs-ready init container, ray-operator/controllers/ray/common/pod.go) after the EKS Pod Identity webhook's
mutation (a projected token volume, aws/amazon-eks-pod-identity-webhook pkg/handler/handler.go), and on each way of
breaking `restricted`. cel-python does not type-check against the Pod schema as the API server does at admission; the
schema check and the evaluations together stand in for that.
"""
from __future__ import annotations

import copy

import celpy
import kubernetes_validate
import pytest

from tests.support.pulumi_mocks import SCHEMA, program

KUBERNETES = SCHEMA["kubernetesVersion"]["default"]
VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
POD_IDENTITY_VOLUME = {"name": "eks-pod-identity-token", "projected": {"sources": [{"serviceAccountToken": {
    "audience": "pods.eks.amazonaws.com", "expirationSeconds": 86400, "path": "eks-pod-identity-token"}}]}}

_env = celpy.Environment()


def _manifest(registration) -> dict:
    kind = registration.type.rsplit(":", 1)[1]
    api_version = registration.type.split(":")[1].replace("core/", "")
    return {"apiVersion": api_version, "kind": kind, "metadata": registration.inputs["metadata"],
            "spec": registration.inputs["spec"]}


@pytest.fixture(scope="module")
def dev_program():
    return program("dev")


@pytest.fixture(scope="module")
def compiled(dev_program):
    policy = dev_program.one(VAP, "ray-train-ray-pod-security").inputs["spec"]
    variables = {v["name"]: _env.program(_env.compile(v["expression"])) for v in policy["variables"]}
    return [(v["message"], _env.program(_env.compile(v["expression"]))) for v in policy["validations"]], variables


def refusals(compiled, pod: dict) -> list[str]:
    """The messages of the validations `pod` fails (empty: admitted)."""
    validations, variables = compiled
    obj = celpy.json_to_cel(pod)
    values = celpy.celtypes.MapType({celpy.celtypes.StringType(name): program.evaluate({"object": obj})
                                     for name, program in variables.items()})
    def admits(message: str, program) -> bool:
        result = program.evaluate({"object": obj, "variables": values})
        # The API server would refuse on an error too (failurePolicy Fail), but here it means an expression that
        # cannot judge this pod's shape: a bug in the policy, not a refusal.
        assert isinstance(result, celpy.celtypes.BoolType), f"{message}: evaluation error {result!r}"
        return bool(result)

    return [message for message, program in validations if not admits(message, program)]


def ray_pods(dev_program) -> dict[str, dict]:
    """The head and worker pods as the API server gets them from KubeRay and the Pod Identity webhook."""
    spec = dev_program.one(RAYCLUSTER).inputs["spec"]
    pods = {"head": copy.deepcopy(spec["headGroupSpec"]["template"]["spec"])}
    for group in spec["workerGroupSpecs"]:
        pod = copy.deepcopy(group["template"]["spec"])
        ray = pod["containers"][0]
        pod["initContainers"] = [{"name": "wait-gcs-ready", "image": ray["image"],
                                  "securityContext": copy.deepcopy(ray["securityContext"])}]
        pods[group["groupName"]] = pod
    for pod in pods.values():
        pod["volumes"] = [*pod.get("volumes", []), POD_IDENTITY_VOLUME]
    return {name: {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ray"}, "spec": pod}
            for name, pod in pods.items()}


def test_the_manifests_are_valid_kubernetes_objects(dev_program):
    for registration in (dev_program.one(VAP, "ray-train-ray-pod-security"), dev_program.one(BINDING, "ray-train-ray-pod-security-binding"),
                         *[p for p in dev_program.of_type(NETWORK_POLICY) if p.inputs["metadata"]["namespace"] == "kuberay-system"]):
        kubernetes_validate.validate(_manifest(registration), KUBERNETES, strict=True)
    patch = dev_program.one("kubernetes:core/v1:NamespacePatch")
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Namespace", "metadata": patch.inputs["metadata"]},
                                 KUBERNETES, strict=True)
    for name, pod in ray_pods(dev_program).items():
        kubernetes_validate.validate(pod, KUBERNETES, strict=True)


def test_the_policy_is_bound_to_the_ray_namespace_before_any_ray_pod(dev_program):
    policy, binding = dev_program.one(VAP, "ray-train-ray-pod-security"), dev_program.one(BINDING, "ray-train-ray-pod-security-binding")
    assert policy.inputs["spec"]["failurePolicy"] == "Fail"
    assert {"pods", "pods/ephemeralcontainers"} <= set(policy.inputs["spec"]["matchConstraints"]["resourceRules"][0]
                                                      ["resources"])
    assert binding.inputs["spec"] == {
        "policyName": policy.inputs["metadata"]["name"], "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ray"}}}}
    assert binding.urn in dev_program.one(RAYCLUSTER).dependencies, "the RayCluster's pods come after the binding"


def test_the_ray_pods_are_admitted(dev_program, compiled):
    for name, pod in ray_pods(dev_program).items():
        assert refusals(compiled, pod) == [], f"{name}: the stack's own pods must pass"


def _worker(dev_program) -> dict:
    return next(pod for name, pod in ray_pods(dev_program).items() if name != "head")


BREAKS = {
    "privileged": lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True),
    "SYS_ADMIN": lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"].append("SYS_ADMIN"),
    "no drop ALL": lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].pop("drop"),
    "escalation": lambda p: p["spec"]["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
    "escalation unset": lambda p: p["spec"]["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
    "seccomp unconfined": lambda p: p["spec"]["containers"][0]["securityContext"].update(
        seccompProfile={"type": "Unconfined"}),
    "no seccomp": lambda p: p["spec"]["containers"][0]["securityContext"].pop("seccompProfile"),
    "pod seccomp unconfined": lambda p: p["spec"].setdefault("securityContext", {}).update(
        seccompProfile={"type": "Unconfined"}),
    "hostNetwork": lambda p: p["spec"].update(hostNetwork=True),
    "hostPID": lambda p: p["spec"].update(hostPID=True),
    "hostPath": lambda p: p["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
    "hostPort": lambda p: p["spec"]["containers"][0].setdefault("ports", []).append(
        {"containerPort": 9000, "hostPort": 9000}),
    "unsafe sysctl": lambda p: p["spec"].setdefault("securityContext", {}).update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "procMount": lambda p: p["spec"]["containers"][0]["securityContext"].update(procMount="Unmasked"),
    "SELinux user": lambda p: p["spec"]["containers"][0]["securityContext"].update(seLinuxOptions={"user": "root"}),
    "AppArmor unconfined": lambda p: p["spec"]["containers"][0]["securityContext"].update(
        appArmorProfile={"type": "Unconfined"}),
    "privileged init container": lambda p: p["spec"]["initContainers"][0]["securityContext"].update(privileged=True),
    "bare ephemeral container": lambda p: p["spec"].update(ephemeralContainers=[{"name": "debug", "image": "busybox"}]),
}


@pytest.mark.parametrize("breaking", list(BREAKS))
def test_each_departure_from_restricted_is_refused(dev_program, compiled, breaking):
    pod = copy.deepcopy(_worker(dev_program))
    BREAKS[breaking](pod)
    assert refusals(compiled, pod), f"{breaking}: admitted"


def test_the_two_exceptions_are_ipc_lock_and_root(dev_program, compiled):
    pod = copy.deepcopy(_worker(dev_program))
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    pod["spec"]["containers"][0]["securityContext"].update(runAsUser=0)
    del pod["spec"]["containers"][0]["securityContext"]["seccompProfile"]
    pod["spec"]["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}  # the pod's own suffices
    assert refusals(compiled, pod) == []


def test_the_kuberay_namespace_enforces_restricted_and_denies_by_default(dev_program):
    labels = dev_program.one("kubernetes:core/v1:NamespacePatch").inputs["metadata"]["labels"]
    assert labels == {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn", "audit")}
    policies = {p.inputs["metadata"]["name"]: p for p in dev_program.of_type(NETWORK_POLICY)
                if p.inputs["metadata"]["namespace"] == "kuberay-system"}
    assert policies["default-deny"].inputs["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    egress = policies["kuberay-operator-egress"].inputs["spec"]
    assert "ingress" not in egress and {tuple((p["protocol"], p["port"]) for p in rule["ports"])
                                        for rule in egress["egress"]} == {(("UDP", 53), ("TCP", 53)), (("TCP", 443),)}
    https = next(rule for rule in egress["egress"] if rule["ports"] == [{"protocol": "TCP", "port": 443}])
    assert {"ipBlock": {"cidr": "0.0.0.0/0"}} not in https["to"] and \
        not any("169.254" in peer["ipBlock"]["cidr"] for peer in https["to"]), "the API server only, not IMDS"
    kuberay = next(r for r in dev_program.resources if r.name.endswith("-kuberay-operator") and "helm" in r.type)
    assert all(kuberay.urn in p.dependencies for p in [*policies.values(),
                                                        dev_program.one("kubernetes:core/v1:NamespacePatch")])
