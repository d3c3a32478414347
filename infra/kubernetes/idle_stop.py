"""Idle GPUs stop billing (issue 24), like SkyPilot's autostop: with `gpuIdleStopMinutes` set, a CronJob in the Ray
namespace scales the GPU node group to zero once no Ray job has run for that long; the cluster, the system node, the
RayCluster (its workers Pending), the stack's outputs and the checkpoints in S3 stay.

Where the check runs. In the cluster, next to the job server it asks (the head's Jobs API through its service, with
the RayCluster's token from the Secret KubeRay made), on the system node, every CHECK_SCHEDULE; it calls EKS
UpdateNodegroupConfig with its own IAM role through EKS Pod Identity, allowed eks:DescribeNodegroup and
eks:UpdateNodegroupConfig on the GPU node group's ARN and nothing else. Not a Lambda: it would need a way into the
cluster's private job server (a VPC function, the token in Secrets Manager), for the same two calls. The script is
infra/kubernetes/idle_check.py, mounted as it is.

Waking, and day two. While the idle stop is on, the node group's scaling belongs to `GpuNodesAwake` (a small dynamic
resource) and the check: the program gives the group its sizes when it creates it and ignores scalingConfig after
(ignore_changes), so `pulumi up` neither fights a stopped group nor starts it for nothing. GpuNodesAwake runs first in
every `pulumi up` that will wait for GPU nodes or Ray workers, and only then: its inputs are everything such a wait
follows from (gpuNodeCount, the RayCluster's spec and namespace, the node group's ARN, trainSecretEnv's values, which replace the RayCluster, and, when a
job runs, trainRunId and a digest of everything else that replaces the job: a new model, dataset or flag). When one
changed it sets the group to (min 0, desired gpuNodeCount, max gpuNodeCount) in one call, up or down, and waits for EKS
to report the group ACTIVE, failing at once, in EKS's words, on a group EKS reports DEGRADED or failed. ACTIVE is not
ready (the instances join after it): GpuNodesReady, the RayCluster and the job come after the wake and wait for the
nodes themselves (the job: infra/job/nodes_joined.py). Its time is the CronJob's AWAKE_SINCE, so the check counts idle time from it.
By hand: the `gpuWakeCommand` output (`aws eks update-nodegroup-config ...`).

What still bills while stopped: the EKS control plane ($0.10/h), the NAT gateway (hourly and per GB), the system
node (m7i.xlarge by default), the GPU nodes' nothing (their root volumes go with the instances), S3, CloudWatch logs,
and a capacity reservation: an On-Demand Capacity Reservation bills at the On-Demand rate whether instances run in it
or not, and a Capacity Block is paid up front, so with either the idle stop saves nothing on the GPUs (the program
warns at preview). `pulumi destroy` is what stops everything.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from infra.aws import identity as aws_identity
from infra.aws.node_labels import SYSTEM_NODE_SELECTOR
from infra.aws.pod_identity import trust_policy
from infra.config import AwsIdentity
from infra.kubernetes import admission, idle_stop_identity, ray_security
from infra.kubernetes.portforward import CLUSTER_LABEL, NODE_TYPE_LABEL
from infra.kubernetes.raycluster import DASHBOARD_PORT, auth_secret_name, head_service_name

CHECK_SCRIPT = Path(__file__).with_name("idle_check.py")
CHECK_SCHEDULE = "*/5 * * * *"
# The pod carries this label and not the RayCluster's, so the Ray namespace's policy for Ray pods does not apply to it.
IDLE_STOP_LABEL = {"app.kubernetes.io/name": "ray-idle-stop"}
SCALING_ACTIONS = ("eks:DescribeNodegroup", "eks:UpdateNodegroupConfig")
# Python importing Ray and boto3 in the training image: a few hundred MiB, for seconds every five minutes.
CHECK_RESOURCES = {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}}


def idle_stop_name(cluster_name: str) -> str:
    return f"{cluster_name}-idle-stop"


def scaling_policy(nodegroup_arn: str) -> str:
    """The check's IAM policy: the two calls it makes, on the GPU node group only."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": list(SCALING_ACTIONS), "Resource": nodegroup_arn}]})


