"""Pod Security that enforces, as pure functions: a ValidatingAdmissionPolicy holding every pod of the Ray namespace
to the `restricted` Pod Security Standard but for what the training image needs, and the KubeRay operator's namespace
labels and NetworkPolicies.

Why a policy of its own. Pod Security Admission enforces a namespace at one level, and the GPU workers' IPC_LOCK (EFA,
infra/kubernetes/ray_security.py) is outside even `baseline`, so the Ray namespace must be labelled `enforce:
privileged`, which by itself enforces nothing. The policy below (admissionregistration.k8s.io/v1, GA since Kubernetes
1.30) puts the rest back: every check of `restricted` (kubernetes.io/docs/concepts/security/pod-security-standards, and
the same checks in k8s.io/pod-security-admission/policy/check_*.go), with two exceptions, each needed and no wider:
- capabilities.add may hold IPC_LOCK besides restricted's NET_BIND_SERVICE (the workers, for EFA);
- the containers may run as root (runAsNonRoot and runAsUser are not checked): the DLC image's user is root, and
  IPC_LOCK only lifts the memlock limit for a root process.
Everything else of restricted holds: no privileged container, no host namespaces, ports, paths or process, only
restricted's volume types, allowPrivilegeEscalation false, every capability dropped, seccomp RuntimeDefault or
Localhost, no unsafe sysctl, SELinux and AppArmor within baseline, /proc default.

The CEL lists each container kind on its own (containers, initContainers, ephemeralContainers): their types differ,
and a list mixing them does not type-check.
"""
from __future__ import annotations

from infra.kubernetes.ray_security import EFA_CAPABILITIES

ADMISSION_API_VERSION = "admissionregistration.k8s.io/v1"  # ValidatingAdmissionPolicy GA: Kubernetes 1.30
# What restricted lets a container add (Pod Security Standards, restricted, "Capabilities"), plus EFA's.
RESTRICTED_ADDABLE_CAPABILITIES = ("NET_BIND_SERVICE",)
ALLOWED_ADDED_CAPABILITIES = (*RESTRICTED_ADDABLE_CAPABILITIES, *EFA_CAPABILITIES)
# restricted's volume types ("Volume Types").
RESTRICTED_VOLUME_TYPES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                           "projected", "secret")
# baseline's safe sysctls ("Sysctls", as of Kubernetes 1.32).
SAFE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes")
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_TYPES = ("RuntimeDefault", "Localhost")
# The KubeRay operator's own pod meets restricted as its chart (kuberay-operator 1.7.0 values) sets it up.
OPERATOR_POD_SECURITY_LEVEL = "restricted"

CONTAINER_LISTS = {
    "containers": "object.spec.containers",
    "initContainers": "(has(object.spec.initContainers) ? object.spec.initContainers : [])",
    "ephemeralContainers": "(has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])",
}


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _unset_or(path: str, field: str, condition: str) -> str:
    """`path.field` unset (or path itself unset), or `condition` on it."""
    return f"(!has({path}) || !has({path}.{field}) || {condition})"


def _security_options(path: str) -> dict[str, str]:
    """The checks a pod's and a container's securityContext share: SELinux, AppArmor, Windows HostProcess."""
    return {
        "seLinuxOptions": _unset_or(path, "seLinuxOptions",
                                    f"((!has({path}.seLinuxOptions.type) || {path}.seLinuxOptions.type in "
                                    f"{_cel_list(SELINUX_TYPES)}) && !has({path}.seLinuxOptions.user) && "
                                    f"!has({path}.seLinuxOptions.role))"),
        "appArmorProfile": _unset_or(path, "appArmorProfile",
                                     f"{path}.appArmorProfile.type in {_cel_list(APPARMOR_TYPES)}"),
        "windowsOptions.hostProcess": _unset_or(path, "windowsOptions", _unset_or(
            f"{path}.windowsOptions", "hostProcess", f"{path}.windowsOptions.hostProcess == false")),
    }


_OPTION_TEXTS = {"seLinuxOptions": "must not set a custom SELinux user, role or type",
                 "appArmorProfile": "must not set AppArmor Unconfined",
                 "windowsOptions.hostProcess": "must not be a Windows HostProcess container"}

