"""The VPC: one public and one private subnet per AZ, and a NAT gateway for the private subnets' egress.

GPU nodes live in a private subnet and reach the image registry and Hugging Face through the NAT gateway.
The AZ checks are plain functions, run at preview before any resource is registered.
"""
from __future__ import annotations

import ipaddress
import urllib.request
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.config import WORLD_CIDR, StackConfig, config_error
from workload.aws_region import region_problem

# EKS refuses control-plane subnets in these AZ IDs (UnsupportedAvailabilityZoneException); nodes may still
# run there. AZ IDs, not names, because names map to different physical AZs in each account.
EKS_UNSUPPORTED_CONTROL_PLANE_AZ_IDS = frozenset({"use1-az3", "usw1-az2", "cac1-az3"})

# Private subnets get an eighth of the VPC each (a /19 of a /16): the VPC CNI gives every pod a VPC address.
# The last eighth is cut into eighths again for the public subnets, which hold only the NAT gateway and load
# balancers. Hence at most 7 AZs.
_PRIVATE_PREFIX_DIFF = 3
_PUBLIC_PREFIX_DIFF = 6


# AWS's own what-is-my-address service: the address it answers is the one this machine's requests to AWS come from,
# which is what the EKS endpoint's CIDR filter sees (through the same proxy, when HTTPS_PROXY is set: urllib and the
# Kubernetes provider's client both honour it).
CHECKIP_URL = "https://checkip.amazonaws.com"
CHECKIP_TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class SubnetPlan:
    availability_zone: str
    zone_id: str
    private_cidr: str
    public_cidr: str


def aws_region() -> str:
    """The stack's region: aws:region, else the AWS_REGION the provider would fall back to."""
    region = aws.config.region
    if not region:
        raise config_error("aws:region", "not set (and neither is AWS_REGION); set it with "
                                         "`pulumi config set aws:region us-west-2`")
    problem = region_problem(region)
    if problem:
        raise config_error("aws:region", problem)
    return region


def region_availability_zones() -> dict[str, str]:
    """The region's standard AZs (no opt-in Local or Wavelength Zones), name -> AZ ID, in name order."""
    zones = aws.get_availability_zones(
        state="available",
        filters=[aws.GetAvailabilityZonesFilterArgs(name="opt-in-status", values=["opt-in-not-required"])],
    )
    return dict(sorted(zip(zones.names, zones.zone_ids)))


def deployer_public_ip() -> str | None:
    """This machine's public IPv4 address, as AWS sees it; None when it cannot be read (offline, blocked)."""
    try:
        with urllib.request.urlopen(CHECKIP_URL, timeout=CHECKIP_TIMEOUT_SECONDS) as response:
            address = ipaddress.IPv4Address(response.read(64).decode().strip())
    except (OSError, ValueError):
        return None
    return str(address) if address.is_global else None


def api_public_access_cidrs(configured: tuple[str, ...], deployer_ip: str | None) -> tuple[str, ...]:
    """Who may reach the API server's public endpoint: apiPublicAccessCidrs plus this machine's address as a /32, since
    `pulumi up` itself talks to the API server (Helm, the RayCluster, the job). Refused when neither is known."""
    if WORLD_CIDR in configured:
        return configured
    if deployer_ip is None:
        if configured:
            return configured
        raise ValueError(
            f"config key 'apiPublicAccessCidrs': this machine's public address could not be read from {CHECKIP_URL}, "
            "and the API server's public endpoint admits only the CIDRs listed there, so `pulumi up` could not reach "
            "it. Find your address (`curl https://checkip.amazonaws.com`) and set it: `pulumi config set --path "
            f"'apiPublicAccessCidrs[0]' <address>/32`; allowed: public IPv4 CIDRs, or {WORLD_CIDR} for everyone")
    own = ipaddress.IPv4Address(deployer_ip)
    if any(own in ipaddress.IPv4Network(cidr) for cidr in configured):
        return configured
    return (*configured, f"{deployer_ip}/32")


