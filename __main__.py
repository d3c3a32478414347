"""Composition root: config -> checks at preview -> components in dependency order -> exports.

Everything that can refuse the stack runs first (infra/preview/feasibility.py, with the EC2 and Service Quotas look-ups
and an existing reservation's), so a stack that cannot work fails before any resource is registered.
"""
import pulumi

from infra import config
from infra.aws import network, node_health, reservation_end
from infra.aws.capacity_reservation import GpuCapacityReservation
from infra.aws.cluster import EksCluster
from infra.aws.gpu_nodes import GpuNodeGroup, GpuPlacementGroup, TargetedReservation
from infra.aws.network import Network
from infra.aws.pod_identity import RayPodIdentity, checkpoint_storage_policy
from infra.config import secret_inputs
from infra.config.experiment_tracking import artifacts_location
from infra.config.schema import warn
from infra.job import job_config, preflight, ray_job
from infra.kubernetes import addons, cloudwatch, idle_stop, monitoring, raycluster
from infra.kubernetes.mlflow_server import MlflowServer
from infra.preview import feasibility

# ---- config and every check, before any resource ---------------------------------------------------------------
cfg = config.load()
plan = feasibility.plan_stack(cfg)
gpu_facts = plan.gpu
# A key the stack holds as a secret (a private dlcImage or trainModelId) stays one in every resource input.
secret_inputs.keep_secret_inputs()

tags = {"project": pulumi.get_project(), "stack": pulumi.get_stack(), "cluster": cfg.cluster_name}

# ---- AWS: network, control plane with system nodes, GPU capacity, GPU nodes ---------------------------------
net = Network(
    f"{cfg.cluster_name}-net",
    vpc_cidr=cfg.vpc_cidr,
    plan=network.subnet_plan(cfg.vpc_cidr, plan.vpc_azs, plan.zone_ids),
    cluster_name=cfg.cluster_name,
    tags=tags,
)
cluster = EksCluster(
    cfg.cluster_name,
    cfg=cfg,
    identity=plan.identity,
    creator=plan.creator,
    account_id=plan.account_id,
    partition=plan.partition,
    region=plan.region,
    vpc_id=net.vpc_id,
    control_plane_public_subnet_ids=net.control_plane_public_subnet_ids,
    control_plane_private_subnet_ids=net.control_plane_private_subnet_ids,
    system_subnet_ids=net.control_plane_private_subnet_ids,
    public_access_cidrs=plan.api_public_access_cidrs,
    tags=tags,
)
# The Ray pods' own AWS identity (EKS Pod Identity), scoped to the checkpoint prefix, an s3:// dataset file and an
# s3:// model directory (read-only); the nodes' roles have none.
# The stack's MLflow server's prefix under trainStoragePath is denied to them: only the server's role writes its store.
storage_policy = checkpoint_storage_policy(
    cfg.train.storage_path, dataset=cfg.train.dataset, model=cfg.train.model_id,
    server_prefix=artifacts_location(cfg.train.storage_path)[1] if cfg.experiment_tracking == "mlflow" else "")
pod_identity = RayPodIdentity(
    f"{cfg.cluster_name}-ray-pods",
    cluster_name=cluster.cluster_name,
    eks_cluster_name=cfg.cluster_name,
    eks_cluster_arn=cluster.cluster_arn,
    namespace=cfg.ray_namespace,
    service_account=raycluster.pod_service_account_name(cfg.ray_cluster_name),
    storage_policy=storage_policy,
    tags=tags,
) if storage_policy else None

# The GPU nodes' cluster placement group comes first: the stack's own reservation is made inside it.
placement = GpuPlacementGroup(f"{cfg.cluster_name}-gpu-placement", node_group_name=f"{cfg.cluster_name}-gpu",
                              tags=tags) if plan.own_placement_group else None
