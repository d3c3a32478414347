"""The whole program under Pulumi mocks, once per stack file: the resources carry what issue 2 asks for.

Expected values come from the stack file (or Pulumi.yaml's default) and from tests/support/instance_facts.py's instance facts,
never from the code under test.
"""
from __future__ import annotations

import ipaddress
import json

import pytest
import yaml

from tests.support.fake_aws import ACCOUNT_ID, REGIONS, RESERVATIONS
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import (
    PROJECT,
    REPO,
    SCHEMA,
    STACKS,
    ProgramRun,
    Registration,
    is_secret_value,
    program,
    run_program,
    stack_settings,
)

VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
NAT = "aws:ec2/natGateway:NatGateway"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_CLUSTER = "eks:index:Cluster"
ADDON = "aws:eks/addon:Addon"


def stack_value(stack: str, key: str):
    """A config value as the stack sets it, else Pulumi.yaml's default."""
    return stack_settings(stack).get(key)


def gpu_node_group(run: ProgramRun) -> Registration | None:
    return next((r for r in run.of_type(NODE_GROUP) if r.inputs.get("amiType", "").endswith("NVIDIA")), None)


def system_node_group(run: ProgramRun) -> Registration:
    return next(r for r in run.of_type(NODE_GROUP) if not r.inputs["amiType"].endswith("NVIDIA"))


def launch_template_of(run: ProgramRun, group: Registration) -> Registration:
    return next(t for t in run.of_type(LAUNCH_TEMPLATE) if t.resource_id == group.inputs["launchTemplate"]["id"])


def gpu_launch_template(run: ProgramRun) -> Registration:
    return launch_template_of(run, gpu_node_group(run))


def private_subnets(run: ProgramRun) -> dict[str, Registration]:
    return {s.inputs["availabilityZone"]: s for s in run.of_type(SUBNET) if "kubernetes.io/role/internal-elb" in s.inputs["tags"]}


def public_subnets(run: ProgramRun) -> dict[str, Registration]:
    return {s.inputs["availabilityZone"]: s for s in run.of_type(SUBNET) if "kubernetes.io/role/elb" in s.inputs["tags"]}


# ---- the schema and the stack files -------------------------------------------------------------------------

def test_every_config_key_has_type_default_and_description():
    for key, spec in SCHEMA.items():
        missing = {"type", "default", "description"} - set(spec)
        assert not missing, f"Pulumi.yaml config key {key} lacks {sorted(missing)}"


def test_there_is_a_stack_file_per_instance_family():
    families = {stack_value(stack, "gpuInstanceType").split(".")[0] for stack in STACKS}
    assert {"g6", "g6e", "p4d", "p5"} <= families, f"stack files cover {sorted(families)}; expected g6, g6e, p4d, p5"
    assert stack_value("dev", "gpuInstanceType") == "g6.12xlarge" and stack_value("dev", "gpuNodeCount") == 2, \
        "Pulumi.dev.yaml is the reference: 2 x g6.12xlarge"


@pytest.mark.parametrize("stack", STACKS)
def test_stack_file_holds_only_declared_keys_that_differ_from_defaults(stack):
    config = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"]
    assert "aws:region" in config, f"Pulumi.{stack}.yaml must set aws:region"
    for key, value in config.items():
        namespace, _, name = key.partition(":")
        if namespace == "aws":
            continue
        assert namespace == PROJECT and name in SCHEMA, f"Pulumi.{stack}.yaml sets {key}, which Pulumi.yaml does not declare"
        assert value != SCHEMA[name]["default"], f"Pulumi.{stack}.yaml repeats the default of {name} ({value!r})"