# Per container `c`: restricted's container checks, but for running as root (see the module docstring).
SC = "c.securityContext"
CONTAINER_CHECKS = {
    "privileged": (_unset_or(SC, "privileged", f"{SC}.privileged == false"),
                   "must not be privileged"),
    "allowPrivilegeEscalation": (f"has({SC}) && has({SC}.allowPrivilegeEscalation) && "
                                 f"{SC}.allowPrivilegeEscalation == false",
                                 "must set securityContext.allowPrivilegeEscalation=false"),
    "capabilities.drop": (f"has({SC}) && has({SC}.capabilities) && has({SC}.capabilities.drop) && "
                          f"'ALL' in {SC}.capabilities.drop",
                          "must drop ALL capabilities"),
    "capabilities.add": (f"(!has({SC}) || !has({SC}.capabilities) || !has({SC}.capabilities.add) || "
                         f"{SC}.capabilities.add.all(a, a in {_cel_list(ALLOWED_ADDED_CAPABILITIES)}))",
                         f"may add only {', '.join(ALLOWED_ADDED_CAPABILITIES)}"),
    "seccompProfile": (f"(has({SC}) && has({SC}.seccompProfile)) ? {SC}.seccompProfile.type in "
                       f"{_cel_list(SECCOMP_TYPES)} : variables.podSeccompAllowed",
                       "must set seccompProfile.type RuntimeDefault or Localhost (on the container or the pod)"),
    "hostPort": ("(!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))",
                 "must not use host ports"),
    "procMount": (_unset_or(SC, "procMount", f"{SC}.procMount == 'Default'"), "must use the default /proc mount"),
    **{check: (expression, _OPTION_TEXTS[check]) for check, expression in _security_options(SC).items()},
}
PSC = "object.spec.securityContext"
POD_CHECKS = {
    "hostNamespaces": ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && "
                       "!(has(object.spec.hostPID) && object.spec.hostPID) && "
                       "!(has(object.spec.hostIPC) && object.spec.hostIPC)",
                       "must not share the host's network, PID or IPC namespace"),
    "volumes": ("!has(object.spec.volumes) || object.spec.volumes.all(v, "
                + " || ".join(f"has(v.{kind})" for kind in RESTRICTED_VOLUME_TYPES) + ")",
                f"may use only {', '.join(RESTRICTED_VOLUME_TYPES)} volumes (no hostPath)"),
    "seccompProfile": (_unset_or(PSC, "seccompProfile", f"{PSC}.seccompProfile.type in {_cel_list(SECCOMP_TYPES)}"),
                       "must not set seccompProfile Unconfined"),
    "sysctls": (_unset_or(PSC, "sysctls", f"{PSC}.sysctls.all(s, s.name in {_cel_list(SAFE_SYSCTLS)})"),
                "may set only the safe sysctls"),
    **{check: (expression, _OPTION_TEXTS[check]) for check, expression in _security_options(PSC).items()},
}
VARIABLES = [{"name": "podSeccompAllowed",
              "expression": f"has({PSC}) && has({PSC}.seccompProfile) && "
                            f"{PSC}.seccompProfile.type in {_cel_list(SECCOMP_TYPES)}"}]


def validations() -> list[dict]:
    """The policy's validations: one per pod check, one per container check and container kind."""
    rules = [{"expression": expression, "message": f"Pod Security (restricted but IPC_LOCK and root): the pod {text}",
              "reason": "Forbidden"} for expression, text in POD_CHECKS.values()]
    for kind, items in CONTAINER_LISTS.items():
        rules += [{"expression": f"{items}.all(c, {expression})",
                   "message": f"Pod Security (restricted but IPC_LOCK and root): every one of {kind} {text} ({check})",
                   "reason": "Forbidden"}
                  for check, (expression, text) in CONTAINER_CHECKS.items()]
    return rules


def pod_security_policy(name: str) -> dict:
    """The ValidatingAdmissionPolicy: pods on create and update (and ephemeral containers added to them)."""
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            # Fail: if the policy cannot be evaluated, no pod gets in unchecked.
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/ephemeralcontainers"]}]},
            "variables": VARIABLES,
            "validations": validations(),
        },
    }


def pod_security_binding(name: str, *, policy_name: str, namespace: str) -> dict:
    """The policy's binding to one namespace (by the name label the API server sets on every namespace)."""
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }


def operator_namespace_labels() -> dict[str, str]:
    """Pod Security Admission of the KubeRay operator's namespace: its pod meets restricted, so enforce that."""
    return {f"pod-security.kubernetes.io/{mode}": OPERATOR_POD_SECURITY_LEVEL for mode in ("enforce", "warn", "audit")}