placement_group: pulumi.Input[str] | None = placement.name if placement else None
if cfg.capacity_reserve:
    # An ended reservation (capacityReservationHours, or cancelled) leaves no GPU node able to launch: say so now.
    reservation_end.warn_if_ended(f"{cfg.cluster_name}-gpu-reservation", region=plan.region, identity=plan.identity,
                                  end_hours=cfg.capacity_reservation_hours,
                                  idle_stop_minutes=cfg.gpu_idle_stop_minutes)
    reservation = GpuCapacityReservation(
        f"{cfg.cluster_name}-gpu-reservation",
        instance_type=cfg.gpu_instance_type,
        instance_count=cfg.gpu_node_count,
        candidate_azs=list(plan.candidate_azs),
        tags=tags,
        # The dynamic provider runs outside the AWS provider: tell it the stack's region and identity (with the
        # account it reached at preview, which the provider checks before it reserves anything).
        region=plan.region,
        identity=plan.identity,
        end_hours=cfg.capacity_reservation_hours,
        placement_group_arn=placement.arn if placement else None,
    )
    gpu_az: pulumi.Input[str] = reservation.availability_zone
    target: TargetedReservation | None = TargetedReservation(reservation.reservation_id)
elif plan.reservation:
    gpu_az = plan.reservation.availability_zone
    target = TargetedReservation(plan.reservation.reservation_id, capacity_block=plan.reservation.capacity_block)
    placement_group = plan.reservation.placement_group
else:
    gpu_az, target = cfg.gpu_availability_zone, None

gpu_nodes = GpuNodeGroup(
    f"{cfg.cluster_name}-gpu",
    cluster_name=cluster.cluster_name,
    kubernetes_version=cfg.kubernetes_version,
    facts=gpu_facts,
    node_count=cfg.gpu_node_count,
    vpc_id=net.vpc_id,
    subnet_id=net.private_subnet_id(gpu_az),
    availability_zone=gpu_az,
    cluster_security_group_id=cluster.cluster_security_group_id,
    root_volume_gib=cfg.gpu_root_volume_gib,
    placement_group=placement_group,
    reservation=target,
    tags=tags,
    node_repair=cfg.gpu_node_repair,
    idle_stop=bool(cfg.gpu_idle_stop_minutes),
)

# ---- Kubernetes: device plugins and KubeRay, GPU nodes ready, the RayCluster, then (optionally) the job ------
cluster_addons = addons.ClusterAddons(
    f"{cfg.cluster_name}-addons",
    provider=cluster.provider,
    gpu_instance_type=cfg.gpu_instance_type,
    vpc_cidr=cfg.vpc_cidr,
    depends_on=[cluster.system_node_group, cluster.coredns, gpu_nodes.node_group],
)
# Day two with the idle stop (infra/kubernetes/idle_stop.py): the GPU group may sit at 0 nodes. Before anything that
# waits for GPU nodes or Ray workers (GpuNodesReady, the RayCluster's readiness, the job), GpuNodesAwake sets the group
# to gpuNodeCount, in one EKS call with min, desired and max together; it runs only when one of those waits follows
# from a change (node count, RayCluster spec or namespace, a replaced GPU group, trainSecretEnv, trainRunId, and anything else that replaces the job:
# its definition's digest).
awake = idle_stop.GpuNodesAwake(
    f"{cfg.cluster_name}-gpu-awake", cluster=cluster.cluster_name, nodegroup=gpu_nodes.node_group_name,
    nodegroup_arn=gpu_nodes.node_group.arn,
    node_count=cfg.gpu_node_count, run_id=cfg.train.run_id if cfg.train.enabled else "",
    job_definition=ray_job.job_definition(job_config.job_inputs(cfg, gpu_facts)) if cfg.train.enabled else "",
    ray_cluster_spec=raycluster.spec_digest(cfg, gpu_facts), ray_namespace=cfg.ray_namespace,
    secret_env=cfg.train.secret_env.reveal(),
    region=plan.region, identity=plan.identity,
    opts=pulumi.ResourceOptions(depends_on=[gpu_nodes.node_group])) if cfg.gpu_idle_stop_minutes else None