# ---- the program, per stack file ------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_components_own_every_resource(stack):
    run = program(stack)
    components = [r for r in run.resources if r.type.startswith("raytrain:infra:")]
    assert {"raytrain:infra:Network", "raytrain:infra:EksCluster", "raytrain:infra:GpuNodeGroup"} <= {c.type for c in components}, \
        f"{stack}: components registered: {sorted(c.type for c in components)}"
    stack_urn = next(c.parent for c in components)
    # The project's own dynamic resources (the capacity reservation) are a concern of their own.
    own = ("raytrain:", "pulumi-python:dynamic/raytrain:")
    orphans = [r.name for r in run.resources if r.parent == stack_urn and not r.type.startswith(own) and not r.read]
    assert not orphans, f"{stack}: resources directly under the stack instead of a raytrain:infra component: {orphans}"


@pytest.mark.parametrize("stack", STACKS)
def test_network_has_public_and_private_subnets_in_two_azs_and_nat(stack):
    run = program(stack)
    vpc = run.one(VPC)
    assert vpc.inputs["cidrBlock"] == stack_value(stack, "vpcCidr"), f"{stack}: VPC cidrBlock should be the vpcCidr"
    region_azs = sorted(REGIONS[stack_value(stack, "aws:region")])
    private, public = private_subnets(run), public_subnets(run)
    assert sorted(private) == sorted(public) == region_azs, \
        f"{stack}: expected a private and a public subnet in each of {region_azs}; got {sorted(private)}, {sorted(public)}"
    networks = [ipaddress.ip_network(s.inputs["cidrBlock"]) for s in [*private.values(), *public.values()]]
    vpc_net = ipaddress.ip_network(vpc.inputs["cidrBlock"])
    assert all(n.subnet_of(vpc_net) for n in networks), f"{stack}: every subnet must lie inside {vpc_net}"
    assert not any(a.overlaps(b) for i, a in enumerate(networks) for b in networks[i + 1:]), f"{stack}: subnets overlap"

    nat = run.one(NAT)
    assert nat.inputs["subnetId"] in {s.resource_id for s in public.values()}, f"{stack}: the NAT gateway sits in a public subnet"
    private_routes = [rt for rt in run.of_type(ROUTE_TABLE) if any(r.get("natGatewayId") for r in rt.inputs["routes"])]
    assert len(private_routes) == 1 and private_routes[0].inputs["routes"][0]["natGatewayId"] == nat.resource_id, \
        f"{stack}: the private route table sends 0.0.0.0/0 through the NAT gateway"


def _physical_names(stack: str) -> set[str]:
    """The names that AWS holds unique per account and region (IAM roles: per account) the stack chooses itself."""
    run = program(stack)
    return {run.one(EKS_CLUSTER).inputs["name"], run.one("aws:cloudwatch/logGroup:LogGroup").inputs["name"],
            run.one("aws:kms/alias:Alias").inputs["name"]}


def test_no_two_stacks_share_a_name_aws_holds_unique():
    names = {stack: _physical_names(stack) for stack in STACKS}
    for one in STACKS:
        for other in STACKS:
            assert one == other or not names[one] & names[other], \
                f"stacks {one} and {other} (one account, possibly one region) share {names[one] & names[other]}"
    assert names["g6e"] == {"ray-train-g6e", "/aws/eks/ray-train-g6e/cluster", "alias/ray-train-g6e-eks-secrets"}, \
        "without clusterName a stack's names are ray-train-<stack>"
    assert "ray-train" in names["dev"], "Pulumi.dev.yaml keeps its live clusters' name, ray-train"
    assert run_program("g6e", {"clusterName": "team-a"}).one(EKS_CLUSTER).inputs["name"] == "team-a"


def test_the_default_cluster_name_is_a_valid_one_for_any_stack_name():
    from infra.config import CLUSTER_NAME
    from infra.config.naming import default_cluster_name
    for stack in ("g6e", "Prod_East.1", "a" * 80, "p5", "x.y", "x-y"):
        assert CLUSTER_NAME.match(default_cluster_name(stack)), f"{stack!r} -> {default_cluster_name(stack)!r}"
    assert default_cluster_name("x.y") != default_cluster_name("x-y"), "stacks whose names only differ in . and -"
    assert default_cluster_name("a" * 80) != default_cluster_name("a" * 81), "long names stay apart"