def control_plane_azs(azs: tuple[str, ...], zone_ids: dict[str, str]) -> list[str]:
    """The AZs among `azs` whose zone IDs (`zone_ids`: AZ name -> zone ID) EKS accepts for its control plane."""
    return [az for az in azs if zone_ids[az] not in EKS_UNSUPPORTED_CONTROL_PLANE_AZ_IDS]


def choose_vpc_azs(configured: tuple[str, ...], region_azs: dict[str, str]) -> tuple[str, ...]:
    """The VPC's AZs: the configured ones (each must exist in the region), else every standard AZ, up to 7."""
    if configured:
        unknown = [az for az in configured if az not in region_azs]
        if unknown:
            raise ValueError(
                f"config key 'vpcAvailabilityZones': {unknown} are not AZs of this region; "
                f"allowed: {sorted(region_azs)}")
        chosen = configured
    else:
        chosen = tuple(sorted(region_azs))[:7]
    control_plane = control_plane_azs(chosen, region_azs)
    if len(control_plane) < 2:
        key = "vpcAvailabilityZones" if configured else "aws:region"
        raise ValueError(
            f"config key '{key}': EKS needs two AZs for its control plane, but of {list(chosen)} only "
            f"{control_plane} can host it (EKS refuses zone IDs {sorted(EKS_UNSUPPORTED_CONTROL_PLANE_AZ_IDS)})")
    return chosen


def reservation_candidate_azs(cfg: StackConfig, vpc_azs: tuple[str, ...]) -> tuple[str, ...]:
    """The AZs capacityReserve tries, in order: capacityCandidateAzs, else gpuAvailabilityZone then the rest."""
    if cfg.capacity_candidate_azs:
        return cfg.capacity_candidate_azs
    return tuple(dict.fromkeys(az for az in (cfg.gpu_availability_zone, *vpc_azs) if az))


def check_gpu_azs(vpc_azs: tuple[str, ...], *, gpu_az: str, candidate_azs: tuple[str, ...]) -> None:
    """Every AZ the GPU nodes may land in needs a private subnet of the cluster."""
    if gpu_az and gpu_az not in vpc_azs:
        raise ValueError(
            f"config key 'gpuAvailabilityZone': {gpu_az} has no private subnet in the cluster's VPC; "
            f"allowed: {list(vpc_azs)} (or add it to vpcAvailabilityZones)")
    outside = [az for az in candidate_azs if az not in vpc_azs]
    if outside:
        raise ValueError(
            f"config key 'capacityCandidateAzs': {outside} have no private subnet in the cluster's VPC; "
            f"allowed: {list(vpc_azs)} (or add them to vpcAvailabilityZones)")


def subnet_plan(vpc_cidr: str, azs: tuple[str, ...], zone_ids: dict[str, str]) -> list[SubnetPlan]:
    """The CIDRs of each AZ's private and public subnet; stable as long as the AZ list keeps its order."""
    vpc = ipaddress.IPv4Network(vpc_cidr)
    eighths = list(vpc.subnets(prefixlen_diff=_PRIVATE_PREFIX_DIFF))
    public_blocks = list(vpc.subnets(prefixlen_diff=_PUBLIC_PREFIX_DIFF))[-len(eighths):]
    assert len(azs) <= len(eighths) - 1, "config.parse caps the AZ count at 7"
    return [
        SubnetPlan(az, zone_ids[az], str(eighths[i]), str(public_blocks[i]))
        for i, az in enumerate(azs)
    ]


