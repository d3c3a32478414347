"""experimentTracking: the stack's own MLflow tracking server (infra/kubernetes/mlflow_server.py builds it), and the
names the server and the job share: its service, port and in-cluster URI, and where its artifacts go in S3."""
from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any
from urllib.parse import urlsplit

from infra.config.rules import require, require_choice, s3_location
from workload.config.fields import shown_uri
from workload.config.special_names import not_public

EXPERIMENT_TRACKING = ("none", "mlflow")
MLFLOW_SERVICE = "mlflow"
"""The Service, Deployment and ServiceAccount name, in the Ray namespace."""
MLFLOW_PORT = 5000  # `mlflow server`'s default port
MLFLOW_ARTIFACTS_DIRECTORY = "mlflow"
"""Under trainStoragePath's prefix: the runs' artifacts and the copy of the server's SQLite store."""


def in_cluster_uri(namespace: str) -> str:
    """The server as the Ray pods reach it: its Service's cluster DNS name (plain http inside the cluster; the
    NetworkPolicies admit only the Ray pods)."""
    return f"http://{MLFLOW_SERVICE}.{namespace}.svc:{MLFLOW_PORT}"


# https on 443: the Ray pods' NetworkPolicy lets them out to public addresses on 443 only (infra/kubernetes/
# ray_security.py), and a policy cannot name a host to let a team server on another port or address through.
_TRACKING_URI = re.compile(r"https://[A-Za-z0-9.-]+(:443)?(/[\w./-]*)?")
# Host names that name no public address: the special-use names (workload/config/special_names.py: .onion, .invalid,
# .test, .localhost, .local, .home.arpa, .internal, ...), a cluster's (svc, cluster.local) and the conventional
# private ones (localdomain, lan), and a bare name (resolved through the cluster's search domains).
_IPV4_CHARS = frozenset("0123456789abcdefx.")
_PRIVATE_SUFFIXES = (".svc", ".localdomain", ".lan")
# SERVICE.NAMESPACE names a Service of the cluster: the pods' resolv.conf (ndots 5) tries the cluster's search domains
# first. The namespaces every EKS cluster has, and this stack's (rayNamespace's default, infra/kubernetes: addons.py,
# monitoring.py, monitoring_security.py; not imported, which would make a cycle); none is a public top-level domain.
CLUSTER_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "ray", "kuberay-system",
                                "monitoring", "monitoring-host", "amazon-cloudwatch"})
TRACKING_ALLOWED = ("allowed: https://host[/path] on port 443 at a public address, the only way out the Ray pods' "
                    "NetworkPolicy allows, with no user:password@ (credentials go in trainSecretEnv as "
                    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD), or the stack's own server "
                    "(experimentTracking mlflow)")


def _ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address `host` names in any notation the resolver takes (C's inet_aton, which getaddrinfo and so
    every HTTP client use): dotted quads, but also 127.1, octal 0177.0.0.1, hex 0x7f.0.0.1 and the integer
    2130706433. None when it is a name."""
    if not host or not set(host) <= _IPV4_CHARS:
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _address_problem(host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why no HTTPS connection from the Ray pods reaches `address`, or None. One rule over ipaddress's kinds: TCP
    connects to one host only, so a multicast group (224.0.0.0/4, ff00::/8) takes none, and neither does the
    unspecified address (0.0.0.0, ::), a reserved one (240.0.0.0/4, 255.255.255.255) or a link-local one (169.254.0.0/16,
    fe80::/10: the node's own link); is_global is False for the rest that the egress policy keeps in (private,
    loopback, carrier-grade NAT, documentation). Python's is_global is True for multicast groups (every one of
    224.0.0.0/4 and ff00::/8 on 3.11), hence the kinds first. An IPv6 address that maps an IPv4 one (::ffff:224.0.0.1) is that one."""
    address = getattr(address, "ipv4_mapped", None) or address
    kinds = [kind for kind in ("multicast", "unspecified", "reserved", "link_local") if getattr(address, f"is_{kind}")]
    if kinds:
        return (f"{host} is a {kinds[0].replace('_', '-')} address ({address}), which no HTTPS connection reaches, "
                "not a public address")
    return None if address.is_global else f"{host} is not a public address ({address})"


