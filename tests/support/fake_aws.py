"""The fake AWS the Pulumi program runs against under mocks (tests/support/pulumi_mocks.py): the account, regions, quotas and
existing reservations it answers from, and AwsMocks, which answers each call as AWS and pulumi-eks do."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

from tests.support.instance_facts import INSTANCE_FACTS

ACCOUNT_ID = "123456789012"
DEPLOYER_ROLE_ARN = f"arn:aws:iam::{ACCOUNT_ID}:role/deployer"
# The public address the machine running the program has (a public one: the stack refuses documentation ranges).
DEPLOYER_IP = "54.240.196.170"

# name -> AZ ID per region, in the shape of DescribeAvailabilityZones (standard zones only). use1-az3 is the AZ
# EKS refuses for a control plane.
REGIONS: dict[str, dict[str, str]] = {
    "us-east-1": {"us-east-1a": "use1-az1", "us-east-1b": "use1-az2", "us-east-1c": "use1-az4",
                  "us-east-1d": "use1-az6", "us-east-1e": "use1-az3", "us-east-1f": "use1-az5"},
    "us-east-2": {"us-east-2a": "use2-az1", "us-east-2b": "use2-az2", "us-east-2c": "use2-az3"},
    "us-west-2": {"us-west-2a": "usw2-az1", "us-west-2b": "usw2-az2", "us-west-2c": "usw2-az3",
                  "us-west-2d": "usw2-az4"},
    "eu-north-1": {"eu-north-1a": "eun1-az1", "eu-north-1b": "eun1-az2", "eu-north-1c": "eun1-az3"},
}

# Service Quotas values (service code, quota code) -> value, in every region but UNREADABLE_QUOTA_REGIONS.
QUOTAS: dict[tuple[str, str], float] = {
    ("ec2", "L-DB2E81BA"): 384.0,  # Running On-Demand G and VT instances (vCPUs): 8 x g6.12xlarge
    ("ec2", "L-417A185B"): 384.0,  # Running On-Demand P instances (vCPUs): 2 x p5.48xlarge
    ("eks", "L-BD136A63"): 450.0,  # Nodes per managed node group
}
UNREADABLE_QUOTA_REGIONS = {"eu-north-1"}

_NOW = datetime.now(timezone.utc)


def _reservation(reservation_id: str, az: str = "us-east-2a", instance_type: str = "p5.48xlarge", total: int = 2,
                 available: int = 2, **fields: Any) -> dict[str, Any]:
    """One reservation as DescribeCapacityReservations returns it, plus describe_existing's ClusterInstances."""
    return {"CapacityReservationId": reservation_id, "AvailabilityZone": az, "InstanceType": instance_type,
            "InstancePlatform": "Linux/UNIX", "Tenancy": "default", "State": "active", "ReservationType": "default",
            "TotalInstanceCount": total, "AvailableInstanceCount": available, "InstanceMatchCriteria": "targeted",
            "EndDateType": "unlimited", "ClusterInstances": 0, **fields}


# Capacity reservations that exist outside any stack, for capacityReservationId; all in us-east-2a (the p5 stack).
RESERVATIONS: dict[str, dict[str, Any]] = {r["CapacityReservationId"]: r for r in (
    _reservation("cr-0123456789abcdef0"),  # fits the p5 stack's 2 nodes
    _reservation("cr-0000000000000a4d0", instance_type="p4d.24xlarge"),
    _reservation("cr-00000000000057d00", InstancePlatform="Windows"),
    _reservation("cr-0000000000000ded0", Tenancy="dedicated"),
    # On an AWS Outpost: DescribeCapacityReservations gives its OutpostArn (absent for a regional reservation).
    _reservation("cr-000000000000a0770",
                 OutpostArn="arn:aws:outposts:us-east-2:123456789012:outpost/op-0a1b2c3d4e5f60718"),
    _reservation("cr-00000000000cace10", State="cancelled", available=0),
    _reservation("cr-00000000000000001", total=1, available=1),
    _reservation("cr-000000000000000f0", available=0),  # full of other instances
    _reservation("cr-000000000000005e1", available=0, ClusterInstances=2),  # full of this cluster's own nodes
    _reservation("cr-00000000000000c91",
                 PlacementGroupArn="arn:aws:ec2:us-east-2:123456789012:placement-group/p5-spine"),
    _reservation("cr-00000000000000cb1", ReservationType="capacity-block", State="active",
                 StartDate=_NOW - timedelta(hours=1), EndDate=_NOW + timedelta(days=2), EndDateType="limited"),
    _reservation("cr-00000000000000cb2", ReservationType="capacity-block", State="scheduled",
                 StartDate=_NOW + timedelta(days=1), EndDate=_NOW + timedelta(days=3), EndDateType="limited"),
    _reservation("cr-00000000000000cb3", ReservationType="capacity-block", State="active",  # ends in 30 minutes
                 StartDate=_NOW - timedelta(hours=20), EndDate=_NOW + timedelta(minutes=30), EndDateType="limited"),
)}