@pytest.mark.parametrize("stack", STACKS)
def test_eks_cluster_uses_access_entries_oidc_and_core_addons(stack):
    run = program(stack)
    cluster = run.one(EKS_CLUSTER)
    inputs = cluster.inputs
    assert inputs["version"] == stack_value(stack, "kubernetesVersion"), f"{stack}: eks.Cluster version"
    assert inputs["name"] == stack_value(stack, "clusterName"), f"{stack}: eks.Cluster name should be clusterName"
    assert inputs["authenticationMode"] == "API", f"{stack}: eks.Cluster authenticationMode should be API"
    assert inputs["createOidcProvider"] is True, f"{stack}: eks.Cluster should create an OIDC provider"
    assert inputs["skipDefaultNodeGroup"] is True, f"{stack}: eks.Cluster should skip the default node group"
    assert inputs["useDefaultVpcCni"] is False and inputs["kubeProxyAddonOptions"]["enabled"] is True, \
        f"{stack}: vpc-cni and kube-proxy should be EKS add-ons"
    coredns = run.one(ADDON, f"{stack_value(stack, 'clusterName')}-coredns")
    assert coredns.inputs["addonName"] == "coredns", f"{stack}: expected a coredns EKS add-on"
    assert system_node_group(run).urn in coredns.dependencies, f"{stack}: coredns must wait for the system nodes it runs on"
    # EKS refuses control-plane subnets in use1-az3; nodes may still use it.
    region = REGIONS[stack_value(stack, "aws:region")]
    refused = {az for az, zone_id in region.items() if zone_id == "use1-az3"}
    control_plane = set(inputs["privateSubnetIds"]) | set(inputs["publicSubnetIds"])
    for az in refused:
        assert private_subnets(run)[az].resource_id not in control_plane, f"{stack}: control plane must avoid {az} (use1-az3)"


@pytest.mark.parametrize("stack", STACKS)
def test_system_node_group_is_labelled_for_kuberay_and_ray_head(stack):
    group = system_node_group(program(stack))
    assert group.inputs["instanceTypes"] == [stack_value(stack, "systemInstanceType")], "system node group instance type"
    assert group.inputs["labels"] == {"role": "system"}, "system node group labels should be role=system"
    assert group.inputs["scalingConfig"]["desiredSize"] == stack_value(stack, "systemNodeCount"), "system node count"
    assert not group.inputs.get("taints"), "system nodes carry no taint (kube-system add-ons must schedule there)"


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_launch_template_has_one_efa_interface_per_network_card(stack):
    run = program(stack)
    facts = INSTANCE_FACTS[stack_value(stack, "gpuInstanceType")]
    interfaces = gpu_launch_template(run).inputs["networkInterfaces"]
    assert len(interfaces) == facts.network_cards, \
        f"{stack}: launch template should have {facts.network_cards} EFA interfaces (one per network card)"
    assert [i["networkCardIndex"] for i in interfaces] == list(range(facts.network_cards)), f"{stack}: network card indexes"
    assert [i["interfaceType"] for i in interfaces] == ["efa"] + ["efa-only"] * (facts.network_cards - 1), \
        f"{stack}: the first interface is efa, the rest efa-only"
    assert all("subnetId" not in i for i in interfaces), f"{stack}: managed node groups refuse a subnet in the template"
    efa_sg = run.one(SECURITY_GROUP)
    cluster_sg = run.one(EKS_CLUSTER).outputs["clusterSecurityGroupId"]
    for interface in interfaces:
        assert sorted(interface["securityGroups"]) == sorted([efa_sg.resource_id, cluster_sg]), \
            f"{stack}: each EFA interface carries the EFA and the cluster security group"


