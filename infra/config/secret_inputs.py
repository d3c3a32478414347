"""A key the stack holds as a secret stays one in every resource input that carries its value.

The program reads its keys with pulumi.Config.get and friends, which return a secret key's value as plain text (the SDK
only returns an Output.secret from get_secret; pulumi/config.py's warning that a secret is read as plain is commented
out, pulumi/pulumi#7127), so a secret dlcImage or trainModelId would sit in plain text in the RayCluster's, the CronJob's
and the job's inputs, in the state and the preview. Rather than one get_secret per key and an Output through every
pure function that builds a manifest, one stack transformation marks secret each input that holds such a value.
trainSecretEnv is not among them: it is a secret by its declaration and reaches its resources as one on purpose.
"""
from __future__ import annotations

import json
from typing import Any

import pulumi

from infra.config.schema import is_stack_secret, project_name, schema
from infra.config.settings import SECRET_KEYS

# Shorter values would mark ordinary words secret across the state (a secret "ray" in every name).
MIN_FRAGMENT = 3


def secret_config_values() -> list[str]:
    """The strings of the string and list keys the stack holds as secrets (besides SECRET_KEYS): each string, and each
    entry of a list."""
    project = project_name()
    values: list[str] = []
    for key, spec in schema().items():
        namespaced = f"{project}:{key}"
        if key in SECRET_KEYS or spec["type"] not in ("string", "array") or not is_stack_secret(namespaced):
            continue
        text = pulumi.runtime.get_config(namespaced)
        if text is None:
            continue
        entries: Any = text
        if spec["type"] == "array":
            try:
                entries = json.loads(text)
            except ValueError:
                pass
        values.extend(e for e in entries if isinstance(e, str)) if isinstance(entries, list) else values.append(text)
    return sorted({value for value in values if len(value) >= MIN_FRAGMENT}, key=len, reverse=True)


def _holds(value: Any, fragments: list[str]) -> bool:
    if isinstance(value, str):
        return any(fragment in value for fragment in fragments)
    if isinstance(value, dict):
        return any(_holds(key, fragments) or _holds(item, fragments) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds(item, fragments) for item in value)
    return False


def _marked(value: Any, fragments: list[str]) -> Any:
    """`value` as a secret Output when it holds a fragment. A value with Outputs in it is looked into once they resolve
    (and an unknown one stays unknown at preview)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return pulumi.Output.secret(value) if _holds(value, fragments) else value
    return pulumi.Output.from_input(value).apply(
        lambda resolved: pulumi.Output.secret(resolved) if _holds(resolved, fragments) else resolved)


def keep_secret_inputs() -> None:
    """Register the stack transformation, when the stack holds any such key; a stack without one is left untouched."""
    fragments = secret_config_values()
    if not fragments:
        return

    def transformation(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult:
        props = {key: _marked(value, fragments) for key, value in args.props.items()}
        return pulumi.ResourceTransformationResult(props=props, opts=args.opts)

    pulumi.runtime.register_stack_transformation(transformation)