# When a device plugin leaves the GPU nodes without their GPUs or EFA interfaces, this fails within
# preflight.GPU_NODES_READY_TIMEOUT_SECONDS naming the node or DaemonSet at fault; the RayCluster would instead
# wait out its own 30 minutes with its workers Pending.
gpu_nodes_ready = preflight.GpuNodesReady(
    f"{cfg.cluster_name}-gpu-nodes-ready",
    kubeconfig=cluster.kubeconfig,
    request=preflight.WorkerRequest.for_instance(gpu_facts, cfg.gpu_node_count),
    gpu_node_group=gpu_nodes.node_group.arn,
    image_cuda_version=plan.image.cuda_version,
    opts=pulumi.ResourceOptions(depends_on=[cluster_addons.nvidia_device_plugin, cluster_addons.efa_device_plugin,
                                            *([awake] if awake else [])]),
)
ray_cluster = raycluster.RayCluster(
    f"{cfg.cluster_name}-ray",
    provider=cluster.provider,
    cfg=cfg,
    facts=gpu_facts,
    # Pods get Pod Identity credentials only if the association exists when they are created.
    depends_on=[cluster_addons.kuberay_operator, gpu_nodes_ready, cluster.pod_identity_agent,
                *([pod_identity.association] if pod_identity else [])],
)

# ---- metrics, node health, idle stop (issue 24) -----------------------------------------------------------------
# The agent's conditions are worth having with repair off too (`kubectl describe node` names the fault).
node_health.NodeMonitoringAgent(f"{cfg.cluster_name}-node-monitoring-agent", cluster_name=cluster.cluster_name,
                                 tags=tags, depends_on=[cluster.system_node_group])
if cfg.monitoring == "prometheus":
    metrics = monitoring.PrometheusMonitoring(
        f"{cfg.cluster_name}-monitoring", provider=cluster.provider, ray_namespace=ray_cluster.namespace,
        ray_namespace_name=cfg.ray_namespace, ray_cluster_name=cfg.ray_cluster_name,
        control_plane_cidrs=net.control_plane_cidrs,
        depends_on=[cluster.system_node_group, cluster.coredns, gpu_nodes.node_group])
    pulumi.export("grafanaCommand", metrics.dashboard_command)
    pulumi.export("grafanaAdminPassword", metrics.admin_password)
elif cfg.monitoring == "cloudwatch":
    metrics = cloudwatch.CloudWatchMonitoring(
        f"{cfg.cluster_name}-cloudwatch", provider=cluster.provider, cluster_name=cluster.cluster_name,
        eks_cluster_name=cfg.cluster_name, eks_cluster_arn=cluster.cluster_arn,
        control_plane_cidrs=net.control_plane_cidrs, vpc_cidr=cfg.vpc_cidr, tags=tags,
        depends_on=[cluster.system_node_group, cluster.pod_identity_agent])
    pulumi.export("grafanaCommand", metrics.dashboard_command)
# ---- the stack's own MLflow server (issue 34): the job reports to it when trainReportTo names mlflow ---------------
tracking = MlflowServer(
    f"{cfg.cluster_name}-mlflow", provider=cluster.provider, cluster_name=cluster.cluster_name,
    eks_cluster_name=cfg.cluster_name, eks_cluster_arn=cluster.cluster_arn, namespace_name=cfg.ray_namespace,
    ray_cluster_name=cfg.ray_cluster_name, storage_path=cfg.train.storage_path, tags=tags,
    depends_on=[ray_cluster.namespace_resource, ray_cluster.admission_binding, cluster.system_node_group,
                cluster.pod_identity_agent]) if cfg.experiment_tracking == "mlflow" else None
if tracking:
    pulumi.export("mlflowCommand", tracking.port_forward_command)
wake_command = pulumi.Output.all(cluster.cluster_name, gpu_nodes.node_group_name).apply(
    lambda names: idle_stop.wake_command(names[0], names[1], cfg.gpu_node_count, plan.region))