@pytest.mark.parametrize("stack", STACKS)
def test_efa_security_group_allows_itself_in_both_directions(stack):
    group = program(stack).one(SECURITY_GROUP)
    for direction in ("ingress", "egress"):
        rules = group.inputs.get(direction, [])
        assert any(r.get("self") is True and r["protocol"] == "-1" for r in rules), \
            f"{stack}: EFA security group needs an all-traffic {direction} rule to itself (missing egress = NCCL error 4126)"


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_launch_template_hardening(stack):
    template = gpu_launch_template(program(stack)).inputs
    assert template["metadataOptions"]["httpTokens"] == "required", f"{stack}: IMDSv2 must be required"
    root = template["blockDeviceMappings"][0]
    assert root["deviceName"] == "/dev/xvda", f"{stack}: root device of the AL2023 AMI"
    assert root["ebs"]["volumeType"] == "gp3", f"{stack}: root volume should be gp3"
    assert root["ebs"]["volumeSize"] == stack_value(stack, "gpuRootVolumeGiB") == 200, f"{stack}: root volume 200 GiB"


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_placement_and_capacity_reservation(stack):
    run = program(stack)
    template = gpu_launch_template(run).inputs
    group = run.one(PLACEMENT_GROUP)
    assert group.inputs["strategy"] == "cluster", f"{stack}: GPU placement group strategy should be cluster"
    assert template["placement"]["groupName"] == group.outputs["name"], f"{stack}: launch template uses the placement group"
    if stack_value(stack, "capacityReserve"):
        reservation = next(r for r in run.resources if r.type.endswith(":GpuCapacityReservation"))
        assert template["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] \
            == reservation.outputs["reservation_id"], f"{stack}: the launch template targets the stack's reservation"
        # EC2 co-locates a reservation's capacity only when it is made in the group the nodes launch into.
        assert reservation.inputs["placement_group_arn"] == group.outputs["arn"], \
            f"{stack}: the reservation must be made in the GPU placement group {group.outputs['arn']}"
        assert group.urn in reservation.dependencies, f"{stack}: the placement group must exist before the reservation"
        assert run.exports["gpuAvailabilityZone"] == reservation.outputs["availability_zone"], \
            f"{stack}: GPU AZ is the reservation's AZ"
        assert reservation.inputs["region"] == stack_value(stack, "aws:region"), \
            f"{stack}: the reservation's provider must be told the stack's region"
    else:
        assert "capacityReservationSpecification" not in template, f"{stack}: no reservation targeted"


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_is_one_az_labelled_tainted_nvidia_ami(stack):
    run = program(stack)
    group = gpu_node_group(run).inputs
    facts = INSTANCE_FACTS[stack_value(stack, "gpuInstanceType")]
    assert group["amiType"] == "AL2023_x86_64_NVIDIA", f"{stack}: GPU node group AMI type"
    assert group["instanceTypes"] == [facts.instance_type], f"{stack}: GPU node group instance type"
    count = stack_value(stack, "gpuNodeCount")
    # minSize 0: the idle stop (gpuIdleStopMinutes, on by default) may scale the group to 0 (tests/program/test_monitoring.py).
    assert group["scalingConfig"] == {"desiredSize": count, "minSize": 0, "maxSize": count}, f"{stack}: {count} GPU nodes"
    assert group["labels"] == {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}, f"{stack}: GPU node labels"
    assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}], f"{stack}: GPU taint"
    az = run.exports["gpuAvailabilityZone"]
    assert group["subnetIds"] == [private_subnets(run)[az].resource_id], f"{stack}: GPU nodes in the private subnet of {az}"
    template = gpu_launch_template(run)
    assert template.name.endswith("-gpu-lt"), f"{stack}: GPU node group uses its own launch template"
    if not stack_value(stack, "capacityReserve"):
        assert az == stack_value(stack, "gpuAvailabilityZone"), f"{stack}: GPU AZ should be gpuAvailabilityZone"


