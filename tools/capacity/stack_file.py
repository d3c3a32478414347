"""The stack file the finder reads (where the stack's VPC is) and writes (the region and AZ it found)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from infra.config.naming import default_cluster_name  # the stack's clusterName when it sets none, as infra.config
from tools.stack_name import shown_stack
from workload import cli, config_file, user_files
from workload.output_paths import length_problem, output_problem


@dataclass(frozen=True)
class StackContext:
    """What the finder needs from a stack: where its VPC is and what its subnets are tagged with."""

    name: str
    path: Path
    project: str
    cluster_name: str
    region: str | None
    vpc_azs: tuple[str, ...] = ()
    """vpcAvailabilityZones, when the stack pins them; empty means a new VPC covers every AZ."""
    capacity_reserve: bool = False
    """capacityReserve: only then does the program read capacityCandidateAzs (and refuses it otherwise)."""


def load_stack(project_dir: Path, name: str, flag: str) -> StackContext:
    # The stack file (--write-stack writes it): its path's length by the rule of every output (workload/output_paths.py),
    # before a path the kernel refuses (ENAMETOOLONG) is asked about; one that is there is read first, by the rule of
    # every file read (a FIFO, a directory refused unread).
    if (why := length_problem(str(project_dir / f"Pulumi.{name}.yaml"))) is not None:
        raise ValueError(f"{flag}: the path {why}; give a shorter --project-dir or stack name")
    # A link is never written through (the rule of every output); other kinds of file are the reader's below to name.
    if flag == "--write-stack" and os.path.islink(project_dir / f"Pulumi.{name}.yaml"):
        why = output_problem(str(project_dir / f"Pulumi.{name}.yaml"))
        raise ValueError(f"{flag} {shown_stack(name)}: its stack file {why}")
    project_file = project_dir / "Pulumi.yaml"
    if not project_file.exists():
        raise ValueError(f"--project-dir {project_dir}: no Pulumi.yaml there")
    # Both files by the one reader of the tools' YAML (bounded, a regular file, no aliases, no key given twice).
    project = config_file.read_document(str(project_file), named=f"--project-dir {project_dir}: Pulumi.yaml")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str) or \
            not isinstance(project.get("config") or {}, dict):
        raise cli.UsageError(f"--project-dir {project_dir}: Pulumi.yaml is not a Pulumi project file (a mapping with "
                             "its name: and config:)")
    project_name = project["name"]
    path = project_dir / f"Pulumi.{name}.yaml"
    stack_config: dict[str, Any] = {}
    if path.exists():
        document = config_file.read_document(str(path), named=f"{flag} {name}: {path.name}") or {}
        stack_config = document.get("config") if isinstance(document, dict) else None
        if not isinstance(stack_config or {}, dict) or not isinstance(document, dict):
            raise cli.UsageError(f"{flag} {name}: {path.name} must be a mapping with config: key: value (as `pulumi "
                                 "config set` writes it)")
        stack_config = stack_config or {}
    elif flag == "--stack":
        named = shown_stack(name)
        raise ValueError(f"--stack {named}: {path if named == name else 'its stack file'} does not exist (stacks here: "
                         f"{', '.join(sorted(p.name for p in project_dir.glob('Pulumi.*.yaml'))) or 'none'})")
    schema = project.get("config") or {}

    def setting(key: str):
        declared = schema.get(key)
        return stack_config.get(f"{project_name}:{key}", declared.get("default") if isinstance(declared, dict) else None)

    return StackContext(name=name, path=path, project=project_name, cluster_name=setting("clusterName") or default_cluster_name(name),
                        region=stack_config.get("aws:region"), vpc_azs=tuple(setting("vpcAvailabilityZones") or ()),
                        capacity_reserve=setting("capacityReserve") in (True, "true"))


def write_stack_file(path: Path, project: str, region: str, availability_zone: str,
                     candidate_azs: list[str] | None) -> str | None:
    """Sets the region and the GPU AZ in a stack file, keeping its comments and other keys; with `candidate_azs`
    also capacityCandidateAzs, and without them removes a stale list (the program refuses the key unless
    capacityReserve is true).

    Returns the region it replaced, if it was another one.
    """
    yaml = YAML()  # round-trip: comments, key order and quoting survive
    yaml.indent(mapping=2, sequence=4, offset=2)
    # load_stack has read it already (a regular file within config_file's bound); read as bounded again here
    document = yaml.load(user_files.read_bytes(path, config_file.MAX_CONFIG_BYTES)) if path.exists() else None
    if document is None:
        document = CommentedMap()
    config = document.get("config")
    if config is None:
        config = document["config"] = CommentedMap()
    previous = config.get("aws:region")
    config["aws:region"] = region
    config[f"{project}:gpuAvailabilityZone"] = availability_zone
    if candidate_azs is not None:
        config[f"{project}:capacityCandidateAzs"] = CommentedSeq(candidate_azs)
    else:
        config.pop(f"{project}:capacityCandidateAzs", None)
    # O_NOFOLLOW: a link put there since load_stack looked is not written through (workload/output_paths.py)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644),
                   "w") as stream:
        yaml.dump(document, stream)
    return previous if previous not in (None, region) else None