def cronjob_manifest(*, namespace: str, cluster_name: str, image: str, eks_cluster: pulumi.Input[str],
                     nodegroup_name: pulumi.Input[str], region: str, idle_minutes: int,
                     awake_since: pulumi.Input[str] = "") -> dict:
    name = idle_stop_name(cluster_name)
    env = {"RAY_JOB_SERVER": f"http://{head_service_name(cluster_name)}.{namespace}.svc:{DASHBOARD_PORT}",
           "EKS_CLUSTER": eks_cluster, "GPU_NODEGROUP": nodegroup_name, "AWS_REGION": region,
           "IDLE_MINUTES": str(idle_minutes), "AWAKE_SINCE": awake_since,
           # The image's NVIDIA hook fails on a node without GPUs unless told there are none (as on the Ray head).
           "NVIDIA_VISIBLE_DEVICES": "void"}
    pod = {
        "metadata": {"labels": dict(IDLE_STOP_LABEL)},
        "spec": {
            "serviceAccountName": name,
            "automountServiceAccountToken": False,  # it calls AWS and Ray, never the Kubernetes API
            "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
            "restartPolicy": "Never",
            "containers": [{
                "name": "idle-check",
                "image": image,
                "command": ["python3", f"/opt/idle-stop/{CHECK_SCRIPT.name}"],
                "env": [*({"name": key, "value": value} for key, value in env.items()),
                        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
                            "name": auth_secret_name(cluster_name), "key": "auth_token"}}}],
                "volumeMounts": [{"name": "script", "mountPath": "/opt/idle-stop", "readOnly": True}],
                "resources": CHECK_RESOURCES,
                # The check writes its outcome there; a crash before it did leaves the log's last lines instead.
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": ray_security.container_security_context(efa=False),
            }],
            "volumes": [{"name": "script", "configMap": {"name": name}}],
        },
    }
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": CHECK_SCHEDULE,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 240,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {"backoffLimit": 0, "activeDeadlineSeconds": 240, "ttlSecondsAfterFinished": 3600,
                                     "template": pod}},
        },
    }


