"""Run the whole Pulumi program (`__main__.py`) under `pulumi.runtime.set_mocks` and look at what it registered.

    run = run_program("dev", {"gpuNodeCount": 3})        # Pulumi.dev.yaml plus overrides
    ng = run.one("aws:eks/nodeGroup:NodeGroup", "ray-train-gpu-ng")
    assert ng.inputs["scalingConfig"]["desiredSize"] == 3

    failed = run_program_expecting_error("dev", {"gpuNodeCount": 0})
    assert isinstance(failed.error, ValueError) and failed.resources == []

Always with preview=False: under preview, unknown outputs make assertions inside `apply` silently never run.

What the fake AWS answers:
- `aws.ec2.get_instance_type` from tests/stacks.py's INSTANCE_FACTS; an unknown type fails as EC2 does.
- `aws.get_availability_zones` from REGIONS below; an unknown region fails.
- `aws.servicequotas.get_service_quota` from QUOTAS; in UNREADABLE_QUOTA_REGIONS it fails, as without permission.
- caller identity, partition, region.
- the deployer's public address (infra.aws.network.deployer_public_ip, an HTTPS request at preview): DEPLOYER_IP.
- an existing capacity reservation (infra.aws.capacity_reservation.describe_existing, boto3 at preview) from
  RESERVATIONS, in the region of its AZ only; that function itself is tested against botocore Stubbers.
- `eks:index:Cluster` (a remote component) returns kubeconfig, security group, OIDC and an `eksCluster` that
  is a real resource reference, as pulumi-eks's does; its `kubeconfig` output carries `--role` but never
  `--profile` (pulumi-eks returns kubeconfigWithoutProfile), and its getKubeconfig method answers with both.
Resource references found in any resource's inputs are turned into their URNs before the mock monitor
deserializes them: deserializing a reference constructs a Resource inside the monitor, which makes the stock
mock monitor flaky.
"""
from __future__ import annotations

import functools
import hashlib
import json
import runpy
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi
import yaml
from google.protobuf import struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.proto import provider_pb2
from pulumi.runtime import config as runtime_config
from pulumi.runtime import rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from infra.aws import capacity_reservation
from infra.aws import network
from tests.stacks import INSTANCE_FACTS

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "__main__.py"
PROJECT_FILE = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
PROJECT = PROJECT_FILE["name"]
SCHEMA: dict[str, dict[str, Any]] = PROJECT_FILE["config"]
"""Pulumi.yaml's config keys: type, default and description of each."""
STACKS = sorted(path.name.split(".")[1] for path in REPO.glob("Pulumi.*.yaml"))
ACCOUNT_ID = "123456789012"
DEPLOYER_ROLE_ARN = f"arn:aws:iam::{ACCOUNT_ID}:role/deployer"
DEPLOYER_IP = "54.240.196.170"
"""The public address the machine running the program has (a public one: the stack refuses documentation ranges)."""

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


def _describe_existing(reservation_id: str, *, cluster_name: str, region: str | None,
                       identity: Any) -> dict[str, Any] | None:
    found = RESERVATIONS.get(reservation_id)
    return dict(found) if found and region and found["AvailabilityZone"].startswith(region) else None

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


@dataclass
class Registration:
    """One registered resource: its type token, logical name, URN, parent URN and the inputs it was given."""

    type: str
    name: str
    urn: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    dependencies: list[str]
    provider: str
    read: bool = False
    delete_before_replace: bool = False
    alias_parents: list[str] = field(default_factory=list)
    """The parent URNs of the resource's aliases: where it used to live."""
    replacement_trigger: Any = None
    """The replacement_trigger option, deserialized (a secret stays wrapped in the secret signature)."""
    transforms: int = 0
    """How many resource transforms the registration carries (the engine runs them on the resource's children; the
    mock monitor does not)."""
    ignore_changes: list[str] = field(default_factory=list)
    """The ignore_changes option: property paths `pulumi up` leaves as the cloud has them."""

    @property
    def resource_id(self) -> str:
        return self.outputs.get("id", "")


