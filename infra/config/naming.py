"""The stack's default cluster name, which every AWS name the stack chooses is made from.

EKS cluster names, CloudWatch log group names and KMS alias names are unique per account and region, and IAM role
names per account; the stack files' regions overlap (g6e and p4d are both in us-east-1), so a default shared by every
stack would make the second `pulumi up` in an account fail on the log group, the alias and the cluster. The default is
therefore `ray-train-<stack>`; a stack that sets clusterName keeps it (Pulumi.dev.yaml keeps `ray-train`, the name
its live clusters already have, so they are not replaced).
"""
from __future__ import annotations

import hashlib
import re

DEFAULT_CLUSTER_NAME_PREFIX = "ray-train"
# infra/config/'s clusterName rule: a letter first, then letters, digits and hyphens, 39 characters at most.
_MAX_LENGTH = 39
_DIGEST_LENGTH = 6


def default_cluster_name(stack: str) -> str:
    """`ray-train-<stack>` for clusterName's empty default. Pulumi stack names may hold `.` and `_` (and any length),
    which clusterName may not: they become hyphens, and then, or when the name is too long, a short digest of the
    stack's own name keeps two stacks apart (`a.b` and `a-b`)."""
    tail = re.sub(r"[^a-z0-9]+", "-", stack.lower()).strip("-")
    name = f"{DEFAULT_CLUSTER_NAME_PREFIX}-{tail}" if tail else DEFAULT_CLUSTER_NAME_PREFIX
    if tail == stack and len(name) <= _MAX_LENGTH:
        return name
    digest = hashlib.sha256(stack.encode()).hexdigest()[:_DIGEST_LENGTH]
    return f"{name[:_MAX_LENGTH - _DIGEST_LENGTH - 1].rstrip('-')}-{digest}"