def existing(reservation_id: str, **more) -> dict:
    """Stack overrides: the p5 stack targeting a reservation made outside it (RESERVATIONS), instead of making its own."""
    return {"capacityReserve": False, "capacityReservationId": reservation_id, **more}


def describe_existing(reservation_id: str, *, cluster_name: str, region: str | None,
                       identity: Any) -> dict[str, Any] | None:
    found = RESERVATIONS.get(reservation_id)
    return dict(found) if found and region and found["AvailabilityZone"].startswith(region) else None


# The stack's own reservations by their URN tag (infra.aws.reservation_end.describe_tagged): none unless a test puts
# some here (a reservation that ended, say).
TAGGED_RESERVATIONS: dict[str, list[dict[str, Any]]] = {}


def describe_tagged(urn: str, *, region: str | None, identity: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in TAGGED_RESERVATIONS.get(urn, []) if region and r["AvailabilityZone"].startswith(region)]


# (instance type, AZ) pairs EC2 does not offer (DescribeInstanceTypeOfferings); every other type is offered in every AZ
# of REGIONS.
UNOFFERED: set[tuple[str, str]] = {("p5.48xlarge", "us-west-2d")}


def read_zones_offering(instance_type: str, *, region: str | None, identity: Any) -> set[str]:
    """infra.aws.offerings.read_zones_offering, answered from REGIONS and UNOFFERED."""
    return {az for az in REGIONS.get(region or "", {}) if (instance_type, az) not in UNOFFERED}


_ID_PREFIXES = {
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
    "aws:ec2/securityGroup:SecurityGroup": "sg-",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
    "aws:ec2/internetGateway:InternetGateway": "igw-",
    "aws:ec2/natGateway:NatGateway": "nat-",
    "aws:ec2/eip:Eip": "eipalloc-",
    "aws:ec2/routeTable:RouteTable": "rtb-",
}


def _digest(text: str, length: int = 17) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