def network_policies(*, namespace: str, cluster_name: str) -> list[dict]:
    """The check's way through the default deny: out to the head's job server, DNS, AWS's public endpoints (EKS) and
    the Pod Identity agent; the head admits it on the job server's port."""
    check_pod = {"matchLabels": dict(IDLE_STOP_LABEL)}
    head = {"matchLabels": {CLUSTER_LABEL: cluster_name, NODE_TYPE_LABEL: "head"}}
    name = idle_stop_name(cluster_name)

    def policy(suffix: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": f"{name}-{suffix}", "namespace": namespace}, "spec": spec}

    job_server = [{"protocol": "TCP", "port": DASHBOARD_PORT}]
    return [
        policy("egress", {"podSelector": check_pod, "policyTypes": ["Egress"], "egress": [
            {"to": [{"podSelector": head}], "ports": job_server},
            {"to": [ray_security.DNS_PEER],
             "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(ray_security.NON_PUBLIC_CIDRS)}}],
             "ports": [{"protocol": "TCP", "port": ray_security.HTTPS_PORT}]},
            {"to": [{"ipBlock": {"cidr": ray_security.POD_IDENTITY_AGENT_CIDR}}],
             "ports": [{"protocol": "TCP", "port": ray_security.POD_IDENTITY_AGENT_PORT}]},
        ]}),
        policy("to-head", {"podSelector": head, "policyTypes": ["Ingress"],
                           "ingress": [{"from": [{"podSelector": check_pod}], "ports": job_server}]}),
    ]


def wake_command(cluster: str, nodegroup: str, node_count: int, region: str) -> str:
    return (f"aws eks update-nodegroup-config --region {region} --cluster-name {cluster} --nodegroup-name {nodegroup} "
            f"--scaling-config minSize=0,maxSize={node_count},desiredSize={node_count}")


class IdleStop(pulumi.ComponentResource):
    """The check's IAM role (Pod Identity), service account, script, CronJob and NetworkPolicies."""

    def __init__(self, name: str, *, provider: k8s.Provider, cluster_name: pulumi.Input[str], eks_cluster_name: str,
                 eks_cluster_arn: str, namespace: pulumi.Input[str], namespace_name: str, ray_cluster_name: str,
                 image: str,
                 nodegroup_name: pulumi.Input[str], nodegroup_arn: pulumi.Input[str], region: str, idle_minutes: int,
                 tags: dict[str, str], awake: "GpuNodesAwake | None" = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("raytrain:infra:IdleStop", name, None, opts)
        service_account = idle_stop_name(ray_cluster_name)
        role = aws.iam.Role(f"{name}-role",
                            description=f"EKS {eks_cluster_name}: scale the GPU node group to 0 when idle",
                            assume_role_policy=trust_policy(eks_cluster_arn, eks_cluster_name, namespace_name,
                                                            service_account),
                            tags=tags, opts=pulumi.ResourceOptions(parent=self))
        policy = aws.iam.RolePolicy(f"{name}-scaling", role=role.id,
                                    policy=pulumi.Output.from_input(nodegroup_arn).apply(scaling_policy),
                                    opts=pulumi.ResourceOptions(parent=role))
        association = aws.eks.PodIdentityAssociation(
            f"{name}-association", cluster_name=cluster_name, namespace=namespace_name,
            service_account=service_account, role_arn=role.arn, tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]))
        in_cluster = pulumi.ResourceOptions(parent=self, provider=provider)
        # No other pod of the namespace may act as the check (infra/kubernetes/idle_stop_identity.py), bound before
        # the account exists.
        guard_name = f"{namespace_name}-{service_account}"
        guard = idle_stop_identity.identity_policy(guard_name, service_account=service_account,
                                                   cronjob=idle_stop_name(ray_cluster_name))
        guard_policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-identity", metadata=guard["metadata"], spec=guard["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider))
        binding = admission.pod_security_binding(guard_name, policy_name=guard_name, namespace=namespace_name)
        guard_binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-identity-binding", metadata=binding["metadata"], spec=binding["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[guard_policy]))
        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={"name": service_account, "namespace": namespace},
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[guard_binding]))
        script = k8s.core.v1.ConfigMap(
            f"{name}-script", metadata={"name": service_account, "namespace": namespace},
            data={CHECK_SCRIPT.name: CHECK_SCRIPT.read_text()}, opts=in_cluster)
        self.network_policies = [
            k8s.networking.v1.NetworkPolicy(f"{name}-{p['metadata']['name']}",
                                            metadata={**p["metadata"], "namespace": namespace}, spec=p["spec"],
                                            opts=in_cluster)
            for p in network_policies(namespace=namespace_name, cluster_name=ray_cluster_name)]
        manifest = cronjob_manifest(namespace=namespace_name, cluster_name=ray_cluster_name, image=image,
                                    eks_cluster=cluster_name, nodegroup_name=nodegroup_name, region=region,
                                    idle_minutes=idle_minutes, awake_since=awake.woken_at if awake else "")
        # Pods get Pod Identity credentials only if the association exists when they are created.
        self.cron_job = k8s.batch.v1.CronJob(
            f"{name}-cronjob", metadata={**manifest["metadata"], "namespace": namespace}, spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider,
                                        depends_on=[association, account, script, *self.network_policies,
                                                    *([awake] if awake else [])]))
        self.register_outputs({"cron_job": self.cron_job.metadata["name"]})


# ---- waking the nodes for a job (pulumi up) ------------------------------------------------------------------------

# What GpuNodesAwake's diff compares: any change means this `pulumi up` waits for GPU nodes or Ray workers. With a
# job: its run id and its definition (a digest of whatever infra/job/ray_job.py REPLACE_ON_CHANGE covers: a new
# model, dataset or flag replaces the job, whose create then needs the GPU nodes).
# The node group's ARN as well as its name: EKS gives a replaced group a new ARN (its last part is a UUID) under the
# same name, and the GPU group's name is fixed (infra/aws/gpu_nodes.py), so only the ARN says "new nodes to wait for".
# And the RayCluster's namespace, which its spec does not hold: a new one replaces the RayCluster as a new spec does.
WAKE_TRIGGERS = ("node_count", "run_id", "job_definition", "nodegroup", "nodegroup_arn", "ray_cluster_spec",
                 "ray_namespace", "secret_env")
# Triggers that only matter while a job runs: going to "" (trainEnabled false) deletes the job and waits for nothing.
JOB_TRIGGERS = ("run_id", "job_definition")
# Triggers a state written before they existed lacks: their first value is no change (it must not wake a stopped group).
ADDED_TRIGGERS = ("nodegroup_arn", "ray_namespace")


