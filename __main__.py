"""Composition root: config -> checks at preview -> components in dependency order -> exports.

Everything that can refuse the stack's config runs first (including the EC2 look-ups of the instance types and
the region's AZs), so a bad config fails before any resource is registered.
"""
import pulumi
import pulumi_aws as aws

from infra import addons, config, instance_facts, network, preflight, ray_job, raycluster
from infra.aws_identity import StackIdentity
from infra.capacity_reservation import GpuCapacityReservation
from infra.cluster import EksCluster, checkpoint_storage_policy
from infra.gpu_nodes import GpuNodeGroup, existing_reservation_id
from infra.network import Network

# ---- config and every check that needs no resource -------------------------------------------------------
cfg = config.load()
region = network.aws_region()
zone_ids = network.region_availability_zones()
vpc_azs = network.choose_vpc_azs(cfg.vpc_availability_zones, zone_ids)
candidate_azs = network.reservation_candidate_azs(cfg, vpc_azs) if cfg.capacity_reserve else ()
network.check_gpu_azs(vpc_azs, gpu_az=cfg.gpu_availability_zone, candidate_azs=candidate_azs)
gpu_facts = instance_facts.gpu_instance_facts(cfg.gpu_instance_type)
instance_facts.lookup(cfg.system_instance_type, config_key="systemInstanceType")
addons.check_efa_allowlist(cfg.gpu_instance_type)
raycluster.check_config(cfg, gpu_facts)
if cfg.train.enabled:
    ray_job.job_inputs(cfg, gpu_facts)  # refuses a job the cluster cannot run, before any resource
if cfg.capacity_reserve:
    # aws:profile and aws:assumeRoles as the AWS provider reads them (a bad assumeRoles entry is refused here), and
    # the account they reach, through the AWS provider itself.
    stack_identity = StackIdentity.from_stack_config(account_id=aws.get_caller_identity().account_id)

tags = {"project": pulumi.get_project(), "stack": pulumi.get_stack(), "cluster": cfg.cluster_name}

# ---- AWS: network, control plane with system nodes, GPU capacity, GPU nodes ---------------------------------
net = Network(
    f"{cfg.cluster_name}-net",
    vpc_cidr=cfg.vpc_cidr,
    plan=network.subnet_plan(cfg.vpc_cidr, vpc_azs, zone_ids),
    cluster_name=cfg.cluster_name,
    tags=tags,
)
cluster = EksCluster(
    cfg.cluster_name,
    cfg=cfg,
    vpc_id=net.vpc_id,
    control_plane_public_subnet_ids=net.control_plane_public_subnet_ids,
    control_plane_private_subnet_ids=net.control_plane_private_subnet_ids,
    system_subnet_ids=net.control_plane_private_subnet_ids,
    tags=tags,
)

if cfg.capacity_reserve:
    reservation = GpuCapacityReservation(
        f"{cfg.cluster_name}-gpu-reservation",
        instance_type=cfg.gpu_instance_type,
        instance_count=cfg.gpu_node_count,
        candidate_azs=list(candidate_azs),
        tags=tags,
        # The dynamic provider runs outside the AWS provider: tell it the stack's region, profile and assumed roles,
        # and the account they reached at preview, which it checks before it reserves anything.
        region=region,
        identity=stack_identity,
        end_hours=cfg.capacity_reservation_hours,
    )
    gpu_az: pulumi.Input[str] = reservation.availability_zone
    reservation_id: pulumi.Input[str] | None = reservation.reservation_id
elif cfg.capacity_reservation_id:
    gpu_az = cfg.gpu_availability_zone
    reservation_id = existing_reservation_id(
        f"{cfg.cluster_name}-gpu-reservation",
        cfg.capacity_reservation_id,
        instance_type=cfg.gpu_instance_type,
        availability_zone=cfg.gpu_availability_zone,
        node_count=cfg.gpu_node_count,
    )
else:
    gpu_az, reservation_id = cfg.gpu_availability_zone, None

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
    gpu_placement=cfg.gpu_placement,
    capacity_reservation_id=reservation_id,
    tags=tags,
    storage_policy=checkpoint_storage_policy(cfg.train.storage_path),
)

# ---- Kubernetes: device plugins and KubeRay, GPU nodes ready, the RayCluster, then (optionally) the job ------
cluster_addons = addons.ClusterAddons(
    f"{cfg.cluster_name}-addons",
    provider=cluster.provider,
    gpu_instance_type=cfg.gpu_instance_type,
    depends_on=[cluster.system_node_group, cluster.coredns, gpu_nodes.node_group],
)
# When a device plugin leaves the GPU nodes without their GPUs or EFA interfaces, this fails within
# preflight.GPU_NODES_READY_TIMEOUT_SECONDS naming the node or DaemonSet at fault; the RayCluster would instead
# wait out its own 30 minutes with its workers Pending.
gpu_nodes_ready = preflight.GpuNodesReady(
    f"{cfg.cluster_name}-gpu-nodes-ready",
    kubeconfig=cluster.kubeconfig,
    request=preflight.WorkerRequest.for_instance(gpu_facts, cfg.gpu_node_count),
    gpu_node_group=gpu_nodes.node_group.arn,
    opts=pulumi.ResourceOptions(depends_on=[cluster_addons.nvidia_device_plugin, cluster_addons.efa_device_plugin]),
)
ray_cluster = raycluster.RayCluster(
    f"{cfg.cluster_name}-ray",
    provider=cluster.provider,
    cfg=cfg,
    facts=gpu_facts,
    depends_on=[cluster_addons.kuberay_operator, gpu_nodes_ready],
)

pulumi.export("clusterName", cluster.cluster_name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("region", region)
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
        opts=pulumi.ResourceOptions(depends_on=[ray_cluster]),
    )
    pulumi.export("jobId", job.job_id)
    pulumi.export("jobStatus", job.status)
    pulumi.export("jobFinalLoss", job.final_loss)
    pulumi.export("jobTokensPerSecond", job.tokens_per_s)
    pulumi.export("jobWorldSize", job.world_size)
    pulumi.export("jobTransportVerdicts", job.verdicts)
    pulumi.export("jobCheckpoint", job.checkpoint)
    pulumi.export("jobFollow", job.follow)
