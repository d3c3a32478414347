"""The shape of a `pulumi stack export` (what tools.leftovers reads, from --state FILE or the Pulumi CLI), checked once
before any field is used, so that a file of another shape is refused naming where it came from rather than met by an
AttributeError deep in the reader.

Pulumi's own schema of the export (pulumi/pulumi sdk/go/common/apitype/deployments.json, "Pulumi Deployment
States", and the Go types beside it in core.go: UntypedDeployment, DeploymentV3, ResourceV3, OperationV2):
- the top level is an object with `version` (integer) and `deployment` (object), both required; `pulumi stack export`
  writes version 3 (apitype.DeploymentSchemaVersionCurrent), the only one whose fields this reader knows;
- `deployment.resources` is an array of resources, each an object whose `urn` and `type` are strings (required by
  ResourceV3) and whose `id`, when there, is a string, `inputs` an object; an empty stack's export omits the array;
- `deployment.pending_operations` is an array of operations, each an object with a string `type` ("creating", ...)
  and a `resource` of the shape above.
Standard library only; the message names no value from the file (an export holds the stack's outputs, secrets among
them when not encrypted).
"""
from __future__ import annotations

from typing import Any

VERSION = 3


def _resource_problem(resource: Any, where: str) -> str | None:
    if not isinstance(resource, dict):
        return f"{where} is {type(resource).__name__}, not an object"
    for key in ("urn", "type"):
        if not isinstance(resource.get(key), str):
            return f"{where} has no string {key!r}"
    if not isinstance(resource.get("id", ""), str):
        return f"{where}'s 'id' is {type(resource['id']).__name__}, not a string"
    if not isinstance(resource.get("inputs", {}), dict):
        return f"{where}'s 'inputs' is {type(resource['inputs']).__name__}, not an object"
    return None


def export_problem(export: Any) -> str | None:
    """Why `export` is not a version-3 `pulumi stack export` this reader can use, or None."""
    if not isinstance(export, dict):
        return f"its top level is {type(export).__name__}, not an object with version and deployment"
    if export.get("version") != VERSION or isinstance(export.get("version"), bool):
        return (f"its version is {str(export.get('version'))[:20]!r}; allowed: {VERSION} (what `pulumi stack export` "
                "writes)")
    deployment = export.get("deployment")
    if not isinstance(deployment, dict):
        return f"its deployment is {type(deployment).__name__}, not an object with resources"
    resources = deployment.get("resources", [])
    if not isinstance(resources, list):
        return f"its deployment.resources is {type(resources).__name__}, not an array"
    for index, resource in enumerate(resources):
        if (why := _resource_problem(resource, f"deployment.resources[{index}]")) is not None:
            return why
    operations = deployment.get("pending_operations", [])
    if not isinstance(operations, list):
        return f"its deployment.pending_operations is {type(operations).__name__}, not an array"
    for index, operation in enumerate(operations):
        where = f"deployment.pending_operations[{index}]"
        if not isinstance(operation, dict) or not isinstance(operation.get("type"), str):
            return f"{where} is not an object with a string 'type'"
        if (why := _resource_problem(operation.get("resource"), f"{where}.resource")) is not None:
            return why
    return None