@pytest.mark.parametrize("stack", STACKS)
def test_exports(stack):
    run = program(stack)
    facts = INSTANCE_FACTS[stack_value(stack, "gpuInstanceType")]
    assert run.exports["clusterName"] == stack_value(stack, "clusterName"), f"{stack}: clusterName export"
    assert "kubeconfig" in run.secret_exports, f"{stack}: the kubeconfig export must be a secret"
    assert stack_value(stack, "clusterName") in run.exports["kubeconfig"], f"{stack}: kubeconfig targets the cluster"
    assert run.exports["gpuNodeGroupName"] == gpu_node_group(run).outputs["nodeGroupName"], f"{stack}: gpuNodeGroupName export"
    assert run.exports["systemNodeGroupName"] == system_node_group(run).outputs["nodeGroupName"], f"{stack}: systemNodeGroupName"
    assert (run.exports["gpusPerNode"], run.exports["efaInterfacesPerNode"]) == (facts.gpus, facts.network_cards), \
        f"{stack}: gpusPerNode/efaInterfacesPerNode exports should be {facts.gpus}/{facts.network_cards}"
    assert run.exports["gpuAvailabilityZone"] in REGIONS[stack_value(stack, "aws:region")], f"{stack}: GPU AZ export"


def test_no_secret_in_plain_state():
    run = program("dev")
    kubeconfig = run.exports["kubeconfig"]
    plain = [k for k, v in run.exports.items() if k not in run.secret_exports and isinstance(v, str) and v == kubeconfig]
    assert not plain, f"kubeconfig exported in the clear as {plain}"


# ---- variations of the reference stack ------------------------------------------------------------------------

def test_gpu_placement_none_drops_the_placement_group():
    run = program("dev", (("gpuPlacement", "none"),))
    assert not run.of_type(PLACEMENT_GROUP), "gpuPlacement=none should create no placement group"
    assert "placement" not in gpu_launch_template(run).inputs, "gpuPlacement=none: launch template without placement"