class AwsMocks(pulumi.runtime.Mocks):
    """Fake AWS (and pulumi-eks) answers."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.monitor: RecordingMonitor | None = None
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
        eks_cluster_urn = f"urn:pulumi:{pulumi.get_stack()}::{PROJECT}::aws:eks/cluster:Cluster::{args.name}-eksCluster"
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
        "supportedPlacementStrategies": ["cluster", "partition", "spread"],
    }


def is_secret_value(value: Any) -> bool:
    """Whether a recorded input was passed as a Pulumi secret (it arrives wrapped in the secret signature)."""
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def plain_strings(value: Any) -> list[str]:
    """Every string in a recorded value outside its secrets (keys included): what the state and preview show in
    plain text."""
    if is_secret_value(value):
        return []
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (str(key), *plain_strings(item))]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in plain_strings(item)]
    return [str(value)] if value is not None else []


def _urns_for_references(value: struct_pb2.Value) -> None:
    """Replace every resource reference inside `value` by its URN, in place."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        fields = value.struct_value.fields
        if rpc._special_sig_key in fields and fields[rpc._special_sig_key].string_value == rpc._special_resource_sig:
            value.string_value = fields["urn"].string_value
            return
        for item in fields.values():
            _urns_for_references(item)
    elif kind == "list_value":
        for item in value.list_value.values:
            _urns_for_references(item)


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The stock mock monitor, plus a record of every registration (with parent) and references as URNs."""

    def __init__(self, mocks: AwsMocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []

    def _record(self, request, urn: str, outputs: dict, *, read: bool) -> None:
        struct = request.properties if read else request.object
        self.registrations.append(Registration(
            type=request.type, name=request.name, urn=urn, parent=request.parent,
            custom=read or bool(request.custom), inputs=rpc.deserialize_properties(struct),
            outputs=outputs, dependencies=list(getattr(request, "dependencies", [])),
            provider=request.provider, read=read,
            delete_before_replace=bool(getattr(request, "deleteBeforeReplace", False)),
            alias_parents=[alias.spec.parentUrn for alias in getattr(request, "aliases", [])
                           if alias.HasField("spec") and alias.spec.parentUrn],
            transforms=len(getattr(request, "transforms", [])) if not read else 0,
            ignore_changes=list(getattr(request, "ignoreChanges", [])),
            replacement_trigger=(rpc.deserialize_properties(struct_pb2.Struct(
                fields={"trigger": request.replacement_trigger}), keep_unknowns=True)["trigger"]
                if not read and request.HasField("replacement_trigger") else None)))

    def RegisterResource(self, request):
        if request.type != "pulumi:pulumi:Stack":
            for item in request.object.fields.values():
                _urns_for_references(item)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            registered = self.resources[response.urn]
            self._record(request, response.urn, {**registered.state, "id": registered.id}, read=False)
        return response

    def Call(self, request):
        for item in request.args.fields.values():
            _urns_for_references(item)
        result = self.mocks.method_call(request.tok, rpc.deserialize_properties(request.args))
        return provider_pb2.CallResponse(**{"return": _sync_await(rpc.serialize_properties(result, {}))})

    def ReadResource(self, request):
        for item in request.properties.fields.values():
            _urns_for_references(item)
        response = super().ReadResource(request)
        registered = self.resources[response.urn]
        self._record(request, response.urn, {**registered.state, "id": registered.id}, read=True)
        return response


# ---- components built by hand, under mocks that echo inputs as state ----------------------------------------

class EchoMocks(pulumi.runtime.Mocks):
    """Echoes inputs back as state; the monitor below keeps every registration."""

    def __init__(self) -> None:
        self.registered: list[dict] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}

    def named(self, name: str) -> dict:
        (registration,) = [r for r in self.registered if r["name"] == name]
        return registration


class EchoMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, also noting each resource's inputs, `dependencies` (what depends_on resolves to) and
    additional secret outputs."""

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        self.mocks.registered.append({
            "urn": response.urn,
            "type": request.type,
            "name": request.name,
            "dependencies": set(request.dependencies),
            "inputs": self.resources[response.urn].state if response.urn in self.resources else {},
            "secret_outputs": list(request.additionalSecretOutputs),
        })
        return response


def run_under_mocks(build, mocks: EchoMocks | None = None) -> tuple[EchoMocks, object]:
    """Run `build()` (components built by hand, not the whole program) under mocks that echo inputs as state;
    return the registrations once every one has finished. Pass `mocks` to read them after `build()` raised."""
    mocks = mocks if mocks is not None else EchoMocks()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack="dev", preview=False, monitor=EchoMonitor(mocks))
    built = {}

    @pulumi.runtime.test
    def program():
        built["value"] = build()
        return built["value"]  # an Output returned here is awaited, so its applies have run on return

    program()
    return mocks, built["value"]



@dataclass
class ProgramRun:
    """The outcome of one program run: the registrations in order, the stack exports, and any error."""

    stack: str
    config: dict[str, str]
    resources: list[Registration]
    exports: dict[str, Any] = field(default_factory=dict)
    secret_exports: set[str] = field(default_factory=set)
    error: BaseException | None = None

    def of_type(self, type_token: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_token]

    def one(self, type_token: str, name: str | None = None) -> Registration:
        found = [r for r in self.of_type(type_token) if name is None or r.name == name]
        names = [r.name for r in self.of_type(type_token)]
        assert len(found) == 1, f"expected exactly one {type_token}{' named ' + name if name else ''}; found {names}"
        return found[0]


def ray_pods_role(run: ProgramRun, service_account: str = "ray-train-pods") -> Registration:
    """The Ray pods' Pod Identity role (infra/aws/pod_identity.py): the one whose trust names their service account. The
    idle check and the CloudWatch agent (issue 24) have Pod Identity roles of their own."""
    (role,) = [r for r in run.of_type("aws:iam/role:Role") if "pods.eks.amazonaws.com" in r.inputs["assumeRolePolicy"]
               and f'"{service_account}"' in r.inputs["assumeRolePolicy"]]
    return role


def stack_file(stack: str) -> Path:
    return REPO / f"Pulumi.{stack}.yaml"