if cfg.gpu_idle_stop_minutes:
    if target is not None:
        warn("gpuIdleStopMinutes with a capacity reservation: stopping the GPU nodes saves nothing, the "
             "reservation bills whether instances run in it or not")
    idle_stop.IdleStop(
        f"{cfg.cluster_name}-idle-stop", provider=cluster.provider, cluster_name=cluster.cluster_name,
        eks_cluster_name=cfg.cluster_name, eks_cluster_arn=cluster.cluster_arn, namespace=ray_cluster.namespace,
        namespace_name=cfg.ray_namespace,
        ray_cluster_name=cfg.ray_cluster_name, image=cfg.dlc_image, nodegroup_name=gpu_nodes.node_group_name,
        nodegroup_arn=gpu_nodes.node_group.arn, region=plan.region, idle_minutes=cfg.gpu_idle_stop_minutes, tags=tags,
        awake=awake)
    pulumi.export("gpuWakeCommand", wake_command)

pulumi.export("clusterName", cluster.cluster_name)
# Who administers the cluster (issue 22): EKS's bootstrap access entry for the creator, which pulumi-eks always asks
# for and which `pulumi up` itself authenticates as, plus clusterAdmins' own entries (docs/security.md, "Who is admin").
pulumi.export("clusterAdmins", {"creator": cluster.creator, "named": list(cfg.cluster_admins)})
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("region", plan.region)
pulumi.export("gpuAvailabilityZone", gpu_nodes.availability_zone)
pulumi.export("gpuInstanceType", gpu_facts.instance_type)
pulumi.export("gpusPerNode", gpu_facts.gpus)
pulumi.export("efaInterfacesPerNode", gpu_facts.efa_interfaces)
pulumi.export("systemNodeGroupName", cluster.system_node_group.node_group_name)
pulumi.export("gpuNodeGroupName", gpu_nodes.node_group_name)
pulumi.export("rayClusterName", ray_cluster.cluster_name)
pulumi.export("rayNamespace", ray_cluster.namespace)
pulumi.export("rayHeadService", ray_cluster.head_service_name)

if cfg.train.enabled:
    job = ray_job.TrainingJob(
        f"{cfg.cluster_name}-job",
        kubeconfig=cluster.kubeconfig,
        cfg=cfg,
        facts=gpu_facts,
        ray_cluster=ray_cluster,
        # Its create waits for the GPU nodes to join (infra/job/nodes_joined.py), reading the group's health from EKS.
        node_group={"eks_cluster": cluster.cluster_name, "gpu_nodegroup": gpu_nodes.node_group_name,
                    "region": plan.region, "profile": plan.identity.profile or "",
                    "role_arn": plan.identity.role_arn or "", "account_id": plan.identity.account_id or "",
                    "wake_command": wake_command},
        # The server up before the job, whose first call to it would otherwise fail (and the run go on without it).
        opts=pulumi.ResourceOptions(depends_on=[ray_cluster, *([awake] if awake else []),
                                                *([tracking.deployment] if tracking else [])]),
    )
    pulumi.export("jobId", job.job_id)
    pulumi.export("jobStatus", job.status)
    pulumi.export("jobFinalLoss", job.final_loss)
    pulumi.export("jobTokensPerSecond", job.tokens_per_s)
    pulumi.export("jobWorldSize", job.world_size)
    pulumi.export("jobTransportVerdicts", job.verdicts)
    pulumi.export("jobCheckpoint", job.checkpoint)
    pulumi.export("jobSharding", job.sharding)
    pulumi.export("jobFabricCheck", job.fabric)
    pulumi.export("jobFollow", job.follow)
    pulumi.export("jobEvalLoss", job.eval_loss)
    pulumi.export("jobModelPath", job.model)
    pulumi.export("jobTensorBoard", job.tensorboard)
    # Known at preview (infra/preview/feasibility.py): the memory levers the job will use and why; None for a model
    # whose architecture the preview could not read.
    pulumi.export("jobMemoryPlan", plan.memory_plan.as_dict() if plan.memory_plan else None)
    # And the layout it would choose from the instance's nominal network; the job decides again with its fabric
    # check's measurement (jobSharding).
    pulumi.export("jobLayoutPlan", plan.layout_plan)
    # And what one of its checkpoints costs: its size, the seconds a save holds up the steps, and at which rates.
    pulumi.export("jobCheckpointPlan", plan.checkpoint_plan)
    # And what tokenizing its dataset costs: the tokens, the token shards each node copies, the stage's seconds.
    pulumi.export("jobDataPlan", plan.data_plan)