def test_existing_capacity_reservation_is_targeted_without_placement_group():
    reservation_id = "cr-0123456789abcdef0"
    run = program("p5", (("capacityReserve", False), ("capacityReservationId", reservation_id)))
    template = gpu_launch_template(run).inputs
    assert template["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] \
        == reservation_id, f"launch template should target {reservation_id}"
    assert not run.of_type(PLACEMENT_GROUP) and "placement" not in template, \
        "no placement group for a reservation outside one: EC2 would not let its instances use it"
    assert run.exports["gpuAvailabilityZone"] == RESERVATIONS[reservation_id]["AvailabilityZone"], \
        "GPU AZ is the reservation's AZ"
    assert "instanceMarketOptions" not in template and gpu_node_group(run).inputs["capacityType"] == "ON_DEMAND", \
        "an On-Demand Capacity Reservation is used by On-Demand instances"
    assert not [r for r in run.resources if r.type.endswith(":GpuCapacityReservation")], \
        "an existing reservation is only read, never created"
    assert not [r for r in run.resources if r.read], "the reservation is read at preview, not as a resource"


def test_existing_reservation_in_a_placement_group_launches_into_that_group():
    run = program("p5", (("capacityReserve", False), ("capacityReservationId", "cr-00000000000000c91")))
    template = gpu_launch_template(run).inputs
    assert template["placement"] == {"groupName": "p5-spine"}, \
        f"the GPU nodes must launch into the reservation's placement group p5-spine; got {template.get('placement')}"
    assert not run.of_type(PLACEMENT_GROUP), "the stack makes no placement group of its own next to the reservation's"


def test_capacity_block_nodes_use_the_capacity_block_market():
    run = program("p5", (("capacityReserve", False), ("capacityReservationId", "cr-00000000000000cb1")))
    template = gpu_launch_template(run).inputs
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}, \
        f"a Capacity Block's instances need market type capacity-block; got {template.get('instanceMarketOptions')}"
    assert gpu_node_group(run).inputs["capacityType"] == "CAPACITY_BLOCK", "EKS wants capacity type CAPACITY_BLOCK"
    assert template["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] \
        == "cr-00000000000000cb1", "the launch template targets the Capacity Block"
    assert template.get("instanceType") == "p5.48xlarge" and "instanceTypes" not in gpu_node_group(run).inputs, \
        "EKS wants a Capacity Block's instance type in the launch template, not the node group"
    on_demand = program("p5")
    assert "instanceType" not in gpu_launch_template(on_demand).inputs and \
        gpu_node_group(on_demand).inputs["instanceTypes"] == ["p5.48xlarge"], "elsewhere it stays on the node group"


def test_a_rerun_counts_its_own_nodes_in_the_reservation_as_capacity():
    run = program("p5", (("capacityReserve", False), ("capacityReservationId", "cr-000000000000005e1")))
    assert gpu_node_group(run), "a reservation filled by this cluster's own nodes still holds them"


def test_explicit_vpc_azs_and_gpu_node_count():
    run = run_program("dev", {"vpcAvailabilityZones": ["us-west-2a", "us-west-2b"], "gpuNodeCount": 4})
    assert sorted(private_subnets(run)) == ["us-west-2a", "us-west-2b"], "VPC AZs should be vpcAvailabilityZones"
    assert gpu_node_group(run).inputs["scalingConfig"]["desiredSize"] == 4, "GPU node group should have gpuNodeCount=4 nodes"


# ---- wiring of the other components -----------------------------------------------------------------------------

def test_kubernetes_side_waits_for_the_nodes_and_uses_a_secret_kubeconfig():
    run = program("dev")
    provider = run.one("pulumi:providers:kubernetes")
    assert is_secret_value(provider.inputs["kubeconfig"]), "the Kubernetes provider's kubeconfig must be a secret"
    releases = run.of_type("kubernetes:helm.sh/v3:Release")
    assert releases, "expected the add-on Helm releases"
    for release in releases:
        assert release.provider.startswith(provider.urn), f"{release.name} should use the cluster's provider"
        assert {gpu_node_group(run).urn, system_node_group(run).urn} <= set(release.dependencies), \
            f"{release.name} should wait for both node groups"
    operator = next(r for r in releases if "kuberay" in r.name)
    ray_cluster = run.one("kubernetes:ray.io/v1:RayCluster")
    assert operator.urn in ray_cluster.dependencies, "the RayCluster depends on the KubeRay operator (destroy order)"


ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


def _policies_of(run: ProgramRun, group: Registration) -> set[str]:
    role = next(r for r in run.of_type(ROLE) if r.outputs.get("arn") == group.inputs["nodeRoleArn"])
    return {r.urn for r in run.resources if r.parent == role.urn and r.type in (ROLE_POLICY, ROLE_POLICY_ATTACHMENT)}


@pytest.mark.parametrize("stack", STACKS)
def test_node_groups_wait_for_their_role_policies(stack):
    """Nodes must not boot before the CNI policy is attached, nor lose it while they drain on destroy."""
    run = program(stack)
    for group in (system_node_group(run), gpu_node_group(run)):
        policies = _policies_of(run, group)
        assert len(policies) >= 3, f"{stack}: {group.name}'s role should carry the worker, CNI and ECR policies"
        assert policies <= set(group.dependencies), f"{stack}: {group.name} must depend on its role's policies"


def test_node_roles_hold_node_policies_only():
    """Checkpoint access is the Ray pods' own role (tests/program/test_security.py); the nodes' roles have none of it."""
    from infra.aws.cluster import NODE_POLICY_ARNS

    run = program("dev", (("trainStoragePath", "s3://ckpt-bucket/runs/dev"),))
    for group in (system_node_group(run), gpu_node_group(run)):
        attached = [r for r in run.of_type(ROLE_POLICY_ATTACHMENT) if r.urn in _policies_of(run, group)]
        assert sorted(r.inputs["policyArn"] for r in attached) == sorted(NODE_POLICY_ARNS), group.name
        assert not [r for r in run.of_type(ROLE_POLICY) if r.urn in _policies_of(run, group)], \
            f"{group.name}: no inline policy (no S3) on a node role"


def _pod_role_policies(run: ProgramRun) -> list[Registration]:
    """The inline policies of the Ray pods' role (EKS Pod Identity, for their service account), the only role with S3
    access; the idle check's Pod Identity role (issue 24) is another service account's."""
    roles = {r.urn for r in run.of_type("aws:iam/role:Role") if "pods.eks.amazonaws.com" in r.inputs["assumeRolePolicy"]
             and '"ray-train-pods"' in r.inputs["assumeRolePolicy"]}
    return [r for r in run.of_type(ROLE_POLICY) if r.parent in roles]


def test_an_s3_dataset_is_readable_by_the_ray_pods_and_nothing_more():
    run = program("dev", (("trainStoragePath", "s3://ckpt-bucket/runs/dev"),
                          ("trainDataset", "s3://data-bucket/corpora/chat.jsonl")))
    (policy,) = _pod_role_policies(run)
    statements = json.loads(policy.inputs["policy"])["Statement"]
    on_data = [s for s in statements if "data-bucket" in s["Resource"]]
    assert {(s["Resource"], str(s["Action"])) for s in on_data} == {
        ("arn:aws:s3:::data-bucket/corpora/chat.jsonl", "s3:GetObject"),
        ("arn:aws:s3:::data-bucket", "s3:ListBucket")}, f"the Ray pods' role reads that one object: {on_data}"
    listing = next(s for s in on_data if s["Action"] == "s3:ListBucket")
    assert listing["Condition"]["StringLike"]["s3:prefix"][0] == "corpora/chat.jsonl", listing
    for group in (system_node_group(run), gpu_node_group(run)):
        assert not [r for r in run.of_type(ROLE_POLICY) if r.urn in _policies_of(run, group)], \
            f"{group.name}: the dataset's read access is the pods', not the node's"
    on_storage = [s for s in statements if "ckpt-bucket" in s["Resource"]]
    assert on_storage, f"the same one policy grants trainStoragePath, where the dataset's token shards go: {statements}"
    assert not [s for s in on_data if "s3:PutObject" in str(s["Action"])], f"the dataset itself is read-only: {on_data}"


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_updates_never_surge_past_a_reservation(stack):
    update = gpu_node_group(program(stack)).inputs["updateConfig"]
    assert update["maxUnavailable"] == 1, f"{stack}: one GPU node at a time"
    reserved = stack_value(stack, "capacityReserve") or stack_value(stack, "capacityReservationId")
    assert update.get("updateStrategy") == ("MINIMAL" if reserved else None), \
        f"{stack}: a reservation sized to the nodes has no room for surge nodes"


def test_reservation_uses_the_stacks_aws_identity_and_checks_its_account():
    role = {"roleArn": f"arn:aws:iam::{ACCOUNT_ID}:role/gpu-deployer"}
    run = run_program("p5", {"aws:profile": "gpu-account", "aws:assumeRoles": [role], "capacityReservationHours": 48})
    reservation = next(r for r in run.resources if r.type.endswith(":GpuCapacityReservation"))
    assert (reservation.inputs["profile"], reservation.inputs["role_arn"]) == ("gpu-account", role["roleArn"]), \
        f"the provider makes the reservation as the stack's profile, then its role: {reservation.inputs}"
    assert reservation.inputs["account_id"] == ACCOUNT_ID, \
        "the account the stack's AWS provider reaches at preview, for the provider to check before reserving"
    assert reservation.inputs["urn"] == reservation.urn.replace("pulumi:pulumi:Stack$", ""), \
        "the reservation is tagged with its own URN (as the engine writes it, without the root stack)"
    assert reservation.inputs["end_hours"] == 48, "capacityReservationHours reaches the reservation"