class AwsMocks(pulumi.runtime.Mocks):
    """Fake AWS (and pulumi-eks) answers."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.monitor: Any = None  # the RecordingMonitor (tests/support/pulumi_mocks.py) a run gives it
        self.clusters: dict[str, tuple[str, str, dict]] = {}
        self.launch_templates: dict[str, dict] = {}
        """Launch template id -> its inputs, for what EKS checks of the node groups that use one."""
        """eks:index:Cluster name -> (EKS name, endpoint, credential options), for Cluster.get_kubeconfig."""

    def method_call(self, token: str, args: dict) -> dict:
        """A component's method (pulumi.runtime.call with res=...): `__self__` arrives as the component's URN."""
        if token == "eks:index:Cluster/getKubeconfig":
            cluster_name, endpoint, _ = self.clusters[args["__self__"].rsplit("::", 1)[1]]
            # Cluster.getKubeconfig (nodejs/eks/cluster/cluster.ts): generateKubeconfig with includeProfile=true and
            # the options given, stringified.
            options = {key: args[key] for key in ("roleArn", "profileName") if args.get(key)}
            return {"result": json.dumps(
                generate_kubeconfig(cluster_name, endpoint, self.region, options, include_profile=True))}
        raise NotImplementedError(f"pulumi_mocks: no fake answer for method {token}")

    # ---- invokes -----------------------------------------------------------------------------------------
    def call(self, args: pulumi_mocks.MockCallArgs):
        # A failing AWS call reaches the program as an invoke failure (a semantic error it can catch), which
        # is what `failures` produces; an exception raised here would instead crash the whole run.
        if args.token == "aws:ec2/getInstanceType:getInstanceType":
            instance_type = args.args["instanceType"]
            if instance_type not in INSTANCE_FACTS:
                return {}, [("instanceType",
                             f"reading EC2 Instance Type ({instance_type}): operation error EC2: DescribeInstanceTypes, "
                             f"api error InvalidInstanceType: The following supplied instance types do not exist: "
                             f"[{instance_type}]")]
            return describe_instance_type(instance_type)
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            if self.region not in REGIONS:
                return {}, [("region", f"operation error EC2: DescribeAvailabilityZones, unknown region {self.region!r}")]
            zones = REGIONS[self.region]
            return {"id": self.region, "names": list(zones), "zoneIds": list(zones.values()), "state": "available"}
        if args.token == "aws:servicequotas/getServiceQuota:getServiceQuota":
            key = (args.args["serviceCode"], args.args["quotaCode"])
            if self.region in UNREADABLE_QUOTA_REGIONS or key not in QUOTAS:
                return {}, [("quotaCode", f"getting Service Quotas Service Quota ({key[1]}): operation error "
                                          "Service Quotas: GetServiceQuota, api error AccessDeniedException")]
            return {"id": f"{key[0]}/{key[1]}", "serviceCode": key[0], "quotaCode": key[1], "value": QUOTAS[key],
                    "defaultValue": QUOTAS[key], "adjustable": True, "globalQuota": False, "quotaName": key[1],
                    "serviceName": key[0], "arn": f"arn:aws:servicequotas:{self.region}::{key[0]}/{key[1]}",
                    "usageMetrics": []}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT_ID, "arn": f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/deployer/session",
                    "userId": "AROAEXAMPLE:session", "id": ACCOUNT_ID}
        if args.token == "aws:iam/getSessionContext:getSessionContext":
            return {"arn": args.args.get("arn"), "issuerArn": DEPLOYER_ROLE_ARN, "issuerName": "deployer"}
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        if args.token in ("aws:index/getRegion:getRegion", "aws:index/region:getRegion"):
            return {"name": self.region, "region": self.region, "id": self.region}
        raise NotImplementedError(f"pulumi_mocks: no fake answer for invoke {args.token}")

    # ---- resources ---------------------------------------------------------------------------------------
    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        outputs = dict(args.inputs)
        if args.typ == "eks:index:Cluster":
            return f"{args.name}-id", self._eks_cluster_outputs(args)

        resource_id = args.resource_id or f"{_ID_PREFIXES.get(args.typ, args.name + '-')}{_digest(args.name)}"
        if args.custom and "name" not in outputs:
            outputs["name"] = f"{args.name}-{_digest(args.name, 7)}"  # Pulumi's auto-naming
        if args.typ == "aws:iam/role:Role":
            outputs["arn"] = f"arn:aws:iam::{ACCOUNT_ID}:role/{outputs['name']}"
        elif args.typ == "aws:kms/key:Key":
            outputs["keyId"] = resource_id = f"{_digest(args.name, 8)}-{_digest(args.name + 'key', 4)}-key"
            outputs["arn"] = f"arn:aws:kms:{self.region}:{ACCOUNT_ID}:key/{resource_id}"
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            outputs["latestVersion"] = 1
            self.launch_templates[resource_id] = outputs
        elif args.typ == "aws:ec2/placementGroup:PlacementGroup":
            outputs["arn"] = f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:placement-group/{outputs['name']}"
        elif args.typ == "aws:eks/nodeGroup:NodeGroup":
            outputs.setdefault("nodeGroupName", outputs["name"])
            # EKS's node group ARN: arn:aws:eks:REGION:ACCOUNT:nodegroup/CLUSTER/NODEGROUP/UUID (Service Authorization
            # Reference, Amazon EKS, resource type "nodegroup").
            outputs["arn"] = (f"arn:aws:eks:{self.region}:{ACCOUNT_ID}:nodegroup/{outputs['clusterName']}/"
                              f"{outputs['nodeGroupName']}/{_digest(args.name, 8)}-{_digest(args.name + 'ng', 4)}")
            self._check_node_group(outputs)
        elif args.typ == "aws:eks/addon:Addon":
            outputs["addonVersion"] = outputs.get("addonVersion") or "v1.0.0-eksbuild.1"
        elif args.typ.startswith("pulumi-python:dynamic") and "candidate_azs" in outputs:
            # GpuCapacityReservation: AWS grants the first candidate AZ.
            outputs.update(reservation_id=f"cr-{_digest(args.name)}", availability_zone=outputs["candidate_azs"][0],
                           skipped_azs=[])
        return resource_id, outputs

    def _check_node_group(self, inputs: dict) -> None:
        """What CreateNodegroup refuses about the instance type (EKS API reference, CreateNodegroup, instanceTypes:
        not with a launch template that names one; EKS user guide, "Create a managed node group with Capacity Blocks
        for ML": a CAPACITY_BLOCK group's launch template must name it)."""
        template = self.launch_templates.get((inputs.get("launchTemplate") or {}).get("id"), {})
        if template.get("instanceType") and inputs.get("instanceTypes"):
            raise ValueError("InvalidParameterException: instanceTypes next to a launch template with InstanceType")
        if inputs.get("capacityType") == "CAPACITY_BLOCK" and not template.get("instanceType"):
            raise ValueError("InvalidParameterException: a CAPACITY_BLOCK node group's launch template must name "
                             "its InstanceType")

    def _eks_cluster_outputs(self, args: pulumi_mocks.MockResourceArgs) -> dict:
        """What pulumi-eks's Cluster returns, including `eksCluster` as a resource reference."""
        cluster_name = args.inputs.get("name") or f"{args.name}-eksCluster-{_digest(args.name, 7)}"
        endpoint = f"https://{_digest(cluster_name, 32).upper()}.gr7.{self.region}.eks.amazonaws.com"
        cluster_sg = f"sg-{_digest(cluster_name + '-cluster-sg')}"
        eks_cluster_urn = f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::aws:eks/cluster:Cluster::{args.name}-eksCluster"
        eks_cluster_state = {
            "name": cluster_name,
            "arn": f"arn:aws:eks:{self.region}:{ACCOUNT_ID}:cluster/{cluster_name}",
            "endpoint": endpoint,
            "version": args.inputs.get("version"),
            # pulumi-eks's ServiceRole `<name>-eksRole`, auto-named.
            "roleArn": f"arn:aws:iam::{ACCOUNT_ID}:role/{args.name}-eksRole-{_digest(args.name, 7)}",
            "vpcConfig": {"clusterSecurityGroupId": cluster_sg,
                          "subnetIds": args.inputs.get("privateSubnetIds", [])},
        }
        assert self.monitor is not None
        self.monitor.resources[eks_cluster_urn] = pulumi_mocks.MockMonitor.ResourceRegistration(
            eks_cluster_urn, cluster_name, eks_cluster_state)
        # pulumi-eks's Cluster constructor: without providerCredentialOpts it takes AWS_PROFILE, else aws:profile, as
        # {profileName} (nodejs/eks/cluster/cluster.ts, createCluster).
        credentials = args.inputs.get("providerCredentialOpts") or (
            {"profileName": pulumi.Config("aws").get("profile")} if pulumi.Config("aws").get("profile") else {})
        self.clusters[args.name] = (cluster_name, endpoint, credentials)
        # ... and its `kubeconfig` output is createCore's kubeconfigWithoutProfile: `--role`, never `--profile`.
        kubeconfig = generate_kubeconfig(cluster_name, endpoint, self.region, credentials, include_profile=False)
        oidc_id = _digest(cluster_name, 32).upper()
        return {
            **args.inputs,
            "eksCluster": {rpc._special_sig_key: rpc._special_resource_sig, "urn": eks_cluster_urn,
                           "id": cluster_name},
            "kubeconfig": kubeconfig,
            "kubeconfigJson": json.dumps(kubeconfig),
            "clusterSecurityGroupId": cluster_sg,
            "oidcProviderArn": f"arn:aws:iam::{ACCOUNT_ID}:oidc-provider/oidc.eks.{self.region}.amazonaws.com/id/{oidc_id}",
            "oidcProviderUrl": f"oidc.eks.{self.region}.amazonaws.com/id/{oidc_id}",
            "oidcIssuer": f"oidc.eks.{self.region}.amazonaws.com/id/{oidc_id}",
        }


def generate_kubeconfig(cluster_name: str, endpoint: str, region: str, options: dict, *,
                        include_profile: bool) -> dict:
    """pulumi-eks's generateKubeconfig (nodejs/eks/cluster/cluster.ts, pulumi/pulumi-eks@7bf0c1b): `aws eks get-token`
    with `--role` when options name one, and `--profile` only when include_profile (the internal provider's and
    getKubeconfig's kubeconfig, not the `kubeconfig` output)."""
    token_args = ["--region", region, "eks", "get-token", "--cluster-name", cluster_name, "--output", "json"]
    if options.get("roleArn"):
        token_args += ["--role", options["roleArn"]]
    if include_profile and options.get("profileName"):
        token_args += ["--profile", options["profileName"]]
    return {
        "apiVersion": "v1",
        "clusters": [{"cluster": {"server": endpoint, "certificate-authority-data": "LS0tLS1CRUdJTg=="},
                      "name": "kubernetes"}],
        "contexts": [{"context": {"cluster": "kubernetes", "user": "aws"}, "name": "aws"}],
        "current-context": "aws",
        "kind": "Config",
        "users": [{"name": "aws", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws", "args": token_args,
            "env": [{"name": "KUBERNETES_EXEC_INFO", "value": '{"apiVersion": "client.authentication.k8s.io/v1beta1"}'}],
        }}}],
    }


