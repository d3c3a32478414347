"""A stack's settings as the operator's commands read them: its Pulumi.<stack>.yaml over Pulumi.yaml's defaults,
with no Pulumi CLI (tools.status, tools.job)."""
from __future__ import annotations

from typing import Any

import yaml

from infra.config import PROJECT_FILE, project_name, schema
from workload import cli


def stack_settings(stack: str | None) -> tuple[str, str]:
    """(namespace, RayCluster name) of a stack: its Pulumi.<stack>.yaml, else Pulumi.yaml's defaults."""
    keys = schema()
    namespace, cluster = keys["rayNamespace"]["default"], keys["rayClusterName"]["default"]
    if stack:
        stack_file = PROJECT_FILE.parent / f"Pulumi.{stack}.yaml"
        if not stack_file.is_file():
            stacks = sorted(path.name.split(".")[1] for path in PROJECT_FILE.parent.glob("Pulumi.*.yaml"))
            raise cli.UsageError(f"--stack {stack}: no {stack_file.name} here; stacks: {', '.join(stacks)}")
        config = (yaml.safe_load(stack_file.read_text()) or {}).get("config") or {}
        prefix = project_name()
        namespace = config.get(f"{prefix}:rayNamespace", namespace)
        cluster = config.get(f"{prefix}:rayClusterName", cluster)
    return namespace, cluster


def stack_key(stack: str | None, key: str) -> Any:
    """One of the project's keys as the stack sets it (Pulumi.<stack>.yaml), else Pulumi.yaml's default."""
    value = schema()[key]["default"]
    if stack:
        config = (yaml.safe_load((PROJECT_FILE.parent / f"Pulumi.{stack}.yaml").read_text()) or {}).get("config") or {}
        value = config.get(f"{project_name()}:{key}", value)
    return value
