"""The rules single values follow: names, ARNs, AZs and S3 locations, each refusal a ValueError naming the key
and what it allows."""
from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote

from infra.config.storage_bounds import check_storage_bounds
from workload.config import STACK_KEYS
from workload.config.fields import shown_choice, shown_value
from workload.config.s3_uri import PERCENT_ESCAPE, S3_URI_FLAGS, s3_uri_problem, segments_problem
from workload.s3_names import S3_BUCKET, s3_hint  # noqa: F401 (S3_BUCKET: infra.config's too)

# 39 at most: IAM role names are <clusterName>-system-node-role plus Pulumi's 8-character suffix, 64 at most.
CLUSTER_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,38}$")
K8S_VERSION = re.compile(r"^1\.[0-9]{2}$")
AZ_NAME = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$")
INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,32}$")
RAY_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
CUDA_VERSION = re.compile(r"^[0-9]+\.[0-9]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# An IAM user or role (optionally with a path): what an EKS access entry's principal can be.
# IAM's own rule (the IAM User Guide's "IAM identifiers"): an optional path of /-separated parts, then the name, which
# is not empty (a trailing '/' leaves none, and EKS refuses such an access entry at `up`).
PRINCIPAL_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/(?:[A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,64}$")
# NCCL_SOCKET_IFNAME: interface name prefixes (Linux names are at most 15 characters), comma-separated, optionally
# led by ^ (exclude) or = (exact match), as NCCL's environment variable documentation gives them.
SOCKET_IFNAME = re.compile(r"[\^=]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*")
# The interfaces a pod has on EKS's VPC CNI (amazon-vpc-cni-k8s: the pod's network namespace gets `eth0`, a veth to the
# node, and `lo`; EFA devices reach the pod as /dev/infiniband devices, not as network interfaces). NCCL's bootstrap
# and socket transport need one of them matched, and not `lo`, which no other node can reach.
POD_INTERFACES = ("eth0", "lo")
POD_INTERFACE = "eth0"
# FI_PROVIDER and NCCL_NET_PLUGIN: a name (libfabric's layered providers join theirs with ';', lists with ',').
PLUGIN_WORD = re.compile(r"[\^]?[A-Za-z0-9_.;,+-]{1,64}")
# EKS's "Public endpoint access CIDR ranges per cluster" quota: 40, not adjustable (Amazon EKS User Guide, "View and
# manage Amazon EKS and Fargate service quotas").
EKS_PUBLIC_ACCESS_CIDRS_MAX = 40
# The VPC is split in eighths (one an AZ, and room left), so seven AZs at most; no region has more standard AZs.
MAX_VPC_AZS = 7
# clusterAdmins and clusterViewers, each: an EKS access entry a principal, and a team's are a few roles.
MAX_PRINCIPALS = 200
# trainPip: every worker installs the list at the job's start.
MAX_PIP_REQUIREMENTS = 200
# Every pattern here is applied with fullmatch: `re.match` with `$` would take a trailing newline.
# S3's bucket naming rules (workload/s3_names.py) and an s3:// location's whole form (workload/config/s3_uri.py),
# shared with the local run and the tools.


def arn_parts(arn: str) -> tuple[str, str, str]:
    """(partition, account, resource) of an ARN: arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE."""
    fields = arn.split(":", 5)
    return fields[1], fields[4], fields[5]


# The form config_error gives, which every refusal at preview has (tests/unit/test_refusal_form.py holds infra/ to it).
REFUSAL_FORM = re.compile(r"config (key '[A-Za-z0-9:]+'|keys '[A-Za-z0-9:]+'(, '[A-Za-z0-9:]+')+): ")


def config_error(keys: str | tuple[str, ...], message: str) -> ValueError:
    """The one form of a refusal at preview: `config key 'gpuNodeCount': ...`, or with several keys that together
    break a rule `config keys 'gpuAvailabilityZone', 'gpuInstanceType': ...`."""
    keys = (keys,) if isinstance(keys, str) else tuple(keys)
    if len(keys) == 1:
        return ValueError(f"config key {keys[0]!r}: {message}")
    return ValueError(f"config keys {', '.join(repr(key) for key in keys)}: {message}")


def require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise config_error(key, message)


def require_choice(value: object, choices: tuple | list, key: str, words: str = "") -> None:
    """The one refusal of a key that takes one of `choices`: the value quoted only as shown_choice allows (short, and
    no token shape; a secret pasted into the wrong key is not echoed), the choices listed. `words`: after the list."""
    require(value in choices, key, f"{shown_choice(value)} is not one of {list(choices)}{words}")


def check_az_list(key: str, azs: list[str]) -> tuple[str, ...]:
    for az in azs:
        require(bool(AZ_NAME.fullmatch(az)), key, f"{shown_value(az)} is not an availability zone name (like "
                                                  "us-west-2a)")
    require_unique(key, azs, "an AZ")
    return tuple(azs)


def first_duplicate(items: list[str] | tuple[str, ...]) -> tuple[int, str] | None:
    """(index, item) of the first item that repeats an earlier one, or None."""
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item in seen:
            return index, item
        seen.add(item)
    return None


def require_unique(key: str, items: list[str] | tuple[str, ...], what: str) -> None:
    """One rule for every list key's duplicates: the refusal names the first repeated item and its position, never
    the list, which may hold thousands of entries (checked items only: each already passed the key's own form)."""
    if (duplicate := first_duplicate(items)) is not None:
        index, item = duplicate
        raise ValueError(f"config key {key!r}: lists {what} twice: entry {index} {item!r} repeats an earlier entry; "
                         "allowed: each once")


def s3_location(path: str, key: str = "") -> tuple[str, str] | None:
    """(bucket, key or prefix without surrounding slashes) of an s3:// path; None for any other path. The Ray pods'
    IAM policy is written from it (infra/aws/pod_identity.py), so a path that would grant more than one bucket or prefix,
    or that S3, pyarrow and IAM would read differently (workload/config/s3_uri.py, the one rule of every s3:// setting,
    flags and the commands' arguments too), is refused, naming the config `key` it came from."""
    if not path.startswith("s3://"):
        return None
    problem = s3_uri_problem(path)
    require(problem is None, key, f"{shown_value(path)}: {problem}")
    bucket, _, prefix = path.removeprefix("s3://").partition("/")
    return bucket, prefix.strip("/")


def _check_segments(path: str, inner: str, key: str) -> None:
    """No empty, '.' or '..' segment in a local or file:// path (s3_uri.segments_problem, the s3:// rule's own)."""
    problem = segments_problem(inner)
    require(problem is None, key, f"{shown_value(path)} {problem}")


# Where the Ray pods can keep checkpoints: S3 through their own role (infra/aws/pod_identity.py), or a node's disk.
STORAGE_ALLOWED = ("allowed: s3://bucket/prefix (the Ray pods' role gets access to that prefix only), an absolute path "
                   "or file:///path (a disk of the one GPU node), or empty for no checkpoints")


def check_storage_path(path: str) -> None:
    """trainStoragePath: empty, s3://bucket/prefix with a prefix (a bucket root would give the pods read, write and
    delete on the whole bucket), or a local absolute path (file:///path is one too; infra.preview.feasibility refuses it
    for more than one GPU node)."""
    key = "trainStoragePath"
    if not path:
        return
    check_storage_bounds(path)  # lengths S3 and Linux refuse, and /proc, /sys, /dev
    scheme, separator, rest = path.partition("://")
    if not separator:
        require(path.startswith("/"), key, f"{shown_value(path)} is neither an absolute path nor a URI; "
                                           f"{STORAGE_ALLOWED}")
        _check_segments(path, path[1:].removesuffix("/"), key)
        return
    require(scheme in ("s3", "file"), key,
             f"{shown_value(path)}: {scheme}:// is not a storage the pods can reach (they hold AWS credentials for "
             "S3 only)"
             + ("; URI schemes are lowercase" if scheme.lower() in ("s3", "file") else "") + f"; {STORAGE_ALLOWED}"
             + s3_hint(path))
    if scheme == "file":
        require(rest.startswith("/"), key, f"{shown_value(path)}: a file:// URI takes an absolute path (file:///path); "
                                            f"{STORAGE_ALLOWED}")
        _check_segments(path, unquote(rest[1:]).removesuffix("/"), key)
        require(not PERCENT_ESCAPE.search(rest), key,
                 f"{shown_value(path)} holds a percent-escape, which a file:// URI's reader decodes; allowed: the "
                 "path written out")
        return
    _bucket, prefix = s3_location(path, key)
    require(bool(prefix), key, f"{shown_value(path)} is a bucket root, and the Ray pods' role would get read, write "
                               "and delete "
                                f"on the whole bucket; {STORAGE_ALLOWED}")


# Remote sources the Ray pods can read (trainDataset, trainModelId, trainTokenizer): S3 through their own role
# (infra/aws/pod_identity.py); they hold no credentials for gs://, hf:// or a web server, and file:// is a path on a
# node that none of them was given. One allow-list for every source key; each key's other forms are its own.
SOURCE_SCHEMES = ("s3",)
SOURCE_ALLOWED = {
    "trainDataset": "s3://bucket/key.jsonl (or .txt, .json; the Ray pods' role gets read access to it), a Hugging "
                    "Face dataset id, or empty for random tokens",
    "trainModelId": "a Hugging Face Hub id (org/name), or s3://bucket/prefix/ (a directory save_pretrained wrote)",
    "trainTokenizer": "a Hugging Face Hub id (org/name), s3://bucket/prefix/, or empty for the model's own",
}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,15}")


def check_source_scheme(key: str, value: str) -> None:
    """A source key's URI, refused unless its scheme is one of SOURCE_SCHEMES. The refusal names the scheme alone
    (a URI's user, path or query may hold a token). An s3:// one follows s3_location's rules (S3's bucket
    naming among them), as trainStoragePath does: one rule for every key that takes an s3:// URI."""
    scheme, separator, _ = value.partition("://")
    if not separator:
        return
    if scheme in SOURCE_SCHEMES:
        s3_location(value, key)
        return
    shown = f"{scheme}://" if _SCHEME.fullmatch(scheme) else "its scheme"
    raise config_error(key, f"{shown} is not a location the job can read (the Ray pods hold AWS credentials for S3 "
                            "only)" + ("; URI schemes are lowercase" if scheme.lower() in SOURCE_SCHEMES else "")
                            + f"; allowed: {SOURCE_ALLOWED[key]}" + s3_hint(value))


def check_dataset_location(dataset: str) -> None:
    """trainDataset, when remote: s3://bucket/key only. The job reads remote files through pyarrow's S3 file system
    with the Ray pods' role (workload/data/batches.py); an https:// or gs:// file would fail on the cluster after `up`
    made it."""
    check_source_scheme("trainDataset", dataset)


def socket_ifname_matches(ifname: str, interface: str) -> bool:
    """Whether NCCL_SOCKET_IFNAME `ifname` selects `interface`, as NCCL reads it: a list of name prefixes, exact names
    when led by '=', and everything but the listed ones when led by '^' (NCCL's environment variable documentation,
    NCCL_SOCKET_IFNAME)."""
    exclude = ifname.startswith("^")
    body = ifname.removeprefix("^")
    exact = body.startswith("=")
    names = body.removeprefix("=").split(",")
    listed = any(interface == name if exact else interface.startswith(name) for name in names)
    return listed != exclude


# Every job setting that takes an s3:// URI, as flag -> the stack key that sets it: each follows s3_location's rule
# (workload/config/s3_uri.py) on the stack (check_storage_path, check_source_scheme) and as a flag (TrainConfig).
S3_URI_SETTINGS = {flag: STACK_KEYS[flag] for flag in S3_URI_FLAGS}


# Ranges no VPC's nodes can be addressed in (Python's ipaddress kinds, each a whole range for a /16 to /20): loopback,
# 127.0.0.0/8, which "must not appear outside a host" (RFC 1122 3.2.1.3; Linux routes all of it to lo, so nodes would
# reach neither each other nor the control plane); "this network", 0.0.0.0/8 (RFC 1122 3.2.1.3); link-local,
# 169.254.0.0/16 (RFC 3927: EC2's instance metadata, DNS and time servers answer there); multicast, 224.0.0.0/4
# (RFC 5771); and the reserved 240.0.0.0/4 (RFC 1112). AWS's VPC user guide ("VPC CIDR blocks") asks for the RFC 1918
# private ranges, or a publicly routable range the account owns.
_NOT_FOR_NODES = ("loopback", "link_local", "multicast", "reserved", "unspecified")
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")


def check_vpc_range(vpc: ipaddress.IPv4Network) -> None:
    """vpcCidr (already a /16 to /20): refused when it lies in a range where no node can have its address."""
    kinds = [kind.replace("_", "-") for kind in _NOT_FOR_NODES if getattr(vpc, f"is_{kind}")]
    if vpc.subnet_of(_THIS_NETWORK):
        kinds.append("this-network (0.0.0.0/8)")
    require(not kinds, "vpcCidr", f"{vpc} is a {kinds[0] if kinds else ''} range, where no node can be addressed "
                                  "(RFC 1122, 3927, 5771); allowed: a private range (RFC 1918: 10.0.0.0/8, "
                                  "172.16.0.0/12, 192.168.0.0/16) or a public one the account owns")
