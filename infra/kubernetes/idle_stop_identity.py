"""Who may act as the idle stop (issue 31, item 14): its service account holds an IAM role (EKS Pod Identity) allowed
eks:UpdateNodegroupConfig on the GPU node group, which can grow the group as well as stop it, and it lives in the Ray
namespace, where anyone who can create a pod could name it. A ValidatingAdmissionPolicy bound to that namespace
holds it to the one chain the stack makes: the CronJob of the idle stop's name, the Jobs the CronJob controller
creates from it, the pods the Job controller creates for those.

The controllers are told apart by the user they act as: kube-controller-manager runs each controller with its own
service account credentials (--use-service-account-credentials, as EKS runs it), so the CronJob controller creates
Jobs as system:serviceaccount:kube-system:cronjob-controller and the Job controller pods as
system:serviceaccount:kube-system:job-controller (kubernetes/kubernetes cmd/kube-controller-manager/app/batch.go:
ClientOrDie("cronjob-controller"), ClientOrDie("job-controller")). Whoever may edit that CronJob itself still controls
what runs as the account: that is the namespace's admins, who hold the stack.
"""
from __future__ import annotations

from infra.kubernetes.admission import ADMISSION_API_VERSION

CRONJOB_CONTROLLER = "system:serviceaccount:kube-system:cronjob-controller"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def _uses(spec: str, service_account: str) -> str:
    return f"(has({spec}.serviceAccountName) && {spec}.serviceAccountName == '{service_account}')"


def validations(service_account: str, cronjob: str) -> list[dict]:
    pod = _uses("object.spec", service_account)
    job = _uses("object.spec.template.spec", service_account)
    cron = _uses("object.spec.jobTemplate.spec.template.spec", service_account)
    return [
        {"expression": f"object.kind != 'Pod' || !{pod} || (request.userInfo.username == '{JOB_CONTROLLER}' && "
                       "has(object.metadata.ownerReferences) && "
                       "object.metadata.ownerReferences.exists(o, o.kind == 'Job'))",
         "message": f"only the idle stop's Jobs may run pods as the service account {service_account}",
         "reason": "Forbidden"},
        {"expression": f"object.kind != 'Job' || !{job} || request.userInfo.username == '{CRONJOB_CONTROLLER}'",
         "message": f"only the CronJob {cronjob} may create Jobs that run as {service_account}", "reason": "Forbidden"},
        {"expression": f"object.kind != 'CronJob' || !{cron} || object.metadata.name == '{cronjob}'",
         "message": f"only the CronJob {cronjob} may run as {service_account}", "reason": "Forbidden"},
    ]


def identity_policy(name: str, *, service_account: str, cronjob: str) -> dict:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]},
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                 "resources": ["jobs", "cronjobs"]}]},
            "validations": validations(service_account, cronjob),
        },
    }
