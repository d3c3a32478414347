"""A stack's settings as the operator's commands read them: its Pulumi.<stack>.yaml over Pulumi.yaml's defaults,
with no Pulumi CLI (tools.status, tools.job)."""
from __future__ import annotations

from typing import Any

from infra.config import PROJECT_FILE, project_name, schema
from tools.stack_name import shown_stack
from workload import cli, config_file


def stack_file_config(stack: str) -> dict[str, Any]:
    """The `config:` mapping of Pulumi.<stack>.yaml, keys as written (`raytrain-eks:trainSteps`, `aws:region`). Every
    command that reads a stack file reads it here, so a file Pulumi would refuse (not YAML, a key given twice, not a
    mapping) is refused alike: exit 2, naming the file and the line, before anything is reached."""
    path = PROJECT_FILE.parent / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        stacks = sorted(path.name.split(".")[1] for path in PROJECT_FILE.parent.glob("Pulumi.*.yaml"))
        named = shown_stack(stack)
        raise cli.UsageError(f"--stack {named}: no {path.name if named == stack else 'such stack file'} here; stacks: "
                             f"{', '.join(stacks)}")
    document = config_file.read_document(str(path), named=f"--stack {stack}: {path.name}") or {}
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(config or {}, dict):
        what, got = ("its config:", config) if isinstance(document, dict) else ("the file", document)
        raise cli.UsageError(f"--stack {stack}: {path.name}: {what} must be a mapping of key: value (as `pulumi config "
                             f"set` writes it), got a {type(got).__name__}")
    return config or {}


def stack_settings(stack: str | None) -> tuple[str, str]:
    """(namespace, RayCluster name) of a stack: its Pulumi.<stack>.yaml, else Pulumi.yaml's defaults."""
    keys = schema()
    namespace, cluster = keys["rayNamespace"]["default"], keys["rayClusterName"]["default"]
    if stack:
        config = stack_file_config(stack)
        prefix = project_name()
        namespace = config.get(f"{prefix}:rayNamespace", namespace)
        cluster = config.get(f"{prefix}:rayClusterName", cluster)
    return namespace, cluster


def stack_key(stack: str | None, key: str) -> Any:
    """One of the project's keys as the stack sets it (Pulumi.<stack>.yaml), else Pulumi.yaml's default."""
    value = schema()[key]["default"]
    if stack:
        config = stack_file_config(stack)
        value = config.get(f"{project_name()}:{key}", value)
    return value
