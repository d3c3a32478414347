"""What peers ship, checked against each other: pyproject.toml's commands run the modules `python -m` runs, its
version is the package's and the changelog's newest, and the license is the Apache-2.0 text it declares."""
from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import workload
from tools import entry_points

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_command_is_an_entry_point_onto_its_module():
    scripts = PYPROJECT["project"]["scripts"]
    assert set(scripts) == set(entry_points.COMMANDS), "one entry point per command, named alike"
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target
        assert callable(importlib.import_module(entry_points.COMMANDS[name]).main), name
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert {module.rsplit(".", 1)[0] for module in entry_points.COMMANDS.values()} <= packages, packages


def test_every_package_of_the_tree_is_packaged():
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    in_tree = {str(init.parent.relative_to(REPO)).replace("/", ".")
               for layer in ("infra", "tools", "workload") for init in (REPO / layer).rglob("__init__.py")}
    assert packages == in_tree, f"pyproject.toml's packages differ from the tree's by {packages ^ in_tree}"
    for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        for pattern in patterns:
            assert list((REPO / package.replace(".", "/")).glob(pattern)), f"{package}: {pattern} matches no file"


def test_the_version_is_one_and_the_changelog_names_it():
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "workload.__version__"}
    newest = re.search(r"^## \[(\d+\.\d+\.\d+)\]", (REPO / "CHANGELOG.md").read_text(), re.M).group(1)
    assert newest == workload.__version__, (newest, workload.__version__)


def test_the_license_is_apache_2():
    text = (REPO / "LICENSE").read_text()
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