class Network(pulumi.ComponentResource):
    """VPC, public and private subnet per AZ, internet gateway, one NAT gateway and the route tables."""

    def __init__(
        self,
        name: str,
        *,
        vpc_cidr: str,
        plan: list[SubnetPlan],
        cluster_name: str,
        tags: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("raytrain:infra:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Subnet tags that let the AWS load balancer controller find the subnets of this cluster.
        cluster_tag = {f"kubernetes.io/cluster/{cluster_name}": "shared"}

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=vpc_cidr,
            enable_dns_hostnames=True,  # EKS nodes register under their private DNS names
            enable_dns_support=True,
            tags={**tags, "Name": f"{cluster_name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=self.vpc.id, tags={**tags, "Name": f"{cluster_name}-igw"}, opts=child)

        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**tags, "Name": f"{cluster_name}-public"},
            opts=child,
        )
        self.public_subnets: dict[str, aws.ec2.Subnet] = {}
        self.private_subnets: dict[str, aws.ec2.Subnet] = {}
        for entry in plan:
            az = entry.availability_zone
            public = aws.ec2.Subnet(
                f"{name}-public-{az}",
                vpc_id=self.vpc.id,
                cidr_block=entry.public_cidr,
                availability_zone=az,
                tags={**tags, **cluster_tag, "Name": f"{cluster_name}-public-{az}", "kubernetes.io/role/elb": "1"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{az}", subnet_id=public.id, route_table_id=public_rt.id, opts=child)
            self.public_subnets[az] = public
            self.private_subnets[az] = aws.ec2.Subnet(
                f"{name}-private-{az}",
                vpc_id=self.vpc.id,
                cidr_block=entry.private_cidr,
                availability_zone=az,
                tags={**tags, **cluster_tag, "Name": f"{cluster_name}-private-{az}",
                      "kubernetes.io/role/internal-elb": "1"},
                opts=child,
            )

        # One NAT gateway, not one per AZ: nodes only pull images and weights through it, and a second one
        # would add about $33 a month for resilience a training cluster does not need.
        first_az = plan[0].availability_zone
        nat_ip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", tags={**tags, "Name": f"{cluster_name}-nat"}, opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            subnet_id=self.public_subnets[first_az].id,
            allocation_id=nat_ip.id,
            tags={**tags, "Name": f"{cluster_name}-nat"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt",
            vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
            tags={**tags, "Name": f"{cluster_name}-private"},
            opts=child,
        )
        for az, subnet in self.private_subnets.items():
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{az}", subnet_id=subnet.id, route_table_id=private_rt.id, opts=child)

        self.availability_zones = tuple(entry.availability_zone for entry in plan)
        self.vpc_id = self.vpc.id
        self.private_subnet_ids = [s.id for s in self.private_subnets.values()]
        self.public_subnet_ids = [s.id for s in self.public_subnets.values()]
        control_plane = control_plane_azs(self.availability_zones, {e.availability_zone: e.zone_id for e in plan})
        self.control_plane_private_subnet_ids = [self.private_subnets[az].id for az in control_plane]
        self.control_plane_public_subnet_ids = [self.public_subnets[az].id for az in control_plane]
        # EKS places the control plane's cross-account ENIs in the subnets given to the cluster (both kinds here), and
        # the API server's calls to webhooks come from those ENIs' addresses (EKS user guide, "Amazon EKS networking
        # requirements": the ENIs "enable communication between the control plane and the VPC").
        by_az = {entry.availability_zone: entry for entry in plan}
        self.control_plane_cidrs = tuple(cidr for az in control_plane
                                         for cidr in (by_az[az].private_cidr, by_az[az].public_cidr))
        self.register_outputs({
            "vpc_id": self.vpc_id,
            "private_subnet_ids": self.private_subnet_ids,
            "public_subnet_ids": self.public_subnet_ids,
        })

    def private_subnet_id(self, availability_zone: pulumi.Input[str]) -> pulumi.Output[str]:
        """The private subnet of an AZ that may be known only at deploy time (a capacity reservation's AZ)."""
        by_az = {az: subnet.id for az, subnet in self.private_subnets.items()}

        def pick(az: str) -> pulumi.Output[str]:
            if az not in by_az:
                raise ValueError(f"GPU AZ {az} has no private subnet in the cluster's VPC; allowed: {sorted(by_az)}")
            return by_az[az]

        return pulumi.Output.from_input(availability_zone).apply(pick)