def stack_settings(stack: str | None) -> dict[str, Any]:
    """Pulumi.yaml's defaults overlaid with Pulumi.<stack>.yaml's values (None: the defaults alone); the project's
    keys without their prefix (`gpuNodeCount`), others as written (`aws:region`)."""
    settings = {key: spec.get("default") for key, spec in SCHEMA.items()}
    if stack is not None:
        for key, value in (yaml.safe_load(stack_file(stack).read_text()).get("config") or {}).items():
            settings[key.removeprefix(f"{PROJECT}:")] = value
    # Pulumi.yaml's clusterName: empty means ray-train-<stack> (the stack the runs below use: "test" without a file).
    settings["clusterName"] = settings["clusterName"] or f"ray-train-{stack or 'test'}"
    return settings


REFERENCE_DIR = REPO / "tests" / "reference"
"""Upstream files the tests check against (KubeRay CRDs, chart values), copied with their provenance."""


@dataclass(frozen=True)
class Secret:
    """An override set as `pulumi config set --secret` would: the program sees the key among the secret keys."""

    value: Any


def secret_keys(overrides: dict[str, Any] | None) -> list[str]:
    """The namespaced keys of the overrides given as Secret(...)."""
    return [key if ":" in key else f"{PROJECT}:{key}" for key, value in (overrides or {}).items()
            if isinstance(value, Secret)]


def stack_config(stack: str | None, overrides: dict[str, Any] | None = None,
                 project_dir: Path = REPO) -> dict[str, str]:
    """The stack file's config plus overrides, keyed and encoded as the Pulumi CLI hands them to the program.

    Override keys without a namespace belong to the project (`gpuNodeCount` -> `raytrain-eks:gpuNodeCount`).
    The stack file is `project_dir`'s (a test's copy of the project, say).
    """
    values: dict[str, Any] = {}
    if stack is not None:
        values.update(yaml.safe_load((project_dir / f"Pulumi.{stack}.yaml").read_text()).get("config") or {})
    for key, value in (overrides or {}).items():
        values[key if ":" in key else f"{PROJECT}:{key}"] = value.value if isinstance(value, Secret) else value

    def encode(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, tuple, dict)):
            return json.dumps(value)
        return str(value)

    return {key: encode(value) for key, value in values.items()}


def _run(stack: str | None, overrides: dict[str, Any] | None, project_dir: Path = REPO) -> ProgramRun:
    config = stack_config(stack, overrides, project_dir)
    region = config.get("aws:region", "us-west-2")
    mocks = AwsMocks(region)
    monitor = RecordingMonitor(mocks)
    mocks.monitor = monitor

    # Other tests in the same process may use Pulumi's runtime too: leave its config and root as they were.
    previous_config = dict(runtime_config.CONFIG.get())
    previous_secret_keys = list(runtime_config._SECRET_KEYS.get())
    previous_root = settings.get_root_resource()
    pulumi.runtime.set_all_config(config, secret_keys(overrides))
    settings.ROOT.set(None)  # a fresh root Stack per run, so exports do not leak between runs
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack or "test", preview=False, monitor=monitor)
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()

    run = ProgramRun(stack=stack or "test", config=config, resources=monitor.registrations)

    async def collect_exports() -> None:
        root = settings.get_root_resource()
        for key, value in root.outputs.items():
            output = pulumi.Output.from_input(value)
            run.exports[key] = await output.future()
            if await output.is_secret():
                run.secret_exports.add(key)

    def program():
        runpy.run_path(str(PROGRAM), run_name="__main__")
        return collect_exports()

    try:
        with mock.patch.object(capacity_reservation, "describe_existing", _describe_existing), \
                mock.patch.object(network, "deployer_public_ip", lambda: DEPLOYER_IP):
            _sync_await(run_pulumi_func(program))
    except BaseException as e:  # noqa: BLE001 handed to the caller
        run.error = e
    finally:
        pulumi.runtime.set_all_config(previous_config, previous_secret_keys)
        settings.ROOT.set(previous_root)
    return run


def run_program(stack: str | None = "dev", overrides: dict[str, Any] | None = None,
                project_dir: Path = REPO) -> ProgramRun:
    """Run `__main__.py` with `Pulumi.<stack>.yaml` (None: no stack file) plus overrides; raise its error."""
    run = _run(stack, overrides, project_dir)
    if run.error is not None:
        raise run.error
    return run


@functools.cache
def program(stack: str, overrides: tuple[tuple[str, Any], ...] = ()) -> ProgramRun:
    """run_program, once per (stack, overrides) in the whole test session: for tests that only read the run."""
    return run_program(stack, dict(overrides))


def run_program_expecting_error(stack: str | None = "dev", overrides: dict[str, Any] | None = None,
                                project_dir: Path = REPO) -> ProgramRun:
    """Run the program, which must fail; the ProgramRun holds the error and whatever got registered first."""
    run = _run(stack, overrides, project_dir)
    assert run.error is not None, (
        f"expected the program to fail with config {run.config}; it registered {len(run.resources)} resources")
    return run
