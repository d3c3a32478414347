"""Which keys may be Pulumi secrets: a secret value on a key that names or shapes cloud resources is refused.

Pulumi keeps a secret secret only where the value itself is an input; a resource's name, its URN, an ARN or an IAM
policy built from it are plain text in the state and the preview (and some pulumi-aws inputs are not strings the SDK
can mark at all: a secret clusterName reached the EKS cluster's name as a dict). So rather than chase each derived
form, a key is either declared able to hold a secret (settings.SECRET_CAPABLE_KEYS: its value reaches the job's
arguments, its env or the pods' image whole, where secret_inputs marks it) or refused as one, before anything reads it.
"""
from __future__ import annotations

from typing import Any, Callable

from infra.config.settings import SECRET_CAPABLE_KEYS, SECRET_UNLESS_S3_KEYS


def check_secret_placement(raw: dict[str, Any], project: str, is_secret: Callable[[str], bool]) -> None:
    """Refuse a secret on a key outside SECRET_CAPABLE_KEYS, and an s3:// location held secret in a
    SECRET_UNLESS_S3_KEYS key, naming the key and never its value."""
    for key in sorted(raw):
        if not is_secret(f"{project}:{key}"):
            continue
        if key not in SECRET_CAPABLE_KEYS:
            raise ValueError(
                f"config key {key!r}: cannot be a secret: its value names or shapes AWS and Kubernetes resources "
                f"(their names, ARNs, IAM policies or sizes), which the state and the preview show in plain text; "
                f"set it plain: `pulumi config rm {key}`, then `pulumi config set {key} VALUE`")
        value = raw[key]
        if key in SECRET_UNLESS_S3_KEYS and isinstance(value, str) and value.strip().lower().startswith("s3://"):
            raise ValueError(
                f"config key {key!r}: cannot be a secret while it is an s3:// location: its bucket and key go into the "
                f"Ray pods' IAM policy as ARNs, which the state and the preview show in plain text; set it plain")