def _unreachable_host(host: str) -> str | None:
    """Why the Ray pods could not reach `host` through their egress (public addresses on 443), or None: an address,
    in any notation, that is not global (loopback, private, link-local, carrier-grade NAT, unspecified), a name that
    ends in a number but is no address, or a name of no public address (localhost, .svc, .internal, a bare name)."""
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = _ipv4(host)
    if address is None:
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            address = None
    if address is not None:
        return _address_problem(host, address)
    if host.rsplit(".", 1)[-1].isdigit():
        return f"{host} is neither a host name nor an IPv4 address"
    if (special := not_public(host)) is not None:
        return f"{host} is under the special-use domain {special}, which public DNS never resolves"
    if host == "localhost" or "." not in host or host.endswith(_PRIVATE_SUFFIXES):
        return f"{host} is not a public address"
    if host.count(".") == 1 and host.rsplit(".", 1)[1].lower() in CLUSTER_NAMESPACES:
        return f"{host} is a Service of the cluster (SERVICE.NAMESPACE), not a public address"
    return None


def tracking_uri_problem(uri: str, own_server_uri: str | None) -> str | None:
    """Why the Ray pods could not reach the MLflow server at `uri` (the words after the key or flag), or None: one rule
    for the stack's trainMlflowTrackingUri and `tools.job submit`'s --mlflow_tracking_uri. `own_server_uri`: the
    stack's own server's in-cluster URI when experimentTracking is mlflow. Never quotes a URI with credentials."""
    if not uri or uri == own_server_uri:
        return None
    shown = shown_uri(uri)
    if not _TRACKING_URI.fullmatch(uri):
        return f"{TRACKING_ALLOWED}; got {shown}"
    host = (urlsplit(uri).hostname or "").rstrip(".").lower()
    if (why := _unreachable_host(host)) is not None:
        return (f"{why}, and the Ray pods' NetworkPolicy lets them out to public addresses only; {TRACKING_ALLOWED}; "
                f"got {shown}")
    return None


def artifacts_location(storage_path: str) -> tuple[str, str]:
    """(bucket, prefix) of the server's artifacts: `mlflow` under trainStoragePath's S3 prefix."""
    location = s3_location(storage_path)
    assert location is not None, "experimentTracking mlflow is refused without an s3:// trainStoragePath"
    bucket, prefix = location
    return bucket, f"{prefix}/{MLFLOW_ARTIFACTS_DIRECTORY}" if prefix else MLFLOW_ARTIFACTS_DIRECTORY


def parse_experiment_tracking(raw: dict[str, Any]) -> str:
    """experimentTracking, checked: one of EXPERIMENT_TRACKING; mlflow needs an s3:// trainStoragePath, where its
    artifacts and its store's copy live."""
    value = raw["experimentTracking"]
    require_choice(value, EXPERIMENT_TRACKING, "experimentTracking")
    if value == "mlflow":
        require(s3_location(raw["trainStoragePath"]) is not None, "experimentTracking",
                 "mlflow keeps its artifacts and a copy of its store under trainStoragePath's S3 prefix, and "
                 "trainStoragePath is not an s3:// location: set it to s3://bucket/prefix, or experimentTracking none")
    return value


def default_tracking_uri(raw: dict[str, Any], trackers: tuple[str, ...] | list[str]) -> str:
    """trainMlflowTrackingUri, or the stack's own server when experimentTracking is mlflow, trainReportTo names
    mlflow and the key is unset."""
    uri = raw["trainMlflowTrackingUri"]
    if uri or "mlflow" not in trackers or parse_experiment_tracking(raw) != "mlflow":
        return uri
    return in_cluster_uri(raw["rayNamespace"])
