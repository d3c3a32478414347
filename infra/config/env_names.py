"""trainEnv and trainSecretEnv names the stack does not take: each would take over what another part of the stack sets
on purpose (the pods' AWS identity, the loader and Python paths of the image, the job's own NCCL and libfabric
settings), and a bound on how many entries the two keys hold. A refusal names the variable and the key that sets its
setting properly; it never quotes a value."""
from __future__ import annotations

# The Ray pods' AWS identity is EKS Pod Identity's role, scoped to trainStoragePath's prefix and trainDataset's and
# trainModelId's objects (infra/aws/pod_identity.py). Any of these in the job's environment replaces it for the job
# and every library it loads (botocore's credential chain reads the environment first: static keys, then profiles and
# web identity, then the container credential provider's AWS_CONTAINER_CREDENTIALS_* that Pod Identity itself sets).
_AWS_IDENTITY = ("the Ray pods' AWS identity is EKS Pod Identity's role; grant it data through trainStoragePath, "
                 "trainDataset and trainModelId")
_LOADER = ("it changes what the image's Python and libraries load for every rank; add packages with trainPip, or "
           "build an image (dlcImage)")
RESERVED_ENV = {
    **dict.fromkeys(("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                     "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                     "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CA_BUNDLE",
                     "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED"), _AWS_IDENTITY),
    **dict.fromkeys(("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
                     "PYTHONUSERBASE", "PYTHONSAFEPATH", "PYTHONEXECUTABLE"), _LOADER),
    # Set on the Ray workers from their own stack keys (infra/config/parse.py, transport_env); trainExpectTransport and
    # the preview's transport checks read those keys, so a second value here would contradict what they checked.
    "NCCL_DEBUG": "set it with the stack key ncclDebug",
    "NCCL_SOCKET_IFNAME": "set it with the stack key ncclSocketIfname",
    "FI_PROVIDER": "set it with the stack key fiProvider",
    "NCCL_NET_PLUGIN": "set it with the stack key ncclNetPlugin",
}
# Families of names: the container credential provider's (FULL_URI, RELATIVE_URI, AUTHORIZATION_TOKEN[_FILE], and any
# added later) and the endpoint overrides (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3, ...), which send the job's S3 calls,
# signed with the pods' credentials, to another host.
RESERVED_ENV_PREFIXES = {"AWS_CONTAINER_": _AWS_IDENTITY, "AWS_ENDPOINT_URL": _AWS_IDENTITY}
# Entries per key, and characters per value. Each entry is an environment variable of every Ray container and of the
# job's runtime_env; no job the project knows sets more than a handful, and a larger set belongs in the image.
MAX_ENV_ENTRIES = 64
MAX_ENV_VALUE_CHARS = 32768


def reserved_reason(name: str) -> str | None:
    """Why the job may not set `name` (and what sets it properly), or None when it may."""
    if name in RESERVED_ENV:
        return RESERVED_ENV[name]
    return next((why for prefix, why in RESERVED_ENV_PREFIXES.items() if name.startswith(prefix)), None)