def describe_instance_type(instance_type: str) -> dict:
    """DescribeInstanceTypes for one type, shaped as aws.ec2.get_instance_type returns it."""
    facts = INSTANCE_FACTS[instance_type]
    gpus = [{"count": facts.gpus, "manufacturer": "NVIDIA", "memorySize": facts.gpu_memory_mib,
             "name": facts.gpu_name}] if facts.gpus else []
    return {
        "id": instance_type,
        "instanceType": instance_type,
        "gpuses": gpus,
        "totalGpuMemory": facts.gpus * facts.gpu_memory_mib,
        "efaSupported": facts.efa_supported,
        "efaMaximumInterfaces": facts.maximum_efa_interfaces,
        "maximumNetworkCards": facts.network_cards,
        "networkCards": [{"index": i, "maximumInterfaces": 2 if facts.efa_supported else 4,
                          "baselineBandwidth": facts.network_gbps / facts.network_cards,
                          "peakBandwidth": facts.network_gbps / facts.network_cards,
                          "performance": f"{facts.network_gbps:g} Gigabit"}
                         for i in range(facts.network_cards)],
        "defaultVcpus": facts.vcpus,
        "memorySize": facts.memory_mib,
        "supportedArchitectures": list(facts.architectures),
        "instanceStorageSupported": bool(facts.instance_store_gb),
        "totalInstanceStorage": facts.instance_store_gb,
        "instanceDisks": [{"count": facts.instance_store_disks, "type": "ssd",
                           "size": facts.instance_store_gb // facts.instance_store_disks}]
        if facts.instance_store_disks else [],
        "supportedPlacementStrategies": ["cluster", "partition", "spread"],
    }
