"""Who may reach the API server's public endpoint, judged by the addresses apiPublicAccessCidrs covers rather than by
its text: `0.0.0.0/1` and `128.0.0.0/1` are the whole internet as much as `0.0.0.0/0` is. And EKS's limit on how many
CIDRs the endpoint takes, counted after the preview adds the deployer's own address."""
from __future__ import annotations

import ipaddress

from infra.config.rules import EKS_PUBLIC_ACCESS_CIDRS_MAX

IPV4_ADDRESSES = 2 ** 32
# A warning from this many addresses on: a /8 is some 16.7 million addresses, more than any organisation's egress
# ranges; what covers that much is a mistake or a shortcut for "everyone".
BROAD_ADDRESSES = 2 ** 24


def covered_addresses(cidrs: tuple[str, ...] | list[str]) -> int:
    """How many IPv4 addresses the CIDRs cover together (overlaps counted once)."""
    networks = ipaddress.collapse_addresses(ipaddress.IPv4Network(cidr) for cidr in cidrs)
    return sum(network.num_addresses for network in networks)


def covers_internet(cidrs: tuple[str, ...] | list[str]) -> bool:
    return covered_addresses(cidrs) == IPV4_ADDRESSES


def public_access_warning(cidrs: tuple[str, ...]) -> str | None:
    """The preview's warning for an endpoint open to the internet or to a large part of it; None otherwise."""
    covered = covered_addresses(cidrs)
    if covered == IPV4_ADDRESSES:
        return ("apiPublicAccessCidrs covers every IPv4 address (0.0.0.0/0, or blocks that add up to it): the API "
                "server's endpoint answers the whole internet (a stolen credential works from anywhere)")
    if covered >= BROAD_ADDRESSES:
        return (f"apiPublicAccessCidrs covers {covered:,} addresses ({covered / IPV4_ADDRESSES:.1%} of IPv4): the API "
                "server's endpoint answers far more than one organisation's addresses; list your egress CIDRs")
    return None


def check_public_access_count(cidrs: tuple[str, ...]) -> None:
    """EKS refuses more than EKS_PUBLIC_ACCESS_CIDRS_MAX public access CIDRs, at cluster creation or update, after
    the VPC and the IAM roles exist: refuse at preview, counting the deployer's address the preview added."""
    if len(cidrs) > EKS_PUBLIC_ACCESS_CIDRS_MAX:
        raise ValueError(
            f"config key 'apiPublicAccessCidrs': {len(cidrs) - 1} CIDRs plus this machine's address (which no listed "
            f"CIDR covers, and `pulumi up` must reach the API server from) are {len(cidrs)}; EKS accepts at most "
            f"{EKS_PUBLIC_ACCESS_CIDRS_MAX}; allowed: at most {EKS_PUBLIC_ACCESS_CIDRS_MAX - 1} CIDRs, or one that "
            "covers this machine")