def changed_triggers(olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
    return [key for key in WAKE_TRIGGERS
            if olds.get(key) != news.get(key) and not (key in ADDED_TRIGGERS and key not in olds)]


def to_stderr(line: str) -> None:
    """Progress from the provider's process: Pulumi shows its stderr under the resource."""
    import sys

    print(line, file=sys.stderr, flush=True)


def needs_wake(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    """Whether the new inputs make this `up` wait for GPU nodes: a trigger changed, other than a job's going away."""
    return any(key not in JOB_TRIGGERS or news.get(key) for key in changed_triggers(olds, news))


class _WakeProvider(ResourceProvider):
    """create/update: wait for the node group to settle (EKS refuses a second update while one runs:
    ResourceInUseException), set it to awake_scaling(node_count), and wait until EKS reports it ACTIVE again. A
    failed or DEGRADED group fails at once with EKS's health issues (infra/aws/nodegroup_health.py). ACTIVE is not
    ready: the instances launch and join after it, and what needs them waits for them itself (GpuNodesReady, the
    RayCluster's readiness, the job's wait for joined nodes in infra/job/nodes_joined.py). delete: nothing (the node
    group is the program's)."""

    def _wake(self, props: dict[str, Any]) -> dict[str, Any]:
        from datetime import datetime, timezone

        from infra.aws import nodegroup_health
        from infra.kubernetes import idle_check

        identity = aws_identity.identity_from_props(props)
        boto_session = aws_identity.session(identity, props["region"])
        aws_identity.check_account(boto_session, identity)
        eks = boto_session.client("eks")
        describe = nodegroup_health.reader(eks, props["cluster"], props["nodegroup"])
        nodegroup_health.wait_until_settled(describe, strict=False, on_progress=to_stderr)
        woken = idle_check.wake(eks, props["cluster"], props["nodegroup"], int(props["node_count"]))
        if woken:
            to_stderr(f"woke the GPU node group {props['nodegroup']}: {int(props['node_count'])} node(s) asked of EKS; "
                      "what needs them waits for them to join")
            nodegroup_health.wait_until_settled(describe, strict=True, on_progress=to_stderr)
        return {**props, "woken": woken, "woken_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=f"{props['cluster']}/{props['nodegroup']}", outs=self._wake(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # A state without an added trigger gets it recorded by an update that wakes nothing (needs_wake skips it),
        # so that a later change of it counts.
        recorded = all(key in olds for key in ADDED_TRIGGERS)
        return DiffResult(changes=bool(changed_triggers(olds, news)) or not recorded, replaces=[],
                          delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if not needs_wake(olds, news):
            # The job went away (trainEnabled false): nothing waits for nodes. Record the new inputs, so that a job
            # turned on again later is a change that wakes.
            return UpdateResult(outs={**news, "woken": False, "woken_at": olds.get("woken_at")})
        return UpdateResult(outs=self._wake(news))


class GpuNodesAwake(pulumi.dynamic.Resource, module="raytrain", name="GpuNodesAwake"):
    """The GPU node group at gpuNodeCount before anything of this `pulumi up` waits for GPU nodes or Ray workers."""

    woken: pulumi.Output[bool]
    woken_at: pulumi.Output[str]

    def __init__(self, name: str, *, cluster: pulumi.Input[str], nodegroup: pulumi.Input[str], node_count: int,
                 run_id: str, job_definition: str, ray_cluster_spec: str, secret_env: pulumi.Input[dict], region: str,
                 identity: AwsIdentity, nodegroup_arn: pulumi.Input[str] = "", ray_namespace: str = "",
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(_WakeProvider(), name, {
            "cluster": cluster, "nodegroup": nodegroup, "nodegroup_arn": nodegroup_arn, "node_count": node_count,
            "run_id": run_id,
            # A digest of the job's definition (ray_job.job_definition), "" without a job; a secret, since the
            # definition holds trainSecretEnv's values.
            "job_definition": pulumi.Output.secret(job_definition),
            # A digest of the spec (plain values the stack config gives), and the secret's values as a secret: a
            # new token replaces the RayCluster (raycluster.RayCluster's replacement_trigger), so it wakes too.
            "ray_cluster_spec": ray_cluster_spec, "ray_namespace": ray_namespace,
            "secret_env": pulumi.Output.secret(secret_env),
            "region": region, "profile": identity.profile or "", "role_arn": identity.role_arn or "",
            "account_id": identity.account_id or "", "woken": None, "woken_at": None}, opts)
