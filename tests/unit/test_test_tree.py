"""The test tree a newcomer reads (tests/README.md): every test module in one of the four tiers' folders, every fake
and helper in tests/support and importing no test module, and modules named by the behaviour they hold, never by the
issue that asked for them."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from tests import conftest

REPO = Path(__file__).resolve().parents[2]
TIERS = ("unit", "program", "runs", "docs")
PACKAGE_FILES = ("__init__.py", "conftest.py")


def tracked_modules() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "tests/*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    return sorted({Path(name) for name in listed.stdout.split() if (REPO / name).is_file()})


def test_every_test_module_is_in_a_tier_folder():
    misplaced = [str(path) for path in tracked_modules()
                 if path.name.startswith("test_") and (len(path.parts) != 3 or path.parts[1] not in TIERS)]
    assert misplaced == [], f"test modules outside tests/{{{','.join(TIERS)}}}/: move each to its tier"


def test_every_helper_is_in_support():
    misplaced = [str(path) for path in tracked_modules() if not path.name.startswith("test_")
                 and path.name not in PACKAGE_FILES and path.parts[:2] != ("tests", "support")]
    assert misplaced == [], f"helpers outside tests/support/: {misplaced}"


def test_support_imports_no_test_module():
    for path in tracked_modules():
        if path.parts[:2] != ("tests", "support"):
            continue
        for node in ast.walk(ast.parse((REPO / path).read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            tests = [name for name in names if re.match(r"tests\.(unit|program|runs|docs)\b", name)]
            assert tests == [], f"{path} imports {tests}: a shared name moves down into tests/support"


def test_each_folder_says_what_it_holds():
    for folder in (*TIERS, "support"):
        init = REPO / "tests" / folder / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc.split()) >= 12, f"{init.relative_to(REPO)}: a docstring saying what the folder holds"


def test_no_module_is_named_by_an_issue():
    numbered = [str(path) for path in tracked_modules() if re.search(r"\d{2}|issue", path.stem)]
    assert numbered == [], f"modules named by an issue, not by what they hold: {numbered}"


def test_the_longest_first_are_modules_of_the_tree():
    stems = {path.stem for path in tracked_modules()}
    assert set(conftest.LONGEST_FIRST) <= stems, f"tests/conftest.py ranks {set(conftest.LONGEST_FIRST) - stems}"
