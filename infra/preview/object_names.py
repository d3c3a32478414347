"""Names the stack derives from rayClusterName and rayNamespace, checked at preview against the limit of every object
each is used for, and the namespaces the monitoring choice creates, which the Ray namespace cannot also be.

Each limit is the API server's own: a name it refuses is found only when that object is created, some 30 minutes into
the first `pulumi up` (after the cluster, the node groups and the RayCluster).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from infra.config import StackConfig
from infra.kubernetes import idle_stop, monitoring, raycluster
from workload.config.fields import shown_value

# Kubernetes' limit on a CronJob's name: the Jobs it creates are named `<cronjob>-<minutes since the epoch>`, 11
# characters more, and a Job's name must stay a 63-character label (kubernetes/kubernetes,
# pkg/apis/batch/validation/validation.go, ValidateCronJobCreate: "must be no more than 52 characters").
CRONJOB_NAME_MAX = 52
# DNS-1123 subdomains: Services' and ConfigMaps' and ServiceAccounts' names (apimachinery validation).
SUBDOMAIN_MAX = 253
# KubeRay's limit on a RayCluster's name (raycluster.py's _RAYCLUSTER_NAME_MAX; the operator's validation.go).
RAYCLUSTER_NAME_MAX = 53


@dataclass(frozen=True)
class DerivedName:
    kind: str
    name: Callable[[str], str]
    limit: int
    needed: Callable[[StackConfig], bool] = lambda cfg: True


# Every object whose name is made from rayClusterName, with the limit of its kind.
FROM_RAY_CLUSTER_NAME = (
    DerivedName("RayCluster", lambda name: name, RAYCLUSTER_NAME_MAX),
    DerivedName("CronJob (the idle stop)", idle_stop.idle_stop_name, CRONJOB_NAME_MAX,
                lambda cfg: bool(cfg.gpu_idle_stop_minutes)),
    DerivedName("ServiceAccount (the Ray pods')", raycluster.pod_service_account_name, SUBDOMAIN_MAX),
    DerivedName("Secret (trainSecretEnv)", raycluster.secret_env_name, SUBDOMAIN_MAX),
)

# The namespaces each monitoring choice creates and deletes with the stack (infra/kubernetes/monitoring.py): a Ray
# namespace of the same name is declared twice (the second create fails with AlreadyExists), and the Ray namespace's
# restricted Pod Security would refuse the DaemonSets' host access (node-exporter, the CloudWatch agent).
MONITORING_NAMESPACES = {
    "prometheus": (monitoring.MONITORING_NAMESPACE, monitoring.MONITORING_HOST_NAMESPACE),
    "cloudwatch": (monitoring.CLOUDWATCH_NAMESPACE,),
    "none": (),
}


def check_names(cfg: StackConfig) -> None:
    for derived in FROM_RAY_CLUSTER_NAME:
        name = derived.name(cfg.ray_cluster_name)
        if derived.needed(cfg) and len(name) > derived.limit:
            longest = derived.limit - (len(name) - len(cfg.ray_cluster_name))
            raise ValueError(
                f"config key 'rayClusterName': {cfg.ray_cluster_name!r} makes the {derived.kind} name {name!r}, "
                f"{len(name)} characters, and Kubernetes allows {derived.limit}; allowed: a rayClusterName of at most "
                f"{longest} characters")
    # Every choice's, not only the current one's: switching `monitoring` is a day-two change, and
    # it must not meet a Ray namespace already holding the name.
    for choice, owned in MONITORING_NAMESPACES.items():
        if cfg.ray_namespace in owned:
            raise ValueError(
                f"config key 'rayNamespace': {shown_value(cfg.ray_namespace)} is the namespace monitoring={choice} "
                "creates for "
                f"its own pods (with their own Pod Security and network policies); allowed: a name none of "
                f"{[n for names in MONITORING_NAMESPACES.values() for n in names]} (such as ray)")
